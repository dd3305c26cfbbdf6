"""`cuda-agent serve-policy` answers the `openai` policy: the real command serves a tiny local model over HTTP, and
the policy's client gets a completion with token ids and logprobs that are the model's own, and tool calls parsed
from the Hermes format."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from cuda_agent.agent.policies.openai_policy import OpenAIPolicy
from cuda_agent.train.serve import parse_tool_calls
from cuda_agent.train.tiny import build_tiny_model
from tests.conftest import ROOT

# One vocabulary word that is a whole tool call: the word-level tokenizer keeps it as one token.
CALL = '<tool_call>{"name":"compile","arguments":{"path":"k.cu"}}</tool_call>'
WORDS = ("compile", "kernel", "obs", "ok", CALL)
TOOLS = [{"type": "function", "function": {"name": "compile", "parameters": {"type": "object", "properties": {}}}}]


def scripted_model(folder: Path) -> Path:
    """A tiny model whose greedy reply to anything is CALL then </s>, by construction of its weights: the blocks
    add nothing to the residual stream (zeroed output projections), so the final hidden state is the current
    token's embedding, whose dimension 0 is positive for every token and dimension 1 only for CALL; the output
    rows make CALL win after any other token and </s> win after CALL."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build_tiny_model(folder, WORDS)
    model = AutoModelForCausalLM.from_pretrained(folder)
    call, eos = AutoTokenizer.from_pretrained(folder).convert_tokens_to_ids([CALL, "</s>"])  # type: ignore[misc]
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        embed.zero_()
        embed[:, 0] = 1.0
        embed[call, 1] = 1.0
        head = model.lm_head.weight
        head.zero_()
        head[call, 0], head[call, 1] = 10.0, -100.0
        head[eos, 0], head[eos, 1] = 5.0, 100.0
    model.save_pretrained(folder)
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(base URL, model folder) of `cuda-agent serve-policy` running the scripted model."""
    folder = scripted_model(tmp_path_factory.mktemp("policy"))
    port = free_port()
    command = ["serve-policy", str(folder), "--port", str(port), "--model-name", "tiny", "--device", "cpu"]
    log = folder / "serve.log"  # a file, not a pipe that nobody drains while the tests run
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", *command], cwd=ROOT, stdout=out, stderr=out)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"serve-policy did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base_url, folder
    finally:
        process.terminate()
        process.wait(timeout=30)


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
