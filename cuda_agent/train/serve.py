"""`cuda-agent serve-policy CHECKPOINT`: a transformers checkpoint behind an OpenAI-compatible chat-completions
endpoint, with tool calls and token logprobs, so the `openai` policy (agent rollouts) can sample from the policy
being trained. For small models on one device; large models are served by vLLM (docs/training.md).

The wire protocol is the subset the `openai` policy uses, spelled as vLLM spells it: ``tools``, ``logprobs`` (the
model's own distribution at each sampled token, before temperature and top-p, as vLLM's default raw logprobs),
and vLLM's ``return_token_ids`` (``prompt_token_ids`` on the response, ``token_ids`` on the choice) and
``return_tokens_as_token_ids`` (logprob tokens spelled ``token_id:N``).

Tool calls, in and out, use the Hermes format that Qwen's chat templates and vLLM's ``hermes`` parser use: the
model writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, once per call, anywhere in its reply;
the rest of the reply is its content. A block that is not such JSON stays in the content (the agent then sees no
call, as it would from a server's parser). A tokenizer without a chat template gets FALLBACK_CHAT_TEMPLATE.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

if TYPE_CHECKING:
    import torch

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
# Hermes-style rendering for tokenizers that ship no template (the tiny test model): roles in markers, tools
# listed once up front, an assistant's calls in <tool_call> blocks, as the model is expected to write them.
FALLBACK_CHAT_TEMPLATE = (
    "{% if tools %}<|system|>tools: {{ tools | tojson }}<|end|>\n{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>"
    '{"name": {{ c.function.name | tojson }}, "arguments": {{ c.function.arguments }}}</tool_call>'
    "{% endfor %}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
DEFAULT_MAX_TOKENS = 1024


class ChatRequest(BaseModel):
    """The fields of an OpenAI chat-completions request that this server honours; others are accepted and ignored
    (clients send e.g. ``stream: false``, ``n: 1``), as vLLM does."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(max_length=200)
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=10_000)
    tools: list[dict[str, Any]] | None = Field(None, max_length=256)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)
    max_completion_tokens: int | None = Field(None, ge=1, le=1_000_000)
    logprobs: bool = False
    seed: int | None = None
    stream: Literal[False] = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, OpenAI tool calls) of a reply in the Hermes format."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in TOOL_CALL.finditer(text):
        try:
            call = json.loads(match.group(1))
            name, arguments = call["name"], call.get("arguments", {})
            if not isinstance(name, str):
                raise TypeError(name)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # not a call: it stays in the content
        kept.append(text[last : match.start()])
        last = match.end()
        encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": encoded},
            }
        )
    content = ("".join(kept) + text[last:]).strip()
    return content or None, calls


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind}})


class PolicyServer:
    """One model and tokenizer on one device; requests are served one at a time (generation holds the device)."""

    def __init__(self, checkpoint: Path, model_name: str | None = None, device: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # A training checkpoint (cuda_agent.train.run) holds the policy in policy/; a model folder holds it itself.
        folder = checkpoint / "policy" if (checkpoint / "policy" / "config.json").is_file() else checkpoint
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if not self.tokenizer.chat_template:
            self.tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, use_kernels=False)  # run._causal_lm says why
        # transformers annotates PreTrainedModel.to through a decorator whose stub takes the model as argument 1.
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        self.model_name = model_name or checkpoint.resolve().name
        self.context = int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)
        self.stop_ids = self._stop_ids()
        self._lock = threading.Lock()

    def _stop_ids(self) -> set[int]:
        stop = self.model.generation_config.eos_token_id or self.tokenizer.eos_token_id
        return set(stop if isinstance(stop, list) else [stop] if stop is not None else [])

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        tools: list[dict[Any, Any] | Callable[..., Any]] | None = list(request.tools) if request.tools else None
        text = self.tokenizer.apply_chat_template(
            request.messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def sample(
        self, prompt: list[int], max_new: int, temperature: float, top_p: float, seed: int | None
    ) -> tuple[list[int], list[float], bool]:
        """(token ids, their logprobs under the model, whether a stop token ended it) for one reply."""
        import torch

        generator = torch.Generator(device="cpu")
        if seed is None:
            generator.seed()  # a fresh nondeterministic seed per request
        else:
            generator.manual_seed(seed)
        ids: list[int] = []
        logprobs: list[float] = []
        with self._lock, torch.inference_mode():
            inputs = torch.tensor([prompt], device=self.device)
            past = None
            for _ in range(max_new):
                out = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = out.past_key_values
                log_probs = torch.log_softmax(out.logits[0, -1].float(), dim=-1).cpu()
                token = _choose(log_probs, temperature, top_p, generator)
                ids.append(token)
                logprobs.append(float(log_probs[token]))
                if token in self.stop_ids:
                    return ids, logprobs, True
                inputs = torch.tensor([[token]], device=self.device)
        return ids, logprobs, False

    def complete(self, request: ChatRequest) -> dict[str, Any] | JSONResponse:
        try:
            prompt = self.prompt_ids(request)
        except Exception as exc:  # a template error is the request's (bad message shapes), not the server's
            return _error(400, f"cannot render the conversation: {type(exc).__name__}: {exc}")
        room = self.context - len(prompt)
        if room < 1:
            return _error(400, f"the prompt has {len(prompt)} tokens; this model's context is {self.context}")
        wanted = request.max_completion_tokens or request.max_tokens or DEFAULT_MAX_TOKENS
        ids, logprobs, stopped = self.sample(
            prompt, min(wanted, room), request.temperature, request.top_p, request.seed
        )
        content, calls = parse_tool_calls(str(self.tokenizer.decode(ids, skip_special_tokens=True)))
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if calls else "stop" if stopped else "length",
            "logprobs": None,
        }
        if request.logprobs:
            tokens = self.tokenizer.convert_ids_to_tokens(ids)
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{i}" if request.return_tokens_as_token_ids else token,
                        "logprob": lp,
                        "bytes": list(token.encode()),
                        "top_logprobs": [],
                    }
                    for i, token, lp in zip(ids, tokens, logprobs, strict=True)
                ]
            }
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
            },
        }
        if request.return_token_ids:
            choice["token_ids"] = ids
            response["prompt_token_ids"] = prompt
        return response


def _choose(log_probs: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """Greedy at temperature 0; else a sample at ``temperature`` from the smallest set of mass >= ``top_p``."""
    import torch

    if temperature == 0:
        return int(log_probs.argmax())
    probs = torch.softmax(log_probs / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        outside = sorted_probs.cumsum(0) - sorted_probs >= top_p  # the token that crosses top_p stays in
        probs = probs.scatter(0, order[outside], 0.0)
    return int(torch.multinomial(probs, 1, generator=generator))


def create_server_app(server: PolicyServer) -> FastAPI:
    app = FastAPI(title="cuda-agent policy server")

    @app.post("/v1/chat/completions", response_model=None)
    def chat_completions(request: ChatRequest) -> dict[str, Any] | JSONResponse:
        """An OpenAI chat completion from the served checkpoint."""
        if request.model != server.model_name:
            return _error(404, f"model {request.model!r} is not served here; this server serves {server.model_name!r}")
        return server.complete(request)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        """The one model served."""
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "owned_by": "cuda-agent"}]}

    return app


def serve(checkpoint: Path, *, host: str, port: int, model_name: str | None, device: str | None) -> None:
    import uvicorn

    server = PolicyServer(checkpoint, model_name, device)
    uvicorn.run(create_server_app(server), host=host, port=port, log_level="info")
