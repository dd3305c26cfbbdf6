"""Disk and memory quotas of a sandbox run, enforced by polling from the host.

rlimits bound one process or one file; a run needs bounds on all of it together: a candidate once wrote 7 GiB in
many files under a per-file limit, and an evaluation child mapped 15 GiB. A memory cgroup bounds memory where
the host delegates one (``cgroup.py``); the GPU host has none, and RLIMIT_AS cannot be used there (CUDA reserves
far more address space than it uses), so this watchdog is the guarantee everywhere. Every ``POLL_S`` it sums

- memory: anonymous and shared resident pages of every process of the run (/proc/PID/status RssAnon + RssShmem),
  what its private tmpfs mounts (/tmp, /dev/shm: host memory) hold, and memfd files it keeps open;
- disk: the allocated blocks of every file under the run's writable directories (one walk, no link followed,
  each inode once, so hard links count once) and of deleted files it keeps open, plus the number of entries;

and kills the run with the quota it broke. Mapped tmpfs or memfd pages count twice (as files and as RssShmem):
the error is on the safe side. A pass's cost grows with the files and, without a cgroup to list the run's
processes, with the host's processes; the watchdog sleeps several times a pass's cost between passes, keeping its
share of a core small. Not seen: SysV shared memory no process maps (only a memory cgroup bounds that).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

Quota = Literal["disk", "memory"]
POLL_S = 0.05
_SHARE = 9  # sleep at least this many times a pass's cost: the watchdog stays near a tenth of a core at most
_TMPFS_MOUNTS = ("tmp", "dev/shm")
_RSS_KEYS = (b"RssAnon:", b"RssShmem:")


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat_line = f.read()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses and may contain anything.
        ppid = int(stat_line[stat_line.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo += children.get(pid, [])
    return found


def resident_bytes(pid: int) -> int:
    """Anonymous plus shared resident memory of one process (file-backed pages are reclaimable cache)."""
    total = 0
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(_RSS_KEYS):
                total += int(line.split()[1]) * 1024
    return total


def _sandbox_root(pids: list[int]) -> int | None:
    """A descriptor of the root directory the sandbox's processes see, or None before bwrap has switched to it.

    The outer bwrap, and bwrap's child until its pivot_root, still see the host's root: their /tmp would be the
    host's disk, so only a process whose root is another directory counts."""
    host = os.stat("/")
    for pid in pids:
        with contextlib.suppress(OSError):
            fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != (host.st_dev, host.st_ino):
                return fd
            os.close(fd)
    return None


def tmpfs_bytes(pids: list[int]) -> int:
    """What the sandbox's private tmpfs mounts hold. The sandbox's root is read-only, so /tmp and /dev/shm are
    the mounts bwrap made; O_NOFOLLOW keeps a link there from sending us anywhere else regardless, and a directory
    on the root's own filesystem (no mount there yet) is not counted."""
    root = _sandbox_root(pids)
    if root is None:
        return 0
    total = 0
    try:
        root_dev = os.fstat(root).st_dev
        for rel in _TMPFS_MOUNTS:
            with contextlib.suppress(OSError):
                fd = os.open(rel, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root)
                try:
                    if os.fstat(fd).st_dev != root_dev:
                        fs = os.fstatvfs(fd)
                        total += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
                finally:
                    os.close(fd)
    finally:
        os.close(root)
    return total


class _DiskScan:
    """One pass over the writable directories; stops as soon as a bound is passed."""

    def __init__(self, max_bytes: int | None, max_entries: int | None, seen: set[tuple[int, int]]) -> None:
        self.max_bytes, self.max_entries, self.seen = max_bytes, max_entries, seen
        self.bytes = self.entries = 0

    @property
    def over(self) -> bool:
        return (self.max_bytes is not None and self.bytes > self.max_bytes) or (
            self.max_entries is not None and self.entries > self.max_entries
        )

    def add(self, info: os.stat_result) -> None:
        if (info.st_dev, info.st_ino) not in self.seen:
            self.seen.add((info.st_dev, info.st_ino))
            self.bytes += info.st_blocks * 512

    def walk(self, root: Path) -> None:
        # Paths, not descriptors: a directory the run swaps for a link between our lstat and scandir sends the
        # walk elsewhere, but it only lists names and stats (never opens a file), and what it counts there can
        # only make the run itself pass its quota sooner; the entry bound stops any walk.
        todo = [str(root)]
        while todo and not self.over:
            with contextlib.suppress(OSError), os.scandir(todo.pop()) as it:
                for entry in it:
                    self.entries += 1
                    with contextlib.suppress(OSError):
                        info = entry.stat(follow_symlinks=False)
                        self.add(info)
                        if stat.S_ISDIR(info.st_mode):
                            todo.append(entry.path)
                    if self.over:
                        return


def open_unlinked_files(pids: list[int]) -> list[tuple[str, os.stat_result]]:
    """(link text, stat) of regular files the processes hold open that no directory shows (deleted files and
    memfds): they take disk or memory as much as visible files do. The stat is of the open file itself."""
    found = []
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        with contextlib.suppress(OSError):
            for fd in os.listdir(fd_dir):
                with contextlib.suppress(OSError):
                    info = os.stat(f"{fd_dir}/{fd}")
                    if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
                        found.append((os.readlink(f"{fd_dir}/{fd}"), info))
    return found


class Watchdog(threading.Thread):
    """Polls a running sandbox until ``stop`` or until ``alive`` turns false; calls ``on_exceeded(quota)`` once
    when a quota is passed.

    ``processes`` lists the run's pids (from its cgroup, or the process tree); ``writable`` are the host
    directories the run may write."""

    def __init__(
        self,
        alive: Callable[[], bool],
        processes: Callable[[], list[int]],
        writable: list[Path],
        *,
        disk_bytes: int | None,
        disk_entries: int | None,
        memory_bytes: int | None,
        on_exceeded: Callable[[Quota], None],
    ) -> None:
        super().__init__(daemon=True, name="sandbox-watchdog")
        self.alive, self.processes, self.on_exceeded = alive, processes, on_exceeded
        self.disk_bytes, self.disk_entries, self.memory_bytes = disk_bytes, disk_entries, memory_bytes
        self.writable = _outermost(writable)
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        next_slow, memfd_bytes, pause = 0.0, 0, POLL_S
        while not self._stop_event.wait(pause) and self.alive():
            started = time.monotonic()
            pids = self.processes()
            if started >= next_slow:  # the costly part: every open file and the writable trees
                unlinked = open_unlinked_files(pids)
                memfd_bytes = sum(info.st_blocks * 512 for link, info in unlinked if link.startswith("/memfd:"))
                disk_over = self.disk_over(unlinked)
                next_slow = time.monotonic() + max(POLL_S, _SHARE * (time.monotonic() - started))
                if disk_over:
                    self._trip("disk")
                    return
            if self.memory_bytes is not None:
                used = sum(resident_bytes(pid) for pid in pids) + tmpfs_bytes(pids) + memfd_bytes
                if used > self.memory_bytes:
                    self._trip("memory")
                    return
            # Listing processes scans /proc when there is no cgroup: on a busy host a pass costs more.
            pause = max(POLL_S, _SHARE * (time.monotonic() - started))

    def _trip(self, quota: Quota) -> None:
        if not self._stop_event.is_set():
            self.on_exceeded(quota)

    def disk_over(self, unlinked: list[tuple[str, os.stat_result]]) -> bool:
        if self.disk_bytes is None and self.disk_entries is None:
            return False
        scan = _DiskScan(self.disk_bytes, self.disk_entries, set())
        for root in self.writable:
            scan.walk(root)
        devices = set()
        for root in self.writable:
            with contextlib.suppress(OSError):
                devices.add(os.stat(root).st_dev)
        for link, info in unlinked:
            if not link.startswith("/memfd:") and info.st_dev in devices:
                scan.add(info)
        return scan.over


def _outermost(paths: list[Path]) -> list[Path]:
    """Real paths, without those inside another (walked once)."""
    real = sorted({Path(os.path.realpath(p)) for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for p in real:
        if not any(p == k or k in p.parents for k in kept):
            kept.append(p)
    return kept
