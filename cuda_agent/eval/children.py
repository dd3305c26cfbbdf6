"""Evaluation child processes: each in its own sandbox, each used for exactly one job, most started warm.

Before an evaluation child can do anything it pays seconds of start-up: Python, torch and torch._dynamo imports.
A *warm* child is started ahead of its work, with an empty working directory, imports all that, and blocks on its
channel: one end of a Unix socket pair, inherited into the sandbox at a descriptor named on its command line. The
evaluation that takes it writes the problem and the candidate into that directory and sends the job over the
channel; from then on parent and child talk in lockstep (``child/protocol.py``) and nothing the child writes to
disk is ever read back. Taking a warm child starts its replacement, so on a busy GPU worker the start-up of the
next candidate's processes overlaps the current evaluation. Nothing is shared between jobs: a child that ran one
job is never reused, and its directory is deleted with it.

Every child sees the same mounts whatever its job: its working directory (read-write) and, inside it,
``artifact/torch_extensions`` bound at the path load_inline extensions were built at (empty unless the job is a
compiled KernelBench-form candidate). Job-specific environment travels in the job, not the process environment.
"""

from __future__ import annotations

import atexit
import contextlib
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.compile.store import TORCH_EXT_SANDBOX_DIR
from cuda_agent.eval.child.channel import Channel
from cuda_agent.eval.memory import CPU_ADDRESS_SPACE
from cuda_agent.safefs import remove_tree
from cuda_agent.sandbox import SandboxLimits, SandboxProcess, SandboxResult, SandboxSpec, start_sandboxed
from cuda_agent.settings import get_settings

EXTENSIONS_SUBDIR = Path("artifact") / "torch_extensions"
# One directory per child below this root: a worker killed mid-evaluation leaves its children's directories here,
# where the start-up sweep (cuda_agent.sandbox.sweep_stale) finds them.
CHILDREN_ROOT = Path(tempfile.gettempdir()) / "cuda-agent-children"


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
    channel: Channel | None = None  # the parent's end of the child's socket pair

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
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        # Never follows a link the child planted (safefs.remove_tree).
        remove_tree(self.root)


def new_slot(key: ChildKey, argv_prefix: tuple[str, ...] = (), readonly: tuple[str, ...] = ()) -> ChildSlot:
    """A directory for one child; its process starts in ``ensure_started`` (cold) or ``start_warm``."""
    CHILDREN_ROOT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="child-", dir=CHILDREN_ROOT))
    (root / "work" / EXTENSIONS_SUBDIR).mkdir(parents=True)
    return ChildSlot(key, root, argv_prefix, readonly)


def start_warm(key: ChildKey) -> ChildSlot:
    slot = new_slot(key)
    _start(slot, warm=True)
    return slot


def _start(slot: ChildSlot, *, warm: bool) -> None:
    key, workdir = slot.key, slot.workdir
    cuda = key.device == "cuda"
    settings = get_settings()
    # The sandbox supplies PATH, PYTHONPATH (the cuda_agent package, read-only) and a private /tmp.
    env = {
        "HOME": str(workdir),
        "CUDA_HOME": str(settings.cuda_home),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": str(key.gpu_index) if cuda and key.gpu_index is not None else "",
        "OMP_NUM_THREADS": key.omp_threads,
    }
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = child_end.fileno()
    argv = [*slot.argv_prefix, sys.executable, "-P", "-m", "cuda_agent.eval.child", "--channel", str(fd)]
    spec = SandboxSpec(
        argv=argv,
        pass_fds=[fd],
        cwd=workdir,
        writable_paths=[workdir],
        readonly_paths=[Path(p) for p in slot.readonly],
        extra_binds=[(workdir / EXTENSIONS_SUBDIR, TORCH_EXT_SANDBOX_DIR)],
        env=env,
        gpu=cuda,
        network=False,
        limits=SandboxLimits(
            wall_time_s=0,  # unused: the parent bounds every reply on the channel (evaluate.Session)
            cpu_time_s=key.cpu_time_s,
            address_space_bytes=None if cuda else CPU_ADDRESS_SPACE,
            max_processes=1024,
            max_file_bytes=8 * 1024**3,
            max_output_bytes=256 * 1024,
            disk_bytes=settings.eval_disk_bytes,
            memory_bytes=settings.eval_memory_quota_bytes,
        ),
    )
    try:
        slot.process, slot.warm = start_sandboxed(spec), warm
    finally:
        child_end.close()  # the child holds its own copy; EOF on ours then means the child is gone
    slot.channel = Channel(parent_end)
    if isinstance(slot.process, SandboxProcess):
        slot.process.send(b"")  # standard input is unused: end of input, as from /dev/null


def ensure_started(slot: ChildSlot) -> SandboxResult | None:
    """The slot's child running (a cold one replaces a warm child that died before its job, say because the
    thread that started it ended); the sandbox's failure if none could start."""
    if not slot.alive:
        if isinstance(slot.process, SandboxProcess):
            slot.process.wait(10)
        if slot.channel is not None:
            slot.channel.close()
        _start(slot, warm=False)
    return slot.process if isinstance(slot.process, SandboxResult) else None


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
