"""bubblewrap sandbox: own PID/user/IPC/UTS/network namespaces, read-only system, tmpfs /tmp, rlimits.

What the child sees: the system directories a compiler, Python and CUDA need (read-only), the running Python
installation, CUDA_HOME, the ``cuda_agent`` package (read-only, so candidates can ``import cuda_agent.kernels``),
a private tmpfs at /tmp and /dev, and exactly the paths the spec names. Nothing else of the host exists there:
not the data directory, not $HOME, not /work.

Limits: rlimits are applied by ``prlimit`` right before the command runs; the process count and memory are also
bounded by a per-run cgroup where one can be created, because RLIMIT_NPROC does not bind processes that are root
outside the sandbox (see ``cgroup.py``). Disk and memory quotas over the whole run are enforced by a watchdog
thread everywhere (``watchdog.py``); a run it kills reports the quota in ``SandboxResult.limit_exceeded``. A
seccomp filter (``seccomp.py``) refuses ptrace and the other calls a candidate never needs. The wall clock kills
the outer bwrap; ``--die-with-parent`` and the PID namespace take every descendant with it, and the cgroup is
swept as a second net.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from functools import cache
from pathlib import Path

from pydantic import BaseModel, Field

from cuda_agent.sandbox.cgroup import RunCgroup, cgroup_controllers
from cuda_agent.sandbox.seccomp import filter_program
from cuda_agent.sandbox.watchdog import Quota, Watchdog, descendants
from cuda_agent.settings import get_settings

log = logging.getLogger(__name__)

SANDBOX_UID = 1000  # the candidate runs as this unprivileged uid inside its user namespace
_ETC_ESSENTIALS = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "os-release",
)
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxLimits(BaseModel):
    wall_time_s: float = 60.0
    cpu_time_s: int | None = 60
    address_space_bytes: int | None = Field(
        4 * 1024**3, description="RLIMIT_AS; None: unlimited (CUDA reserves >= 64 GiB of address space)."
    )
    max_processes: int | None = 128
    max_file_bytes: int | None = 256 * 1024**2
    max_output_bytes: int = 1024**2
    tmpfs_bytes: int = Field(
        1024**3, description="Size of the private /tmp, and of /dev/shm (they live in host memory)."
    )
    disk_bytes: int | None = Field(
        4 * 1024**3, description="Quota on the bytes of all files in the writable paths together; None: none."
    )
    disk_files: int | None = Field(
        100_000, description="Quota on the number of entries in the writable paths together; None: none."
    )
    memory_bytes: int | None = Field(
        16 * 1024**3,
        description="Quota on resident memory of all processes together, tmpfs contents included; None: none.",
    )


class SandboxSpec(BaseModel):
    argv: list[str]
    cwd: Path
    writable_paths: list[Path] = Field(description="Bound read-write at the same path.")
    readonly_paths: list[Path] = Field(default_factory=list, description="Extra read-only binds at the same path.")
    extra_binds: list[tuple[Path, Path]] = Field(
        default_factory=list, description="(host path, sandbox path) bound read-write at a different path."
    )
    env: dict[str, str] = Field(default_factory=dict, description="The child's whole environment, over defaults.")
    gpu: bool = False
    network: bool = False
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    stdin: bytes | None = None
    pass_fds: list[int] = Field(
        default_factory=list, description="Open descriptors the command inherits at the same numbers (a socket)."
    )


class SandboxResult(BaseModel):
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    sandbox_error: str | None = Field(None, description="Set when the sandbox itself failed (not the command).")
    limit_exceeded: Quota | None = Field(
        None, description="The run was killed for passing this quota: a failure of the command, not the sandbox."
    )

    @property
    def ok(self) -> bool:
        return self.sandbox_error is None and not self.timed_out and self.limit_exceeded is None and self.exit_code == 0


def package_parent() -> Path:
    """Directory that must be on PYTHONPATH for ``import cuda_agent`` inside the sandbox."""
    import cuda_agent

    return Path(cuda_agent.__file__).resolve().parent.parent


def _python_paths() -> list[Path]:
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            paths.add(Path(sysconfig.get_paths()[key]))
    import site

    paths.update(Path(p) for p in site.getsitepackages())
    return sorted(paths)


@cache
def _import_roots() -> tuple[Path, ...]:
    """Library folders this process imports from through PYTHONPATH (e.g. wheels unpacked beside a system
    Python), so that sandboxed Python finds the same packages. The cuda_agent checkout itself is not among them:
    only its package folder is bound, never the rest of the repository."""
    roots = []
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        path = Path(entry).resolve() if entry else None
        if path is not None and path.is_dir() and path != package_parent():
            roots.append(path)
    return tuple(roots)


@cache
def _system_paths() -> tuple[Path, ...]:
    import cuda_agent

    paths = [Path(p) for p in _SYSTEM_DIRS] + [Path("/etc") / name for name in _ETC_ESSENTIALS]
    paths += _python_paths() + list(_import_roots())
    paths += [get_settings().cuda_home, Path(cuda_agent.__file__).resolve().parent]
    return tuple(p for p in paths if os.path.lexists(p))


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _bind_args(paths: list[Path], flag: str, bound: list[str], mounted: tuple[str, ...] = ()) -> list[str]:
    """Bind each path at its own location; a symlink becomes a symlink to its (bound) target, unless an earlier
    mount (``mounted``) already shows it: bwrap cannot create a symlink where one exists (e.g. /usr/local/cuda
    inside a bound /usr)."""
    args: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if not _covered(real, bound):
            args += [flag, real, real]
            bound.append(real)
        lexical = os.path.abspath(p)
        if lexical != real and not _covered(lexical, [*bound, *mounted]):
            args += ["--symlink", real, lexical]
            bound.append(lexical)
    return args


def _default_env() -> dict[str, str]:
    cuda_bin = get_settings().cuda_home / "bin"
    path = [str(Path(sys.executable).parent), str(cuda_bin), "/usr/local/bin", "/usr/bin", "/bin"]
    return {
        "PATH": ":".join(path),
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join(str(p) for p in (package_parent(), *_import_roots())),
    }


def _prlimit_args(limits: SandboxLimits) -> list[str]:
    args = ["/usr/bin/prlimit", "--core=0"]
    if limits.cpu_time_s is not None:
        args.append(f"--cpu={limits.cpu_time_s}")
    if limits.address_space_bytes is not None:
        args.append(f"--as={limits.address_space_bytes}")
    if limits.max_processes is not None:
        args.append(f"--nproc={limits.max_processes}")
    if limits.max_file_bytes is not None:
        args.append(f"--fsize={limits.max_file_bytes}")
    return [*args, "--"]


def _find_executable(argv0: str, env: dict[str, str], visible: list[str]) -> str | None:
    found = argv0 if "/" in argv0 else shutil.which(argv0, path=env.get("PATH", ""))
    if found is None or not os.access(found, os.X_OK) or not os.path.isfile(found):
        return None
    return found if _covered(os.path.realpath(found), visible) or _covered(os.path.abspath(found), visible) else None


class _Drain(threading.Thread):
    """Reads a pipe to EOF, keeping the first ``limit`` bytes so a chatty child cannot exhaust our memory."""

    def __init__(self, pipe: int, limit: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.limit = pipe, limit
        self.kept = bytearray()
        self.dropped = 0

    def run(self) -> None:
        with open(self.pipe, "rb", buffering=0, closefd=True) as f:
            while chunk := f.read(65536):
                room = self.limit - len(self.kept)
                self.kept += chunk[: max(room, 0)]
                self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        out = self.kept.decode("utf-8", errors="replace")
        if self.dropped:
            out += f"\n[... {self.dropped} more bytes dropped: output limit {self.limit} bytes]\n"
        return out


def _decode_status(returncode: int) -> tuple[int | None, int | None]:
    """(exit_code, signal). bwrap reports a child killed by signal N as exit status 128 + N."""
    if returncode < 0:
        return None, -returncode
    if returncode > 128 and (returncode - 128) in {s.value for s in signal.Signals}:
        return None, returncode - 128
    return returncode, None


def _failure(message: str, started: float) -> SandboxResult:
    return SandboxResult(
        exit_code=None,
        signal=None,
        stdout="",
        stderr="",
        timed_out=False,
        duration_s=time.monotonic() - started,
        sandbox_error=message,
    )


def run_sandboxed(spec: SandboxSpec) -> SandboxResult:
    """Run ``spec.argv`` in a fresh sandbox and wait for it (or the wall clock)."""
    started = start_sandboxed(spec)
    if isinstance(started, SandboxResult):
        return started
    if spec.stdin is None:
        started.send(b"")  # end of input at once, as from /dev/null
    return started.wait(spec.limits.wall_time_s)


def start_sandboxed(spec: SandboxSpec) -> SandboxProcess | SandboxResult:
    """Start ``spec.argv`` in a fresh sandbox without waiting: a running process, or the failure that kept it from
    starting. Its standard input stays open for ``send`` unless ``spec.stdin`` gave it already; the wall clock runs
    from ``wait``, so a process can be started ahead of the work it will be sent (a warm evaluation child)."""
    started = time.monotonic()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return _failure("bubblewrap (bwrap) is not installed", started)
    if not spec.argv:
        return _failure("empty argv", started)
    for p in [*spec.writable_paths, *spec.readonly_paths, *(src for src, _ in spec.extra_binds)]:
        if not p.exists():
            return _failure(f"sandbox bind source does not exist: {p}", started)

    env = {**_default_env(), **spec.env}
    bound: list[str] = []
    args = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(spec.limits.tmpfs_bytes),
        "--tmpfs",
        "/tmp",
    ]
    if not spec.network:
        args.append("--unshare-net")
    args += _bind_args(list(_system_paths()), "--ro-bind", bound)
    if spec.gpu:
        for dev in [*sorted(Path("/dev").glob("nvidia*")), Path("/dev/dri")]:
            if dev.exists():
                args += ["--dev-bind", str(dev), str(dev)]
        args += ["--ro-bind", "/sys", "/sys"]  # the CUDA driver enumerates devices through sysfs
    # bwrap's /dev is a tmpfs the command owns, with no size bound: /dev/shm gets a bounded tmpfs of its own and
    # the rest is made read-only (device nodes stay usable).
    args += ["--size", str(spec.limits.tmpfs_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    # Later binds win, so explicit read-only paths come after the system and writable ones last.
    ro_explicit: list[str] = []
    args += _bind_args(spec.readonly_paths, "--ro-bind", ro_explicit, tuple(bound))
    rw: list[str] = []
    args += _bind_args(spec.writable_paths, "--bind", rw, (*bound, *ro_explicit))
    for src, dest in spec.extra_binds:
        args += ["--bind", os.path.realpath(src), str(dest)]
    visible = [*bound, *ro_explicit, *rw, *(str(d) for _, d in spec.extra_binds)]
    cwd = os.path.abspath(spec.cwd)
    if cwd != "/tmp" and not _covered(cwd, visible):
        return _failure(f"sandbox cwd {cwd} is not inside a bound path", started)
    exe = _find_executable(spec.argv[0], env, visible)
    if exe is None:
        return _failure(f"executable not found in the sandbox: {spec.argv[0]}", started)
    args += ["--chdir", cwd]

    # The marker pipe tells setup failures of bwrap (infrastructure) from failures of the command: the wrapper
    # writes one byte once the sandbox exists, then closes the fd so the command can never write it.
    marker_r, marker_w = os.pipe()
    wrapper = f'printf . >&{marker_w} && exec {marker_w}>&- && exec "$@"'
    seccomp_r = _seccomp_fd()
    args[1:1] = ["--seccomp", str(seccomp_r)]
    args += ["--", "/bin/bash", "-c", wrapper, "sandbox", *_prlimit_args(spec.limits), exe, *spec.argv[1:]]

    cgroup = RunCgroup.create(max_pids=spec.limits.max_processes, memory_bytes=spec.limits.memory_bytes)
    if cgroup is not None:
        # Join the cgroup(s) before bwrap starts, so no process of the run is ever outside them.
        files = cgroup.procs_files
        join = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(files)))
        args = ["/bin/sh", "-c", f'{join} && shift {len(files)} && exec "$@"', "sh", *map(str, files), *args]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=out_w,
            stderr=err_w,
            env=env,
            pass_fds=(marker_w, seccomp_r, *spec.pass_fds),
            start_new_session=True,  # its own process group, so the timeout can kill it whole
        )
    except OSError as exc:
        for fd in (out_r, out_w, err_r, err_w, marker_r, marker_w, seccomp_r):
            os.close(fd)
        if cgroup is not None:
            cgroup.destroy()
        return _failure(f"could not start bwrap: {exc}", started)
    for fd in (out_w, err_w, marker_w, seccomp_r):
        os.close(fd)
    drains = (_Drain(out_r, spec.limits.max_output_bytes), _Drain(err_r, spec.limits.max_output_bytes))
    for d in drains:
        d.start()
    writable = [*spec.writable_paths, *(src for src, _ in spec.extra_binds)]
    process = SandboxProcess(proc, drains, marker_r, cgroup, started, spec.limits, writable)
    if spec.stdin is not None:
        process.send(spec.stdin)
    return process


def _seccomp_fd() -> int:
    """A pipe holding the filter program, read by bwrap to EOF (the program is far below a pipe's capacity)."""
    read, write = os.pipe()
    os.write(write, filter_program())
    os.close(write)
    return read


class SandboxProcess:
    """A started sandbox. ``send`` writes its standard input once and closes it; ``wait`` bounds it by the wall
    clock and collects the result (later calls return the same); ``kill`` ends it early. A watchdog polls its
    disk and memory use from the start and kills it when it passes a quota.

    bwrap's --die-with-parent is tied to the *thread* that started it: start sandboxes from a thread that
    outlives them (``alive`` tells when that did not hold)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        drains: tuple[_Drain, _Drain],
        marker_r: int,
        cgroup: RunCgroup | None,
        started: float,
        limits: SandboxLimits,
        writable: list[Path],
    ) -> None:
        self.proc, self.drains, self.marker_r, self.cgroup, self.started = proc, drains, marker_r, cgroup, started
        self._result: SandboxResult | None = None
        self._exceeded: Quota | None = None
        # The pids cgroup lists the run's processes for the price of one read; the process tree costs a /proc scan.
        self.watchdog = Watchdog(
            lambda: proc.poll() is None,
            cgroup.pids if cgroup is not None and "pids" in cgroup.enforced else lambda: descendants(proc.pid),
            writable,
            disk_bytes=limits.disk_bytes,
            disk_entries=limits.disk_files,
            memory_bytes=limits.memory_bytes,
            on_exceeded=self._quota_exceeded,
        )
        self.watchdog.start()

    def _quota_exceeded(self, quota: Quota) -> None:
        self._exceeded = quota
        log.info("sandbox %d passed its %s quota: killed", self.proc.pid, quota)
        self.kill()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, data: bytes) -> bool:
        """Write ``data`` and close standard input; False if the process no longer reads it."""
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return False
        try:
            stdin.write(data)
            stdin.close()
        except (BrokenPipeError, ValueError):
            with contextlib.suppress(BrokenPipeError):
                stdin.close()
            return False
        return True

    def pause(self, paused: bool) -> None:
        """Stop (True) or continue (False) every process of the sandbox. bwrap gives the command a session of
        its own, so the tree is found through /proc rather than the process group."""
        sig = signal.SIGSTOP if paused else signal.SIGCONT
        for pid in descendants(self.proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def wait(self, wall_time_s: float) -> SandboxResult:
        if self._result is not None:
            return self._result
        timed_out = False
        try:
            self.proc.wait(timeout=wall_time_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill()
            self.proc.wait()
        self.watchdog.stop()
        if self._exceeded is None and self.watchdog.disk_over([]):
            self._exceeded = "disk"  # written faster than the watchdog polls, by a command that has ended since
        try:
            self._result = self._collect(timed_out)
            return self._result
        finally:
            with contextlib.suppress(OSError):
                os.close(self.marker_r)
            if self.proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    self.proc.stdin.close()
            if self.cgroup is not None:
                self.cgroup.destroy()

    def _collect(self, timed_out: bool) -> SandboxResult:
        for d in self.drains:
            d.join(timeout=10)  # EOF comes once the namespace is gone; bounded in case something odd holds the pipe
        stdout, stderr = self.drains[0].text(), self.drains[1].text()
        exit_code, sig = _decode_status(self.proc.returncode)
        exceeded = self._exceeded
        if exceeded is None and self.cgroup is not None and self.cgroup.memory_killed():
            exceeded = "memory"
        sandbox_error = None
        if not timed_out and exceeded is None and not _read_marker(self.marker_r):
            sandbox_error = "sandbox setup failed: " + (stderr.strip().splitlines() or ["(no message)"])[-1]
        if exceeded is not None:
            stderr += f"\n[killed by the sandbox: over its {exceeded} quota]\n"
        return SandboxResult(
            exit_code=None if timed_out else exit_code,
            signal=signal.SIGKILL.value if timed_out else sig,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            duration_s=time.monotonic() - self.started,
            sandbox_error=sandbox_error,
            limit_exceeded=exceeded,
        )


def _read_marker(fd: int) -> bool:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1) == b"."
    except BlockingIOError:
        return False


def sandbox_available() -> tuple[bool, str]:
    """(ok, reason), probing a real sandboxed command; for ``cuda-agent doctor``."""
    if shutil.which("bwrap") is None:
        return False, "bubblewrap (bwrap) is not installed"
    probe = run_sandboxed(
        SandboxSpec(argv=["/bin/true"], cwd=Path("/tmp"), writable_paths=[], limits=SandboxLimits(wall_time_s=30))
    )
    if probe.sandbox_error or probe.exit_code != 0:
        return False, f"bubblewrap cannot create a sandbox here: {probe.sandbox_error or probe.stderr.strip()}"
    if "pids" in cgroup_controllers():
        return True, "bubblewrap sandbox works; process count bounded by a pids cgroup"
    if os.geteuid() == 0:
        return True, "bubblewrap sandbox works, but no writable pids cgroup: the process limit is not enforced for root"
    return True, "bubblewrap sandbox works; process count bounded by RLIMIT_NPROC"


def quota_mechanisms() -> dict[str, str]:
    """How each bound of a sandbox run is enforced on this host, for ``cuda-agent doctor``."""
    controllers = cgroup_controllers()
    return {
        "seccomp": f"filter of {len(filter_program()) // 8} BPF instructions (ptrace, bpf, mount, ... refused)",
        "memory": (
            "memory cgroup (kernel-enforced) and the watchdog"
            if "memory" in controllers
            else "watchdog only (no writable memory cgroup): resident memory and tmpfs polled every 50 ms"
        ),
        "disk": "watchdog: bytes and entries of the writable paths, polled",
        "processes": "pids cgroup" if "pids" in controllers else "RLIMIT_NPROC only",
    }
