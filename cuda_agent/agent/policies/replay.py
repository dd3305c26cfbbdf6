"""The `replay` policy: plays back the assistant turns of a recorded trajectory, in order."""

from __future__ import annotations

from typing import Any

from cuda_agent.agent.policies.base import PolicyError
from cuda_agent.contracts.agent import AssistantTurn, Trajectory


class ReplayPolicy:
    name = "replay"

    def __init__(self, *, trajectory: Trajectory | dict[str, Any]) -> None:
        # A dict is the JSON form, as it arrives in a job's policy options.
        trajectory = Trajectory.model_validate(trajectory) if isinstance(trajectory, dict) else trajectory
        self._turns = [t.assistant for t in trajectory.turns]
        self._next = 0

    def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        if self._next >= len(self._turns):
            raise PolicyError(f"replay exhausted: the recorded trajectory has {len(self._turns)} turns")
        turn = self._turns[self._next]
        self._next += 1
        return turn.model_copy(deep=True)
