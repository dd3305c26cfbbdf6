"""Policies by name: `openai` (any OpenAI-compatible endpoint), `multi` (a coordinator and specialist roles taking
turns, all on one `openai` endpoint), `replay` (a recorded trajectory) and `heuristic` (the built-in kernel
author, cuda_agent.author: captures the problem's graph, plans fused kernels, emits CUDA or C++ and searches variants).

Other non-LLM kernel authors plug in by implementing ``Policy`` and calling ``register_policy``.
"""

from collections.abc import Mapping
from typing import Any

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
from cuda_agent.agent.policies.openai_policy import OpenAIPolicy, resolve_endpoint
from cuda_agent.agent.policies.replay import ReplayPolicy
from cuda_agent.contracts.agent import RolloutRequest
from cuda_agent.settings import ConfigError

register_policy("openai", OpenAIPolicy)
register_policy("multi", create_multi_agent_policy)
register_policy("replay", ReplayPolicy)
register_policy("heuristic", HeuristicPolicy)


def default_policy() -> str:
    """The policy of a request that names none: the LLM policy where the default endpoint has a model, else the
    built-in kernel author, so that optimizing works out of the box on a machine with no endpoint."""
    try:
        resolve_endpoint("default")
    except ConfigError:
        return "heuristic"
    return "openai"


def policy_for(name: str | None, options: Mapping[str, Any]) -> str:
    """The policy a request or command runs: the one it names; else the LLM policy when its options name an
    endpoint (or, on the command line, a URL), else ``default_policy``."""
    if name is not None:
        return name
    return "openai" if "endpoint" in options or "base_url" in options else default_policy()


def with_policy(request: RolloutRequest) -> RolloutRequest:
    """``request`` naming its policy (``policy_for``), its options checked against it."""
    if request.policy is not None:
        return request
    name = policy_for(None, request.policy_options)
    return RolloutRequest.model_validate({**request.model_dump(), "policy": name})


__all__ = [
    "HeuristicPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyError",
    "ReplayPolicy",
    "create_policy",
    "default_policy",
    "names_an_endpoint",
    "policy_for",
    "policy_names",
    "register_policy",
    "with_policy",
]
