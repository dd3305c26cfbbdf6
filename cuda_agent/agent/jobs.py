"""The optimize job: one agent rollout behind POST /v1/optimize and `cuda-agent optimize`.

The rollout's compile/verify/profile calls go through their own jobs (JobBackend); the trajectory and its turns
are stored when the rollout ends, and the job's result names the best candidate and its verdict.
"""

from __future__ import annotations

from typing import Any

from cuda_agent.agent.backend import JobBackend
from cuda_agent.agent.loop import run_request
from cuda_agent.candidates import record_problem
from cuda_agent.contracts.agent import RolloutProgress, RolloutRequest, Trajectory
from cuda_agent.contracts.common import JobKind
from cuda_agent.db import session_scope
from cuda_agent.db.models import Trajectory as TrajectoryRow
from cuda_agent.db.models import Turn
from cuda_agent.jobs.registry import JobContext, register_handler


@register_handler(JobKind.OPTIMIZE)
def optimize_job(request: dict[str, Any], context: JobContext) -> dict[str, Any]:
    rollout = RolloutRequest.model_validate(request)
    with session_scope() as session:
        problem_id = record_problem(session, rollout.problem_source).id
    rollout = rollout.model_copy(update={"problem_id": problem_id})

    def progress(update: RolloutProgress) -> None:
        context.report_progress(update.model_dump(mode="json"))

    trajectory = run_request(
        rollout, backend=JobBackend(tenant=context.tenant), cancel=context.is_cancelled, progress=progress
    )
    store_trajectory(trajectory, job_id=context.job_id, tenant=context.tenant)
    return optimize_result(trajectory)


def optimize_result(trajectory: Trajectory) -> dict[str, Any]:
    """The job's result document: the best candidate (not the last) with its verdict, and where the rest is."""
    best = trajectory.best
    return {
        "trajectory_id": trajectory.id,
        "termination": trajectory.termination.value if trajectory.termination else None,
        "termination_detail": trajectory.termination_detail,
        "turns": len(trajectory.turns),
        "best": best.model_dump(mode="json") if best else None,
        "model_new": best.candidate.model_new if best else None,
        "cancelled": trajectory.termination is not None and trajectory.termination.value == "cancelled",
    }


def store_trajectory(trajectory: Trajectory, job_id: str | None = None, tenant: str | None = None) -> None:
    """Write the trajectory and one row per turn (messages, tool calls, observations, tokens, rewards)."""
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
        for turn in trajectory.turns:
            assistant = turn.assistant
            session.add(
                Turn(
                    trajectory_id=trajectory.id,
                    index=turn.index,
                    messages=[assistant.model_dump(mode="json")],
                    tool_calls=[call.model_dump(mode="json") for call in assistant.tool_calls],
                    observations=[obs.model_dump(mode="json") for obs in turn.observations],
                    token_ids=assistant.token_ids,
                    logprobs=assistant.logprobs,
                    response_mask=[1] * len(assistant.token_ids) if assistant.token_ids else None,
                    reward_events=[event.model_dump(mode="json") for event in turn.reward_events],
                    duration_s=turn.generation_s + turn.tools_s,
                )
            )


def load_trajectory(trajectory_id: str, tenant: str | None = None) -> Trajectory | None:
    """Rebuild the exported trajectory from its rows (None when absent or another tenant's)."""
    from cuda_agent.contracts.agent import TurnRecord

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
