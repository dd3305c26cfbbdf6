"""``synthesize``: compose, decontaminate, filter and deduplicate until ``n`` problems are kept.

Candidates are numbered; candidate ``i`` is a pure function of (seed, i, options) and every decision about it is
made in index order, stopping at the ``n``-th kept problem. So the same seed and options give the same kept set
and the same statistics however the work is batched or parallelized (the time window aside, which measures a
clock: keep it wide where exact reruns matter). For the same reason a synthesis can stop after any batch and go on
elsewhere: ``checkpoint`` keeps what was decided, and the deduplicator is rebuilt from the kept problems in order.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from cuda_agent import safefs
from cuda_agent.dataset.compose import (
    PAPER_OP_COUNTS,
    ComposedProblem,
    ComposeOptions,
    CompositionFailure,
    LLMComposer,
    compose_one,
)
from cuda_agent.dataset.crawl import Catalogue, crawl
from cuda_agent.dataset.dedupe import Deduplicator
from cuda_agent.dataset.filters import FilterOptions, ProblemVerdict, filter_problems


class SynthesisError(RuntimeError):
    """The machinery failed (no filter verdict at all), as opposed to problems being rejected."""


class LLMOptions(BaseModel):
    base_url: str
    model: str
    api_key: str = "EMPTY"
    temperature: float = 0.7


class SynthesisOptions(BaseModel):
    composer: Literal["programmatic", "llm"] = "programmatic"
    llm: LLMOptions | None = Field(None, description="The endpoint of the llm composer.")
    compose: ComposeOptions = Field(default_factory=ComposeOptions)
    filters: FilterOptions = Field(default_factory=FilterOptions)
    eval_dir: Path | None = Field(None, description="KernelBench-format files the dataset must not resemble.")
    similarity_threshold: float = Field(0.9, description="Drop a problem more similar than this to another.")
    max_candidates: int | None = Field(None, description="Give up after this many candidates; None: 5 per problem.")
    batch_limit: int | None = Field(
        None,
        ge=1,
        description="Most candidates composed and checked together; None: 16 per filter worker. Progress is "
        "checkpointed between batches, so a batch is also what a stopped run loses.",
    )

    def fingerprint(self) -> str:
        """What decides the kept set (not where files or caches live, nor how the work is batched)."""
        decisive = self.model_dump(
            mode="json", exclude={"batch_limit": True, "filters": {"workers", "cache_dir", "timeout_s", "timing_lock"}}
        )
        return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()


class Stage:
    COMPOSE = "compose"
    DECONTAMINATE = "decontaminate"
    DUPLICATE = "duplicate"
    INFRASTRUCTURE = "infrastructure"  # the sandbox failed: no verdict on the problem itself

    @staticmethod
    def filter(name: str) -> str:
        return f"filter:{name}"


class Rejection(BaseModel):
    index: int
    stage: str
    reason: str
    source_hash: str | None = None


class KeptProblem(BaseModel):
    problem: ComposedProblem
    verdict: ProblemVerdict


class SynthesisStats(BaseModel):
    requested: int
    candidates: int = Field(description="Candidates decided on (up to the n-th kept one).")
    kept: int
    removed: dict[str, int] = Field(description="Candidates removed at each stage.")
    reasons: dict[str, list[str]] = Field(description="Up to five distinct reasons per stage.")
    op_counts: dict[int, int] = Field(description="Kept problems by number of operators.")
    op_count_share: dict[int, float]
    paper_op_count_share: dict[int, float] = Field(default_factory=lambda: dict(PAPER_OP_COUNTS))
    elapsed_s: float
    kept_per_minute: float


class SynthesisProgress(BaseModel):
    """What a synthesis has decided so far, written after every batch: enough to go on with it in another process
    or on another machine (time-limited GPU hosts run a large synthesis over several sessions)."""

    n: int
    seed: int
    fingerprint: str = Field(description="SynthesisOptions.fingerprint() of the run it belongs to.")
    next_index: int = Field(description="The first candidate not yet composed.")
    kept: list[KeptProblem]
    rejections: list[Rejection]
    elapsed_s: float = Field(description="Time spent so far, over every run (not the pauses between them).")


# A checkpoint of the paper's 6,000 problems is tens of megabytes; a larger file is not one of ours.
_CHECKPOINT_LIMIT = 1 << 30


def _load_progress(path: Path, n: int, seed: int, fingerprint: str) -> SynthesisProgress | None:
    if not os.path.lexists(path):
        return None
    try:  # a link, FIFO or device left at the path is refused, never followed or read
        progress = SynthesisProgress.model_validate_json(safefs.read_text(path.parent, path.name, _CHECKPOINT_LIMIT))
    except safefs.UnsafePath as exc:
        raise SynthesisError(f"checkpoint {path}: {exc}") from None
    except ValueError as exc:
        raise SynthesisError(f"checkpoint {path}: not a synthesis checkpoint ({str(exc).splitlines()[0]})") from None
    if (progress.n, progress.seed, progress.fingerprint) != (n, seed, fingerprint):
        raise SynthesisError(
            f"checkpoint {path} belongs to another synthesis (n={progress.n}, seed={progress.seed}, options "
            f"{progress.fingerprint[:12]}; this one: n={n}, seed={seed}, options {fingerprint[:12]}): "
            "name another file"
        )
    return progress


class SynthesisReport(BaseModel):
    n: int
    seed: int
    options: SynthesisOptions
    kept: list[KeptProblem]
    rejections: list[Rejection]
    stats: SynthesisStats


Progress = Callable[[int, int], None]  # (kept so far, requested)
# Verdicts of (key, code) problems keyed like them: filter_problems here, per-problem eval jobs in a deployment.
CheckProblems = Callable[[list[tuple[str, str]], FilterOptions], dict[str, ProblemVerdict]]


def _statistics(n: int, kept: list[KeptProblem], rejections: list[Rejection], elapsed_s: float) -> SynthesisStats:
    removed = collections.Counter(r.stage for r in rejections)
    reasons: dict[str, list[str]] = {}
    for r in rejections:
        seen = reasons.setdefault(r.stage, [])
        if r.reason not in seen and len(seen) < 5:
            seen.append(r.reason)
    counts = collections.Counter(k.problem.op_count for k in kept)
    return SynthesisStats(
        requested=n,
        candidates=len(kept) + len(rejections),
        kept=len(kept),
        removed=dict(sorted(removed.items())),
        reasons=reasons,
        op_counts=dict(sorted(counts.items())),
        op_count_share={c: round(k / len(kept), 4) for c, k in sorted(counts.items())} if kept else {},
        elapsed_s=round(elapsed_s, 2),
        kept_per_minute=round(len(kept) / elapsed_s * 60, 2) if elapsed_s > 0 else 0.0,
    )


def synthesize(
    n: int,
    seed: int,
    options: SynthesisOptions,
    progress: Progress | None = None,
    check: CheckProblems = filter_problems,
    checkpoint: Path | None = None,
) -> SynthesisReport:
    """``n`` kept problems (fewer if ``max_candidates`` runs out), with every rejection and its reason; ``check``
    runs the execution filters on each batch. With ``checkpoint``, progress is written there after every batch and
    a synthesis of the same n, seed and options found there goes on from it."""
    started = time.monotonic()
    catalogue = crawl()
    compose: Callable[[int, int, Catalogue, ComposeOptions], ComposedProblem | CompositionFailure]
    if options.composer == "llm":
        if options.llm is None:
            raise ValueError("the llm composer needs options.llm (base_url, model)")
        llm = options.llm
        compose = LLMComposer(llm.base_url, llm.model, llm.api_key, llm.temperature).compose_one
    else:
        compose = compose_one
    dedupe = Deduplicator(options.similarity_threshold)
    if options.eval_dir is not None:
        dedupe.load_eval_dir(options.eval_dir)
    limit = options.max_candidates if options.max_candidates is not None else 5 * n
    workers = options.filters.workers or os.cpu_count() or 1
    batch_limit = options.batch_limit or 16 * workers
    kept: list[KeptProblem] = []
    rejections: list[Rejection] = []
    next_index, earlier_s = 0, 0.0
    fingerprint = options.fingerprint()
    resumed = _load_progress(checkpoint, n, seed, fingerprint) if checkpoint is not None else None
    if resumed is not None:
        kept, rejections = resumed.kept, resumed.rejections
        next_index, earlier_s = resumed.next_index, resumed.elapsed_s
        for k in kept:
            dedupe.keep(str(k.problem.index), k.problem.code)
    while len(kept) < n and next_index < limit:
        # Ask for a little more than is missing (some will be rejected), and enough to keep every worker busy.
        size = min(max(2 * (n - len(kept)), 2 * workers), batch_limit, limit - next_index)
        batch = [compose(seed, i, catalogue, options.compose) for i in range(next_index, next_index + size)]
        next_index += size
        early: dict[int, Rejection] = {}
        for item in batch:
            if isinstance(item, CompositionFailure):
                early[item.index] = Rejection(index=item.index, stage=Stage.COMPOSE, reason=item.reason)
            elif (match := dedupe.contamination(item.code)) is not None:
                early[item.index] = Rejection(
                    index=item.index,
                    stage=Stage.DECONTAMINATE,
                    reason=f"similarity {match.score:.3f} to evaluation problem {match.name}",
                    source_hash=item.source_hash,
                )
        to_check = [(str(p.index), p.code) for p in batch if isinstance(p, ComposedProblem) and p.index not in early]
        verdicts = check(to_check, options.filters)
        failed = [v.infra_error for v in verdicts.values() if v.infra_error is not None]
        if failed and len(failed) == len(verdicts):
            # Not one verdict: the sandbox or the workers are broken, which says nothing about the problems.
            raise SynthesisError(f"the filters could not run: {failed[0]}")
        for item in batch:
            if len(kept) == n:
                break  # later candidates are never decided on: the set does not depend on the batch size
            if item.index in early:
                rejections.append(early[item.index])
                continue
            assert isinstance(item, ComposedProblem)
            verdict = verdicts[str(item.index)]
            failure = verdict.failure
            if verdict.infra_error is not None:
                rejection = Rejection(
                    index=item.index,
                    stage=Stage.INFRASTRUCTURE,
                    reason=verdict.infra_error,
                    source_hash=item.source_hash,
                )
            elif failure is not None:
                rejection = Rejection(
                    index=item.index,
                    stage=Stage.filter(failure.name),
                    reason=failure.reason or "",
                    source_hash=item.source_hash,
                )
            elif (match := dedupe.duplicate(item.code)) is not None:
                rejection = Rejection(
                    index=item.index,
                    stage=Stage.DUPLICATE,
                    reason=f"similarity {match.score:.3f} to kept problem {match.name}",
                    source_hash=item.source_hash,
                )
            else:
                kept.append(KeptProblem(problem=item, verdict=verdict))
                dedupe.keep(str(item.index), item.code)
                continue
            rejections.append(rejection)
        if checkpoint is not None:
            elapsed = earlier_s + time.monotonic() - started
            state = SynthesisProgress(n=n, seed=seed, fingerprint=fingerprint, next_index=next_index, kept=kept,
                                      rejections=rejections, elapsed_s=elapsed)  # fmt: skip
            # Whole or not at all (written aside, then renamed): a run killed meanwhile leaves the previous batch's.
            safefs.write_text(checkpoint.parent, checkpoint.name, state.model_dump_json())
        if progress is not None:
            progress(len(kept), n)
    return SynthesisReport(
        n=n,
        seed=seed,
        options=options,
        kept=kept,
        rejections=rejections,
        stats=_statistics(n, kept, rejections, earlier_s + time.monotonic() - started),
    )
