"""The synthesize_dataset job (`dataset` queue) and the measure_problem job (`eval` queue): the library calls behind
POST /v1/datasets.

A synthesis whose filters run on cuda in a deployment (a broker is configured) does not measure on its own host:
each batch fans out one measure_problem job per problem to the eval queue, whose workers own the GPUs (one task per
GPU at a time), and waits for them. Everywhere else (cpu filters, or the embedded default) the batch is checked
here by filter_problems' sandboxed workers, in parallel over the host's cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuda_agent.contracts.common import Device, JobKind, JobStatus
from cuda_agent.contracts.dataset import (
    FilterRequestOptions,
    MeasureRequest,
    MeasureResult,
    SynthesizeRequest,
    SynthesizeResult,
)
from cuda_agent.dataset.compose import SMALL_SHAPES, ComposeOptions, ShapeOptions
from cuda_agent.dataset.filters import FilterOptions, ProblemVerdict, filter_problems
from cuda_agent.dataset.pipeline import CheckProblems, SynthesisOptions, synthesize
from cuda_agent.dataset.store import DatasetConflict, find_dataset, save_report
from cuda_agent.jobs.registry import JobContext
from cuda_agent.jobs.runner import submit_job, wait_for_job
from cuda_agent.problem import problem_hash
from cuda_agent.settings import get_settings

# How long a synthesis waits for one problem's measurement: the eval queue is shared with candidate evaluations,
# so a measurement may queue behind many of them before its own seconds of work.
MEASURE_WAIT_S = 6 * 3600.0


class SynthesisCancelled(RuntimeError):
    """The synthesis job was cancelled (or its attempt superseded) between two batches."""


def _cache_dir() -> Path:
    # One inductor cache per host, kept across jobs: the same operators compile to the same kernels.
    return get_settings().data_dir / "dataset" / "inductor-cache"


def filter_options(request: FilterRequestOptions, workers: int = 0) -> FilterOptions:
    """The library's filter options for a tenant's choices; workers and the cache are the host's."""
    return FilterOptions.model_validate(
        {**request.model_dump(mode="json"), "workers": workers, "cache_dir": _cache_dir()}
    )


def synthesis_options(request: SynthesizeRequest) -> SynthesisOptions:
    compose = request.compose.model_dump(exclude={"shapes"}, exclude_none=True)
    shapes = SMALL_SHAPES if request.compose.shapes == "small" else ShapeOptions()
    return SynthesisOptions(
        compose=ComposeOptions.model_validate({**compose, "shapes": shapes}),
        filters=filter_options(request.filters),
        similarity_threshold=request.similarity_threshold,
        max_candidates=request.max_candidates,
    )


def dataset_name(request: SynthesizeRequest, options: SynthesisOptions) -> str:
    """The request's name, or one that the same request always derives (so it names the same dataset)."""
    return request.name or f"synth-{options.fingerprint()[:16]}-n{request.n}-s{request.seed}"


def _verdict_of_job(job_id: str, code: str) -> ProblemVerdict:
    """A measure_problem job's verdict; a job that ended without one is an infrastructure fault for the problem."""
    try:
        job = wait_for_job(job_id, timeout_s=MEASURE_WAIT_S, poll_s=1.0)
    except TimeoutError as exc:
        return ProblemVerdict(source_hash=problem_hash(code), results=[], infra_error=str(exc))
    if job.status is not JobStatus.SUCCEEDED or job.result is None:
        why = f"measure_problem job {job_id} {job.status.value}: {job.error or 'no result'}"
        return ProblemVerdict(source_hash=problem_hash(code), results=[], infra_error=why)
    return ProblemVerdict.model_validate(MeasureResult.model_validate(job.result).model_dump(exclude={"passed"}))


def measure_on_eval_queue(filters: FilterRequestOptions, context: JobContext) -> CheckProblems:
    """A batch check that sends each problem to the eval queue and collects the verdicts.

    The idempotency key ties each measurement to this synthesis job and candidate: a redelivered synthesis finds
    the measurements its dead attempt already ran instead of queueing them again.
    """

    def check(problems: list[tuple[str, str]], _options: FilterOptions) -> dict[str, ProblemVerdict]:
        job_ids = {
            key: submit_job(
                JobKind.MEASURE_PROBLEM,
                MeasureRequest(problem_source=code, filters=filters),
                idempotency_key=f"{context.job_id}:{key}",
                tenant=context.tenant,
            ).id
            for key, code in problems
        }
        codes = dict(problems)
        return {key: _verdict_of_job(job_id, codes[key]) for key, job_id in job_ids.items()}

    return check


def synthesize_dataset_job(request: SynthesizeRequest, context: JobContext) -> SynthesizeResult:
    """Synthesize and store a dataset; a dataset this same request already made is returned, not made again."""
    options = synthesis_options(request)
    name = dataset_name(request, options)
    existing = find_dataset(name, context.tenant)
    if existing is not None:
        dataset_id, spec = existing
        if (spec.get("fingerprint"), spec.get("n"), spec.get("seed")) != (
            options.fingerprint(),
            request.n,
            request.seed,
        ):
            raise DatasetConflict(f"dataset {name!r} exists from another request; choose another name")
        stats: dict[str, Any] = spec["stats"]
        return SynthesizeResult(dataset_id=dataset_id, name=name, kept=stats["kept"], stats=stats, reused=True)

    def progress(kept: int, requested: int) -> None:
        context.report_progress({"kept": kept, "requested": requested})
        if context.is_cancelled():  # between batches: the problems checked so far are dropped with the job
            raise SynthesisCancelled(f"cancelled with {kept} of {requested} problems kept")

    fan_out = request.filters.device is Device.CUDA and not get_settings().embedded
    check = measure_on_eval_queue(request.filters, context) if fan_out else filter_problems
    report = synthesize(request.n, request.seed, options, progress=progress, check=check)
    dataset_id = save_report(name, report, tenant=context.tenant)
    stats = report.stats.model_dump(mode="json")
    return SynthesizeResult(dataset_id=dataset_id, name=name, kept=report.stats.kept, stats=stats, reused=False)


def measure_problem_job(request: MeasureRequest, _context: JobContext) -> MeasureResult:
    """The filters on one problem: check_problem in a sandboxed worker's child (generated code never runs in the
    queue worker, whose process must not touch CUDA before it forks), eager time by CUDA events on cuda."""
    verdict = filter_problems([("problem", request.problem_source)], filter_options(request.filters, workers=1))
    return MeasureResult.model_validate(
        {**verdict["problem"].model_dump(mode="json"), "passed": verdict["problem"].passed}
    )
