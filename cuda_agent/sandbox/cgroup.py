"""A throwaway pids cgroup per sandbox run.

RLIMIT_NPROC is ignored for processes whose real uid is root outside every user namespace, and that is what a
bubblewrap child is when the worker runs as root (the usual container setup). A pids cgroup bounds the process
count regardless of uid, and also lets us kill every process of the run at once.
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


def _own_cgroup_dir() -> Path | None:
    """The directory under which this process may create a pids-limited child cgroup, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if hid != "0" and "pids" in controllers.split(","):
            base = _CGROUP_ROOT / "pids" / path.lstrip("/")  # cgroup v1
            return base if base.is_dir() else None
    for line in lines:
        hid, _, path = line.split(":", 2)
        if hid == "0":  # cgroup v2: pids must be delegated to our children
            base = _CGROUP_ROOT / path.lstrip("/")
            with contextlib.suppress(OSError):
                if "pids" in (base / "cgroup.subtree_control").read_text().split():
                    return base
    return None


class PidsCgroup:
    """Create with ``PidsCgroup.create(max_pids)``; put a process in by writing its pid to ``procs_file``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    @classmethod
    def create(cls, max_pids: int) -> PidsCgroup | None:
        base = _own_cgroup_dir()
        if base is None:
            return None
        path = base / f"cuda-agent-sbx-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_pids))
        except OSError as exc:
            log.debug("pids cgroup unavailable under %s: %s", base, exc)
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(p) for p in self.procs_file.read_text().split()]
        return []

    def kill_all(self) -> None:
        kill_file = self.path / "cgroup.kill"  # v2 kills atomically, no race with forking processes
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
        for _ in range(100):  # killed tasks leave the cgroup asynchronously
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
        log.warning("could not remove sandbox cgroup %s", self.path)


def pids_cgroup_supported() -> bool:
    cg = PidsCgroup.create(16)
    if cg is None:
        return False
    cg.destroy()
    return True
