"""Compiler output -> Diagnostics an agent can act on, and ``ptxas -v`` -> per-kernel resources."""

from __future__ import annotations

import re

from cuda_agent.contracts.compile import Diagnostic, KernelResources

# kernels/a.cu(12): error: identifier "x" is undefined        (nvcc front end)
_NVCC = re.compile(
    r"^(?P<file>[^\s(][^()]*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning)[^:]*: (?P<msg>.*)$"
)
# kernels/a.cpp:12:5: error: expected ';'                         (g++, and nvcc's host pass)
_GCC = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning): (?P<msg>.*)$"
)
# ptxas x.ptx, line 26; error   : Instruction 'wgmma.fence' not supported on .target 'sm_90'
_PTXAS = re.compile(r"^ptxas(?: [^,]*, line \d+;)? ?(?P<sev>error|fatal)\s*: (?P<msg>.*)$")
_TOOL = re.compile(
    r"^(?P<tool>nvcc|nvlink|g\+\+|cc1plus|collect2|/usr/bin/ld|ld)(?: fatal)?\s*: ?"
    r"(?P<sev>fatal error|error|fatal)?:?\s*(?P<msg>.*)$"
)
_UNDEFINED = re.compile("undefined (?:reference to|symbol:?) [`'\u2018]?(?P<sym>[\\w:]+)")
_PYTHON_ERROR = re.compile(r"^(?P<exc>[A-Z]\w*(?:Error|Exception))(?:: (?P<msg>.*))?$")

_CLASSES: list[tuple[str, re.Pattern[str], str]] = [
    (
        "arch_mismatch",
        re.compile(
            r"not supported on \.target|requires \.target|requires sm_|Unsupported gpu architecture|"
            r"is not supported on|sm_\d+a? or higher",
            re.IGNORECASE,
        ),
        "this instruction needs another target: arch-specific Hopper features (wgmma, setmaxnreg, TMA "
        "multicast) need sm_90a -- pass the extra flag -arch=sm_90a",
    ),
    (
        "smem_overflow",
        re.compile(r"too much shared data|shared memory.*exceed", re.IGNORECASE),
        "static __shared__ arrays are capped at 48 KB per block (227 KB built for sm_90a); use extern __shared__ "
        "(dynamic) memory and raise "
        "the cap with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) "
        "(up to 227 KB on H100/H200), or use smaller tiles",
    ),
    (
        "too_many_resources",
        re.compile(
            r"too many resources requested for launch|too many registers|uses too much local data", re.IGNORECASE
        ),
        "the block needs more registers or memory than an SM has: use fewer threads per block, add "
        "__launch_bounds__(threads), or cap registers with the extra flag -maxrregcount=N",
    ),
    (
        "undefined_symbol",
        re.compile(r"undefined reference|undefined symbol", re.IGNORECASE),
        'define every function you call (a declaration is not enough) and export launchers as extern "C" '
        "definitions; device code in another file needs -rdc, so keep a kernel and its callers in one .cu",
    ),
    (
        "resource_limit",
        re.compile(
            r"out of memory|MemoryError|virtual memory exhausted|Cannot allocate memory|"
            r"Resource temporarily unavailable|File size limit exceeded",
            re.IGNORECASE,
        ),
        "the build hit a sandbox limit (memory, processes or file size); simplify the code or templates",
    ),
]


def classify(message: str) -> tuple[str | None, str | None]:
    """(code, hint) for a known class of message, else (None, None). Also usable for runtime errors."""
    for code, pattern, hint in _CLASSES:
        if pattern.search(message):
            return code, hint
    return None, None


def _diag(
    message: str, file: str | None = None, line: int | None = None, column: int | None = None, severity: str = "error"
) -> Diagnostic:
    code, hint = classify(message)
    return Diagnostic(
        file=file, line=line, column=column, severity=severity, message=message.strip(), code=code, hint=hint
    )


def _severity(raw: str | None) -> str:
    return "warning" if raw == "warning" else "error"


def parse_diagnostics(log: str, *, limit: int = 50) -> list[Diagnostic]:
    """Errors first (then warnings) from nvcc, g++, ptxas, the linker and Python tracebacks."""
    found: list[Diagnostic] = []
    seen: set[tuple[str | None, int | None, str]] = set()
    for raw in log.splitlines():
        line = raw.rstrip()
        d: Diagnostic | None = None
        if m := _NVCC.match(line):
            d = _diag(m["msg"], m["file"], int(m["line"]), severity=_severity(m["sev"]))
        elif m := _GCC.match(line):
            d = _diag(m["msg"], m["file"], int(m["line"]), int(m["col"]) if m["col"] else None, _severity(m["sev"]))
        elif m := _PTXAS.match(line):
            d = _diag(m["msg"])
        elif m := _UNDEFINED.search(line):
            d = _diag(f"undefined reference to {m['sym']}")
        elif (m := _TOOL.match(line)) and (m["sev"] or "error" in line.lower()):
            d = _diag(m["msg"])
        elif m := _PYTHON_ERROR.match(line):
            d = _diag(f"{m['exc']}: {m['msg']}" if m["msg"] else m["exc"])
        if d is None or (d.file, d.line, d.message) in seen:
            continue
        seen.add((d.file, d.line, d.message))
        found.append(d)
    found.sort(key=lambda d: d.severity != "error")
    return found[:limit]


_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPS = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads")
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(?P<n>\d+) bytes smem")
_CMEM = re.compile(r"(?P<n>\d+) bytes cmem\[0\]")


def demangle_name(symbol: str) -> str:
    """Base name of an Itanium-mangled kernel (``_Z10add_kernelPKfS0_Pfi`` -> ``add_kernel``); cheap and safe."""
    m = re.match(r"_Z(?:N\d*\w*?)?(\d+)(\w+)", symbol)
    if not m:
        return symbol
    n = int(m.group(1))
    return m.group(2)[:n] or symbol


def parse_resources(log: str) -> list[KernelResources]:
    """Per-kernel registers, shared memory, spills and stack from ``-Xptxas -v`` output."""
    kernels: list[KernelResources] = []
    current: KernelResources | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = KernelResources(kernel=demangle_name(m["name"]))
            kernels.append(current)
        elif current is not None:
            if m := _PROPS.search(line):
                current.stack_bytes = int(m["stack"])
                current.spill_stores_bytes = int(m["st"])
                current.spill_loads_bytes = int(m["ld"])
            if m := _USED.search(line):
                current.registers = int(m["regs"])
                current.shared_bytes = int(s["n"]) if (s := _SMEM.search(line)) else 0
                if c := _CMEM.search(line):
                    current.constant_bytes = int(c["n"])
    return kernels
