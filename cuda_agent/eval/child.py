"""Evaluation child: ``python -m cuda_agent.eval.child job.json``, run by the parent inside the sandbox.

Role ``reference`` runs the problem's Model (outputs for the correctness seeds and spot-checked timing calls,
eager and torch.compile baselines). Role ``candidate`` runs ModelNew under the guards. The two never share a
process; the parent compares their outputs. Everything the harness calls after the candidate loads was captured
at import time, before any candidate code existed, and the captures are verified afterwards (guards.Snapshot).
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import random
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.autograd.profiler

from cuda_agent.eval import extensions, guards
from cuda_agent.eval.protocol import (
    JOB_FILE,
    LIBRARY_KERNEL_MARKERS,
    OUTPUTS_FILE,
    PROBLEM_FILE,
    RESULT_FILE,
    STICKY_CUDA_ERRORS,
    ChildJob,
    ChildReport,
    ChildTimings,
    TimingPlan,
)
from cuda_agent.problem import Problem, ProblemError, call_inputs, load_candidate, load_problem

# Captured before any candidate code can run; the harness calls only these.
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_cuda_sync = torch.cuda.synchronize
_external_stream = torch.cuda.ExternalStream
_default_stream = torch.cuda.default_stream
_gpu_sleep = torch.cuda._sleep
_manual_seed = torch.manual_seed
_initial_seed = torch.initial_seed
_save = torch.save
_equal = torch.equal
_clone = torch.Tensor.clone
_to = torch.Tensor.to
_storage = torch.Tensor.untyped_storage
_is_floating = torch.Tensor.is_floating_point
_no_grad = torch.no_grad
_open = builtins.open
_replace = os.replace
_dumps = json.dumps
_active_threads = threading.active_count
_profile = torch.autograd.profiler.profile
_sleep = time.sleep
_time = time.time

INIT_SEED = 42
# GPU cycles of busy-wait queued before each timed call: ~0.5 ms at the H200's 1.98 GHz. The host needs ~50 us to
# reach a candidate's first launch on a quiet machine and twice that when its CPUs are contended; with 50 us of
# busy-wait the excess leaked into the event times (medians of one kernel 5% apart between evaluations).
PREFILL_CYCLES = 1_000_000
# Composite names the profiler shows for allowed operations.
_PROFILER_ALLOWED = guards.ALLOWED_ATEN_OPS | {
    "reshape",
    "to",
    "flatten",
    "expand_as",
    "reshape_as",
    "item",
    "is_nonzero",
    "swapaxes",
    "lift",
    "type_as",
    "empty_strided",
}


class Stop(Exception):
    """Ends the child's work early; the report already says why."""


def classify(exc: BaseException) -> tuple[str, str]:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0][:500]
    lowered = text.lower()
    if any(s in lowered for s in STICKY_CUDA_ERRORS):
        return "illegal_access", first
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in lowered or "can't allocate memory" in lowered:
        return "out_of_memory", first
    return "runtime_error", first


def flatten(output: Any) -> list[Any]:
    return list(output) if isinstance(output, tuple | list) else [output]


def to_cpu(values: list[Any]) -> list[Any]:
    return [_to(_clone(v).detach(), "cpu") if type(v) is torch.Tensor else None for v in values]


def signature(inputs: list[Any]) -> list[str]:
    return [
        f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else f"{type(x).__name__} {x!r}"[:80]
        for x in inputs
    ]


class LaunchTimer:
    """Launch hook for cuda_agent.kernels and extension modules (cuda_agent.eval.extensions): CUDA events on the
    launch's stream around every custom launch."""

    def __init__(self) -> None:
        self.pairs: list[tuple[Any, Any]] = []
        self.pending: Any = None

    def __call__(self, before: bool, stream: int | None) -> None:
        on = _external_stream(stream) if stream else _default_stream()  # type: ignore[no-untyped-call]
        event = _Event(enable_timing=True)  # type: ignore[no-untyped-call]
        _event_record(event, on)
        if before:
            self.pending = event
        elif self.pending is not None:
            self.pairs.append((self.pending, event))
            self.pending = None


class Child:
    def __init__(self, job: ChildJob, workdir: str) -> None:
        self.job = job
        self.workdir = workdir
        self.report = ChildReport(
            role=job.role, status="ok", torch_version=torch.__version__, cuda_version=torch.version.cuda
        )
        self.device = "cuda:0" if job.device == "cuda" else "cpu"
        self.outputs: dict[str, Any] = {"trials": [], "spot": []}
        self.flush_buffer: torch.Tensor | None = None

    # --- shared -------------------------------------------------------------------------------------------
    def fail(self, status: str, message: str) -> None:
        self.report.status = status  # type: ignore[assignment]
        self.report.message = message[:2000]
        raise Stop

    def phase_done(self, name: str) -> None:
        self.report.phases[name] = _time()

    def setup_device(self) -> None:
        if self.job.device != "cuda":
            return
        if not torch.cuda.is_available():
            self.fail("runtime_error", "device=cuda but the child sees no CUDA device")
        torch.cuda.set_per_process_memory_fraction(self.job.memory_fraction, 0)
        props = torch.cuda.get_device_properties(0)
        self.report.gpu_name = props.name
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 64 * 1024**2)
        # Writing twice the L2 size evicts everything a previous call left cached.
        self.flush_buffer = torch.empty(2 * l2_bytes // 4, dtype=torch.float32, device=self.device)

    def load_problem(self) -> tuple[Problem, list[Any]]:
        with _open(os.path.join(self.workdir, PROBLEM_FILE)) as f:
            source = f.read()
        try:
            problem = load_problem(source, name="kb_problem", filename=PROBLEM_FILE)
            init_inputs = call_inputs(problem.get_init_inputs, "get_init_inputs")
        except ProblemError as exc:
            self.fail("problem_error", str(exc))
        return problem, init_inputs

    def make_inputs(self, problem: Problem, seed: int) -> list[Any]:
        _manual_seed(seed)
        try:
            values = call_inputs(problem.get_inputs, "get_inputs")
        except ProblemError as exc:
            self.fail("problem_error", str(exc))
        return [_to(v, self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def scales(self, plan: TimingPlan) -> list[float]:
        rng = random.Random(plan.scale_seed)
        return [1.0 - 0.01 * rng.random() for _ in range(plan.warmup + plan.trials)]

    @staticmethod
    def scaled(base: list[Any], scale: float) -> list[Any]:
        # A fresh buffer with fresh contents per call defeats output caching keyed on pointers or values.
        return [(x * scale if _is_floating(x) else _clone(x)) if isinstance(x, torch.Tensor) else x for x in base]

    def sync(self) -> None:
        if self.job.device == "cuda":
            _cuda_sync()

    def time_calls(
        self, call: Callable[[list[Any]], Any], base: list[Any], plan: TimingPlan
    ) -> tuple[ChildTimings, list[list[Any]]]:
        """Warmups, then trials: fresh inputs, L2 flush, CUDA events (or the host clock on CPU) per call.

        On the GPU the flush and a busy-wait kernel are queued before the start event, so the GPU reaches the start
        event busy and the call's work starts as soon as its first kernel is queued: the interval measures the
        device, as in a steady stream of calls, not how long the host took to reach the first launch (that latency
        varied with the host's load). Host work beyond the busy-wait (~0.5 ms) still counts.

        Two end events: one on the current stream as the call returns, one after a device-wide synchronize. The
        second adds the host's wake-up and launch latency, which varies; the first misses work on other streams.
        The first counts unless the second ends later than that latency explains (calibrated on empty calls in
        this process): then the device had work left, and the device-wide end counts."""
        scales = self.scales(plan)
        cuda = self.job.device == "cuda"
        samples: list[float] = []
        host: list[float] = []
        spot: list[list[Any]] = []
        wanted = set(plan.spot_indices)
        started = _perf_counter()
        events = [_Event(enable_timing=True) for _ in range(4)] if cuda else []  # type: ignore[no-untyped-call]
        latency = self.sync_latency(events) if events else 0.0
        for i in range(plan.warmup + plan.trials):
            inputs = self.scaled(base, scales[i])
            if events:
                pre, start, returned, end = events
                # The host clock starts once the GPU has reached `pre`: waiting for a GPU shared with other
                # processes is in neither clock.
                _event_record(pre)
                _cuda_sync()
                h0 = _perf_counter()
                self.prefill()
                _event_record(start)
                out = call(inputs)
                _event_record(returned)
                _cuda_sync()
                _event_record(end)
                _cuda_sync()
                h1 = _perf_counter()
                ms = _event_elapsed(start, returned)
                if _event_elapsed(returned, end) > latency:
                    ms = _event_elapsed(start, end)
                # The host clock of the call alone: less the flush and busy-wait it waited for.
                host_ms = (h1 - h0) * 1e3 - _event_elapsed(pre, start)
            else:
                h0 = _perf_counter()
                out = call(inputs)
                h1 = _perf_counter()
                ms = host_ms = (h1 - h0) * 1e3
            trial = i - plan.warmup
            if trial < 0:
                continue
            samples.append(ms)
            host.append(host_ms)
            if trial in wanted:
                spot.append(to_cpu(flatten(out)))
            if trial + 1 >= 10 and _perf_counter() - started > plan.budget_s:
                break
        method = "cuda_events" if cuda else "perf_counter"
        return ChildTimings(method=method, samples_ms=samples, host_samples_ms=host), spot

    def prefill(self) -> None:
        """Queue the L2 flush and the busy-wait that precede every timed GPU call (see time_calls)."""
        if self.flush_buffer is not None:
            self.flush_buffer.zero_()
        _gpu_sleep(PREFILL_CYCLES)  # type: ignore[no-untyped-call]

    def sync_latency(self, events: list[Any]) -> float:
        """Upper bound (ms) of the gap a device-wide synchronize plus an event record adds after idle-stream
        work: the largest of 20 empty calls, with 50% margin. Side-stream work shorter than this is not seen."""
        _, start, returned, end = events
        gaps = []
        for _ in range(20):
            _event_record(start)
            _event_record(returned)
            _cuda_sync()
            _event_record(end)
            _cuda_sync()
            gaps.append(_event_elapsed(returned, end))
        return 1.5 * max(gaps) + 0.002

    def write(self) -> None:
        # Written to a temporary name and renamed, so a crash never leaves a half-written report.
        if self.outputs["trials"] or self.outputs["spot"]:
            _save(self.outputs, os.path.join(self.workdir, OUTPUTS_FILE + ".tmp"))
            _replace(os.path.join(self.workdir, OUTPUTS_FILE + ".tmp"), os.path.join(self.workdir, OUTPUTS_FILE))
        tmp = os.path.join(self.workdir, RESULT_FILE + ".tmp")
        with _open(tmp, "w") as f:
            f.write(self.report.model_dump_json())
        _replace(tmp, os.path.join(self.workdir, RESULT_FILE))

    # --- reference ----------------------------------------------------------------------------------------
    def run_reference(self) -> None:
        self.setup_device()
        problem, init_inputs = self.load_problem()
        try:
            _manual_seed(INIT_SEED)
            model = problem.model_cls(*init_inputs).to(self.device)
        except Exception as exc:
            self.fail("problem_error", f"Model(*get_init_inputs()) raised {classify(exc)[1]}")

        def call(inputs: list[Any]) -> Any:
            with _no_grad():
                return model(*inputs)

        try:
            for seed in self.job.seeds:
                inputs = self.make_inputs(problem, seed)
                if not self.report.input_signature:
                    self.report.input_signature = signature(inputs)
                out = flatten(call(inputs))
                self.sync()
                self.report.output_aliases_input |= aliases(out, inputs)
                self.outputs["trials"].append(to_cpu(out))
            self.phase_done("correctness")
            plan = self.job.timing
            if plan is not None and plan.spot_indices:
                base = self.make_inputs(problem, plan.base_seed)
                scales = self.scales(plan)
                for idx in plan.spot_indices:
                    self.outputs["spot"].append(to_cpu(flatten(call(self.scaled(base, scales[plan.warmup + idx])))))
                self.phase_done("spot")
        except Stop:
            raise
        except Exception as exc:
            self.fail("problem_error", f"reference Model.forward raised {classify(exc)[1]}")
        if plan is not None and self.job.baselines:
            self.time_baselines(model, problem, plan)

    def time_baselines(self, model: Any, problem: Problem, plan: TimingPlan) -> None:
        base = self.make_inputs(problem, plan.base_seed)
        timing_plan = plan.model_copy(update={"spot_indices": []})
        for name in self.job.baselines:
            try:
                target = model if name == "eager" else torch.compile(model)

                def call(inputs: list[Any], target: Any = target) -> Any:
                    with _no_grad():
                        return target(*inputs)

                # The first compiled call compiles; keep it out of the warmups that are timed-like.
                call(base)
                self.report.timings[name], _ = self.time_calls(call, base, timing_plan)
            except Exception as exc:
                self.report.baseline_notes[name] = f"{name} baseline unavailable: {classify(exc)[1]}"
        self.phase_done("baselines")

    # --- candidate ----------------------------------------------------------------------------------------
    def run_candidate(self) -> None:
        job = self.job
        self.setup_device()
        problem, init_inputs = self.load_problem()
        # Every input exists before the candidate loads; nothing it does later can change their shapes.
        trial_inputs = [self.make_inputs(problem, seed) for seed in job.seeds]
        self.report.input_signature = signature(trial_inputs[0]) if trial_inputs else []
        base = self.make_inputs(problem, job.timing.base_seed) if job.timing else []
        problem_state = _simple_globals(problem.module)
        guard = guards.ComputeGuard(enabled=not job.allow_torch_compute)
        warm_up()  # torch._dynamo re-wraps torch functions when imported: before the snapshot, not during forward
        watched = {"harness": sys.modules[__name__], "guards": guards, "problem": problem.module}
        # Launch counts prove a project-form kernel ran. A KernelBench-form extension may register torch.ops
        # instead of module functions, so its calls are only timed (custom-kernel share), never required.
        if job.project_form:
            launch_count, launch_hook = _kernels_api()
            watched["cuda_agent.kernels"] = sys.modules["cuda_agent.kernels"]
        else:
            launch_count, launch_hook = None, extensions.install()
            watched["cuda_agent.eval.extensions"] = extensions
        snapshot = guards.Snapshot(extra=watched)
        audit = guards.AuditLog(
            protected_files=[os.path.join(self.workdir, n) for n in (JOB_FILE, RESULT_FILE, OUTPUTS_FILE)]
            + job.protected_files,
            allowed_read_roots=_python_roots(),
            library_roots=[
                os.environ[v] for v in ("CUDA_AGENT_KERNELS_DIR", "TORCH_EXTENSIONS_DIR") if v in os.environ
            ],
        )
        audit.install()
        self.phase_done("setup")

        def collect(expected_seed: int | None) -> None:
            for finding in snapshot.check(expected_seed) + audit.findings + guard.findings:
                if finding not in self.report.findings:
                    self.report.findings.append(finding)
            if _simple_globals(problem.module) != problem_state:
                self.add("problem_tampered", "candidate changed the problem module's constants")

        try:
            with _open(os.path.join(self.workdir, job.candidate_file)) as f:
                source = f.read()
            with audit.running("load"):
                try:
                    model_new = load_candidate(source, name="kb_candidate", filename=job.candidate_file)
                except ProblemError as exc:
                    self.fail("candidate_error", str(exc))
            with audit.running("init"):
                _manual_seed(INIT_SEED)
                model = model_new(*init_inputs)
                if isinstance(model, torch.nn.Module):
                    model = model.to(self.device)
            collect(INIT_SEED)
            self.phase_done("init")
            per_call = self.correctness(model, trial_inputs, audit, guard, launch_count)
            collect(INIT_SEED)
            if job.timing is not None and not self.report.findings:
                self.timing(model, base, job.timing, audit, (launch_count, launch_hook), per_call)
                collect(INIT_SEED)
        except Stop:
            raise
        except SystemExit as exc:
            self.add("early_exit", f"candidate called exit({exc.code}) inside the harness")
            self.fail("runtime_error", "candidate tried to exit the evaluation process")
        except guards.GuardViolation:
            collect(None)
            self.fail("ok", "stopped at the first forbidden PyTorch operation")
        except Exception as exc:
            collect(None)
            status, message = classify(exc)
            where = _candidate_frame(exc, job.candidate_file)
            self.fail(status, f"{message}{where}")

    def wait_for_reference(self) -> None:
        """When the reference child runs concurrently, time only once it is done: the GPU must be ours alone."""
        if self.job.start_timing_after is None:
            return
        marker = os.path.join(self.workdir, self.job.start_timing_after)
        deadline = _perf_counter() + 300
        while not os.path.exists(marker) and _perf_counter() < deadline:
            _sleep(0.005)

    def run_profile(self) -> None:
        """Under ncu: one warm-up call, then one call between cudaProfilerStart/Stop."""
        self.setup_device()
        problem, init_inputs = self.load_problem()
        inputs = self.make_inputs(problem, self.job.seeds[0])
        with _open(os.path.join(self.workdir, self.job.candidate_file)) as f:
            source = f.read()
        try:
            model_new = load_candidate(source, name="kb_candidate", filename=self.job.candidate_file)
            _manual_seed(INIT_SEED)
            model = model_new(*init_inputs).to(self.device)
            with _no_grad():
                model(*inputs)
                self.sync()
                torch.cuda.profiler.start()  # type: ignore[no-untyped-call]
                model(*inputs)
                self.sync()
                torch.cuda.profiler.stop()  # type: ignore[no-untyped-call]
        except ProblemError as exc:
            self.fail("candidate_error", str(exc))
        except Exception as exc:
            self.fail(*classify(exc))
        self.phase_done("profile")

    def add(self, code: str, message: str) -> None:
        if (code, message) not in self.report.findings:
            self.report.findings.append((code, message))

    def correctness(
        self,
        model: Any,
        trial_inputs: list[list[Any]],
        audit: guards.AuditLog,
        guard: guards.ComputeGuard,
        launch_count: Callable[[], int] | None,
    ) -> float | None:
        """Guarded trials; returns custom launches per call (project form) for the unguarded comparison."""
        previous: list[Any] = []
        launches_before = launch_count() if launch_count else 0
        for inputs in trial_inputs:
            given = [_clone(x) if isinstance(x, torch.Tensor) else x for x in inputs]
            threads = _active_threads()
            with _no_grad(), audit.running("forward"), guard.active():
                out = model(*given)
            values = flatten(out)
            # Copies ordered on the current stream see only work ordered before them: if they differ from the
            # output after a device-wide sync, the output was still being written when forward returned.
            early = [_clone(v) if type(v) is torch.Tensor else None for v in values]
            self.sync()
            if self.job.device == "cpu":
                _sleep(0.002)  # a background thread writing the output gets caught in the act
            self.check_output(values, early, given, inputs, previous, threads)
            self.outputs["trials"].append(to_cpu(values))
            self.report.trials_run += 1
            previous = values
        self.phase_done("correctness")
        if launch_count is None:
            return None
        per_call = (launch_count() - launches_before) / max(len(trial_inputs), 1)
        self.report.launch_count = launch_count()
        if per_call == 0 and not self.job.allow_torch_compute:
            self.add("no_custom_kernel", "ModelNew.forward launched no custom kernel")
        return per_call

    def check_output(
        self,
        values: list[Any],
        early: list[Any],
        given: list[Any],
        pristine: list[Any],
        previous: list[Any],
        threads: int,
    ) -> None:
        for v in values:
            if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor:
                self.add("output_not_plain_tensor", f"forward returned a {type(v).__name__}, not a plain Tensor")
            elif not isinstance(v, torch.Tensor) and hasattr(v, "__torch_function__"):
                self.add("output_not_plain_tensor", f"forward returned a tensor-like {type(v).__name__}")
        if any(f[0] == "output_not_plain_tensor" for f in self.report.findings):
            raise Stop
        tensors = [v for v in values if type(v) is torch.Tensor]
        for t in tensors:
            if t.device.type != self.job.device:
                self.fail("runtime_error", f"forward returned a tensor on {t.device}, expected {self.job.device}")
        for v, e in zip(values, early, strict=True):
            if e is not None and not _equal(v, e) and not (v.isnan().any() and e.isnan().any()):
                self.add(
                    "output_written_after_return",
                    "the output changed after forward returned (unsynced stream or thread)",
                )
        for x, y in zip(given, pristine, strict=True):
            if isinstance(x, torch.Tensor) and not _equal(x, y):
                self.add("input_mutated", "forward modified its input tensors")
        input_storages = {_storage(x).data_ptr() for x in given if isinstance(x, torch.Tensor) and x.numel()}
        if any(_storage(t).data_ptr() in input_storages for t in tensors if t.numel()):
            self.add("output_aliases_input", "forward returned a view or alias of an input")
        previous_storages = {_storage(t).data_ptr() for t in previous if type(t) is torch.Tensor and t.numel()}
        if any(_storage(t).data_ptr() in previous_storages for t in tensors if t.numel()):
            self.add("output_buffer_reused", "forward returned the same output buffer on two calls")
        if _active_threads() > threads:
            self.add("background_thread", "forward left a Python thread running")

    def timing(
        self,
        model: Any,
        base: list[Any],
        plan: TimingPlan,
        audit: guards.AuditLog,
        kernels_api: tuple[Callable[[], int] | None, Callable[[Any], None] | None],
        per_call_guarded: float | None,
    ) -> None:
        launch_count, launch_hook = kernels_api

        def call(inputs: list[Any]) -> Any:
            with _no_grad(), audit.running("forward"):
                return model(*inputs)

        launches_before = launch_count() if launch_count else 0
        self.wait_for_reference()
        timings, spot = self.time_calls(call, base, plan)
        self.report.timings["candidate"] = timings
        self.outputs["spot"] = spot
        calls = plan.warmup + len(timings.samples_ms)
        if launch_count is not None and per_call_guarded is not None:
            per_call = (launch_count() - launches_before) / max(calls, 1)
            self.report.launch_count = launch_count()
            if per_call < per_call_guarded:
                self.add("unguarded_behaviour_differs", "fewer custom launches per call when unguarded than guarded")
        if timings.method == "cuda_events":
            event, host = statistics.median(timings.samples_ms), statistics.median(timings.host_samples_ms)
            if host - event > max(0.2, event):
                self.add("work_escapes_timer", f"host time {host:.3f} ms vs event time {event:.3f} ms per call")
        self.phase_done("timing")
        self.profile_call(call, self.scaled(base, 0.995))
        if launch_hook is not None and self.report.custom_kernel_time_share is None:
            self.launcher_share(call, self.scaled(base, 0.995), launch_hook)
        self.phase_done("profiled")

    def profile_call(self, call: Callable[[list[Any]], Any], inputs: list[Any]) -> None:
        """One unguarded call under the autograd profiler (it does not import dynamo, which would re-wrap torch
        functions): no PyTorch compute may appear, and on GPU the share of kernel time spent in non-library
        (custom) kernels is measured."""
        cuda = self.job.device == "cuda"
        with _profile(use_device="cuda" if cuda else None) as prof:
            call(inputs)
            self.sync()
        events = list(prof.function_events)
        if not self.job.allow_torch_compute:
            ops = {e.name for e in events if e.name.startswith("aten::")} - {f"aten::{n}" for n in _PROFILER_ALLOWED}
            if ops:
                self.add("torch_compute_unguarded", f"PyTorch ops ran while unguarded: {', '.join(sorted(ops)[:8])}")
        if not cuda:
            return
        kernels: dict[str, float] = {}
        for e in events:
            if e.device_type == torch.autograd.DeviceType.CUDA:  # type: ignore[attr-defined]
                kernels[e.name] = kernels.get(e.name, 0.0) + float(e.time_range.elapsed_us())
        self.report.kernels = {k[:200]: round(v, 3) for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])[:20]}
        total = sum(kernels.values())
        if total <= 0:
            return  # the profiler recorded no GPU activity at all: no evidence either way
        custom = sum(t for k, t in kernels.items() if not any(p in k for p in LIBRARY_KERNEL_MARKERS))
        self.report.custom_kernel_time_share = custom / total
        self.report.custom_kernel_time_method = "profiler"
        if custom == 0 and not self.job.allow_torch_compute:
            self.add("no_custom_kernel", "the profiler saw no custom GPU kernel in ModelNew.forward")

    def launcher_share(
        self, call: Callable[[list[Any]], Any], inputs: list[Any], set_hook: Callable[[Any], None]
    ) -> None:
        """Where the profiler sees no GPU activity (CUPTI gives no kernel records on some hosts), the share of the
        call's GPU time between the launcher's events around each custom launch: one more unguarded call."""
        if self.job.device != "cuda":
            return
        timer = LaunchTimer()
        start, returned = _Event(enable_timing=True), _Event(enable_timing=True)  # type: ignore[no-untyped-call]
        self.prefill()
        set_hook(timer)
        try:
            _event_record(start)
            call(inputs)
            _event_record(returned)
            _cuda_sync()
        finally:
            set_hook(None)
        # Up to the call's return on the current stream: an end event after a synchronize would add the host's
        # wake-up latency, comparable to a short kernel. Launches on other streams are capped by min(1, ...).
        whole = _event_elapsed(start, returned)
        custom = sum(_event_elapsed(a, b) for a, b in timer.pairs)
        # No hooked call: nothing to attribute (a project form without launches already has no_custom_kernel).
        if whole > 0 and timer.pairs:
            self.report.custom_kernel_time_share = min(1.0, custom / whole)
            self.report.custom_kernel_time_method = "launcher_events"


def aliases(outputs: list[Any], inputs: list[Any]) -> bool:
    storages = {_storage(x).data_ptr() for x in inputs if isinstance(x, torch.Tensor) and x.numel()}
    return any(_storage(t).data_ptr() in storages for t in outputs if isinstance(t, torch.Tensor) and t.numel())


def _simple_globals(module: Any) -> dict[str, str]:
    return {
        k: repr(v)
        for k, v in vars(module).items()
        if not k.startswith("__") and isinstance(v, int | float | str | tuple | list | bool)
    }


def _kernels_api() -> tuple[Callable[[], int], Callable[[Any], None]]:
    """``cuda_agent.kernels``' launch counter and launch hook setter, captured before the candidate loads."""
    from cuda_agent.kernels import launch_count, set_launch_hook

    return launch_count, set_launch_hook


def _python_roots() -> list[str]:
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    roots |= {os.path.dirname(os.path.dirname(os.path.abspath(guards.__file__)))}
    roots |= {"/dev/nvidia", "/dev/null", "/dev/urandom", "/proc/self", "/sys", "/usr/lib", "/usr/local/cuda"}
    return sorted(roots)


def _candidate_frame(exc: BaseException, filename: str) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return f" ({filename} line {frames[-1].lineno})" if frames else ""


def warm_up() -> None:
    """What a warm child does before its job exists: the imports every evaluation would otherwise wait for.
    Entering the guard modes the first time imports torch._dynamo; load_inline candidates import cpp_extension."""
    with guards.ComputeGuard(enabled=True).active():
        torch.empty(0)
    importlib.import_module("torch.utils.cpp_extension")


def main(argv: list[str]) -> int:
    job_path = argv[1]
    workdir = os.path.dirname(os.path.abspath(job_path))
    phases = {"imported": _time()}
    if "--wait" in argv[2:]:
        warm_up()
        phases["ready"] = _time()
        if not sys.stdin.buffer.readline():
            return 0  # never given a job: the worker let this warm child go
        phases["go"] = _time()
    with _open(job_path) as f:
        job = ChildJob.model_validate_json(f.read())
    # Set before any candidate code runs: where its compiled artifact is (kernels dir, torch extensions).
    os.environ.update(job.env)
    child = Child(job, workdir)
    child.report.phases.update(phases)
    try:
        if job.role == "reference":
            child.run_reference()
        elif job.role == "profile":
            child.run_profile()
        else:
            child.run_candidate()
    except Stop:
        pass
    child.phase_done("writing")
    child.write()
    # Skip interpreter teardown (seconds with torch loaded; the candidate's atexit hooks would run in it):
    # everything the parent needs is on disk.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
