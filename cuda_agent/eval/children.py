"""Evaluation child processes: each in its own sandbox, each used for exactly one job, most started warm.

Before an evaluation child can do anything it pays seconds of start-up: Python, torch and torch._dynamo imports.
A *warm* child is started ahead of its work, with an empty working directory, imports all that, and blocks on its
standard input. The evaluation that takes it writes the problem, the candidate and ``job.json`` into that directory
and sends one line; the wall-clock limit runs from then. Taking a warm child starts its replacement, so on a busy
GPU worker the start-up of the next candidate's processes overlaps the current evaluation. Nothing is shared
between jobs: a child that ran one job is never reused, and its directory is deleted with it.

Every child sees the same mounts whatever its job: its working directory (read-write) and, inside it,
``artifact/torch_extensions`` bound at the path load_inline extensions were built at (empty unless the job is a
compiled KernelBench-form candidate). Job-specific environment travels in the job, not the process environment.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.compile.store import TORCH_EXT_SANDBOX_DIR
from cuda_agent.eval.protocol import JOB_FILE
from cuda_agent.sandbox import SandboxLimits, SandboxProcess, SandboxResult, SandboxSpec, start_sandboxed

EXTENSIONS_SUBDIR = Path("artifact") / "torch_extensions"
CPU_ADDRESS_SPACE = 16 * 1024**3
GO = b"go\n"


@dataclass(frozen=True)
class ChildKey:
    """What makes two children interchangeable: everything in their sandbox that does not depend on the job."""

    device: str
    gpu_index: int | None
    cpu_time_s: int
    omp_threads: str


@dataclass
class ChildSlot:
    """A child's directory and, once started, its process."""

    key: ChildKey
    root: Path
    argv_prefix: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()
    process: SandboxProcess | SandboxResult | None = None  # a SandboxResult when the sandbox failed to start
    warm: bool = False

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    @property
    def alive(self) -> bool:
        return isinstance(self.process, SandboxProcess) and self.process.alive

    def discard(self) -> None:
        if isinstance(self.process, SandboxProcess) and self.process.alive:
            self.process.kill()
            self.process.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


def new_slot(key: ChildKey, argv_prefix: tuple[str, ...] = (), readonly: tuple[str, ...] = ()) -> ChildSlot:
    """A directory for one child; its process starts in ``run_job`` (cold) or ``start_warm``."""
    root = Path(tempfile.mkdtemp(prefix="cuda-agent-child-"))
    (root / "work" / EXTENSIONS_SUBDIR).mkdir(parents=True)
    return ChildSlot(key, root, argv_prefix, readonly)


def start_warm(key: ChildKey) -> ChildSlot:
    slot = new_slot(key)
    _start(slot, warm=True)
    return slot


def _start(slot: ChildSlot, *, warm: bool) -> None:
    key, workdir = slot.key, slot.workdir
    cuda = key.device == "cuda"
    # The sandbox supplies PATH, PYTHONPATH (the cuda_agent package, read-only) and a private /tmp.
    env = {
        "HOME": str(workdir),
        "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda"),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": str(key.gpu_index) if cuda and key.gpu_index is not None else "",
        "OMP_NUM_THREADS": key.omp_threads,
    }
    argv = [*slot.argv_prefix, sys.executable, "-P", "-m", "cuda_agent.eval.child", str(workdir / JOB_FILE)]
    spec = SandboxSpec(
        argv=[*argv, "--wait"] if warm else argv,
        cwd=workdir,
        writable_paths=[workdir],
        readonly_paths=[Path(p) for p in slot.readonly],
        extra_binds=[(workdir / EXTENSIONS_SUBDIR, TORCH_EXT_SANDBOX_DIR)],
        env=env,
        gpu=cuda,
        network=False,
        limits=SandboxLimits(
            wall_time_s=0,  # unused: run_job gives the limit to wait(), from the moment the job is sent
            cpu_time_s=key.cpu_time_s,
            address_space_bytes=None if cuda else CPU_ADDRESS_SPACE,
            max_processes=1024,
            max_file_bytes=8 * 1024**3,
            max_output_bytes=256 * 1024,
        ),
    )
    slot.process, slot.warm = start_sandboxed(spec), warm


def run_job(slot: ChildSlot, job_json: str, wall_time_s: float) -> SandboxResult:
    """Write the job into the child's directory, start the child working and wait for it (or the wall clock)."""
    (slot.workdir / JOB_FILE).write_text(job_json)
    process = slot.process
    if slot.warm and not (isinstance(process, SandboxProcess) and process.send(GO)):
        # The warm child died before its job (the thread that started it ended, say): a cold one takes over.
        if isinstance(process, SandboxProcess):
            process.wait(10)
        slot.process = None
    if slot.process is None:
        _start(slot, warm=False)
        if isinstance(slot.process, SandboxProcess):
            slot.process.send(b"")
    assert slot.process is not None
    if isinstance(slot.process, SandboxResult):
        return slot.process
    return slot.process.wait(wall_time_s)


class WarmChildren:
    """Idle warm children of one key (a worker serves one GPU and one configuration; another key replaces them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: ChildKey | None = None
        self._idle: list[ChildSlot] = []

    def take(self, key: ChildKey) -> ChildSlot:
        with self._lock:
            while self._key == key and self._idle:
                slot = self._idle.pop(0)
                if slot.alive:
                    assert isinstance(slot.process, SandboxProcess)
                    slot.process.pause(False)  # never hand out a child stopped by an evaluation that failed midway
                    return slot
                slot.discard()
        return start_warm(key)

    def refill(self, key: ChildKey, count: int) -> None:
        with self._lock:
            stale = self._idle if self._key != key else [s for s in self._idle if not s.alive]
            self._idle = [s for s in self._idle if s not in stale]
            self._key = key
            missing = count - len(self._idle)
        for slot in stale:
            slot.discard()
        fresh = [start_warm(key) for _ in range(max(missing, 0))]
        with self._lock:
            self._idle += fresh

    def pause(self, paused: bool) -> None:
        """Stop (or continue) the idle children: their start-up is CPU work that disturbs a candidate's timing
        (launch latencies, and with them event times, grew by up to 25% on the GPU host while children imported)."""
        with self._lock:
            idle = list(self._idle)
        for slot in idle:
            if isinstance(slot.process, SandboxProcess):
                slot.process.pause(paused)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pause(True)
        try:
            yield
        finally:
            self.pause(False)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for slot in idle:
            slot.discard()


POOL = WarmChildren()
atexit.register(POOL.close)
