"""Static checks of a candidate's source before it runs: the cheap first layer against reward hacking.

Run-time guards (cuda_agent.eval.guards) catch the same behaviour when it is obfuscated; these rules give the
policy a precise, early message. Every rule is a finding code prefixed ``static_``.
"""

from __future__ import annotations

import ast
import re

from cuda_agent.compile.libraries import ALLOWED_LIBRARIES
from cuda_agent.compile.manifest import blank_comments, included, line_of
from cuda_agent.contracts.candidate import KERNEL_SUFFIXES, CandidateSource, RuleProfile
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


def scan_candidate(candidate: CandidateSource, rules: RuleProfile = RuleProfile.STANDARD) -> list[Finding]:
    findings: list[Finding] = []
    for path, text in sorted(candidate.files.items()):
        if path.endswith(".py"):
            findings += scan_python(text, path)
            if rules is RuleProfile.PAPER:
                findings += paper_python(text, path)
        elif path.endswith(KERNEL_SUFFIXES):
            if NATIVE_ESCAPES.search(text):
                findings.append(Finding(code="static_native_escape", message=f"{path}: calls dlopen/system/fork/exec"))
            if rules is RuleProfile.PAPER:
                findings += paper_native(text, path)
    return findings


# --- the paper profile ----------------------------------------------------------------------------------------
# Rule names as findings carry them: static_paper_<rule>.
RULE_TORCH_OPERATOR = "paper_torch_operator"
RULE_VENDOR_LIBRARY = "paper_vendor_library"
RULE_VENDOR_CALL = "paper_vendor_call"
_RULE_TEXT = {
    RULE_TORCH_OPERATOR: "no torch operator beyond allocation",
    RULE_VENDOR_LIBRARY: "vendor libraries: cuBLAS for GEMM and cuDNN for convolution only",
    RULE_VENDOR_CALL: "cuBLAS only for GEMM, cuDNN only for convolution",
}
# torch functions that only allocate, describe or move tensors (the run-time guard's allow-list, in Python names).
TORCH_ALLOCATION = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "from_blob",
        "no_grad",
        "inference_mode",
        "device",
        "dtype",
        "is_tensor",
        "get_default_dtype",
        "Size",
        "TensorOptions",
        "scalar_tensor",
        "getCurrentCUDAStream",
        "elementSize",
        "toString",
    }
)
# Tensor methods that compute: a call of one of these names on anything is taken for a torch operator.
TORCH_COMPUTE_METHODS = frozenset(
    {
        "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", "conv1d", "conv2d", "conv3d",
        "sum", "mean", "prod", "cumsum", "amax", "amin", "argmax", "argmin", "norm", "var", "std", "logsumexp",
        "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "pow", "sqrt", "rsqrt", "exp", "log",
        "relu", "relu_", "sigmoid", "tanh", "gelu", "silu", "softmax", "log_softmax", "clamp", "clamp_",
        "abs", "neg", "maximum", "minimum", "where", "masked_fill", "topk", "layer_norm", "batch_norm",
    }
)  # fmt: skip
# Namespaces whose every call is an operator.
_TORCH_OPERATOR_NAMESPACES = ("torch.nn.functional.", "torch.special.", "torch.linalg.", "torch.fft.")


def _paper(rule: str, path: str, line: int | str, what: str) -> Finding:
    return Finding(code=f"static_{rule}", message=f"{path} line {line}: {what} (paper rule: {_RULE_TEXT[rule]})")


def paper_python(source: str, path: str) -> list[Finding]:
    """torch operators called outside ``__init__`` (where weights are made; they are replaced by the reference's
    state_dict anyway): ``torch.<op>``, ``torch.nn.functional`` and the like, and compute methods on anything."""
    try:
        tree = ast.parse(source, path)
    except SyntaxError:
        return []
    aliases = {"torch": "torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("torch")})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            skip |= {id(n) for n in ast.walk(node)}
    kernels = _kernel_modules(tree)
    findings: list[Finding] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in skip:
            continue
        dotted = _dotted(node.func) or ""
        root, _, rest = dotted.partition(".")
        full = f"{aliases[root]}.{rest}".rstrip(".") if root in aliases else dotted
        name = node.func.attr if isinstance(node.func, ast.Attribute) else full.rsplit(".", 1)[-1]
        is_operator = full.startswith(_TORCH_OPERATOR_NAMESPACES) or (
            full.startswith("torch.") and full.count(".") == 1 and name[:1].islower() and name not in TORCH_ALLOCATION
        )
        if not is_operator and isinstance(node.func, ast.Attribute) and root not in aliases:
            # A launcher may share a tensor method's name (a kernel called silu): on the kernels' module it is ours.
            is_operator = name in TORCH_COMPUTE_METHODS and dotted.rpartition(".")[0] not in kernels
        if is_operator:
            findings.append(_paper(RULE_TORCH_OPERATOR, path, node.lineno, f"calls {full or '.' + name}()"))
    return findings


def _kernel_modules(tree: ast.AST) -> set[str]:
    """Names that only ever hold the candidate's kernels: ``import cuda_extension`` (the workdir form's module) and
    targets assigned ``load_kernels(...)`` (the project form's), e.g. ``_k`` or ``self._kernels``; a name also
    assigned anything else is not one."""
    sources: dict[str, set[bool]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                sources.setdefault(a.asname or a.name, set()).add(a.name == "cuda_extension")
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                sources.setdefault(a.asname or a.name, set()).add(False)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            loaded = isinstance(value, ast.Call) and (_dotted(value.func) or "").rpartition(".")[2] == "load_kernels"
            for target in targets:
                sources.setdefault(_dotted(target) or "", set()).add(loaded and not isinstance(node, ast.AugAssign))
    return {name for name, kinds in sources.items() if name and kinds == {True}}


_CPP_TORCH_CALL = re.compile(r"\b(?P<ns>torch|at)::(?P<path>(?:\w+::)*)(?P<name>\w+)\s*(?:<[^<>;()]*>)?\s*\(")
_CPP_METHOD_CALL = re.compile(r"(?:\.|->)\s*(?P<name>\w+)\s*(?:<[^<>;()]*>)?\s*\(")
_CPP_VENDOR_CALL = re.compile(r"\b(?P<name>(?:cublas|cudnn)\w*)\s*\(")
# Set-up and bookkeeping calls of the libraries, and the calls the paper allows them for.
_CUBLAS_ALLOWED = re.compile(
    r"gemm|matmul|create|destroy|^cublas(lt)?(set|get)|matrixlayout|preference|heuristic|version|status", re.I
)
_CUDNN_ALLOWED = re.compile(r"convolution|^cudnn(create|destroy|set|get|find)|errorstring|version", re.I)
_PAPER_LIBRARIES = frozenset({"cublas", "cublasLt", "cudnn"})


def paper_native(source: str, path: str) -> list[Finding]:
    """torch operators called from C++/CUDA (allocation, streams and types are allowed), vendor libraries other
    than cuBLAS and cuDNN, and their calls that are not a GEMM or a convolution."""
    text = blank_comments(source)
    findings: list[Finding] = []
    for m in _CPP_TORCH_CALL.finditer(text):
        name, namespace = m.group("name"), m.group("path")
        allowed = name in TORCH_ALLOCATION or name[:1].isupper() or namespace.startswith("cuda::")
        if not allowed and not namespace.startswith("indexing"):
            call = f"{m.group('ns')}::{namespace}{name}"
            findings.append(_paper(RULE_TORCH_OPERATOR, path, line_of(text, m.start()), f"calls {call}()"))
    for m in _CPP_METHOD_CALL.finditer(text):
        if m.group("name") in TORCH_COMPUTE_METHODS:
            what = f"calls the tensor method .{m.group('name')}()"
            findings.append(_paper(RULE_TORCH_OPERATOR, path, line_of(text, m.start()), what))
    for header, line in included(source):
        for library, headers in ALLOWED_LIBRARIES.items():
            if header in headers and library not in _PAPER_LIBRARIES:
                findings.append(_paper(RULE_VENDOR_LIBRARY, path, line, f"includes {header} ({library})"))
    for m in _CPP_VENDOR_CALL.finditer(text):
        name = m.group("name")
        allowed = _CUBLAS_ALLOWED if name.startswith("cublas") else _CUDNN_ALLOWED
        if not allowed.search(name):
            findings.append(_paper(RULE_VENDOR_CALL, path, line_of(text, m.start()), f"calls {name}()"))
    return findings
