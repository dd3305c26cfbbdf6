"""The `openai` policy: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, ...).

Token ids and logprobs are recorded when the server returns them, for RL: logprobs through the standard
``logprobs`` field; token ids through vLLM's extra fields (``return_token_ids``: ``prompt_token_ids`` on the
response, ``token_ids`` on the choice) or its ``token_id:N`` logprob tokens. Both are optional.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import openai

from cuda_agent.agent.policies.base import PolicyError
from cuda_agent.contracts.agent import AssistantTurn, TokenUsage, ToolCall
from cuda_agent.settings import get_settings

TOKEN_ID_PREFIX = "token_id:"


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
        base_url: str | None = None,
        model: str | None = None,
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
        settings = get_settings()
        self.model = model or settings.openai_model
        if not self.model:
            raise ValueError("the openai policy needs a model name (argument or CUDA_AGENT_OPENAI_MODEL)")
        # The SDK's own retries are off: ours classify errors and record why a rollout stopped.
        self.client = openai.OpenAI(
            base_url=base_url or settings.openai_base_url,
            api_key=api_key or settings.openai_api_key.get_secret_value(),
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
