"""Policies by name: `openai` (any OpenAI-compatible endpoint), `replay` (a recorded trajectory) and
`heuristic` (template kernels for elementwise problems).

Other non-LLM kernel authors plug in by implementing ``Policy`` and calling ``register_policy``.
"""

from cuda_agent.agent.policies.base import Policy, PolicyError, create_policy, policy_names, register_policy
from cuda_agent.agent.policies.heuristic import HeuristicPolicy
from cuda_agent.agent.policies.openai_policy import OpenAIPolicy
from cuda_agent.agent.policies.replay import ReplayPolicy

register_policy("openai", OpenAIPolicy)
register_policy("replay", ReplayPolicy)
register_policy("heuristic", HeuristicPolicy)

__all__ = [
    "HeuristicPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyError",
    "ReplayPolicy",
    "create_policy",
    "policy_names",
    "register_policy",
]
