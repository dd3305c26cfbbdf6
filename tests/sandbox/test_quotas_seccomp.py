"""Disk and memory quotas over a whole sandbox run, the seccomp filter, and the start-up sweep; real bwrap runs."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox import SandboxLimits, SandboxSpec, run_sandboxed, sweep_stale
from cuda_agent.sandbox import cgroup as cgroup_module
from cuda_agent.sandbox.cgroup import PREFIX, RunCgroup
from cuda_agent.sandbox.seccomp import _X86_64, REFUSED

pytestmark = pytest.mark.sandbox

PY = sys.executable
MiB = 1024**2


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    d = tmp_path / "scratch"
    d.mkdir()
    return d


@pytest.fixture
def no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU host delegates no cgroup: the watchdog alone must hold the quotas."""
    monkeypatch.setattr(cgroup_module, "_own_cgroup_dirs", lambda controller: [])


def _du(path: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*"))


def test_many_files_are_killed_at_the_disk_quota(scratch: Path) -> None:
    # Each file is far under the per-file limit; together they pass the run's quota.
    code = "for i in range(10000):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n"
    r = run_sandboxed(
        SandboxSpec(
            argv=[PY, "-c", code],
            cwd=scratch,
            writable_paths=[scratch],
            limits=SandboxLimits(disk_bytes=64 * MiB, max_file_bytes=4 * MiB, wall_time_s=60),
        )
    )
    assert r.limit_exceeded == "disk" and r.sandbox_error is None and not r.timed_out and not r.ok
    assert "over its disk quota" in r.stderr
    assert _du(scratch) < 64 * MiB + 512 * MiB  # killed within a poll or two, not at the wall clock


def test_many_empty_files_are_killed_at_the_entry_quota(scratch: Path) -> None:
    code = "import os\nos.makedirs('d')\nfor i in range(10**6):\n    open(f'd/{i}', 'wb').close()\n"
    r = run_sandboxed(
        SandboxSpec(argv=[PY, "-c", code], cwd=scratch, writable_paths=[scratch], limits=SandboxLimits(disk_files=2000))
    )
    assert r.limit_exceeded == "disk" and r.sandbox_error is None


def test_files_written_just_before_exit_still_count(scratch: Path) -> None:
    code = "open('big', 'wb').write(b'x' * (40 << 20))\n"
    r = run_sandboxed(
        SandboxSpec(
            argv=[PY, "-c", code], cwd=scratch, writable_paths=[scratch], limits=SandboxLimits(disk_bytes=16 * MiB)
        )
    )
    assert r.limit_exceeded == "disk" and not r.ok


def test_an_ordinary_run_passes_no_quota(scratch: Path) -> None:
    code = "open('small', 'wb').write(b'x' * (1 << 20))\nx = bytearray(50 << 20)\nprint('done')\n"
    r = run_sandboxed(
        SandboxSpec(
            argv=[PY, "-c", code],
            cwd=scratch,
            writable_paths=[scratch],
            limits=SandboxLimits(disk_bytes=16 * MiB, memory_bytes=512 * MiB),
        )
    )
    assert r.ok and r.limit_exceeded is None and r.stdout == "done\n", r.stderr


HOG = "x = []\nwhile True:\n    x.append(bytearray(32 << 20))\n"


def test_memory_hog_is_killed(scratch: Path) -> None:
    """Whatever this host offers (a memory cgroup here, or the watchdog), the run ends as a memory failure."""
    r = run_sandboxed(
        SandboxSpec(
            argv=[PY, "-c", HOG],
            cwd=scratch,
            writable_paths=[scratch],
            limits=SandboxLimits(memory_bytes=256 * MiB, address_space_bytes=None, wall_time_s=60),
        )
    )
    assert r.limit_exceeded == "memory" and r.sandbox_error is None and not r.timed_out


@pytest.mark.usefixtures("no_cgroup")
@pytest.mark.parametrize(
    "code",
    [
        HOG,
        # Children each under the quota, together over it.
        "import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n        x = bytearray(64 << 20)\n"
        "        time.sleep(60)\ntime.sleep(60)\n",
        # Host memory no process maps: the private tmpfs mounts and a memfd.
        "f = open('/tmp/fill', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))\n",
        "f = open('/dev/shm/fill', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))\n",
        "import os\nfd = os.memfd_create('fill')\nwhile True:\n    os.write(fd, b'x' * (1 << 20))\n",
    ],
    ids=["anonymous", "forked", "tmp", "dev-shm", "memfd"],
)
def test_watchdog_alone_holds_the_memory_quota(scratch: Path, code: str) -> None:
    started = time.monotonic()
    r = run_sandboxed(
        SandboxSpec(
            argv=[PY, "-c", code],
            cwd=scratch,
            writable_paths=[scratch],
            limits=SandboxLimits(memory_bytes=256 * MiB, address_space_bytes=None, max_file_bytes=None, wall_time_s=60),
        )
    )
    assert r.limit_exceeded == "memory" and r.sandbox_error is None, (r.stderr[-500:], r.exit_code)
    assert time.monotonic() - started < 30


def test_dev_is_read_only_but_devices_work(scratch: Path) -> None:
    r = run_sandboxed(
        SandboxSpec(
            argv=["bash", "-c", "echo x > /dev/null && echo null-ok; echo x > /dev/planted || echo refused"],
            cwd=scratch,
            writable_paths=[scratch],
        )
    )
    assert r.stdout == "null-ok\nrefused\n", r.stderr


SYSCALLS = """
import ctypes, errno, os, signal, subprocess, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {nr}

def call(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]

child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
buf = ctypes.create_string_buffer(8)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
print("ptrace_traceme", call("ptrace", 0, 0, 0, 0))
print("ptrace_attach", call("ptrace", 16, child, 0, 0))
print("process_vm_readv", call("process_vm_readv", child, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0))
print("unshare_user", call("unshare", 0x10000000))
print("mount", call("mount", 0, 0, 0, 0, 0))
print("bpf", call("bpf", 0, 0, 0))
print("keyctl", call("keyctl", 0, 0, 0, 0, 0))
print("userfaultfd", call("userfaultfd", 0))
print("io_uring_setup", call("io_uring_setup", 1, 0))
print("personality_query", call("personality", 0xFFFFFFFF))
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
t = threading.Thread(target=lambda: None)
t.start()
t.join()
print("spawn", subprocess.run(["true"]).returncode)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of the probe are x86_64's")
def test_seccomp_refuses_ptrace_and_kernel_surface(scratch: Path) -> None:
    numbers = {k: _X86_64[k] for k in ("ptrace", "process_vm_readv", "unshare", "mount", "bpf", "keyctl")}
    numbers |= {k: _X86_64[k] for k in ("userfaultfd", "io_uring_setup", "personality")}
    r = run_sandboxed(
        SandboxSpec(
            argv=[PY, "-c", SYSCALLS.format(nr=numbers)], cwd=scratch, writable_paths=[scratch], limits=SandboxLimits()
        )
    )
    assert r.exit_code == 0, r.stderr
    got = dict(line.split() for line in r.stdout.splitlines())
    refused = [k for k in got if k not in ("personality_query", "spawn")]
    assert {k: got[k] for k in refused} == dict.fromkeys(refused, "EPERM")
    assert got["personality_query"] == "ok" and got["spawn"] == "0"  # fork, threads and exec still work


def test_gxx_build_and_run_under_the_filter(scratch: Path) -> None:
    (scratch / "hello.cpp").write_text('#include <cstdio>\n#include <thread>\nint main(){std::thread t([]{});'
                                       't.join(); std::puts("hello"); }\n')  # fmt: skip
    r = run_sandboxed(
        SandboxSpec(
            argv=["bash", "-c", "g++ -O1 -pthread -o hello hello.cpp && ./hello"],
            cwd=scratch,
            writable_paths=[scratch],
            limits=SandboxLimits(wall_time_s=120),
        )
    )
    assert r.ok and r.stdout == "hello\n", r.stderr


@pytest.mark.skipif(not Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h").exists(), reason="no kernel headers")
def test_filter_numbers_match_the_kernel_headers() -> None:
    header = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h").read_text()
    defined = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+) (\d+)", header)}
    assert {name: defined[name] for name in _X86_64} == _X86_64
    assert set(REFUSED) <= set(_X86_64)


def test_sweep_removes_stale_leftovers_only(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    stale, fresh = root / "stale", root / "fresh"
    for d in (stale, fresh):
        d.mkdir(parents=True)
    outside = tmp_path / "keep.txt"
    outside.write_text("keep")
    (stale / "link").symlink_to(outside)  # a link left by a run is removed, its target is not
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    left = RunCgroup.create(max_pids=8, memory_bytes=None)  # as a killed worker leaves it: no process inside
    if left is not None:
        for path in left.paths.values():  # older than the grace; fresh ones (other runs starting now) are kept
            os.utime(path, (time.time() - 120, time.time() - 120))
    removed = sweep_stale([root, tmp_path / "missing"], older_than_s=3600, cgroup_grace_s=60)
    assert stale in removed and not stale.exists() and fresh.exists() and outside.read_text() == "keep"
    if left is not None:
        assert all(not p.exists() for p in left.paths.values())
        assert all(p.name.startswith(PREFIX) for p in left.paths.values())


def test_doctor_reports_the_active_mechanisms(no_cgroup: None) -> None:
    from cuda_agent.doctor import check_quotas

    check = check_quotas()
    assert check.ok and "seccomp: filter of" in check.detail
    assert "memory: watchdog only (no writable memory cgroup)" in check.detail  # as on the GPU host
    assert "processes: RLIMIT_NPROC only" in check.detail


def test_a_process_not_yet_in_its_sandbox_root_counts_no_tmpfs() -> None:
    """bwrap's child has a mount namespace of its own before it switches root: its /tmp is still the host's disk,
    whose usage must not be charged to the run (it once killed ordinary builds as over their memory quota)."""
    import shutil
    import subprocess

    from cuda_agent.sandbox.watchdog import tmpfs_bytes

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    proc = subprocess.Popen(["unshare", "--mount", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{proc.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            if proc.poll() is not None:
                pytest.skip("unshare --mount is not permitted here")
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert tmpfs_bytes([proc.pid]) == 0
    finally:
        proc.kill()
        proc.wait()
