"""Execution filters: a composed problem is kept only if it loads, runs in eager and under ``torch.compile``, is
deterministic, finite, depends on its input, and takes a reasonable time.

``check_problem`` runs the filters on ONE problem in this process and returns a verdict with each filter's
result and reason; it is what a GPU measurement job calls inside its evaluation child. ``filter_problems`` runs
many: composed code is generated, so it runs in the bubblewrap sandbox, in ``workers`` sandboxed worker processes
(``worker.py``) that import torch once and fork one child per problem, killed at ``timeout_s``: a problem that
hangs or crashes costs that problem, not the batch.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import json
import os
import stat
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from cuda_agent.dataset.crawl import STOCHASTIC_NAME
from cuda_agent.eval.memory import CPU_ADDRESS_SPACE
from cuda_agent.problem import problem_hash
from cuda_agent.safefs import remove_tree
from cuda_agent.sandbox import SandboxLimits, SandboxSpec, run_sandboxed
from cuda_agent.settings import get_settings


class FilterName(StrEnum):
    LOADS = "loads"
    EAGER = "eager"
    STOCHASTIC = "no_stochastic_ops"
    FINITE = "finite"
    INPUT_SENSITIVE = "input_sensitive"
    TIME_WINDOW = "time_window"
    COMPILE = "compile"
    HARNESS = "harness"  # the problem's child timed out or died: no filter could finish


class FilterResult(BaseModel):
    name: FilterName
    passed: bool
    reason: str | None = Field(None, description="Why it failed (one line); None when it passed.")


class FilterOptions(BaseModel):
    device: Literal["cpu", "cuda"] = "cpu"
    compile: bool = Field(True, description="Run the problem under torch.compile and compare with eager.")
    compile_backend: str = Field("inductor", description="torch.compile backend of the compile filter.")
    compile_tolerance: float = Field(1e-2, description="atol and rtol between compiled and eager outputs.")
    distinct_tolerance: float = Field(
        1e-5, description="Outputs for two different inputs closer than this (atol and rtol) count as the same."
    )
    time_window_ms: tuple[float, float] | None = Field(
        None,
        description="Eager time window [low, high] in ms; None: 1-100 ms on cuda (CUDA events), 0.001-1000 ms on "
        "cpu, where small test shapes take microseconds and the window only keeps out pathological problems.",
    )
    timing_runs: int = Field(5, description="Timed eager calls (after one warm-up); the median is compared.")
    timing_budget_s: float = Field(2.0, description="Timed calls stop after this long (at least the timer's minimum).")
    timeout_s: float = Field(180.0, description="Wall clock of one problem's checks, compile included.")
    workers: int = Field(0, description="Parallel sandboxed workers; 0: one per CPU core.")
    cache_dir: Path | None = Field(
        None, description="Inductor cache shared by the workers and kept across runs; None: one per call."
    )
    timing_lock: Path | None = Field(
        None,
        description="File locked around every timed run, so that workers sharing a GPU take turns; None: one per "
        "call on cuda (filter_problems makes it), none on cpu.",
    )

    def window(self) -> tuple[float, float]:
        if self.time_window_ms is not None:
            return self.time_window_ms
        return (1.0, 100.0) if self.device == "cuda" else (0.001, 1000.0)


class ProblemVerdict(BaseModel):
    source_hash: str
    results: list[FilterResult] = Field(description="In the order run; checking stops at the first failure.")
    eager_ms: float | None = None
    compile_ms: float | None = Field(None, description="The compiled model's time, measured like eager_ms.")
    infra_error: str | None = Field(None, description="The sandbox or worker failed: no verdict on the problem.")

    @property
    def passed(self) -> bool:
        return self.infra_error is None and all(r.passed for r in self.results)

    @property
    def failure(self) -> FilterResult | None:
        return next((r for r in self.results if not r.passed), None)


class _Rejected(Exception):
    def __init__(self, name: FilterName, reason: str) -> None:
        super().__init__(reason)
        self.name, self.reason = name, reason


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _stochastic_names(code: str) -> list[str]:
    """Stochastic operators named in the Model class (the forward may guard them behind flags we cannot see)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for sub in ast.walk(node):
                name = sub.attr if isinstance(sub, ast.Attribute) else sub.id if isinstance(sub, ast.Name) else None
                if name and STOCHASTIC_NAME.search(name):
                    names.add(name)
    return sorted(names)


def _time_eager_ms(model: Any, inputs: list[Any], options: FilterOptions) -> float:
    """Median eager time by the evaluation's timer: CUDA events after an L2 flush on the GPU, the host clock on CPU."""
    from cuda_agent.eval.timing import Timer, stats

    timer = Timer(cuda=options.device == "cuda")
    # Parallel workers share the GPU: timed alongside another problem's kernels (or with its launches starved by
    # their compilations), a 10 us problem measured over 1 ms on an H200 and passed the time window.
    with _held(options.timing_lock):
        timings = timer.run(lambda args: model(*args), inputs, 0, 1, options.timing_runs, options.timing_budget_s)
    return stats(timings).median_ms


@contextlib.contextmanager
def _held(lock: Path | None) -> Iterator[None]:
    if lock is None:
        yield
        return
    # flock needs no write access (the sandbox binds the file read-only). Not followed if a link, not waited on if
    # a FIFO: only a regular file is a lock.
    fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"timing lock {lock} is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield  # released when the file is closed, or when the process dies
    finally:
        os.close(fd)


def _run_checks(code: str, options: FilterOptions, passed: list[FilterResult]) -> tuple[float, float | None]:
    """Each filter in turn; appends those that pass, raises _Rejected at the first failing; eager and compiled ms."""
    import torch

    from cuda_agent.problem import call_inputs, load_problem

    device = torch.device(options.device)
    try:
        problem = load_problem(code, name="kb_filtered")
        with device:
            model = problem.model_cls(*call_inputs(problem.get_init_inputs, "get_init_inputs"))
    except Exception as exc:
        raise _Rejected(FilterName.LOADS, f"{type(exc).__name__}: {exc}") from None
    passed.append(FilterResult(name=FilterName.LOADS, passed=True))

    def inputs(seed: int) -> list[Any]:
        torch.manual_seed(seed)
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in call_inputs(problem.get_inputs, "x")]

    def outputs(args: list[Any], seed: int) -> list[Any]:
        torch.manual_seed(seed)
        with torch.no_grad():
            return _tensors(model(*args))

    inputs_a = inputs(0)
    try:
        out_a = outputs(inputs_a, 100)
    except Exception as exc:
        raise _Rejected(FilterName.EAGER, f"{type(exc).__name__}: {exc}") from None
    if not out_a:
        raise _Rejected(FilterName.EAGER, "forward returned no tensor")
    passed.append(FilterResult(name=FilterName.EAGER, passed=True))

    named = _stochastic_names(code)
    if named:
        raise _Rejected(FilterName.STOCHASTIC, f"uses stochastic operators: {', '.join(named)}")
    # Exact equality in which NaN equals NaN: a NaN output is the finite filter's to report, not a sign of chance.
    if any(
        a.shape != b.shape or not torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
        for a, b in zip(out_a, outputs(inputs_a, 101), strict=True)
    ):
        raise _Rejected(FilterName.STOCHASTIC, "two calls on the same input under different RNG states differ")
    passed.append(FilterResult(name=FilterName.STOCHASTIC, passed=True))

    if any(not bool(torch.isfinite(t).all()) for t in out_a if t.is_floating_point()):
        raise _Rejected(FilterName.FINITE, "output has NaN or infinite values")
    passed.append(FilterResult(name=FilterName.FINITE, passed=True))

    out_b = outputs(inputs(1), 100)
    tol = options.distinct_tolerance
    if all(a.shape == b.shape and torch.allclose(a, b, rtol=tol, atol=tol) for a, b in zip(out_a, out_b, strict=True)):
        raise _Rejected(FilterName.INPUT_SENSITIVE, f"outputs for two different inputs agree within {tol}")
    passed.append(FilterResult(name=FilterName.INPUT_SENSITIVE, passed=True))

    with torch.no_grad():
        eager_ms = _time_eager_ms(model, inputs_a, options)
    low, high = options.window()
    if not low <= eager_ms <= high:
        raise _Rejected(FilterName.TIME_WINDOW, f"eager time {eager_ms:.4f} ms outside [{low}, {high}] ms")
    passed.append(FilterResult(name=FilterName.TIME_WINDOW, passed=True))

    if options.compile:
        try:
            compiled = torch.compile(model, backend=options.compile_backend)
            torch.manual_seed(100)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out_c = _tensors(compiled(*inputs_a))  # type: ignore[no-untyped-call]
        except Exception as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise _Rejected(FilterName.COMPILE, f"{type(exc).__name__}: {first_line}") from None
        ctol = options.compile_tolerance
        if len(out_c) != len(out_a) or any(
            c.shape != a.shape or not torch.allclose(c, a, rtol=ctol, atol=ctol)
            for c, a in zip(out_c, out_a, strict=False)
        ):
            raise _Rejected(FilterName.COMPILE, f"compiled outputs differ from eager beyond {ctol}")
        passed.append(FilterResult(name=FilterName.COMPILE, passed=True))
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile_ms = _time_eager_ms(compiled, inputs_a, options)
        return eager_ms, compile_ms
    return eager_ms, None


def check_problem(code: str, options: FilterOptions) -> ProblemVerdict:
    """Run the filters on one problem in this process (the caller isolates it): stops at the first failure."""
    results: list[FilterResult] = []
    eager_ms = compile_ms = None
    try:
        eager_ms, compile_ms = _run_checks(code, options, results)
    except _Rejected as rejected:
        results.append(FilterResult(name=rejected.name, passed=False, reason=rejected.reason[:500]))
    return ProblemVerdict(source_hash=problem_hash(code), results=results, eager_ms=eager_ms, compile_ms=compile_ms)


def harness_failure(code: str, reason: str) -> ProblemVerdict:
    return ProblemVerdict(
        source_hash=problem_hash(code), results=[FilterResult(name=FilterName.HARNESS, passed=False, reason=reason)]
    )


def _worker_env(options: FilterOptions, cache_dir: Path) -> dict[str, str]:
    return {
        # One thread per worker: workers are the parallelism, and a forked child must not inherit an OpenMP pool.
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        # Inductor compiles in the child itself rather than in a pool of compile subprocesses per child.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
        "CUDA_HOME": str(get_settings().cuda_home),
        # torch.cuda.is_available() by cudaGetDeviceCount poisons every later fork for CUDA ("Cannot re-initialize
        # CUDA in forked subprocess"); asked through NVML, it leaves the worker fit to fork children that use CUDA.
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    }


def _run_worker(
    batch: list[tuple[str, str]], options: FilterOptions, root: Path, cache_dir: Path, index: int
) -> dict[str, ProblemVerdict]:
    workdir = root / f"worker-{index}"
    workdir.mkdir()
    job, results_path = workdir / "job.json", workdir / "results.jsonl"
    job.write_text(json.dumps({"options": options.model_dump(mode="json"), "problems": batch}))
    spec = SandboxSpec(
        argv=[sys.executable, "-m", "cuda_agent.dataset.worker", str(job), str(results_path)],
        cwd=workdir,
        writable_paths=[workdir, cache_dir],
        env=_worker_env(options, cache_dir),
        readonly_paths=[options.timing_lock] if options.timing_lock is not None else [],
        gpu=options.device == "cuda",
        limits=SandboxLimits(
            # The worker's own start-up and warm-up, then each problem's bounded child.
            wall_time_s=120.0 + options.timeout_s * len(batch),
            cpu_time_s=None,  # each child is bounded by its wall clock; the worker's CPU time adds theirs up
            address_space_bytes=CPU_ADDRESS_SPACE if options.device == "cpu" else None,
            max_processes=256,
        ),
    )
    outcome = run_sandboxed(spec)
    verdicts: dict[str, ProblemVerdict] = {}
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                verdicts[record["key"]] = ProblemVerdict.model_validate(record["verdict"])
    if len(verdicts) < len(batch):
        why = outcome.sandbox_error or (
            f"worker exited (code {outcome.exit_code}, signal {outcome.signal}, timed out {outcome.timed_out}): "
            f"{outcome.stderr.strip()[-300:]}"
        )
        for key, code in batch:
            if key not in verdicts:
                verdicts[key] = ProblemVerdict(source_hash=problem_hash(code), results=[], infra_error=why)
    return verdicts


def filter_problems(problems: list[tuple[str, str]], options: FilterOptions) -> dict[str, ProblemVerdict]:
    """Verdicts of ``(key, code)`` problems, keyed like them, checked in parallel sandboxed workers."""
    if not problems:
        return {}
    workers = max(1, min(options.workers or os.cpu_count() or 1, len(problems)))
    # Round-robin, so a run of slow problems (a family of large convolutions) is spread over the workers.
    batches = [problems[i::workers] for i in range(workers)]
    root = Path(tempfile.mkdtemp(prefix="cuda-agent-dataset-"))
    cache_dir = options.cache_dir or root / "inductor-cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    if options.device == "cuda" and options.timing_lock is None:
        timing_lock = root / "gpu-timing.lock"
        os.close(os.open(timing_lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))  # fresh, ours
        options = options.model_copy(update={"timing_lock": timing_lock})
    verdicts: dict[str, ProblemVerdict] = {}
    lock = threading.Lock()

    def run(index: int) -> None:
        found = _run_worker(batches[index], options, root, cache_dir, index)
        with lock:
            verdicts.update(found)

    try:
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        remove_tree(root)
    return verdicts
