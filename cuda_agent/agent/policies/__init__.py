"""Policies by name: `openai` (any OpenAI-compatible endpoint), `multi` (a coordinator and specialist roles taking
turns, all on one `openai` endpoint), `replay` (a recorded trajectory) and `heuristic` (the built-in kernel
author, cuda_agent.author: captures the problem's graph, plans fused kernels, emits CUDA or C++ and searches variants).

Other non-LLM kernel authors plug in by implementing ``Policy`` and calling ``register_policy``.
"""

from cuda_agent.agent.multi_agent import create_multi_agent_policy
from cuda_agent.agent.policies.base import (
    Policy,
    PolicyError,
    create_policy,
    names_an_endpoint,
    policy_names,
    register_policy,
)
from cuda_agent.agent.policies.heuristic import HeuristicPolicy
from cuda_agent.agent.policies.openai_policy import OpenAIPolicy
from cuda_agent.agent.policies.replay import ReplayPolicy

register_policy("openai", OpenAIPolicy)
register_policy("multi", create_multi_agent_policy)
register_policy("replay", ReplayPolicy)
register_policy("heuristic", HeuristicPolicy)

__all__ = [
    "HeuristicPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyError",
    "ReplayPolicy",
    "create_policy",
    "names_an_endpoint",
    "policy_names",
    "register_policy",
]
