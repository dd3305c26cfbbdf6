"""``evaluate(EvalRequest) -> EvalResult``: the verdict and reward of one candidate.

One evaluation uses two child processes, each with its own temporary directory (``children.py``):
    reference:  problem.py, job.json -> result.json, outputs.pt     (the candidate never sees it)
    candidate:  problem.py, model_new.py, kernels/, artifact/, job.json -> result.json, outputs.pt
Each child is ``python -P -m cuda_agent.eval.child job.json`` in its own bubblewrap sandbox with only its own
directory writable and nothing of the other mounted, usually started warm ahead of the evaluation. The parent
validates both reports, compares the outputs itself and decides. Three kinds of outcome: a verdict on the
candidate (reward -1..3), a fault of the problem or of the infrastructure (status sandbox_error, reward None).
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from pydantic import ValidationError

from cuda_agent.contracts.common import Device, EvalStatus
from cuda_agent.contracts.compile import CandidateForm
from cuda_agent.contracts.eval import EvalRequest, EvalResult, Finding, Fingerprint, TimingStats
from cuda_agent.eval import compare
from cuda_agent.eval.baselines import BaselineCache, BaselineEntry, baseline_key
from cuda_agent.eval.children import EXTENSIONS_SUBDIR, POOL, ChildKey, ChildSlot, run_job
from cuda_agent.eval.protocol import (
    OUTPUTS_FILE,
    PROBLEM_FILE,
    REFERENCE_DONE_FILE,
    RESULT_FILE,
    STICKY_CUDA_ERRORS,
    ChildJob,
    ChildReport,
    ChildTimings,
    TimingPlan,
)
from cuda_agent.eval.reward import continuous_speedup, reward_for
from cuda_agent.eval.static_scan import scan_candidate
from cuda_agent.gpu import gpu_by_index, gpu_health, select_gpu
from cuda_agent.problem import problem_hash
from cuda_agent.sandbox import SandboxResult
from cuda_agent.settings import Settings, get_settings

log = logging.getLogger(__name__)

# 2: timed interval starts when the GPU reaches the call, not the host; 3: host latency hidden up to ~0.5 ms.
HARNESS_VERSION = "3"
FIXED_SEEDS = (1234, 2345, 3456, 4567, 5678, 6789, 7890, 8901, 9012)
PLAUSIBLE_SPEEDUP = 10.0  # beyond this a speedup is re-timed in a fresh process before it counts
SPOT_CHECKS = 2
COMPARE_THREADS = 4
CANDIDATE_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
_CHILD_STATUS = {
    "runtime_error": EvalStatus.RUNTIME_ERROR,
    "illegal_access": EvalStatus.ILLEGAL_ACCESS,
    "out_of_memory": EvalStatus.RUNTIME_ERROR,
    "candidate_error": EvalStatus.RUNTIME_ERROR,
}


class Abort(Exception):
    """Ends an evaluation with a finished result."""

    def __init__(self, result: EvalResult) -> None:
        super().__init__(result.message)
        self.result = result


@dataclass
class ChildRun:
    report: ChildReport | None
    outputs: dict[str, list[list[Any]]] = field(default_factory=lambda: {"trials": [], "spot": []})
    status: EvalStatus | None = None  # set when the child failed before reporting
    message: str = ""
    findings: list[Finding] = field(default_factory=list)
    stdout: str = ""


def evaluate(req: EvalRequest, settings: Settings | None = None) -> EvalResult:
    """Judge one candidate. Never raises for bad problems, hostile candidates or broken infrastructure."""
    started = time.perf_counter()
    evaluation = _Evaluation(req, settings or get_settings())
    # The parent's tensor work (comparing outputs) is small; a full-width thread pool only fights the children
    # and the warm children's imports for the cores, which slowed comparisons tenfold on the GPU host.
    threads = torch.get_num_threads()
    torch.set_num_threads(min(threads, COMPARE_THREADS))
    try:
        result = evaluation.run()
    except Abort as stop:
        result = stop.result
    except Exception as exc:  # a harness bug is an infrastructure fault, never the candidate's
        log.exception("evaluation harness failed")
        result = evaluation.result(EvalStatus.SANDBOX_ERROR, f"evaluation harness failed: {type(exc).__name__}: {exc}")
    finally:
        evaluation.cleanup()
        torch.set_num_threads(threads)
    result.duration_s = time.perf_counter() - started
    if result.fingerprint is None:
        result.fingerprint = evaluation.fingerprint()
    return result


def stats(timings: ChildTimings) -> TimingStats:
    samples = timings.samples_ms
    return TimingStats(
        median_ms=statistics.median(samples),
        mean_ms=statistics.fmean(samples),
        std_ms=statistics.pstdev(samples) if len(samples) > 1 else 0.0,
        min_ms=min(samples),
        max_ms=max(samples),
        trials=len(samples),
        samples_ms=[round(s, 6) for s in samples],
        host_samples_ms=[round(s, 6) for s in timings.host_samples_ms],
    )


class _Evaluation:
    def __init__(self, req: EvalRequest, settings: Settings) -> None:
        self.req = req
        self.settings = settings
        self.cuda = req.device is Device.CUDA
        self.gpu_index: int | None = None
        self.clocks: list[int | None] = [None, None]
        self.notes: list[str] = []
        self.slots: list[ChildSlot] = []
        self.timeout = req.timeout_s or settings.eval_timeout_s
        self.problem_hash = problem_hash(req.problem_source)
        self.started = time.time()
        self.timeline: dict[str, float] = {}  # event -> seconds since the evaluation started (diagnostics)

    # --- results ------------------------------------------------------------------------------------------
    def result(self, status: EvalStatus, message: str, **fields: object) -> EvalResult:
        fault = fields.pop("fault", None)
        if fault is None and status is EvalStatus.SANDBOX_ERROR:
            fault = "infrastructure"
        elif fault is None and status is not EvalStatus.CORRECT:
            fault = "candidate"
        reward = fields.pop("reward", None if status is EvalStatus.SANDBOX_ERROR else -1.0)
        return EvalResult(
            status=status,
            correct=status is EvalStatus.CORRECT,
            reward=reward,
            message=message[:4000],
            fault=fault,
            notes=self.notes,
            fingerprint=self.fingerprint(),
            timeline_s={k: round(v, 4) for k, v in sorted(self.timeline.items(), key=lambda kv: kv[1])},
            **fields,
        )

    def fingerprint(self) -> Fingerprint:
        gpu = gpu_by_index(self.gpu_index) if self.gpu_index is not None else None
        return Fingerprint(
            device=self.req.device,
            gpu_name=gpu.name if gpu else None,
            sm_clock_start_mhz=self.clocks[0],
            sm_clock_end_mhz=self.clocks[1],
            driver=gpu.driver if gpu else None,
            cuda=torch.version.cuda,
            torch=torch.__version__,
            python=platform.python_version(),
            tolerance=self.req.tolerance,
            harness_version=HARNESS_VERSION,
            host=socket.gethostname(),
        )

    def cleanup(self) -> None:
        for slot in self.slots:
            slot.discard()

    def mark(self, event: str, at: float | None = None) -> None:
        self.timeline[event] = (at if at is not None else time.time()) - self.started

    # --- children -----------------------------------------------------------------------------------------
    def child_key(self) -> ChildKey:
        # Children are interchangeable across requests: the CPU-time backstop comes from the worker's setting
        # unless a request asks for longer; the wall clock, given per job, is the real bound.
        timeout = max(self.timeout, self.settings.eval_timeout_s)
        return ChildKey(
            device=self.req.device.value,
            gpu_index=self.gpu_index,
            cpu_time_s=int(timeout * 4) + 60,
            omp_threads=os.environ.get("OMP_NUM_THREADS", str(min(8, os.cpu_count() or 1))),
        )

    def take_child(self) -> ChildSlot:
        slot = POOL.take(self.child_key())
        self.slots.append(slot)
        return slot

    def refill(self) -> None:
        POOL.refill(self.child_key(), self.settings.eval_warm_children)

    # --- main flow ----------------------------------------------------------------------------------------
    def run(self) -> EvalResult:
        req = self.req
        static = scan_candidate(req.candidate)
        self.check_candidate_files()
        if self.cuda:
            self.pick_gpu()
        ref_slot, cand_slot = self.take_child(), self.take_child()
        if self.cuda:
            # The next evaluation's children start up (CPU work) while this one uses the GPU. On CPU the host
            # clock times the candidate, so they start only once this evaluation's children are done.
            self.refill()
        self.mark("children_taken")
        env = self.prepare_candidate(cand_slot.workdir)
        (ref_slot.workdir / PROBLEM_FILE).write_text(req.problem_source)

        secret = int.from_bytes(os.urandom(4), "little")
        seeds = [*FIXED_SEEDS[: req.correctness_trials], secret]
        if req.correctness_trials > len(FIXED_SEEDS):
            seeds += [100_000 + k for k in range(req.correctness_trials - len(FIXED_SEEDS))]
        rng = int.from_bytes(os.urandom(8), "little")
        spot = sorted({(rng >> (8 * k)) % min(req.timing_trials, 10) for k in range(SPOT_CHECKS)})
        plan = TimingPlan(
            base_seed=rng % 1_000_003,
            scale_seed=rng % 999_983,
            warmup=req.warmup,
            trials=req.timing_trials,
            spot_indices=spot,
            budget_s=max(5.0, self.timeout / 4),
        )
        cache, key, cached = self.cached_baselines()
        baselines: list[str] = []
        if req.measure_baselines and cached is None:
            baselines = ["eager", "compile"]
        ref_job = ChildJob(
            role="reference",
            device=req.device.value,
            seeds=seeds,
            timing=plan,
            baselines=baselines,
            memory_fraction=self.settings.eval_gpu_memory_fraction,
        )
        cand_job = self.candidate_job(seeds, plan, env)

        if self.cuda:
            health = gpu_health(self.gpu_index or 0)
            self.clocks[0] = health.sm_clock_mhz
            self.notes += [f"GPU health before timing: {p}" for p in health.problems]
        # Idle warm children are stopped while anything is timed: the host stays quiet for the timed calls.
        if baselines:  # baseline timing needs the GPU alone: reference first, then the candidate
            with POOL.paused():
                ref = self.run_child(ref_slot, ref_job)
                cand = self.run_child(cand_slot, cand_job)
        else:  # only outputs on the reference side: both run at once, the candidate times once the reference is done
            cand_job.start_timing_after = REFERENCE_DONE_FILE

            def reference() -> ChildRun:
                try:
                    return self.run_child(ref_slot, ref_job)
                finally:
                    POOL.pause(True)
                    (cand_slot.workdir / REFERENCE_DONE_FILE).touch()

            try:
                with ThreadPoolExecutor(1) as pool:
                    ref_future = pool.submit(reference)
                    cand = self.run_child(cand_slot, cand_job)
                    ref = ref_future.result()
            finally:
                POOL.pause(False)
        self.mark("children_done")
        if self.cuda:
            self.clocks[1] = gpu_health(self.gpu_index or 0).sm_clock_mhz
        else:
            self.refill()

        entry = cached or self.store_baselines(cache, key, ref)
        return self.verdict(static, ref, cand, entry, env)

    def check_candidate_files(self) -> None:
        files = self.req.candidate.files
        if "model_new.py" not in files:
            raise Abort(self.result(EvalStatus.RUNTIME_ERROR, "candidate has no model_new.py"))
        for name in files:
            path = PurePosixPath(name)
            top_level_py = path.suffix == ".py" and len(path.parts) == 1 and name != "model_new.py"
            if path.is_absolute() or ".." in path.parts or not name.endswith(CANDIDATE_SUFFIXES) or top_level_py:
                raise Abort(
                    self.result(
                        EvalStatus.RUNTIME_ERROR,
                        f"candidate file {name!r} not allowed: model_new.py plus kernels/*.cu|.cuh|.cpp|.h only",
                    )
                )

    def pick_gpu(self) -> None:
        try:
            gpu = select_gpu(self.settings.gpu_index)
        except ValueError as exc:
            raise Abort(self.result(EvalStatus.SANDBOX_ERROR, str(exc))) from None
        if gpu is None:
            raise Abort(self.result(EvalStatus.SANDBOX_ERROR, "device=cuda but NVML finds no GPU on this worker"))
        self.gpu_index = gpu.index

    def prepare_candidate(self, cand_dir: Path) -> dict[str, str]:
        """Write the candidate's files and materialize its compiled artifact; the env vars its child needs."""
        (cand_dir / PROBLEM_FILE).write_text(self.req.problem_source)
        for name, text in self.req.candidate.files.items():
            target = cand_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if self.req.artifact_key is None:
            if self.req.candidate.form is CandidateForm.PROJECT:
                raise Abort(
                    self.result(
                        EvalStatus.SANDBOX_ERROR,
                        "project-form candidate evaluated without artifact_key: compile it first",
                    )
                )
            return {"TORCH_EXTENSIONS_DIR": str(cand_dir / "torch_extensions")}
        from cuda_agent.compile import materialize_artifact

        try:
            runtime = materialize_artifact(self.req.artifact_key, cand_dir / "artifact")
        except Exception as exc:
            message = f"artifact {self.req.artifact_key} unavailable: {exc}"
            raise Abort(self.result(EvalStatus.SANDBOX_ERROR, message)) from None
        # Every child binds its own artifact/torch_extensions where extensions were built (children.py).
        if any(src != cand_dir / EXTENSIONS_SUBDIR for src, _ in runtime.extra_binds):
            raise Abort(self.result(EvalStatus.SANDBOX_ERROR, f"unexpected artifact layout: {runtime.extra_binds}"))
        return dict(runtime.env)

    # --- baselines ----------------------------------------------------------------------------------------
    def cached_baselines(self) -> tuple[BaselineCache, str, BaselineEntry | None]:
        gpu = gpu_by_index(self.gpu_index) if self.gpu_index is not None else None
        key = baseline_key(
            self.problem_hash,
            self.req.device.value,
            gpu.name if gpu else platform.processor(),
            gpu.driver if gpu else None,
            torch.version.cuda,
            torch.__version__,
            HARNESS_VERSION,
        )
        cache = BaselineCache(self.settings.data_dir / "eval" / "baselines.json")
        return cache, key, cache.get(key) if self.req.measure_baselines else None

    def store_baselines(self, cache: BaselineCache, key: str, ref: ChildRun) -> BaselineEntry | None:
        if not self.req.measure_baselines or ref.report is None or ref.report.status != "ok":
            return None
        timings = ref.report.timings
        entry = BaselineEntry(
            eager=stats(timings["eager"]) if "eager" in timings else None,
            compile=stats(timings["compile"]) if "compile" in timings else None,
            notes=ref.report.baseline_notes,
        )
        if entry.eager is not None:
            cache.put(key, entry)
        return entry

    def run_child(self, slot: ChildSlot, job: ChildJob) -> ChildRun:
        outcome = run_job(slot, job.model_dump_json(), self.timeout)
        run = self.read_child(slot.workdir, job, outcome)
        run.stdout = outcome.stdout
        if run.report is not None:
            for phase, at in run.report.phases.items():
                self.mark(f"{job.role}.{phase}", at)
        return run

    def read_child(self, workdir: Path, job: ChildJob, outcome: SandboxResult) -> ChildRun:
        sandbox_error = outcome.sandbox_error
        stderr = outcome.stderr
        tail = " | ".join(stderr.strip().splitlines()[-3:])[-600:]
        reference = job.role == "reference"
        if sandbox_error:
            return ChildRun(None, status=EvalStatus.SANDBOX_ERROR, message=f"sandbox failed: {sandbox_error}")
        if outcome.timed_out:
            who = "reference Model" if reference else "candidate"
            return ChildRun(None, status=EvalStatus.TIMEOUT, message=f"{who} exceeded the {self.timeout:.0f} s limit")
        result_path = workdir / RESULT_FILE
        exit_code, signal = outcome.exit_code, outcome.signal
        if not result_path.exists():
            if not reference and any(m in stderr.lower() for m in STICKY_CUDA_ERRORS):
                return ChildRun(
                    None, status=EvalStatus.ILLEGAL_ACCESS, message=f"CUDA fault killed the process: {tail}"
                )
            if signal:
                return ChildRun(
                    None, status=EvalStatus.RUNTIME_ERROR, message=f"process killed by signal {signal}: {tail}"
                )
            if exit_code == 0 and not reference:
                finding = Finding(
                    code="early_exit", message="the candidate ended the process before the harness reported"
                )
                return ChildRun(None, status=EvalStatus.HACK_DETECTED, message=finding.message, findings=[finding])
            return ChildRun(None, status=EvalStatus.RUNTIME_ERROR, message=f"process exited with {exit_code}: {tail}")
        try:
            report = ChildReport.model_validate_json(result_path.read_bytes())
            if report.role != job.role:
                raise ValueError("role mismatch")
            outputs = compare.load_outputs(workdir / OUTPUTS_FILE)
        except (ValidationError, ValueError) as exc:
            finding = Finding(
                code="result_tampered", message=f"the child's report is not the harness's: {str(exc)[:200]}"
            )
            return ChildRun(None, status=EvalStatus.HACK_DETECTED, message=finding.message, findings=[finding])
        if exit_code != 0:
            finding = Finding(code="early_exit", message=f"process exited with {exit_code} after writing a report")
            return ChildRun(
                report, outputs, status=EvalStatus.HACK_DETECTED, message=finding.message, findings=[finding]
            )
        return ChildRun(report, outputs)

    # --- verdict ------------------------------------------------------------------------------------------
    def verdict(
        self,
        static: list[Finding],
        ref: ChildRun,
        cand: ChildRun,
        entry: BaselineEntry | None,
        env: dict[str, str],
    ) -> EvalResult:
        req = self.req
        # The reference decides whether there can be a verdict at all.
        if ref.status is not None or ref.report is None:
            fault = "infrastructure" if ref.status is EvalStatus.SANDBOX_ERROR else "problem"
            raise Abort(self.result(EvalStatus.SANDBOX_ERROR, f"reference failed: {ref.message}", fault=fault))
        if ref.report.status != "ok":
            raise Abort(
                self.result(EvalStatus.SANDBOX_ERROR, f"problem rejected: {ref.report.message}", fault="problem")
            )
        if cand.status is EvalStatus.SANDBOX_ERROR:
            raise Abort(self.result(EvalStatus.SANDBOX_ERROR, f"candidate sandbox failed: {cand.message}"))
        ref_trials = ref.outputs["trials"]
        degenerate = compare.degenerate_reason(ref_trials, req.tolerance)
        if degenerate:
            raise Abort(
                self.result(
                    EvalStatus.SANDBOX_ERROR,
                    f"problem rejected: {degenerate}",
                    fault="problem",
                    findings=[Finding(code="degenerate_problem", message=degenerate)],
                )
            )

        report = cand.report
        findings = list(static) + cand.findings
        if report is not None:
            ignore_alias = ref.report.output_aliases_input
            findings += [
                Finding(code=c, message=m)
                for c, m in report.findings
                if not (ignore_alias and c == "output_aliases_input")
            ]
            if report.input_signature and report.input_signature != ref.report.input_signature:
                findings.append(
                    Finding(code="problem_tampered", message="candidate-side inputs differ from the reference's")
                )
        common = {"findings": findings, "trials_run": report.trials_run if report else 0}
        if findings:
            codes = ", ".join(sorted({f.code for f in findings}))
            raise Abort(self.result(EvalStatus.HACK_DETECTED, f"reward hacking detected: {codes}", **common))
        if cand.status is not None or report is None:
            raise Abort(self.result(cand.status or EvalStatus.RUNTIME_ERROR, cand.message, **common))
        if report.status != "ok":
            raise Abort(self.result(_CHILD_STATUS[report.status], report.message, **common))

        cand_trials = cand.outputs["trials"]
        comparison = compare.compare_trials(cand_trials, ref_trials, req.tolerance)
        common["trials_run"] = len(ref_trials)
        if compare.constant_output(cand_trials, ref_trials):
            findings.append(Finding(code="constant_output", message="the same output for different inputs"))
            raise Abort(self.result(EvalStatus.HACK_DETECTED, "reward hacking detected: constant_output", **common))
        if comparison.failures:
            raise Abort(
                self.result(
                    EvalStatus.INCORRECT,
                    "; ".join(comparison.failures[:3]),
                    max_abs_error=comparison.max_abs_error,
                    trials_passed=comparison.passed,
                    **common,
                )
            )

        spot = compare.compare_trials(cand.outputs["spot"], ref.outputs["spot"], req.tolerance)
        if spot.failures or len(cand.outputs["spot"]) != len(ref.outputs["spot"]):
            findings.append(
                Finding(
                    code="timed_output_mismatch",
                    message="outputs of timed calls are wrong (cached or replayed outputs?): "
                    + "; ".join(spot.failures[:2]),
                )
            )
            raise Abort(
                self.result(EvalStatus.HACK_DETECTED, "reward hacking detected: timed_output_mismatch", **common)
            )

        self.mark("verdict")
        return self.score(report, entry, comparison, env, common)

    def score(
        self,
        report: ChildReport,
        entry: BaselineEntry | None,
        comparison: compare.Comparison,
        env: dict[str, str],
        common: dict[str, object],
    ) -> EvalResult:
        timing = report.timings.get("candidate")
        cand_stats = stats(timing) if timing and timing.samples_ms else None
        eager = entry.eager if entry else None
        compiled = entry.compile if entry else None
        if entry:
            self.notes += list(entry.notes.values())
        if self.req.measure_baselines and compiled is None and not self.cuda:
            self.notes.append("torch.compile baseline unavailable on CPU: reward capped at 2")

        def speedup(base: TimingStats | None) -> float | None:
            return base.median_ms / cand_stats.median_ms if base and cand_stats and cand_stats.median_ms > 0 else None

        vs_eager, vs_compile = speedup(eager), speedup(compiled)
        if cand_stats and max(vs_eager or 0.0, vs_compile or 0.0) > PLAUSIBLE_SPEEDUP:
            cand_stats = self.reverify(cand_stats, common)
            vs_eager, vs_compile = speedup(eager), speedup(compiled)
        reward = reward_for(True, vs_eager, vs_compile, self.settings.reward_speedup_threshold)
        speeds = ", ".join(f"{n} {s:.2f}x" for n, s in (("vs eager", vs_eager), ("vs compile", vs_compile)) if s)
        return self.result(
            EvalStatus.CORRECT,
            f"correct on {comparison.passed} trials" + (f"; {speeds}" if speeds else ""),
            reward=reward,
            speedup_vs_eager=vs_eager,
            speedup_vs_compile=vs_compile,
            continuous_speedup=continuous_speedup(vs_eager, vs_compile),
            candidate_timing=cand_stats,
            eager_timing=eager,
            compile_timing=compiled,
            custom_kernel_time_share=report.custom_kernel_time_share,
            custom_kernel_time_method=report.custom_kernel_time_method,
            max_abs_error=comparison.max_abs_error,
            trials_passed=comparison.passed,
            **common,
        )

    def reverify(self, first: TimingStats, common: dict[str, object]) -> TimingStats:
        """Re-time an implausible speedup in a fresh process on fresh inputs; it counts only if the host clock
        there agrees with the first measurement. The slower of the two medians is kept."""

        def unconfirmed(message: str) -> Abort:
            finding = Finding(code="timing_unconfirmed", message=message)
            rest = {k: v for k, v in common.items() if k != "findings"}
            previous: list[Finding] = list(common["findings"])  # type: ignore[call-overload]
            return Abort(
                self.result(
                    EvalStatus.HACK_DETECTED,
                    f"implausible speedup rejected: {message}",
                    findings=[*previous, finding],
                    **rest,
                )
            )

        rng = int.from_bytes(os.urandom(8), "little")
        plan = TimingPlan(
            base_seed=rng % 1_000_003,
            scale_seed=rng % 999_983,
            warmup=self.req.warmup,
            trials=self.req.timing_trials,
            budget_s=max(5.0, self.timeout / 4),
        )
        slot = self.take_child()
        env = self.prepare_candidate(slot.workdir)
        again = self.run_child(slot, self.candidate_job([rng % 65_521], plan, env))
        report = again.report
        second = report.timings.get("candidate") if report and report.status == "ok" else None
        if second is None or not second.host_samples_ms or again.findings or (report and report.findings):
            raise unconfirmed(f"re-timing in a fresh process failed: {again.message or 'no timing'}")
        host_median = statistics.median(second.host_samples_ms)
        if host_median > 2 * first.median_ms + 0.05:
            raise unconfirmed(
                f"claimed {first.median_ms:.4f} ms per call; a host-clock re-timing measured {host_median:.4f} ms"
            )
        second_stats = stats(second)
        return second_stats if second_stats.median_ms > first.median_ms else first

    def candidate_job(self, seeds: list[int], plan: TimingPlan, env: dict[str, str]) -> ChildJob:
        return ChildJob(
            role="candidate",
            device=self.req.device.value,
            seeds=seeds,
            timing=plan,
            project_form=self.req.candidate.form is CandidateForm.PROJECT,
            allow_torch_compute=self.req.allow_torch_compute,
            memory_fraction=self.settings.eval_gpu_memory_fraction,
            env=env,
        )
