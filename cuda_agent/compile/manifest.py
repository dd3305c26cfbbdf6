"""Source checks of a PROJECT candidate: exported ``extern "C"`` launchers -> manifest, and include hygiene."""

from __future__ import annotations

import re
from typing import Any

from cuda_agent.contracts.compile import Diagnostic
from cuda_agent.kernels.types import (
    LIBRARY_NAME,
    MANIFEST_VERSION,
    POINTER_DTYPES,
    RETURN_TYPES,
    SCALAR_CTYPES,
    STREAM_TYPES,
)

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_LAUNCHER = re.compile(
    r'extern\s+"C"\s+(?P<attrs>(?:(?:__host__|inline|static|__attribute__\s*\(\(.*?\)\))\s+)*)'
    r"(?P<ret>[A-Za-z_][\w\s]*?)\s*(?P<ptr>\*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*(?P<end>[{;])",
    re.DOTALL,
)
_EXTERN_BLOCK = re.compile(r'extern\s+"C"\s*\{')
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict"}
# [ \t], not \s: \s would match the newlines of blank lines before the directive and report the wrong line.
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.MULTILINE)
# First path component (or the file) of headers that belong to torch's C++ API or to CPython.
TORCH_HEADER_ROOTS = frozenset({"torch", "ATen", "c10", "caffe2", "pybind11", "Python.h"})


def blank_comments(text: str) -> str:
    """Comments replaced by spaces with newlines kept, so offsets still give the right line."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _parse_param(raw: str) -> dict[str, Any] | str:
    """A manifest parameter, or the reason the C type is not allowed."""
    text = " ".join(raw.replace("*", " * ").split())
    tokens = text.split()
    stars = tokens.count("*")
    is_const = "const" in tokens[: tokens.index("*")] if stars else "const" in tokens
    words = [t for t in tokens if t not in _QUALIFIERS and t != "*"]
    # The last word is the name when more than the type is left ("float x"); unnamed parameters are allowed.
    type_words = words
    name = ""
    if len(words) > 1 and " ".join(words) not in SCALAR_CTYPES and " ".join(words) not in POINTER_DTYPES:
        type_words, name = words[:-1], words[-1]
    base = " ".join(type_words)
    ctype = ("const " if is_const else "") + base + ("*" if stars else "")
    if stars > 1:
        return f"'{raw.strip()}': pointers to pointers are not allowed"
    if stars == 1:
        if base not in POINTER_DTYPES:
            return f"'{raw.strip()}': pointer base type must be one of {', '.join(POINTER_DTYPES)}"
        return {
            "name": name,
            "ctype": ctype,
            "kind": "pointer",
            "base": base,
            "const": is_const,
            "dtype": POINTER_DTYPES[base],
        }
    if base in STREAM_TYPES:
        return {"name": name, "ctype": base, "kind": "stream", "base": base, "const": False, "dtype": None}
    if base in SCALAR_CTYPES:
        return {"name": name, "ctype": ctype, "kind": "scalar", "base": base, "const": is_const, "dtype": None}
    return f"'{raw.strip()}': type must be a tensor pointer, one of {', '.join(SCALAR_CTYPES)} or cudaStream_t"


def parse_launchers(path: str, source: str) -> tuple[list[dict[str, Any]], list[Diagnostic]]:
    """Exported launchers defined in one .cu/.cpp file, and diagnostics for ones that break the contract."""
    text = blank_comments(source)
    functions: list[dict[str, Any]] = []
    problems: list[Diagnostic] = []

    def problem(offset: int, message: str) -> None:
        problems.append(
            Diagnostic(
                file=path,
                line=line_of(text, offset),
                message=message,
                code="bad_prototype",
                hint="see the candidate contract: exported launchers and allowed types",
            )
        )

    for m in _EXTERN_BLOCK.finditer(text):
        problem(m.start(), 'extern "C" { ... } blocks are not supported; mark each launcher extern "C"')
    for m in _LAUNCHER.finditer(text):
        if m.group("end") == ";":
            continue  # a declaration; the definition is what gets exported
        ret, name = " ".join(m.group("ret").split()), m.group("name")
        if "__global__" in ret or "__device__" in ret:
            continue  # an extern "C" kernel is device code, not a host launcher
        if m.group("ptr") or ret not in RETURN_TYPES:
            problem(m.start(), f"launcher {name}: return type must be one of {', '.join(RETURN_TYPES)}")
            continue
        params: list[dict[str, Any]] = []
        raw_params = [p for p in m.group("params").split(",") if p.strip()]
        if [p.strip() for p in raw_params] == ["void"]:
            raw_params = []
        for i, raw in enumerate(raw_params):
            parsed = _parse_param(raw)
            if isinstance(parsed, str):
                problem(m.start(), f"launcher {name}, parameter {i}: {parsed}")
                break
            if parsed["kind"] == "stream" and i != len(raw_params) - 1:
                problem(m.start(), f"launcher {name}: cudaStream_t must be the last parameter")
                break
            params.append(parsed)
        else:
            functions.append(
                {"name": name, "return": ret, "params": params, "file": path, "line": line_of(text, m.start())}
            )
    return functions, problems


def included(source: str) -> list[tuple[str, int]]:
    """(header as written, line) of each #include outside comments."""
    text = blank_comments(source)
    return [(m.group(2).strip(), line_of(text, m.start())) for m in _INCLUDE.finditer(text)]


def check_includes(path: str, source: str) -> list[Diagnostic]:
    """Nothing may be included by absolute path or via '..' (e.g. ``#include </dev/zero>``), and no torch or
    Python header: the project form builds without them (they are not on its include path either, but a compiler's
    "file not found" would not say why)."""
    problems = []
    for target, line in included(source):
        if target.startswith("/") or ".." in target.split("/"):
            message = f"#include of {target!r}: absolute and '..' include paths are not allowed"
            hint = "include only system/CUDA headers or files of the candidate, by relative path"
        elif target.split("/")[0] in TORCH_HEADER_ROOTS:
            message = f"#include of {target!r}: the project form builds without torch and Python headers"
            hint = 'take tensors as pointers in an extern "C" launcher, or use the kernelbench form (load_inline)'
        else:
            continue
        problems.append(Diagnostic(file=path, line=line, code="forbidden_include", message=message, hint=hint))
    return problems


def workdir_include_problems(path: str, source: str) -> list[Diagnostic]:
    """The workdir form's include rule: torch headers are allowed (its bindings take tensors), the platform's
    registry header is reached through '..' from kernels/, any other absolute or '..' path is refused."""
    from cuda_agent.workdir.layout import REGISTRY_INCLUDES

    problems = []
    for target, line in included(source):
        if (target.startswith("/") or ".." in target.split("/")) and target not in REGISTRY_INCLUDES:
            problems.append(
                Diagnostic(
                    file=path,
                    line=line,
                    code="forbidden_include",
                    message=f"#include of {target!r}: absolute and '..' include paths are not allowed",
                    hint="include system/CUDA/torch headers, files of the candidate by relative path, and "
                    '"../binding_registry.h"',
                )
            )
    return problems


def build_manifest(
    device: str, functions: list[dict[str, Any]], libraries: list[str], kernel_units: list[str]
) -> dict[str, Any]:
    """What the binding loads, plus what the build found: the vendor libraries linked and, for CUDA, the units that
    define a ``__global__`` kernel of the candidate's own (the binding ignores both; they are there to inspect)."""
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "device": device,
        "library": LIBRARY_NAME,
        "functions": functions,
        "libraries": libraries,
    }
    if device == "cuda":
        manifest["kernel_units"] = kernel_units
    return manifest
