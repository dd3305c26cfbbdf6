"""`cuda-agent serve-policy` answers the `openai` policy: the real command serves a tiny local model over HTTP, and
the policy's client gets a completion with token ids and logprobs that are the model's own, and tool calls parsed
from the Hermes format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from cuda_agent.agent.policies.openai_policy import OpenAIPolicy
from cuda_agent.train.serve import parse_tool_calls
from tests.train.scripted import call_word, scripted_model, serving

# One vocabulary word that is a whole tool call: the word-level tokenizer keeps it as one token.
CALL = call_word("compile", path="k.cu")
WORDS = ("compile", "kernel", "obs", "ok")
TOOLS = [{"type": "function", "function": {"name": "compile", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(base URL, model folder) of `cuda-agent serve-policy` running a model whose greedy reply is CALL."""
    folder = scripted_model(tmp_path_factory.mktemp("policy"), [CALL], WORDS)
    with serving(folder) as base_url:
        yield base_url, folder


def test_the_openai_policy_gets_a_tool_call_with_token_ids_and_logprobs(served: tuple[str, Path]) -> None:
    base_url, folder = served
    policy = OpenAIPolicy(base_url=base_url, model="tiny", temperature=0.0, return_token_ids=True, max_retries=0)
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "optimize kernel"},
        {"role": "user", "content": "kernel"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "compile", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "obs ok"},
    ]
    turn = policy.act(conversation, TOOLS)

    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [("compile", {"path": "k.cu"})]
    assert turn.finish_reason == "tool_calls" and turn.content is None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert turn.token_ids == tokenizer.convert_tokens_to_ids([CALL, "</s>"])
    assert turn.prompt_token_ids and turn.logprobs is not None and len(turn.logprobs) == 2
    # The logprobs are the model's own: recompute them by teacher forcing over prompt + reply.
    model = AutoModelForCausalLM.from_pretrained(folder)
    ids = torch.tensor([turn.prompt_token_ids + turn.token_ids])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    n = len(turn.prompt_token_ids)
    expected = [float(log_probs[n - 1 + i, t]) for i, t in enumerate(turn.token_ids)]
    assert turn.logprobs == pytest.approx(expected, abs=1e-4)
    assert turn.usage is not None and turn.usage.prompt_tokens == n


def test_logprob_tokens_spelled_as_ids_and_an_unknown_model_refused(served: tuple[str, Path]) -> None:
    base_url, _ = served
    policy = OpenAIPolicy(
        base_url=base_url, model="tiny", max_tokens=1, extra_body={"return_tokens_as_token_ids": True}, max_retries=0
    )
    turn = policy.act([{"role": "user", "content": "kernel"}], [])
    assert turn.token_ids is not None and len(turn.token_ids) == 1 == len(turn.logprobs or [])
    assert turn.finish_reason in ("length", "stop", "tool_calls")
    wrong = httpx.post(f"{base_url}/chat/completions", json={"model": "other", "messages": [{"role": "user"}]})
    assert wrong.status_code == 404 and "tiny" in wrong.json()["error"]["message"]


def test_parse_tool_calls_keeps_text_and_malformed_blocks_as_content() -> None:
    call = '<tool_call>{"name": "compile", "arguments": {"a": 1}}</tool_call>'
    text = f"let me build {call} then <tool_call>{{bad</tool_call>"
    content, calls = parse_tool_calls(text)
    assert content == "let me build  then <tool_call>{bad</tool_call>"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("compile", {"a": 1})]
    assert parse_tool_calls('<tool_call>{"name": "x", "arguments": "{}"}</tool_call>')[0] is None
