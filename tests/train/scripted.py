"""A served checkpoint whose replies are known: a tiny local model whose greedy reply to any prompt is a fixed chain
of Hermes tool calls, each one vocabulary word, then </s>; and `cuda-agent serve-policy` running a checkpoint."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import torch

from cuda_agent.train.tiny import build_tiny_model
from tests.conftest import ROOT


def call_word(name: str, **arguments: Any) -> str:
    """A Hermes tool call with no whitespace in it, so the word-level tokenizer keeps it as one token: compact JSON,
    where spaces can only be inside strings, and those are escaped (newlines and tabs already are)."""
    compact = json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"), ensure_ascii=True)
    escaped = compact.replace(" ", "\\u0020")
    return f"<tool_call>{escaped}</tool_call>"


def scripted_model(folder: Path, calls: Sequence[str], words: Sequence[str] = ()) -> Path:
    """A tiny model whose greedy reply to anything is ``calls`` in order, then </s>, by construction of its weights:
    the blocks add nothing to the residual stream (zeroed output projections), so the final hidden state is the
    current token's embedding: dimension 0 is 1 for every token, dimension j+1 only for the j-th call. The output
    rows make the first call win after any token that is not a call, call j after call j-1, </s> after the last."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build_tiny_model(folder, [*words, *calls], hidden_size=max(32, len(calls) + 1))
    model = AutoModelForCausalLM.from_pretrained(folder, use_kernels=False)
    ids = AutoTokenizer.from_pretrained(folder).convert_tokens_to_ids([*calls, "</s>"])
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        embed.zero_()
        head.zero_()
        embed[:, 0] = 1.0
        head[ids[0], 0] = 10.0
        for j, token in enumerate(ids[: len(calls)]):
            embed[token, j + 1] = 1.0
            head[ids[0], j + 1] = -100.0  # no restart after any call
            head[ids[j + 1], j + 1] = 100.0  # the next call, or </s> after the last
    model.save_pretrained(folder)
    return folder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(folder: Path, device: str = "cpu", model_name: str = "tiny") -> Iterator[str]:
    """The base URL of `cuda-agent serve-policy` running the checkpoint in ``folder``, until the block ends."""
    port = _free_port()
    command = ["serve-policy", str(folder), "--port", str(port), "--model-name", model_name, "--device", device]
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
                raise RuntimeError(f"serve-policy did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=30)
