"""Multi-agent mode: a coordinator that hands turns to specialist roles over the same workspace.

It is a ``Policy``, so the loop, limits and trajectory are those of a single agent. Roles take turns in blocks;
before each action the active role's brief is appended to the conversation as a user message, and the turn is
tagged with the role. Only the coordinator role may finish; specialists hand over after their block.

Registered as the `multi` policy: every role is served by one `openai` policy, so the whole chat stays on one
server (its prefix cache is reused) and a request's options are the `openai` policy's plus ``turns_per_role``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cuda_agent.agent.policies.base import Policy
from cuda_agent.agent.policies.openai_policy import OpenAIPolicy
from cuda_agent.contracts.agent import AssistantTurn


@dataclass(frozen=True)
class Role:
    name: str
    focus: str
    policy: Policy


SPECIALIST_FOCUS = {
    "memory_layout": "coalesced global memory access, vectorized loads (float4), shared-memory tiling, "
    "avoiding bank conflicts and redundant reads",
    "instruction_parallelism": "instruction-level parallelism: several independent elements per thread, loop "
    "unrolling, fused multiply-add, fewer divisions and branches, register pressure",
    "boundary_conditions": "correctness at the edges: sizes that are not multiples of the block or vector width, "
    "empty and tiny inputs, strides, alignment of vectorized accesses, integer overflow in indices",
}
COORDINATOR_FOCUS = (
    "the overall plan: write the first working candidate, integrate the specialists' changes, verify and finish"
)


def default_roles(policy: Policy) -> list[Role]:
    """The coordinator first, then the three specialists, all served by ``policy``."""
    return [Role("coordinator", COORDINATOR_FOCUS, policy)] + [Role(n, f, policy) for n, f in SPECIALIST_FOCUS.items()]


class MultiAgentPolicy:
    name = "multi"

    def __init__(self, roles: list[Role], turns_per_role: int = 5) -> None:
        if not roles:
            raise ValueError("multi-agent mode needs at least one role")
        if turns_per_role < 1:
            raise ValueError("turns_per_role must be at least 1")
        self.roles = roles
        self.turns_per_role = turns_per_role
        self.model = getattr(roles[0].policy, "model", None)
        self._turn = 0

    def active_role(self) -> Role:
        return self.roles[(self._turn // self.turns_per_role) % len(self.roles)]

    def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        role = self.active_role()
        coordinator = role is self.roles[0]
        left = self.turns_per_role - self._turn % self.turns_per_role
        brief = (
            f"[{role.name}] You are the {role.name.replace('_', ' ')} specialist this turn "
            f"({left} turn(s) left in your block). Focus on {role.focus}. "
            + (
                "You may call finish when the best candidate is verified and no specialist can improve it."
                if coordinator
                else "Do not call finish; verify your change, and the next specialist takes over after your block."
            )
        )
        offered = tools if coordinator else [t for t in tools if t.get("function", {}).get("name") != "finish"]
        turn = role.policy.act([*conversation, {"role": "user", "content": brief}], offered)
        self._turn += 1
        return turn.model_copy(update={"agent_role": role.name})


def create_multi_agent_policy(*, turns_per_role: int = 5, **openai_options: Any) -> MultiAgentPolicy:
    """The `multi` policy: the coordinator and the specialists of ``default_roles``, all on one `openai` policy."""
    return MultiAgentPolicy(default_roles(OpenAIPolicy(**openai_options)), turns_per_role)
