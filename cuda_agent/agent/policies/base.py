"""The policy interface and the registry that creates policies by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from cuda_agent.contracts.agent import POLICY_OPTIONS, AssistantTurn


class PolicyError(RuntimeError):
    """The policy cannot produce an action; the rollout ends with reason policy_error."""


class Policy(Protocol):
    name: str

    def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        """The next assistant turn for an OpenAI-format conversation and OpenAI function-tool schemas."""
        ...


PolicyFactory = Callable[..., Policy]
_POLICIES: dict[str, PolicyFactory] = {}


def register_policy(name: str, factory: PolicyFactory) -> None:
    if name in _POLICIES:
        raise ValueError(f"policy {name!r} is already registered")
    _POLICIES[name] = factory


def create_policy(name: str, **kwargs: Any) -> Policy:
    try:
        factory = _POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; registered: {', '.join(sorted(_POLICIES))}") from None
    return factory(**kwargs)


def policy_names() -> list[str]:
    return sorted(_POLICIES)


def names_an_endpoint(name: str) -> bool:
    """Whether the policy talks to a configured LLM endpoint (`openai`, `multi`): its options name one."""
    options = POLICY_OPTIONS.get(name)
    return options is not None and "endpoint" in options.model_fields
