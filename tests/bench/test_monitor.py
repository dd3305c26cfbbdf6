"""The resource monitor sees what child processes hold and write, sandboxed ones included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent.bench.monitor import ResourceMonitor, descendants

MB = 1 << 20

CHILD = """
import sys, time
held = b"x" * (300 << 20)  # written, so resident
with open(sys.argv[1], "wb") as f:
    f.write(held[: 64 << 20])
    f.flush()
    time.sleep(0.6)  # the file still exists while the monitor samples
"""


def test_peak_memory_disk_and_writes_of_a_child_process(tmp_path: Path) -> None:
    with ResourceMonitor(gpu_index=None, watch=[tmp_path], interval_s=0.02) as monitor:
        subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "out.bin")], check=True)
    figures = monitor.figures
    assert figures.host_rss_peak_bytes - figures.host_rss_before_bytes >= 250 * MB
    assert figures.processes_peak >= 2 and figures.processes_seen >= 2  # this process and the child
    assert figures.wchar_bytes >= 64 * MB  # write_bytes too, unless tmp_path is on tmpfs
    assert figures.disk_used_growth_peak_bytes >= 32 * MB  # the filesystem is shared with other processes
    assert figures.samples >= 10 and figures.wall_s >= 0.6
    assert figures.gpu_used_peak_bytes is None  # no GPU watched


@pytest.mark.sandbox
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_writes_inside_a_pid_namespace_are_counted(tmp_path: Path) -> None:
    # A child reaped by a namespace's init does not pass its counters on: only sampling it sees its writes.
    sandboxed = ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", sys.executable, "-c", CHILD]
    with ResourceMonitor(gpu_index=None, interval_s=0.02) as monitor:
        subprocess.run([*sandboxed, str(tmp_path / "out.bin")], check=True)
    assert monitor.figures.wchar_bytes >= 64 * MB


def test_descendants_follow_the_tree() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in descendants(os.getpid())
        assert os.getpid() not in descendants(child.pid)
    finally:
        child.kill()
        child.wait()
