"""``compile_candidate``: sandboxed, cached builds of both candidate forms."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from cuda_agent import safefs
from cuda_agent.compile import evict, store
from cuda_agent.compile.diagnostics import parse_diagnostics, parse_resources
from cuda_agent.compile.libraries import (
    NO_CUSTOM_KERNEL_MESSAGE,
    VendorLibrary,
    include_flags,
    link_flags,
    vendor_libraries,
)
from cuda_agent.compile.manifest import (
    TORCH_HEADER_ROOTS,
    build_manifest,
    check_includes,
    included,
    parse_launchers,
    workdir_include_problems,
)
from cuda_agent.compile.toolchain import (
    FlagError,
    check_flags,
    gxx_version,
    nvcc_path,
    nvcc_version,
    resolve_arch,
    torch_arch_list,
    torch_version,
)
from cuda_agent.contracts.candidate import (
    BINDING_SUFFIX,
    EXTENSION_MODULE,
    KERNELS_DIR,
    MODEL_NEW_FILE,
    WORKDIR_BINDING_FILE,
    CandidateForm,
    CandidateSource,
    is_kernel_file,
    is_unit,
    layout_error,
)
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest, CompileResult, Diagnostic
from cuda_agent.kernels.types import LIBRARY_NAME, MANIFEST_NAME
from cuda_agent.sandbox import SandboxLimits, SandboxResult, SandboxSpec, run_sandboxed
from cuda_agent.settings import get_settings
from cuda_agent.workdir import flags as wflags
from cuda_agent.workdir.layout import PLATFORM_FILES, REGISTRY_INCLUDES

log = logging.getLogger(__name__)

_LOG_LIMIT = 64 * 1024
# nvcc-only flags are dropped for g++ units; g++-only flags reach nvcc's host compiler through -Xcompiler.
_NVCC_ONLY = re.compile(
    r"^(-?-use_fast_math|--use-fast-math|-lineinfo|-G|-ftz=|-prec-|-fmad=|--extended-lambda|"
    r"--expt-|-?-maxrregcount|-Xptxas|--ptxas-options|--restrict)"
)
# The torch precompiled header is most of a gigabyte; built from the platform's fixed header only, so the limit of
# a candidate's files does not apply to it.
_PCH_MAX_BYTES = 4 * 1024**3
_GXX_ONLY = re.compile(r"^(-ffast-math|-funroll-loops|-march=|-mtune=|-mavx|-mfma|-fopenmp|-fno-strict-aliasing|-fPIC)")


class _BuildFailed(Exception):
    def __init__(self, result: CompileResult) -> None:
        self.result = result


def _normalize(text: str) -> str:
    """CRLF and trailing whitespace do not change what is built, so they must not change the cache key."""
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).rstrip("\n") + "\n"


def _toolchain(device: Device, form: CandidateForm) -> dict[str, str]:
    tools = {"gxx": gxx_version(), "torch": torch_version()}
    if device is Device.CUDA:
        tools["nvcc"] = nvcc_version()
    if form is not CandidateForm.PROJECT:
        tools["python"] = sys.version.split()[0]  # the extension is built against this interpreter
    return tools


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _error(
    key: str,
    message: str,
    started: float,
    diagnostics: list[Diagnostic] | None = None,
    status: CompileStatus = CompileStatus.COMPILE_ERROR,
    log_text: str = "",
) -> CompileResult:
    return CompileResult(
        status=status,
        cache_key=key,
        duration_s=time.monotonic() - started,
        message=message,
        diagnostics=diagnostics or [],
        log=log_text[-_LOG_LIMIT:],
    )


def _summary(diagnostics: list[Diagnostic], fallback: str) -> str:
    for d in diagnostics:
        if d.severity == "error":
            where = f"{d.file}:{d.line}: " if d.file and d.line else ""
            code = f" [{d.code}]" if d.code else ""
            return f"{where}{d.message}{code}"
    return fallback


def compile_candidate(req: CompileRequest) -> CompileResult:
    """Build a candidate in the sandbox, or return the cached artifact of an identical earlier build."""
    started = time.monotonic()
    try:
        extra, flag_arch = check_flags(req.extra_flags)
        arch = resolve_arch(flag_arch or req.arch) if req.device is Device.CUDA else None
    except FlagError as exc:
        return _error("", str(exc), started, [Diagnostic(message=str(exc), code="bad_flag")])
    if problem := layout_error(req.candidate):
        return _error("", problem, started, [Diagnostic(message=problem, code="bad_layout")])
    files = {name: _normalize(text) for name, text in req.candidate.files.items()}
    libraries: list[VendorLibrary] = []
    if req.candidate.form is not CandidateForm.KERNELBENCH:
        kernel_files = {n: t for n, t in files.items() if is_kernel_file(n)}
        libraries, bad = vendor_libraries(
            req.device, kernel_files, by_include=req.candidate.form is CandidateForm.WORKDIR
        )
        if bad:
            return _error("", _summary(bad, "vendor library refused"), started, bad)
    key = _digest(
        {
            # The contract's content key of the normalized files; the build adds what else decides the output.
            "candidate": CandidateSource(form=req.candidate.form, files=files).key,
            "device": req.device,
            "arch": arch,
            "flags": extra,
            "tools": _toolchain(req.device, req.candidate.form),
            # Only when declared, so the keys of candidates without vendor libraries stay what they were.
            **({"libraries": [lib.fingerprint() for lib in libraries]} if libraries else {}),
            # The platform's binding files are built with the candidate's: a new version of them rebuilds.
            **({"platform": PLATFORM_FILES} if req.candidate.form is CandidateForm.WORKDIR else {}),
        }
    )
    with contextlib.suppress(store.ArtifactError):  # not built yet, or evicted since (built again then)
        cached = store.read_record(key).result
        return cached.model_copy(update={"cache_hit": True, "duration_s": time.monotonic() - started})

    settings = get_settings()
    deadline = started + (req.timeout_s or settings.compile_timeout_s)
    scratch = _cache_root() / "tmp" / uuid.uuid4().hex
    (scratch / "src").mkdir(parents=True)
    try:
        for name, text in files.items():
            (scratch / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            (scratch / "src" / name).write_text(text)
        if req.candidate.form is CandidateForm.PROJECT:
            return _build_project(req, files, libraries, key, arch, extra, scratch, deadline, started)
        if req.candidate.form is CandidateForm.WORKDIR:
            return _build_workdir(req, files, libraries, key, arch, extra, scratch, deadline, started)
        return _build_kernelbench(req, key, arch, scratch, deadline, started)
    except _BuildFailed as failed:
        return failed.result.model_copy(update={"duration_s": time.monotonic() - started})
    except OSError as exc:  # disk full, missing toolchain...: the infrastructure, not the candidate
        log.exception("compile infrastructure failure")
        return _error(key, f"build infrastructure failed: {exc}", started, status=CompileStatus.SANDBOX_ERROR)
    finally:
        safefs.remove_tree(scratch)


def _cache_root() -> Path:
    return get_settings().data_dir / "compile_cache"


def _objects_dir() -> Path:
    return _cache_root() / "objects"


def _object_files(obj_keys: dict[str, str]) -> list[Path]:
    return [_objects_dir() / f"{k}{ext}" for k in obj_keys.values() for ext in (".o", ".log")]


def _evict(key: str, used: list[Path]) -> None:
    """Bring the caches back within their budget once a build has published; the artifact and whatever else the
    build used stay."""
    roots = [store.artifacts_root(), _objects_dir(), _cache_root() / "pch"]
    evict.within_budget(roots, keep={store.artifact_dir(key), *used})


def scratch_roots() -> list[Path]:
    """The directories that hold one child per build in progress (its scratch, its staging artifact); a build
    killed with its worker leaves its child behind, for ``cuda_agent.sandbox.sweep_stale`` at start-up."""
    return [_cache_root() / "tmp", store.artifacts_root() / ".staging"]


def _limits(deadline: float, max_file_bytes: int | None = None) -> SandboxLimits:
    s = get_settings()
    return SandboxLimits(
        wall_time_s=max(deadline - time.monotonic(), 0.1),
        cpu_time_s=s.compile_cpu_time_s,
        address_space_bytes=s.compile_memory_bytes,
        max_processes=s.compile_max_processes,
        max_file_bytes=max_file_bytes or s.compile_max_file_bytes,
        max_output_bytes=256 * 1024,
        disk_bytes=s.compile_disk_bytes,
        memory_bytes=s.compile_memory_quota_bytes,
    )


def _sandboxed(
    argv: list[str],
    cwd: Path,
    deadline: float,
    env: dict[str, str] | None = None,
    extra_binds: list[tuple[Path, Path]] | None = None,
    readonly: list[Path] | None = None,
    max_file_bytes: int | None = None,
) -> SandboxResult:
    spec = SandboxSpec(
        argv=argv,
        cwd=cwd,
        writable_paths=[cwd.parent],
        readonly_paths=readonly or [],
        env={"CUDA_HOME": str(get_settings().cuda_home), **(env or {})},
        limits=_limits(deadline, max_file_bytes),
        extra_binds=extra_binds or [],
    )
    return run_sandboxed(spec)


def _check_run(result: SandboxResult, key: str, started: float, what: str) -> str:
    """The run's output; raises _BuildFailed for a timeout, sandbox fault or compiler error."""
    output = (result.stdout + result.stderr)[-_LOG_LIMIT * 4 :]
    if result.sandbox_error:
        raise _BuildFailed(
            _error(
                key,
                f"sandbox failed: {result.sandbox_error}",
                started,
                status=CompileStatus.SANDBOX_ERROR,
                log_text=output,
            )
        )
    if result.limit_exceeded is not None:
        message = f"{what} exceeded the sandbox's {result.limit_exceeded} quota and was killed"
        raise _BuildFailed(
            _error(key, message, started, [Diagnostic(message=message, code="resource_limit")], log_text=output)
        )
    if result.timed_out:
        raise _BuildFailed(
            _error(
                key,
                f"{what} exceeded the time limit and was killed",
                started,
                status=CompileStatus.TIMEOUT,
                log_text=output,
            )
        )
    if result.exit_code != 0:
        diagnostics = parse_diagnostics(output)
        cause = f"exit status {result.exit_code}" if result.signal is None else f"killed by signal {result.signal}"
        if result.signal is not None and not any(d.code == "resource_limit" for d in diagnostics):
            diagnostics.append(
                Diagnostic(
                    message=f"{what} was {cause} (a sandbox limit: CPU time, memory or file size)",
                    code="resource_limit",
                )
            )
        raise _BuildFailed(
            _error(key, _summary(diagnostics, f"{what} failed ({cause})"), started, diagnostics, log_text=output)
        )
    return output


def _split_flags(extra: list[str], for_nvcc: bool) -> list[str]:
    if for_nvcc:
        return [f"-Xcompiler={f}" if _GXX_ONLY.match(f) else f for f in extra]
    return [f for f in extra if not _NVCC_ONLY.match(f)]


def _unit_deps(kernel_files: dict[str, str], units: list[str]) -> dict[str, str]:
    """What an object depends on besides its unit: every header, and any unit another file #includes."""
    included = set(re.findall(r'#\s*include\s*"([^"]+)"', "".join(kernel_files.values())))
    return {
        n: t
        for n, t in kernel_files.items()
        if n not in units
        or PurePosixPath(n).name in included
        or n in included
        or n.removeprefix(f"{KERNELS_DIR}/") in included
    }


def _object_name(unit: str) -> str:
    return unit.replace("/", "__") + ".o"


def _compile_units(
    units: list[str],
    obj_keys: dict[str, str],
    argv_of: Callable[[str, str], list[str]],
    scratch: Path,
    key: str,
    started: float,
    deadline: float,
    readonly: list[Path] | None = None,
) -> list[str]:
    """Compile each unit (paths under scratch/src) into scratch/obj, in parallel, reusing the object of an earlier
    build with the same ``obj_keys[unit]``: an edit to one file rebuilds that file's object only. The logs."""
    objects_dir = _objects_dir()
    objects_dir.mkdir(parents=True, exist_ok=True)
    max_file = get_settings().compile_max_file_bytes

    def build_unit(unit: str) -> str:
        cached_obj, cached_log = f"{obj_keys[unit]}.o", f"{obj_keys[unit]}.log"
        local = _object_name(unit)
        try:
            obj = safefs.read_bytes(objects_dir, cached_obj, max_file)
            output = safefs.read_text(objects_dir, cached_log, _LOG_LIMIT * 4)
        except safefs.UnsafePath:  # never built, or evicted since
            pass
        else:
            evict.mark_used(objects_dir / cached_obj)
            evict.mark_used(objects_dir / cached_log)
            # The cache is ours, but scratch/obj is writable by every unit's sandbox: write, never follow.
            safefs.write_bytes(scratch / "obj", local, obj)
            return output
        argv = argv_of(unit, str(scratch / "obj" / local))
        result = _sandboxed(argv, scratch / "src", deadline, readonly=readonly)
        output = _check_run(result, key, started, f"compiling {unit}")
        obj = _built_file(scratch / "obj", local, max_file, key, started)
        safefs.write_bytes(objects_dir, cached_obj, obj)  # written whole under a temporary name, then renamed
        safefs.write_text(objects_dir, cached_log, output)
        return output

    with ThreadPoolExecutor(max_workers=max(1, min(len(units), os.cpu_count() or 1))) as pool:
        return list(pool.map(build_unit, units))


def _build_project(
    req: CompileRequest,
    files: dict[str, str],
    libraries: list[VendorLibrary],
    key: str,
    arch: str | None,
    extra: list[str],
    scratch: Path,
    deadline: float,
    started: float,
) -> CompileResult:
    kernel_files = {n: t for n, t in files.items() if is_kernel_file(n)}
    units = sorted(n for n in kernel_files if is_unit(n))
    if req.device is Device.CPU and any(u.endswith(".cu") for u in units):
        return _error(key, "device cpu builds C++ only: rename kernels/*.cu to .cpp (OpenMP allowed)", started)
    if not units:
        return _error(key, "no kernels/*.cu or kernels/*.cpp file to build", started)

    problems: list[Diagnostic] = []
    functions: list[dict[str, Any]] = []
    for name, text in kernel_files.items():
        problems += check_includes(name, text)
        if name in units:
            found, bad = parse_launchers(name, text)
            functions += found
            problems += bad
    names = [f["name"] for f in functions]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        problems.append(
            Diagnostic(message=f"launcher defined more than once: {', '.join(dupes)}", code="bad_prototype")
        )
    if not functions and not problems:
        problems.append(
            Diagnostic(
                message='no exported launcher: define at least one extern "C" host function', code="bad_prototype"
            )
        )
    if problems:
        return _error(key, _summary(problems, "candidate contract violated"), started, problems)

    (scratch / "obj").mkdir()
    tools = _toolchain(req.device, CandidateForm.PROJECT)
    unit_flags = [*extra, *include_flags(libraries)]
    deps = _unit_deps(kernel_files, units)
    obj_keys = {
        unit: _digest(
            {
                "unit": unit,
                "text": kernel_files[unit],
                "deps": deps,
                "device": req.device,
                "arch": arch,
                "flags": unit_flags,
                "tools": tools,
            }
        )
        for unit in units
    }
    logs = _compile_units(
        units,
        obj_keys,
        lambda unit, obj: _unit_argv(unit, obj, req.device, arch, unit_flags),
        scratch,
        key,
        started,
        deadline,
    )

    out = scratch / "out"
    out.mkdir()
    objs = [str(scratch / "obj" / _object_name(u)) for u in units]
    lib = str(out / LIBRARY_NAME)
    if req.device is Device.CUDA:
        link = [str(nvcc_path()), "-shared", "-o", lib, *objs, "-Xlinker=--no-undefined", *link_flags(libraries)]
    else:
        link = ["g++", "-shared", "-fopenmp", "-o", lib, *objs, "-Wl,--no-undefined"]
    link_log, symbols, registering = _link(link, lib, objs, scratch, key, started, deadline)
    kernel_units = [u for u in units if f"/{_object_name(u)}:" in registering]
    if libraries and not kernel_units:
        diag = Diagnostic(
            message=NO_CUSTOM_KERNEL_MESSAGE,
            code="no_custom_kernel",
            hint="launch a kernel of your own (an epilogue, a fused elementwise step) next to the library call",
        )
        return _error(key, _summary([diag], NO_CUSTOM_KERNEL_MESSAGE), started, [diag], log_text=link_log)
    exported = {line.split()[-1] for line in symbols.splitlines() if line.strip()}
    missing = [f for f in functions if f["name"] not in exported]
    if missing:
        diags = [
            Diagnostic(
                file=f["file"],
                line=f["line"],
                message=f"launcher {f['name']} is not exported by the library",
                code="undefined_symbol",
            )
            for f in missing
        ]
        return _error(key, _summary(diags, "launcher missing"), started, diags)

    library = _built_file(out, LIBRARY_NAME, get_settings().compile_max_file_bytes, key, started)
    staging = store.new_staging()
    safefs.write_bytes(staging, f"kernels/{LIBRARY_NAME}", library)
    manifest = build_manifest(req.device.value, functions, [lib.name for lib in libraries], kernel_units)
    safefs.write_text(staging, f"kernels/{MANIFEST_NAME}", json.dumps(manifest, indent=1))
    build_log = "\n".join([*logs, link_log])
    diagnostics = parse_diagnostics(build_log)
    result = CompileResult(
        status=CompileStatus.OK,
        cache_key=key,
        artifact_key=key,
        duration_s=time.monotonic() - started,
        diagnostics=diagnostics,
        resources=parse_resources(build_log),
        log=build_log[-_LOG_LIMIT:],
        message=f"built {len(units)} unit(s), launchers: {', '.join(names)}",
    )
    store.publish(
        key, staging, store.BuildRecord(form=CandidateForm.PROJECT, device=req.device, arch=arch, result=result)
    )
    _evict(key, _object_files(obj_keys))
    return result


def _link(
    link: list[str],
    lib: str,
    objs: list[str],
    scratch: Path,
    key: str,
    started: float,
    deadline: float,
) -> tuple[str, str, str]:
    """Run the link command in the sandbox; its log, the library's exported symbols (``nm -D``) and the objects
    that register a __global__ kernel of their own."""
    out = Path(lib).parent
    script = f"{' '.join(map(_quote, link))} && nm -D --defined-only {_quote(lib)} > {_quote(str(out / 'symbols'))}"
    # An object that defines a __global__ kernel registers it with the CUDA runtime at load time, so it refers
    # to __cudaRegisterFunction; one whose host code only calls a vendor library does not.
    script += f" && {{ nm -A -u {' '.join(map(_quote, objs))} | grep -F __cudaRegisterFunction || true; }}"
    script += f" > {_quote(str(out / 'kernel_objects'))}"
    link_log = _check_run(_sandboxed(["bash", "-c", script], scratch / "src", deadline), key, started, "linking")
    symbols = _built_file(out, "symbols", _LOG_LIMIT * 16, key, started).decode(errors="replace")
    registering = _built_file(out, "kernel_objects", _LOG_LIMIT * 16, key, started).decode(errors="replace")
    return link_log, symbols, registering


def _nvcc_argv(unit: str, obj: str, arch: str | None, flags: list[str], std_default: str = "c++17") -> list[str]:
    opt = [] if any(f.startswith("-O") for f in flags) else ["-O3"]
    std = [] if any("std=" in f for f in flags) else [f"-std={std_default}"]
    num = arch.removeprefix("sm_") if arch else "90"
    return [
        str(nvcc_path()),
        "-c",
        *opt,
        *std,
        f"-gencode=arch=compute_{num},code=sm_{num}",
        "-Xcompiler=-fPIC",
        "-Xptxas=-v",
        *_split_flags(flags, True),
        "-o",
        obj,
        unit,
    ]


def _gxx_flags(extra: list[str], host: list[str], std_default: str = "c++17") -> list[str]:
    opt = [] if any(f.startswith("-O") for f in extra) else ["-O3"]
    std = [] if any("std=" in f for f in extra) else [f"-std={std_default}"]
    return [*opt, *std, "-fPIC", *host, *_split_flags(extra, False)]


def _unit_argv(unit: str, obj: str, device: Device, arch: str | None, extra: list[str]) -> list[str]:
    if unit.endswith(".cu"):
        return _nvcc_argv(unit, obj, arch, extra)
    host = ["-fopenmp"] if device is Device.CPU else [f"-I{get_settings().cuda_home / 'include'}"]
    return ["g++", "-c", *_gxx_flags(extra, host), "-o", obj, unit]


def _torch_pch(flags: list[str], tools: dict[str, str], key: str, started: float, deadline: float) -> Path:
    """The precompiled torch header for g++ units built with ``flags``: built once per toolchain and flags (in the
    sandbox; nothing of a candidate goes into it) and kept in the build cache. The header's path: a unit compiled
    with ``-include`` of it and the same flags loads ``<header>.gch`` instead of parsing the torch headers. Beside
    it, ``include/torch/extension.h``: the form's own version of that header (``flags.EXTENSION_HEADER_TEXT``)."""
    pch_key = _digest(
        {"pch": wflags.PCH_HEADER_TEXT, "extension": wflags.EXTENSION_HEADER_TEXT, "flags": flags, "tools": tools}
    )
    pch_dir = _cache_root() / "pch" / pch_key
    header = pch_dir / wflags.PCH_HEADER_NAME
    gch = f"{wflags.PCH_HEADER_NAME}.gch"
    if safefs.exists(pch_dir, gch):
        evict.mark_used(pch_dir)
        return header
    scratch = _cache_root() / "tmp" / uuid.uuid4().hex
    (scratch / "src").mkdir(parents=True)
    try:
        (scratch / "src" / wflags.PCH_HEADER_NAME).write_text(wflags.PCH_HEADER_TEXT)
        argv = ["g++", "-x", "c++-header", *flags, "-o", str(scratch / "src" / gch), wflags.PCH_HEADER_NAME]
        result = _sandboxed(argv, scratch / "src", deadline, max_file_bytes=_PCH_MAX_BYTES)
        _check_run(result, key, started, "precompiling the torch headers")
        if not safefs.exists(scratch / "src", gch):  # a regular file, not a link: nothing else wrote there
            raise _BuildFailed(_error(key, "precompiling the torch headers left no header", started))
        # Moved, not copied (it is half a gigabyte); the headers first, so a .gch present means a complete set.
        pch_dir.mkdir(parents=True, exist_ok=True)
        safefs.write_text(pch_dir, wflags.PCH_HEADER_NAME, wflags.PCH_HEADER_TEXT)
        safefs.write_text(pch_dir, f"include/{wflags.EXTENSION_HEADER}", wflags.EXTENSION_HEADER_TEXT)
        os.replace(scratch / "src" / gch, pch_dir / gch)
    finally:
        safefs.remove_tree(scratch)
    return header


def _build_workdir(
    req: CompileRequest,
    files: dict[str, str],
    libraries: list[VendorLibrary],
    key: str,
    arch: str | None,
    extra: list[str],
    scratch: Path,
    deadline: float,
    started: float,
) -> CompileResult:
    """The workdir form: the platform's binding.cpp and binding_registry.h with the candidate's kernels/ into one
    Python module, ``cuda_extension``. Objects are cached per unit by content; the g++ units that include torch
    headers use a precompiled header of them, so after the first build an edit costs one object and the link."""
    if req.device is not Device.CUDA:
        return _error(key, "the workdir form builds a CUDA extension: use device cuda", started)
    kernel_files = {n: t for n, t in files.items() if is_kernel_file(n)}
    units = sorted(n for n in kernel_files if is_unit(n))
    problems: list[Diagnostic] = []
    for name, text in kernel_files.items():
        problems += workdir_include_problems(name, text)
    if not any(u.endswith(BINDING_SUFFIX) for u in units):
        problems.append(
            Diagnostic(
                message=f"no kernels/*{BINDING_SUFFIX}: bind the kernels to Python with REGISTER_BINDING in one",
                code="bad_layout",
            )
        )
    if problems:
        return _error(key, _summary(problems, "candidate contract violated"), started, problems)
    for name, text in PLATFORM_FILES.items():
        (scratch / "src" / name).write_text(text)
    (scratch / "obj").mkdir()
    tools = _toolchain(req.device, CandidateForm.WORKDIR)
    cuda_include = f"-I{get_settings().cuda_home / 'include'}"
    torch_flags = [*wflags.include_flags(), *wflags.define_flags(), "-I."]
    # The header is precompiled without the vendor libraries' include dirs, so one serves every candidate; a unit
    # adding them still uses it (g++ checks macros and code-generation options, not the include path).
    host_flags = _gxx_flags([*extra, *torch_flags], [cuda_include], wflags.CXX_STANDARD)
    # Units against torch are bindings: they unpack tensors and call the launchers, and at -O3 pybind11's templates
    # cost a third more to compile than at -O1 (a candidate's own -O flag is kept). The header is precompiled with
    # exactly the bindings' flags: g++ may reject one built at another -O level, and a rejected header costs the
    # whole torch parse on every binding edit, silently.
    own_opt = any(f.startswith("-O") for f in extra)
    torch_unit_flags = [f if own_opt or f != "-O3" else "-O1" for f in host_flags]
    pch = _torch_pch(torch_unit_flags, tools, key, started, deadline)
    # -I is searched before torch's -isystem dirs: a unit's <torch/extension.h> is the form's (flags.py says why).
    extension_dir = f"-I{pch.parent / 'include'}"
    binding_flags = [extension_dir, *torch_unit_flags, *include_flags(libraries)]
    gxx_flags = [extension_dir, *host_flags, *include_flags(libraries)]
    nvcc_flags = [extension_dir, *extra, *include_flags(libraries), *torch_flags, *wflags.NVCC_TORCH_FLAGS]
    all_units = [WORKDIR_BINDING_FILE, *units]
    texts = {**kernel_files, **PLATFORM_FILES}
    deps = _unit_deps(texts, all_units)

    def uses_torch(unit: str) -> bool:  # directly or through the registry header, which includes torch
        targets = [target for target, _ in included(texts[unit])]
        return any(t.split("/")[0] in TORCH_HEADER_ROOTS or t in REGISTRY_INCLUDES for t in targets)

    def argv_of(unit: str, obj: str) -> list[str]:
        if unit.endswith(".cu"):
            return _nvcc_argv(unit, obj, arch, nvcc_flags, wflags.CXX_STANDARD)
        if uses_torch(unit):
            return ["g++", "-c", *binding_flags, "-include", str(pch), "-Winvalid-pch", "-o", obj, unit]
        return ["g++", "-c", *gxx_flags, "-o", obj, unit]

    obj_keys = {
        unit: _digest(
            {
                "unit": unit,
                "text": texts[unit],
                "deps": deps,
                "arch": arch,
                "flags": argv_of(unit, "")[1:],  # the argv less the compiler path, the object and the unit
                "tools": tools,
            }
        )
        for unit in all_units
    }
    logs = _compile_units(all_units, obj_keys, argv_of, scratch, key, started, deadline, readonly=[pch.parent])

    out = scratch / "out"
    out.mkdir()
    objs = [str(scratch / "obj" / _object_name(u)) for u in all_units]
    module_file = f"{EXTENSION_MODULE}.so"
    lib = str(out / module_file)
    link = [str(nvcc_path()), "-shared", "-o", lib, *objs, *wflags.link_flags(), *link_flags(libraries)]
    link_log, symbols, registering = _link(link, lib, objs, scratch, key, started, deadline)
    kernel_units = [u for u in units if f"/{_object_name(u)}:" in registering]
    if not kernel_units:
        diag = Diagnostic(
            message="no kernels/*.cu defines a __global__ kernel: at least one kernel of the candidate's own must "
            "do part of the work",
            code="no_custom_kernel",
        )
        return _error(key, _summary([diag], diag.message), started, [diag], log_text=link_log)
    if f"PyInit_{EXTENSION_MODULE}" not in symbols:
        diag = Diagnostic(message=f"the built library does not define the module {EXTENSION_MODULE}", code="bad_layout")
        return _error(key, diag.message, started, [diag], log_text=link_log)
    library = _built_file(out, module_file, get_settings().compile_max_file_bytes, key, started)
    staging = store.new_staging()
    safefs.write_bytes(staging, f"{store.EXTENSION_DIR}/{module_file}", library)
    build_log = "\n".join([*logs, link_log])
    result = CompileResult(
        status=CompileStatus.OK,
        cache_key=key,
        artifact_key=key,
        duration_s=time.monotonic() - started,
        diagnostics=parse_diagnostics(build_log),
        resources=parse_resources(build_log),
        log=build_log[-_LOG_LIMIT:],
        message=f"built {EXTENSION_MODULE} from {len(units)} unit(s); kernels in {', '.join(kernel_units)}",
    )
    store.publish(
        key, staging, store.BuildRecord(form=CandidateForm.WORKDIR, device=req.device, arch=arch, result=result)
    )
    _evict(key, [pch.parent, *_object_files(obj_keys)])
    return result


def _built_file(directory: Path, name: str, limit: int, key: str, started: float) -> bytes:
    """A file the sandboxed build left: read without following links, bounded; anything else fails the build."""
    try:
        return safefs.read_bytes(directory, name, limit)
    except safefs.UnsafePath as exc:
        raise _BuildFailed(_unsafe_output(key, started, exc)) from None


def _unsafe_output(key: str, started: float, exc: safefs.UnsafePath) -> CompileResult:
    message = f"the build left an output the platform refuses to read: {exc}"
    return _error(key, message, started, [Diagnostic(message=message, code="unsafe_output")])


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _build_kernelbench(
    req: CompileRequest, key: str, arch: str | None, scratch: Path, deadline: float, started: float
) -> CompileResult:
    """Import model_new.py in the sandbox so its load_inline call builds into the artifact's extension dir."""
    ext = scratch / "torch_extensions"
    ext.mkdir()
    env = {"TORCH_EXTENSIONS_DIR": str(store.TORCH_EXT_SANDBOX_DIR), "MAX_JOBS": "2"}
    arch_list = torch_arch_list(arch) if arch else None
    if arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = arch_list
    result = _sandboxed(
        [sys.executable, "-c", f"import {PurePosixPath(MODEL_NEW_FILE).stem}"],
        scratch / "src",
        deadline,
        env,
        [(ext, store.TORCH_EXT_SANDBOX_DIR)],
    )
    output = _check_run(result, key, started, f"importing {MODEL_NEW_FILE}")
    staging = store.new_staging()
    try:
        store.copy_artifact_tree(ext, staging / "torch_extensions")
    except safefs.UnsafePath as exc:
        safefs.remove_tree(staging)
        return _unsafe_output(key, started, exc)
    files = safefs.walk_files(staging / "torch_extensions", max_files=store.ARTIFACT_MAX_FILES)
    built = sorted({PurePosixPath(f).parent.name for f in files if f.endswith(".so")})
    diagnostics = parse_diagnostics(output)
    compile_result = CompileResult(
        status=CompileStatus.OK,
        cache_key=key,
        artifact_key=key,
        duration_s=time.monotonic() - started,
        diagnostics=diagnostics,
        log=output[-_LOG_LIMIT:],
        message=(
            f"built extension(s): {', '.join(built)}" if built else f"{MODEL_NEW_FILE} imported; it built no extension"
        ),
    )
    record = store.BuildRecord(
        form=CandidateForm.KERNELBENCH,
        device=req.device,
        arch=arch,
        torch_cuda_arch_list=arch_list,
        result=compile_result,
    )
    store.publish(key, staging, record)
    _evict(key, [])
    return compile_result
