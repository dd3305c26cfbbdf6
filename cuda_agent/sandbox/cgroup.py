"""A throwaway cgroup per sandbox run: process count and memory, where the host delegates the controllers.

RLIMIT_NPROC is ignored for processes whose real uid is root outside every user namespace, and that is what a
bubblewrap child is when the worker runs as root (the usual container setup). A pids cgroup bounds the process
count regardless of uid, and also lets us kill every process of the run at once. A memory cgroup bounds what
rlimits cannot: resident memory of all processes together, including the run's tmpfs pages and files in memory
that are mapped nowhere (memfd, /dev/shm); swap is refused so the limit is not just pushed to disk.

cgroup v2 has one directory per run with both controllers; v1 has one per controller hierarchy. Neither may be
writable (the GPU host has none): the caller then relies on rlimits and the sandbox's watchdog (``bwrap.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

_CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "cuda-agent-sbx-"
CONTROLLERS = ("pids", "memory")


def _own_cgroup_dirs(controller: str) -> list[Path]:
    """Directories under which this process may create a child cgroup with ``controller`` (v1 first, then v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if hid != "0" and controller in controllers.split(","):
            base = _CGROUP_ROOT / controller / path.lstrip("/")  # cgroup v1
            return [base] if base.is_dir() else []
    for line in lines:
        hid, _, path = line.split(":", 2)
        if hid == "0":  # cgroup v2: the controller must be delegated to our children
            base = _CGROUP_ROOT / path.lstrip("/")
            with contextlib.suppress(OSError):
                if controller in (base / "cgroup.subtree_control").read_text().split():
                    return [base]
    return []


def _limit_files(controller: str, base: Path, limit: int) -> dict[str, str]:
    """The files (and values) that set ``limit`` for ``controller`` in a child of ``base``."""
    if controller == "pids":
        return {"pids.max": str(limit)}
    if (base / "memory.limit_in_bytes").exists():  # v1; memsw is memory + swap, present when swap accounting is on
        files = {"memory.limit_in_bytes": str(limit)}
        if (base / "memory.memsw.limit_in_bytes").exists():
            files["memory.memsw.limit_in_bytes"] = str(limit)
        return files
    # v2: no swap, and an OOM kill takes the whole run rather than one process of it.
    return {"memory.max": str(limit), "memory.swap.max": "0", "memory.oom.group": "1"}


class RunCgroup:
    """Create with ``RunCgroup.create(max_pids=..., memory_bytes=...)``; a process joins by writing its pid to
    every file of ``procs_files``. ``enforced`` names the controllers that bound this run."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    @property
    def enforced(self) -> tuple[str, ...]:
        return tuple(self.paths)

    @property
    def procs_files(self) -> list[Path]:
        return [p / "cgroup.procs" for p in dict.fromkeys(self.paths.values())]

    @classmethod
    def create(cls, *, max_pids: int | None, memory_bytes: int | None) -> RunCgroup | None:
        """A cgroup with every requested limit that can be set here (None when none can)."""
        name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        paths: dict[str, Path] = {}
        for controller, limit in (("pids", max_pids), ("memory", memory_bytes)):
            if limit is None:
                continue
            for base in _own_cgroup_dirs(controller):
                path = base / name
                try:
                    path.mkdir(exist_ok=True)  # exists already when v2 holds both controllers in one directory
                    for file, value in _limit_files(controller, base, limit).items():
                        if file == "memory.swap.max" and not (path / file).exists():
                            continue  # the kernel has no swap accounting: nothing to refuse
                        (path / file).write_text(value)
                except OSError as exc:
                    log.debug("%s cgroup unavailable under %s: %s", controller, base, exc)
                    if path not in paths.values():
                        with contextlib.suppress(OSError):
                            path.rmdir()
                    continue
                paths[controller] = path
        return cls(paths) if paths else None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in procs.read_text().split())
        return sorted(found)

    def memory_killed(self) -> bool:
        """True when the kernel killed a process of the run for exceeding the memory limit."""
        path = self.paths.get("memory")
        if path is None:
            return False
        for events in ("memory.events", "memory.oom_control"):  # v2, v1 (kernel >= 4.13)
            with contextlib.suppress(OSError, ValueError):
                for line in (path / events).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        return False

    def kill_all(self) -> None:
        for path in dict.fromkeys(self.paths.values()):
            kill_file = path / "cgroup.kill"  # v2 kills atomically, no race with forking processes
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
        # v1: repeat, since a process may fork between reading the list and the kill.
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def destroy(self) -> None:
        self.kill_all()
        for path in dict.fromkeys(self.paths.values()):
            _remove(path, attempts=100)


def _remove(path: Path, attempts: int) -> bool:
    for _ in range(attempts):  # killed tasks leave the cgroup asynchronously
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.02)
    log.warning("could not remove sandbox cgroup %s", path)
    return False


def cgroup_controllers() -> tuple[str, ...]:
    """The controllers a sandbox run here is bounded by, probed by creating (and removing) a cgroup."""
    cg = RunCgroup.create(max_pids=16, memory_bytes=1024**3)
    if cg is None:
        return ()
    cg.destroy()
    return cg.enforced


def sweep_stale_cgroups(grace_s: float) -> list[Path]:
    """Remove run cgroups left by stopped services (no process left in them); returns those removed.

    A cgroup that still holds processes belongs to a live run, of this worker or another one, and stays; so does
    one created less than ``grace_s`` ago, which a starting run may be about to join."""
    removed = []
    cutoff = time.time() - grace_s
    for base in {b for c in CONTROLLERS for b in _own_cgroup_dirs(c)}:
        with contextlib.suppress(OSError):
            for child in base.iterdir():
                if not child.name.startswith(PREFIX) or not child.is_dir():
                    continue
                try:
                    if child.stat().st_mtime > cutoff or (child / "cgroup.procs").read_text().strip():
                        continue
                except OSError:
                    continue
                if _remove(child, attempts=1):
                    removed.append(child)
    return removed
