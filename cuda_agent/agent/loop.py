"""The rollout loop: an explicit state machine over one environment and one policy.

PENDING -> GENERATING -> RUNNING_TOOLS -> GENERATING -> ... -> TERMINATED(reason). Each state has one handler;
all mutable state lives in ``RolloutState``. Limits (turns, context, wall clock, cancellation) are checked before
every generation, so a policy that loops, calls unknown tools or never finishes still ends with a clear reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from cuda_agent.agent.backend import ToolBackend
from cuda_agent.agent.context import fit_context
from cuda_agent.agent.environment import KernelEnv
from cuda_agent.agent.policies import Policy, PolicyError, create_policy, with_policy
from cuda_agent.contracts.agent import (
    AssistantTurn,
    RolloutProgress,
    RolloutRequest,
    TerminationReason,
    Trajectory,
    TurnRecord,
)
from cuda_agent.settings import get_settings


class LoopState(StrEnum):
    PENDING = "pending"
    GENERATING = "generating"
    RUNNING_TOOLS = "running_tools"
    TERMINATED = "terminated"


@dataclass
class RolloutState:
    trajectory: Trajectory
    state: LoopState = LoopState.PENDING
    head: list[dict[str, Any]] = field(default_factory=list)  # system prompt + skill/problem: never truncated
    turns: list[list[dict[str, Any]]] = field(default_factory=list)  # messages of each turn, for the next prompt
    action: AssistantTurn | None = None  # the action whose tools run next
    started: float = 0.0
    token_ratio: float = 1.0  # server tokens per estimated token, from the last usage report


class RolloutRunner:
    def __init__(
        self,
        env: KernelEnv,
        policy: Policy,
        *,
        cancel: Callable[[], bool] | None = None,
        progress: Callable[[RolloutProgress], None] | None = None,
        problem_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings = get_settings()
        self.env = env
        self.policy = policy
        self.cancel = cancel
        self.progress = progress
        self.clock = clock
        cfg = env.config
        self.max_turns = cfg.max_turns or settings.agent_max_turns
        self.context_tokens = cfg.context_tokens or settings.agent_context_tokens
        self.s = RolloutState(
            trajectory=Trajectory(
                id=env.id,
                problem_id=problem_id,
                policy=policy.name,
                model=getattr(policy, "model", None),
                config=cfg,
                prompt=[],
            )
        )
        self._handlers: dict[LoopState, Callable[[], None]] = {
            LoopState.PENDING: self._on_pending,
            LoopState.GENERATING: self._on_generating,
            LoopState.RUNNING_TOOLS: self._on_running_tools,
        }

    def run(self) -> Trajectory:
        while self.s.state is not LoopState.TERMINATED:
            self._handlers[self.s.state]()
        traj = self.s.trajectory
        traj.best = self.env.best
        traj.finished_at = datetime.now(UTC)
        return traj

    def _terminate(self, reason: TerminationReason, detail: str = "") -> None:
        # A limit that ends the rollout before the policy finishes: a policy that keeps its own account of the work
        # (the heuristic's variants and their figures) adds it, or the trajectory keeps only the limit's name.
        closing = getattr(self.policy, "closing_note", None)
        limits = (TerminationReason.WALL_CLOCK, TerminationReason.MAX_TURNS, TerminationReason.CANCELLED)
        if reason in limits and callable(closing):
            note = closing([message for turn in self.s.turns for message in turn])
            detail = f"{detail}; {note}" if note else detail
        self.s.trajectory.termination = reason
        self.s.trajectory.termination_detail = detail
        self.s.state = LoopState.TERMINATED

    def _on_pending(self) -> None:
        self.s.started = self.clock()
        self.s.head = self.env.reset()
        self.s.trajectory.prompt = list(self.s.head)
        # A policy that works from the problem as data (env.problem_spec) rather than the prompt takes the
        # environment here; the others only ever see the conversation.
        bind = getattr(self.policy, "bind", None)
        if callable(bind):
            bind(self.env)
        self.s.state = LoopState.GENERATING

    def _on_generating(self) -> None:
        s, cfg = self.s, self.env.config
        if self.cancel is not None and self.cancel():
            return self._terminate(TerminationReason.CANCELLED, "cancelled by the caller")
        if cfg.wall_clock_s is not None and self.clock() - s.started >= cfg.wall_clock_s:
            return self._terminate(TerminationReason.WALL_CLOCK, f"wall-clock limit of {cfg.wall_clock_s:g} s reached")
        if len(s.trajectory.turns) >= self.max_turns:
            return self._terminate(TerminationReason.MAX_TURNS, f"turn limit of {self.max_turns} reached")
        budget = self.context_tokens - cfg.response_reserve_tokens
        fitted = fit_context(s.head, s.turns, budget, s.token_ratio)
        if fitted is None:
            return self._terminate(
                TerminationReason.CONTEXT_EXHAUSTED,
                f"the system prompt, skill and latest turn exceed the {self.context_tokens}-token budget",
            )
        prompt, dropped, estimate = fitted
        start = self.clock()
        try:
            action = self.policy.act(prompt, self.env.tool_schemas())
        except PolicyError as exc:
            return self._terminate(TerminationReason.POLICY_ERROR, str(exc))
        except Exception as exc:  # a policy bug ends this rollout, not the worker running it
            return self._terminate(TerminationReason.POLICY_ERROR, f"policy raised {type(exc).__name__}: {exc}")
        if action.usage is not None and action.usage.prompt_tokens > 0 and estimate > 0:
            s.token_ratio = action.usage.prompt_tokens / (estimate / s.token_ratio)
        s.trajectory.turns.append(
            TurnRecord(
                index=len(s.trajectory.turns),
                assistant=action,
                generation_s=self.clock() - start,
                context_tokens=estimate,
                truncated_turns=dropped,
            )
        )
        s.action = action
        s.state = LoopState.RUNNING_TOOLS

    def _on_running_tools(self) -> None:
        s = self.s
        assert s.action is not None
        record = s.trajectory.turns[-1]
        start = self.clock()
        result = self.env.step(s.action)
        record.tools_s = self.clock() - start
        record.observations = result.observations
        record.reward_events = result.reward_events
        s.turns.append([s.action.to_message(), *result.messages])
        s.action = None
        if self.progress is not None:
            best = self.env.best
            self.progress(
                RolloutProgress(
                    trajectory_id=s.trajectory.id,
                    turn=record.index,
                    best_reward=best.result.reward if best else None,
                    best_speedup=best.result.speedup_vs_eager if best else None,
                    tools=[call.name for call in record.assistant.tool_calls],
                    events=record.reward_events,
                )
            )
        if result.done:
            return self._terminate(TerminationReason.FINISHED, self.env.finish_summary)
        s.state = LoopState.GENERATING


def run_rollout(
    env: KernelEnv,
    policy: Policy,
    *,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[RolloutProgress], None] | None = None,
    problem_id: str | None = None,
) -> Trajectory:
    """Run one rollout to termination and close the environment; returns the trajectory (best candidate in it)."""
    try:
        return RolloutRunner(env, policy, cancel=cancel, progress=progress, problem_id=problem_id).run()
    finally:
        env.close()


def run_request(
    request: RolloutRequest,
    *,
    backend: ToolBackend | None = None,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[RolloutProgress], None] | None = None,
) -> Trajectory:
    """A rollout from a job document: the named policy on a fresh environment; the entry point of optimize jobs."""
    request = with_policy(request)
    assert request.policy is not None  # named by with_policy
    policy = create_policy(request.policy, **request.policy_options)
    env = KernelEnv(request.problem_source, config=request.config, backend=backend)
    return run_rollout(env, policy, cancel=cancel, progress=progress, problem_id=request.problem_id)
