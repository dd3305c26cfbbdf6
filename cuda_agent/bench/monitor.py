"""What a stretch of work cost this process tree: peak GPU memory (NVML), peak host memory, disk and writes.

Sampled from /proc, statvfs and NVML in a background thread, so it sees the evaluation's sandboxed children too:
they are descendants of this process. Linux only, like the sandbox.

Write counters (/proc/PID/io) are sampled per process: a child reaped inside a PID namespace (bubblewrap's
``--unshare-pid``) does not pass its counters on to its parent, so a before/after difference of this process's
own counters would miss every sandboxed child. Writes a process makes after its last sample are missed, so
those figures are lower bounds; the peak growth of the used space of the filesystems holding the temporary and
data directories (where evaluation children write) catches large files however short-lived their writers.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel, Field

_PROC = Path("/proc")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_IO_KEYS = ("write_bytes", "wchar")


class ResourceFigures(BaseModel):
    wall_s: float = 0.0
    samples: int = Field(0, description="How many times the tree, the filesystems and the GPU were sampled.")
    gpu_index: int | None = None
    gpu_used_before_bytes: int | None = Field(None, description="NVML used memory when the stretch began.")
    gpu_used_peak_bytes: int | None = Field(None, description="Highest NVML used memory sampled (all processes).")
    host_rss_before_bytes: int = 0
    host_rss_peak_bytes: int = Field(0, description="Highest sum of RSS over this process and its descendants.")
    processes_peak: int = 0
    disk_used_growth_peak_bytes: int = Field(
        0, description="Highest growth of the used space of the watched filesystems (temp and data dirs)."
    )
    write_bytes: int = Field(0, description="Bytes of files the tree wrote (page cache or storage); a lower bound.")
    wchar_bytes: int = Field(0, description="Bytes the tree passed to write(2) and kin, pipes too; a lower bound.")
    processes_seen: int = Field(0, description="Processes of the tree seen over the stretch.")


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, start time in clock ticks) of every live process."""
    table = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone since listing
            continue
        # The command name may hold spaces and parentheses; the fields after the last ")" are fixed.
        fields = stat.rsplit(")", 1)[1].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(root: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """``root`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in (table if table is not None else _proc_table()).items():
        children.setdefault(ppid, []).append(pid)
    tree, stack = [], [root]
    while stack:
        pid = stack.pop()
        tree.append(pid)
        stack.extend(children.get(pid, ()))
    return tree


def _rss_bytes(pid: int) -> int:
    try:
        return int((_PROC / str(pid) / "statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _io(pid: int) -> dict[str, int] | None:
    try:
        text = (_PROC / str(pid) / "io").read_text()
    except OSError:
        return None
    values = dict(line.split(": ") for line in text.splitlines())
    return {key: int(values.get(key, 0)) for key in _IO_KEYS}


def _used_bytes(paths: Iterable[Path]) -> int:
    """Used bytes summed over the distinct filesystems holding ``paths``."""
    seen, used = set(), 0
    for path in paths:
        try:
            device = path.stat().st_dev
            if device in seen:
                continue
            seen.add(device)
            fs = os.statvfs(path)
        except OSError:
            continue
        used += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return used


@contextlib.contextmanager
def _nvml_handle(index: int | None) -> Iterator[Any]:
    """An NVML device handle, or None without NVML or without a GPU to watch."""
    if index is None:
        yield None
        return
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        yield None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _gpu_used(handle: Any) -> int | None:
    if handle is None:
        return None
    import pynvml

    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:
        return None


class ResourceMonitor:
    """``with ResourceMonitor(gpu_index, watch=[tmp, data_dir]) as monitor: work()``; then ``monitor.figures``."""

    def __init__(self, gpu_index: int | None, watch: Iterable[Path] = (), interval_s: float = 0.05) -> None:
        self.figures = ResourceFigures(gpu_index=gpu_index)
        self._watch = list(watch)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, name="resource-monitor", daemon=True)
        self._root = os.getpid()
        # (pid, start time) -> [counters when first seen, counters when last seen]; processes alive when the
        # stretch began start from their counters then, later ones from zero.
        self._io: dict[tuple[int, int], list[dict[str, int]]] = {}
        self._started = 0.0

    def __enter__(self) -> ResourceMonitor:
        self._thread.start()
        self._ready.wait()
        self._started = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.figures.wall_s = time.perf_counter() - self._started
        self._stop.set()
        self._thread.join()
        # A child reaped outside a PID namespace also shows in its parent's counters, so it counts twice; the
        # evaluation starts none (every child is sandboxed), and the other way would miss every sandboxed one.
        self.figures.write_bytes = sum(last["write_bytes"] - first["write_bytes"] for first, last in self._io.values())
        self.figures.wchar_bytes = sum(last["wchar"] - first["wchar"] for first, last in self._io.values())
        self.figures.processes_seen = len(self._io)

    def _sample_tree(self, first: bool) -> int:
        """Sample the tree's counters; returns its RSS."""
        table = _proc_table()
        pids = descendants(self._root, table)
        self.figures.processes_peak = max(self.figures.processes_peak, len(pids))
        for pid in pids:
            io = _io(pid)
            if io is None:
                continue
            start = table.get(pid, (0, 0))[1]
            seen = self._io.setdefault((pid, start), [io if first else dict.fromkeys(_IO_KEYS, 0), io])
            seen[1] = io
        return sum(map(_rss_bytes, pids))

    def _sample_loop(self) -> None:
        figures = self.figures
        with _nvml_handle(figures.gpu_index) as handle:
            try:
                figures.gpu_used_before_bytes = _gpu_used(handle)
                figures.host_rss_before_bytes = self._sample_tree(first=True)
                disk_before = _used_bytes(self._watch)
            finally:
                self._ready.set()  # never leave __enter__ waiting
            while True:
                stopping = self._stop.wait(self._interval_s)  # one last sample after the work ended
                figures.host_rss_peak_bytes = max(figures.host_rss_peak_bytes, self._sample_tree(first=False))
                growth = _used_bytes(self._watch) - disk_before
                figures.disk_used_growth_peak_bytes = max(figures.disk_used_growth_peak_bytes, growth)
                used = _gpu_used(handle)
                if used is not None:
                    figures.gpu_used_peak_bytes = max(figures.gpu_used_peak_bytes or 0, used)
                figures.samples += 1
                if stopping:
                    return
