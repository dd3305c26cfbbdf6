"""The optimize job: one agent rollout behind POST /v1/optimize and `cuda-agent optimize`.

The rollout's compile/verify/profile calls go through their own jobs (JobBackend); the trajectory and its turns
are stored when the rollout ends, and the job's result names the best candidate and its verdict.
"""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

from cuda_agent.agent.loop import run_request
from cuda_agent.candidates import record_problem
from cuda_agent.contracts.agent import (
    RolloutProgress,
    RolloutRequest,
    TerminationReason,
    TokenSequence,
    Trajectory,
    TurnRecord,
)
from cuda_agent.contracts.eval import EvalResult
from cuda_agent.contracts.jobs import OptimizeResult
from cuda_agent.db import session_scope
from cuda_agent.db.models import Trajectory as TrajectoryRow
from cuda_agent.db.models import Turn
from cuda_agent.jobs.registry import JobContext
from cuda_agent.verify import JobBackend, verify_candidate


def optimize_job(request: RolloutRequest, context: JobContext) -> OptimizeResult:
    with session_scope() as session:
        problem_id = record_problem(session, request.problem_source).id
    rollout = request.model_copy(update={"problem_id": problem_id})

    def progress(update: RolloutProgress) -> None:
        context.report_progress(update.model_dump(mode="json"))

    backend = JobBackend(tenant=context.tenant)
    trajectory = run_request(rollout, backend=backend, cancel=context.is_cancelled, progress=progress)
    store_trajectory(trajectory, job_id=context.job_id, tenant=context.tenant)
    confirmation = None
    if trajectory.best is not None and not context.is_cancelled():
        # The search kept the best of many verdicts; the kernel returned is judged once more on inputs it was
        # never run on (every evaluation draws a secret seed), from its build in the cache.
        _, confirmation = verify_candidate(request.problem_source, trajectory.best.candidate, request.config, backend)
    return optimize_result(trajectory, confirmation)


def optimize_result(trajectory: Trajectory, confirmation: EvalResult | None) -> OptimizeResult:
    """The job's result: the best candidate (not the last) with its verdict, and where the rest is."""
    best = trajectory.best
    return OptimizeResult(
        confirmation=confirmation,
        trajectory_id=trajectory.id,
        termination=trajectory.termination,
        termination_detail=trajectory.termination_detail,
        turns=len(trajectory.turns),
        best=best,
        model_new=best.candidate.model_new if best else None,
        cancelled=trajectory.termination is TerminationReason.CANCELLED,
    )


class TurnTokens(NamedTuple):
    """A turn row's tokens: ids, logprobs aligned with them, and the response mask (None: not known)."""

    token_ids: list[int] | None
    logprobs: list[float] | None
    response_mask: list[int] | None


def turn_tokens(trajectory: Trajectory) -> list[TurnTokens]:
    """Each turn's part of the trajectory's response sequence, for its row: the tokens the turn's prompt added after
    the previous turn (its observations and any user text, mask 0), then the model's completion (mask 1), with
    logprobs aligned (0.0 where the model did not sample). The turns' parts joined are the response of
    ``trajectory.token_sequence()``.

    When the trajectory has no single sequence (a turn lacks ids, or its context was truncated), a row holds the
    completion alone and no mask: what the model wrote is known, what it was conditioned on is not.
    """
    sequence = trajectory.token_sequence()
    if sequence is None:
        return [TurnTokens(turn.assistant.token_ids, turn.assistant.logprobs, None) for turn in trajectory.turns]
    # Where each turn's part ends in the response: its whole context (prompt and completion) less the first prompt.
    ends = [
        len(turn.assistant.prompt_token_ids or []) + len(turn.assistant.token_ids or []) - len(sequence.prompt_ids)
        for turn in trajectory.turns
    ]
    return [
        TurnTokens(
            sequence.response_ids[start:end], sequence.response_logprobs[start:end], sequence.response_mask[start:end]
        )
        for start, end in pairwise([0, *ends])
    ]


def store_trajectory(trajectory: Trajectory, job_id: str | None = None, tenant: str | None = None) -> None:
    """Write the trajectory and one row per turn (messages, tool calls, observations, tokens with their response
    mask, rewards)."""
    best = trajectory.best
    with session_scope() as session:
        row = TrajectoryRow(
            id=trajectory.id,
            job_id=job_id,
            problem_id=trajectory.problem_id,
            tenant=tenant,
            policy=trajectory.policy,
            termination=trajectory.termination.value if trajectory.termination else None,
            best_reward=best.result.reward if best else None,
            best_speedup=best.result.speedup_vs_eager if best else None,
            meta={
                "model": trajectory.model,
                "config": trajectory.config.model_dump(mode="json"),
                "prompt": trajectory.prompt,
                "termination_detail": trajectory.termination_detail,
                "best": best.model_dump(mode="json") if best else None,
                "started_at": trajectory.started_at.isoformat(),
                "finished_at": trajectory.finished_at.isoformat() if trajectory.finished_at else None,
            },
        )
        session.add(row)
        for turn, tokens in zip(trajectory.turns, turn_tokens(trajectory), strict=True):
            assistant = turn.assistant
            session.add(
                Turn(
                    trajectory_id=trajectory.id,
                    index=turn.index,
                    messages=[assistant.model_dump(mode="json")],
                    tool_calls=[call.model_dump(mode="json") for call in assistant.tool_calls],
                    observations=[obs.model_dump(mode="json") for obs in turn.observations],
                    token_ids=tokens.token_ids,
                    logprobs=tokens.logprobs,
                    response_mask=tokens.response_mask,
                    reward_events=[event.model_dump(mode="json") for event in turn.reward_events],
                    duration_s=turn.generation_s + turn.tools_s,
                )
            )


def load_trajectory(trajectory_id: str, tenant: str | None = None) -> Trajectory | None:
    """Rebuild the exported trajectory from its rows (None when absent or another tenant's)."""
    with session_scope() as session:
        row = session.get(TrajectoryRow, trajectory_id)
        if row is None or (tenant is not None and row.tenant != tenant):
            return None
        meta = row.meta
        turns = [
            TurnRecord.model_validate(
                {
                    "index": turn.index,
                    "assistant": turn.messages[0],
                    "observations": turn.observations,
                    "reward_events": turn.reward_events,
                }
            )
            for turn in row.turns
        ]
        return Trajectory.model_validate(
            {
                "id": row.id,
                "problem_id": row.problem_id,
                "policy": row.policy,
                "model": meta.get("model"),
                "config": meta["config"],
                "prompt": meta["prompt"],
                "turns": turns,
                "termination": row.termination,
                "termination_detail": meta.get("termination_detail", ""),
                "best": meta.get("best"),
                "started_at": meta["started_at"],
                "finished_at": meta.get("finished_at"),
            }
        )


def load_token_sequence(trajectory_id: str, tenant: str | None = None) -> TokenSequence | None:
    """The stored token sequence a trainer reads: the first turn's prompt ids, then the turns' stored parts joined.
    None when the trajectory is absent or another tenant's, or was stored without a single sequence."""
    with session_scope() as session:
        row = session.get(TrajectoryRow, trajectory_id)
        if row is None or (tenant is not None and row.tenant != tenant) or not row.turns:
            return None
        if any(turn.response_mask is None for turn in row.turns):
            return None
        prompt_ids = row.turns[0].messages[0].get("prompt_token_ids")
        if prompt_ids is None:
            return None
        return TokenSequence(
            prompt_ids=prompt_ids,
            response_ids=[token for turn in row.turns for token in turn.token_ids or []],
            response_mask=[bit for turn in row.turns for bit in turn.response_mask or []],
            response_logprobs=[lp for turn in row.turns for lp in turn.logprobs or []],
        )
