"""Real bubblewrap runs: each test starts hostile or ordinary commands and checks what the host sees."""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuda_agent.sandbox import SandboxLimits, SandboxSpec, run_sandboxed, sandbox_available
from cuda_agent.settings import get_settings
from tests.conftest import sleep_marker

pytestmark = pytest.mark.sandbox

PY = sys.executable


def _py(code: str, scratch: Path, **limits: object) -> SandboxSpec:
    return SandboxSpec(
        argv=[PY, "-c", code],
        cwd=scratch,
        writable_paths=[scratch],
        limits=SandboxLimits(**limits),  # type: ignore[arg-type]
    )


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    d = tmp_path / "scratch"
    d.mkdir()
    return d


def test_available() -> None:
    ok, reason = sandbox_available()
    assert ok, reason


def test_normal_command_env_stdin_and_scratch(scratch: Path) -> None:
    spec = SandboxSpec(
        argv=["bash", "-c", 'read x; echo "got $x $FOO $(pwd)"; echo out > result.txt; echo warn >&2'],
        cwd=scratch,
        writable_paths=[scratch],
        env={"FOO": "bar"},
        stdin=b"hello\n",
    )
    r = run_sandboxed(spec)
    assert r.sandbox_error is None and r.exit_code == 0 and not r.timed_out
    assert r.stdout == f"got hello bar {scratch}\n"
    assert r.stderr == "warn\n"
    assert (scratch / "result.txt").read_text() == "out\n"


def test_exit_code_and_signal(scratch: Path) -> None:
    assert run_sandboxed(_py("raise SystemExit(3)", scratch)).exit_code == 3
    r = run_sandboxed(_py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", scratch))
    assert r.exit_code is None and r.signal == 11 and r.sandbox_error is None


def test_python_and_cuda_agent_importable(scratch: Path) -> None:
    r = run_sandboxed(_py("import cuda_agent.sandbox, pydantic; print('ok')", scratch))
    assert r.stdout.strip() == "ok", r.stderr


def test_missing_binary_is_a_clear_sandbox_error(scratch: Path) -> None:
    r = run_sandboxed(SandboxSpec(argv=["no-such-binary-xyz"], cwd=scratch, writable_paths=[scratch]))
    assert r.sandbox_error == "executable not found in the sandbox: no-such-binary-xyz"
    assert r.exit_code is None


def test_command_faking_a_bwrap_failure_is_not_a_sandbox_error(scratch: Path) -> None:
    # A candidate must not be able to turn its own failure into an infrastructure fault (no reward then).
    spec = SandboxSpec(argv=["bash", "-c", "echo 'bwrap: fake' >&2; exit 1"], cwd=scratch, writable_paths=[scratch])
    r = run_sandboxed(spec)
    assert r.sandbox_error is None and r.exit_code == 1


def test_network_refused(scratch: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\n"
            "except OSError as e:\n"
            "    print('BLOCKED', e)\n"
            "try:\n"
            "    socket.create_connection(('1.1.1.1', 53), timeout=3); print('connected')\n"
            "except OSError as e:\n"
            "    print('BLOCKED', e)\n"
        )
        r = run_sandboxed(_py(code, scratch))
        assert r.exit_code == 0, r.stderr
        assert r.stdout.count("BLOCKED") == 2, r.stdout
    finally:
        server.close()


def test_writes_outside_scratch_refused(scratch: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    readonly = tmp_path / "ro"
    readonly.mkdir()
    (readonly / "f").write_text("keep")
    targets = [outside / "x", readonly / "f", Path("/usr/evil"), Path(sys.prefix) / "evil", Path("/etc/passwd")]
    code = (
        "import sys\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        open(p, 'w').write('pwned'); print('WROTE', p)\n"
        "    except OSError as e:\n"
        "        print('denied', p, e.strerror)\n"
    )
    spec = SandboxSpec(
        argv=[PY, "-c", code, *map(str, targets)],
        cwd=scratch,
        writable_paths=[scratch],
        readonly_paths=[readonly],
    )
    r = run_sandboxed(spec)
    assert r.exit_code == 0, r.stderr
    assert "WROTE" not in r.stdout and r.stdout.count("denied") == len(targets), r.stdout
    assert not (outside / "x").exists() and (readonly / "f").read_text() == "keep"
    assert not Path("/usr/evil").exists()


def test_fork_bomb_contained(scratch: Path) -> None:
    marker = f"bomb{uuid.uuid4().hex[:8]}"
    code = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(10000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError:\n"
        "    print('fork refused after', n)\n"
    )
    spec = SandboxSpec(
        argv=["bash", "-c", f'exec -a {marker} {PY} -c "$0"', code],
        cwd=scratch,
        writable_paths=[scratch],
        limits=SandboxLimits(max_processes=32, wall_time_s=20),
    )
    t0 = time.monotonic()
    r = run_sandboxed(spec)
    assert "fork refused after" in r.stdout, (r.stdout, r.stderr)
    assert int(r.stdout.split()[-1]) < 32
    assert time.monotonic() - t0 < 20  # the sleeping children died with the namespace, not at the timeout
    assert _processes_with(marker) == []


def test_classic_shell_fork_bomb_contained(scratch: Path) -> None:
    spec = SandboxSpec(
        argv=["bash", "-c", "b(){ b|b& }; b; sleep 3"],
        cwd=scratch,
        writable_paths=[scratch],
        limits=SandboxLimits(max_processes=64, wall_time_s=10),
    )
    r = run_sandboxed(spec)
    assert r.sandbox_error is None
    assert "fork" in r.stderr.lower() or "resource temporarily unavailable" in r.stderr.lower(), r.stderr[-500:]


def test_unbounded_allocation_contained(scratch: Path) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))\n"
    r = run_sandboxed(_py(code, scratch, address_space_bytes=1024**3, wall_time_s=30))
    assert r.sandbox_error is None and not r.timed_out
    assert r.exit_code == 1 and "MemoryError" in r.stderr


def test_file_size_limit(scratch: Path) -> None:
    code = "open('big', 'wb').write(b'x' * (8 * 1024 * 1024))"
    r = run_sandboxed(_py(code, scratch, max_file_bytes=1024 * 1024))
    assert r.exit_code != 0 or r.signal is not None
    assert (scratch / "big").stat().st_size <= 1024 * 1024


def test_cpu_time_limit(scratch: Path) -> None:
    r = run_sandboxed(_py("while True: pass", scratch, cpu_time_s=1, wall_time_s=30))
    assert not r.timed_out and r.signal is not None  # SIGXCPU, or SIGKILL at the hard limit


def test_timeout_kills_the_whole_group(scratch: Path) -> None:
    marker = sleep_marker()
    spec = SandboxSpec(
        argv=["bash", "-c", f"(setsid sleep {marker} &); sleep {marker} & sleep {marker}; echo never"],
        cwd=scratch,
        writable_paths=[scratch],
        limits=SandboxLimits(wall_time_s=1.5),
    )
    t0 = time.monotonic()
    r = run_sandboxed(spec)
    assert r.timed_out and r.exit_code is None and r.signal == 9
    assert time.monotonic() - t0 < 10
    assert "never" not in r.stdout
    assert _processes_with(f"sleep {marker}") == []


def test_background_process_does_not_outlive_a_normal_exit(scratch: Path) -> None:
    marker = sleep_marker()
    r = run_sandboxed(
        SandboxSpec(
            argv=["bash", "-c", f"nohup sleep {marker} >/dev/null 2>&1 & echo started"],
            cwd=scratch,
            writable_paths=[scratch],
        )
    )
    assert r.exit_code == 0 and r.stdout == "started\n"
    time.sleep(0.2)
    assert _processes_with(f"sleep {marker}") == []


def test_output_truncated(scratch: Path) -> None:
    r = run_sandboxed(_py("import sys; sys.stdout.write('a' * 500000)", scratch, max_output_bytes=1000))
    assert r.exit_code == 0
    assert r.stdout.startswith("a" * 1000) and "499000 more bytes dropped" in r.stdout


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = Path.home() / f".cuda-agent-test-{uuid.uuid4().hex[:8]}"
    (d / "artifacts").mkdir(parents=True)
    (d / "secret.txt").write_text("s3cret")
    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(d))
    get_settings.cache_clear()
    yield d
    get_settings.cache_clear()
    import shutil

    shutil.rmtree(d)


def test_data_dir_and_home_secrets_invisible(scratch: Path, data_dir: Path) -> None:
    assert get_settings().data_dir == data_dir
    probes = [data_dir / "secret.txt", data_dir, Path.home() / ".ssh", Path("/work"), Path.home() / ".bash_history"]
    code = "import os, sys\nfor p in sys.argv[1:]:\n    print(p, os.path.exists(p))\n"
    spec = SandboxSpec(argv=[PY, "-c", code, *map(str, probes)], cwd=scratch, writable_paths=[scratch])
    r = run_sandboxed(spec)
    assert r.exit_code == 0, r.stderr
    visible = [line for line in r.stdout.splitlines() if line.endswith("True")]
    # /work exists only as the path to the read-only cuda_agent package when it is checked out there.
    pkg = Path(__import__("cuda_agent").__file__).resolve().parent
    assert all(line.startswith("/work ") and str(pkg).startswith("/work/") for line in visible), r.stdout
    # An explicit bind of part of the data dir is visible, the rest is not.
    art = data_dir / "artifacts"
    r = run_sandboxed(SandboxSpec(argv=["ls", str(data_dir)], cwd=art, writable_paths=[art]))
    assert r.stdout.split() == ["artifacts"]


def test_gpu_devices_hidden_without_gpu_flag(scratch: Path) -> None:
    r = run_sandboxed(SandboxSpec(argv=["bash", "-c", "ls /dev"], cwd=scratch, writable_paths=[scratch]))
    assert "nvidia" not in r.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not os.path.exists("/dev/nvidiactl"), reason="no NVIDIA GPU")
def test_gpu_visible_with_gpu_flag(scratch: Path) -> None:
    code = "import torch; x = torch.ones(4, device='cuda'); print(float((x * 2).sum()))"
    spec = _py(code, scratch, address_space_bytes=None, wall_time_s=120)
    r = run_sandboxed(spec.model_copy(update={"gpu": True}))
    assert r.stdout.strip() == "8.0", r.stderr


def test_started_sandbox_pauses_resumes_and_takes_input_later(scratch: Path) -> None:
    """start_sandboxed: the command runs before anything is sent; pause stops every process of the sandbox (a
    grandchild too); send hands over standard input once; wait collects the exit."""
    from cuda_agent.sandbox import SandboxProcess, start_sandboxed

    ticks = scratch / "ticks"
    (scratch / "tick.py").write_text(
        f"import time\nwhile True:\n    open({str(ticks)!r}, 'a').write('x')\n    time.sleep(0.01)\n"
    )
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, {str(scratch / 'tick.py')!r}])\n"
        "print('got', sys.stdin.readline().strip(), flush=True)\n"
    )
    spec = _py(code, scratch, max_processes=64)
    process = start_sandboxed(spec)
    assert isinstance(process, SandboxProcess)
    deadline = time.monotonic() + 30
    while not ticks.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.pause(True)
    time.sleep(0.2)  # a write in flight when the signal came lands now
    size = ticks.stat().st_size
    time.sleep(0.4)
    assert ticks.stat().st_size == size, "a paused sandbox kept running"
    process.pause(False)
    time.sleep(0.4)
    assert ticks.stat().st_size > size, "a resumed sandbox stayed stopped"
    assert process.alive and process.send(b"go\n")
    result = process.wait(30)
    assert result.exit_code == 0 and result.stdout.strip() == "got go"
    assert not _processes_with(str(ticks)), "the grandchild outlived its sandbox"
