"""Static checks of a candidate's source before it runs: the cheap first layer against reward hacking.

Run-time guards (cuda_agent.eval.guards) catch the same behaviour when it is obfuscated; these rules give the
policy a precise, early message. Every rule is a finding code prefixed ``static_``.
"""

from __future__ import annotations

import ast
import re

from cuda_agent.contracts.candidate import KERNEL_SUFFIXES, CandidateSource
from cuda_agent.contracts.eval import Finding

FORBIDDEN_MODULES = frozenset(
    {
        "ctypes",
        "gc",
        "inspect",
        "subprocess",
        "multiprocessing",
        "threading",
        "_thread",
        "socket",
        "importlib",
        "builtins",
        "signal",
        "marshal",
        "pickle",
        "dill",
        "sys",
        "shutil",
        "pty",
        "asyncio",
        "concurrent",
        "cupy",
        "triton",
        "numba",
        "jax",
        "tensorflow",
    }
)
ALLOWED_PLATFORM = frozenset({"cuda_agent", "cuda_agent.kernels", "cuda_agent.kernels.load_kernels"})
FORBIDDEN_CALLS = frozenset({"__import__", "exec", "eval", "compile", "open", "breakpoint", "globals"})
INTROSPECTION_ATTRS = frozenset(
    {
        "__subclasses__",
        "__globals__",
        "__code__",
        "__builtins__",
        "f_back",
        "f_globals",
        "f_locals",
        "gi_frame",
        "tb_frame",
        "__closure__",
        "__dict__",
        "__mro__",
        "__bases__",
    }
)
OS_FORBIDDEN = frozenset(
    {
        "system",
        "_exit",
        "fork",
        "kill",
        "popen",
        "spawnl",
        "spawnv",
        "execv",
        "execve",
        "execl",
        "execvp",
        "posix_spawn",
        "remove",
        "unlink",
        "rename",
        "chmod",
        "putenv",
        "unsetenv",
    }
)
SEED_FUNCTIONS = frozenset({"manual_seed", "seed", "manual_seed_all", "set_rng_state", "use_deterministic_algorithms"})
TORCH_FORBIDDEN = frozenset(
    {
        "compile",
        "jit",
        "library",
        "overrides",
        "profiler",
        "set_float32_matmul_precision",
        "set_default_dtype",
        "fx",
        "export",
        "func",
        "vmap",
    }
)
NATIVE_ESCAPES = re.compile(
    r"\b(dlopen|dlsym|popen|system\s*\(|fork\s*\(|execv|execl|__attribute__\s*\(\(\s*constructor)"
)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.findings: list[Finding] = []
        self.modules: set[str] = set()  # local names bound to modules

    def add(self, code: str, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", "?")
        message = f"{self.filename} line {line}: {what}"
        if not any(f.code == code and f.message == message for f in self.findings):
            self.findings.append(Finding(code=f"static_{code}", message=message))

    def _check_module(self, name: str, node: ast.AST) -> None:
        if any(name == m or name.startswith(m + ".") for m in FORBIDDEN_MODULES):
            self.add("forbidden_import", node, f"imports {name}")
        elif name.startswith("cuda_agent") and name not in ALLOWED_PLATFORM:
            self.add(
                "forbidden_import", node, f"imports {name} (only cuda_agent.kernels.load_kernels is for candidates)"
            )
        elif name.startswith("torch") and any(p.startswith("_") for p in name.split(".")):
            self.add("private_torch_api", node, f"imports private {name}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(alias.name, node)
            self.modules.add(alias.asname or alias.name.split(".")[0])
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module(module, node)
        for alias in node.names:
            self._check_module(f"{module}.{alias.name}", node)
            self.modules.add(alias.asname or alias.name)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            self.add("dynamic_code" if node.func.id != "open" else "file_access", node, f"calls {node.func.id}()")
        if name == "setattr" and node.args:
            target = _dotted(node.args[0]) or ""
            if target.split(".")[0] in self.modules | {"torch", "time", "os", "sys", "builtins"}:
                self.add("monkeypatch", node, f"setattr on {target}")
        if name:
            parts = name.split(".")
            if parts[0] == "os" and parts[-1] in OS_FORBIDDEN:
                self.add("process_or_file_control", node, f"calls {name}()")
            if parts[-1] in SEED_FUNCTIONS and parts[0] in ("torch", "random", "np", "numpy"):
                self.add("rng_reseeded", node, f"calls {name}()")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in INTROSPECTION_ATTRS:
            self.add("introspection", node, f"uses .{node.attr}")
        name = _dotted(node)
        root = name.split(".")[0] if name else ""
        if (
            name
            and root in self.modules
            and root != "torch"
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            self.add("private_api", node, f"uses private {name}")
        if name and name.startswith("torch."):
            parts = name.split(".")
            if any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                self.add("private_torch_api", node, f"uses private {name}")
            elif parts[1] in TORCH_FORBIDDEN:
                self.add("torch_machinery", node, f"uses {'.'.join(parts[:2])}")
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Attribute):
            name = _dotted(target) or ""
            root = name.split(".")[0]
            if root in self.modules or root in ("torch", "time", "os", "sys", "builtins"):
                code = "backend_flags_changed" if name.startswith("torch.backends") else "monkeypatch"
                self.add(code, target, f"assigns to {name}")
        elif isinstance(target, ast.Subscript) and _dotted(target.value) == "os.environ":
            key = target.slice.value if isinstance(target.slice, ast.Constant) else None
            if not (isinstance(key, str) and key in ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS")):
                self.add("environ_tampered", target, f"sets os.environ[{key!r}]")
        elif isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self._check_target(elt)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)


def scan_python(source: str, filename: str) -> list[Finding]:
    try:
        tree = ast.parse(source, filename)
    except SyntaxError:
        return []  # the loader reports syntax errors with their line
    scanner = _Scanner(filename)
    scanner.visit(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NATIVE_ESCAPES.search(node.value):
            scanner.add("native_escape", node, "embedded native code calls dlopen/system/fork/exec")
    return scanner.findings


def scan_candidate(candidate: CandidateSource) -> list[Finding]:
    findings: list[Finding] = []
    for path, text in sorted(candidate.files.items()):
        if path.endswith(".py"):
            findings += scan_python(text, path)
        elif path.endswith(KERNEL_SUFFIXES) and NATIVE_ESCAPES.search(text):
            findings.append(Finding(code="static_native_escape", message=f"{path}: calls dlopen/system/fork/exec"))
    return findings
