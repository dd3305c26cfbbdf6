"""The `openai` policy: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, ...).

Token ids and logprobs are recorded when the server returns them, for RL: logprobs through the standard
``logprobs`` field; token ids through vLLM's extra fields (``return_token_ids``: ``prompt_token_ids`` on the
response, ``token_ids`` on the choice) or its ``token_id:N`` logprob tokens. Both are optional.

Where requests go is the operator's choice: a job names one of the endpoints in settings (``llm_endpoints``, and
``default`` from the ``CUDA_AGENT_OPENAI_*`` settings), never a URL or a key (contracts.agent.OpenAIPolicyOptions).
A URL given directly is for code the operator runs (the CLI, tests), and is sent no configured key.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import openai
from pydantic import SecretStr

from cuda_agent.agent.policies.base import PolicyError
from cuda_agent.contracts.agent import AssistantTurn, TokenUsage, ToolCall
from cuda_agent.settings import ConfigError, LLMEndpoint, get_settings

TOKEN_ID_PREFIX = "token_id:"
LOCAL_ENDPOINT = "local"
# Endpoints the operator's own process declared (`cuda-agent optimize --policy-option base_url=...`): they serve
# only jobs that run in that process, which is why they live here and not in settings.
_local_endpoints: dict[str, LLMEndpoint] = {}


def use_local_endpoint(base_url: str, *, model: str | None = None, api_key: str | None = None) -> str:
    """Declare an endpoint by URL for jobs run in this process (operator code only) and return its name."""
    if not get_settings().embedded:
        raise ConfigError(
            "an endpoint URL given on the command line reaches only jobs run in this process, and with a broker "
            "the rollout runs on a worker: configure it there (CUDA_AGENT_LLM_ENDPOINTS) and name it instead"
        )
    _local_endpoints[LOCAL_ENDPOINT] = LLMEndpoint(
        base_url=base_url, model=model or get_settings().openai_model, api_key=SecretStr(api_key or "EMPTY")
    )
    return LOCAL_ENDPOINT


def resolve_endpoint(name: str, model: str | None = None) -> tuple[LLMEndpoint, str]:
    """The endpoint named ``name`` and the model to ask it for: ``model`` when the endpoint offers it, else its
    own. ConfigError, naming what is configured, for an unknown endpoint or a model it does not offer."""
    endpoint = _local_endpoints.get(name) or get_settings().llm_endpoint(name)
    if model is not None and not endpoint.allows(model):
        offered = ", ".join(m for m in [endpoint.model, *endpoint.models] if m) or "none configured"
        raise ConfigError(f"endpoint {name!r} does not offer model {model!r}; it offers: {offered}")
    chosen = model or endpoint.model
    if not chosen:
        raise ConfigError(
            f"endpoint {name!r} has no model configured (CUDA_AGENT_OPENAI_MODEL or CUDA_AGENT_LLM_ENDPOINTS)"
        )
    return endpoint, chosen


def _transient(exc: openai.OpenAIError) -> bool:
    """Worth retrying: the request may succeed unchanged (timeouts, connection drops, 408/409/429, 5xx)."""
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


class OpenAIPolicy:
    name = "openai"

    def __init__(
        self,
        *,
        endpoint: str = "default",
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 1.0,
        top_p: float | None = None,
        max_tokens: int | None = None,
        logprobs: bool = True,
        return_token_ids: bool = False,
        extra_body: dict[str, Any] | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if base_url is not None:  # operator code naming a server itself: no configured key goes there
            direct_model = model or get_settings().openai_model
            if not direct_model:
                raise ValueError("the openai policy needs a model name (argument or CUDA_AGENT_OPENAI_MODEL)")
            target, self.model = LLMEndpoint(base_url=base_url, api_key=SecretStr(api_key or "EMPTY")), direct_model
        else:
            target, self.model = resolve_endpoint(endpoint, model)
        # The SDK's own retries are off: ours classify errors and record why a rollout stopped.
        self.client = openai.OpenAI(
            base_url=target.base_url,
            api_key=target.api_key.get_secret_value(),
            timeout=timeout_s,
            max_retries=0,
        )
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        # return_token_ids is a vLLM extension; strict servers (api.openai.com) reject unknown fields.
        self.extra_body = {**(extra_body or {}), **({"return_token_ids": True} if return_token_ids else {})}
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep

    def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        kwargs: dict[str, Any] = {"model": self.model, "messages": conversation, "temperature": self.temperature}
        if tools:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = "auto"
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if self.logprobs:
            kwargs["logprobs"] = True
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        for attempt in range(self.max_retries + 1):
            try:
                response = self.client.chat.completions.create(**kwargs)
                break
            except openai.OpenAIError as exc:
                if not _transient(exc):
                    raise PolicyError(f"endpoint rejected the request: {_describe(exc)}") from exc
                if attempt == self.max_retries:
                    raise PolicyError(f"endpoint still failing after {attempt + 1} attempts: {_describe(exc)}") from exc
                delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
                self._sleep(delay)
        return parse_completion(response)


def _describe(exc: openai.OpenAIError) -> str:
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {str(exc)[:500]}"


def parse_completion(response: Any) -> AssistantTurn:
    if not response.choices:
        raise PolicyError("endpoint returned no choices")
    choice = response.choices[0]
    message = choice.message
    calls = [
        ToolCall(id=tc.id or f"call_{i}", name=tc.function.name, arguments=tc.function.arguments or "{}")
        for i, tc in enumerate(message.tool_calls or [])
        if getattr(tc, "function", None) is not None  # custom (non-function) tool calls are not ours
    ]
    extra_msg = message.model_extra or {}
    extra_choice = choice.model_extra or {}
    extra_resp = response.model_extra or {}
    logprobs = token_ids = None
    if choice.logprobs is not None and choice.logprobs.content:
        entries = choice.logprobs.content
        logprobs = [e.logprob for e in entries]
        # vLLM's return_tokens_as_token_ids spells each token "token_id:N".
        if all(e.token.startswith(TOKEN_ID_PREFIX) for e in entries):
            token_ids = [int(e.token[len(TOKEN_ID_PREFIX) :]) for e in entries]
    if extra_choice.get("token_ids") is not None:
        token_ids = [int(t) for t in extra_choice["token_ids"]]
    prompt_ids = extra_resp.get("prompt_token_ids")
    usage = response.usage
    return AssistantTurn(
        content=message.content,
        reasoning=extra_msg.get("reasoning_content") or extra_msg.get("reasoning"),
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        usage=TokenUsage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
        if usage is not None
        else None,
        token_ids=token_ids,
        logprobs=logprobs,
        prompt_token_ids=[int(t) for t in prompt_ids] if prompt_ids is not None else None,
        model=response.model,
    )
