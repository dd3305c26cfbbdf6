"""A local OpenAI-compatible chat-completions server that replays a script, for tests.

It is a real HTTP server (stdlib, one thread per request) on 127.0.0.1 speaking the wire protocol the `openai`
SDK and vLLM use: tool_calls, finish_reason, usage, logprobs, and vLLM's ``return_token_ids`` extras. Tokens are
UTF-8 bytes of a fixed chat rendering, so prompt ids of turn k+1 extend prompt + completion ids of turn k exactly
like a real server's would.

    with FakeOpenAIServer([reply(tool("write_file", path="a", content="x")), reply("done")]) as server:
        OpenAIPolicy(base_url=server.base_url, model="fake", ...)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeReply:
    content: str | None = None
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, raw JSON arguments)
    finish_reason: str | None = None  # None: "tool_calls" when there are calls, else "stop"
    delay_s: float = 0.0


@dataclass
class FakeError:
    status: int
    message: str = "scripted error"


ScriptItem = FakeReply | FakeError | Callable[[dict[str, Any]], "FakeReply | FakeError"]


def tool(name: str, _raw: str | None = None, **arguments: Any) -> tuple[str, str]:
    """A tool call; ``_raw`` sends the arguments text verbatim (to script malformed JSON)."""
    return (name, _raw if _raw is not None else json.dumps(arguments))


def reply(*items: str | tuple[str, str], delay_s: float = 0.0) -> FakeReply:
    """A reply with optional text (str items, joined) and tool calls (tuples from ``tool``)."""
    text = "".join(i for i in items if isinstance(i, str)) or None
    return FakeReply(content=text, tool_calls=[i for i in items if isinstance(i, tuple)], delay_s=delay_s)


def render_message(message: dict[str, Any]) -> str:
    calls = [
        [c["function"]["name"], c["function"]["arguments"]] for c in message.get("tool_calls") or [] if "function" in c
    ]
    body = (message.get("content") or "") + (json.dumps(calls) if calls else "")
    return f"<|{message['role']}|>{body}<|end|>"


def tokenize(text: str) -> list[int]:
    return list(text.encode("utf-8"))


class FakeOpenAIServer:
    def __init__(self, script: list[ScriptItem], then: ScriptItem | None = None, model: str = "fake-model") -> None:
        """``script`` answers requests in order; ``then`` answers every request after it (default: HTTP 400)."""
        self.script = list(script)
        self.then = then
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, body: dict[str, Any]) -> FakeReply | FakeError:
        with self._lock:
            n = len(self.requests)
            self.requests.append(body)
        item = self.script[n] if n < len(self.script) else self.then
        if item is None:
            return FakeError(400, f"fake server script exhausted after {len(self.script)} replies")
        return item(body) if callable(item) else item

    def completion(self, body: dict[str, Any], answer: FakeReply, n: int) -> dict[str, Any]:
        calls = [
            {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(answer.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": answer.content}
        if calls:
            message["tool_calls"] = calls
        prompt_ids = tokenize("".join(render_message(m) for m in body["messages"]))
        completion_ids = tokenize(render_message(message))
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": answer.finish_reason or ("tool_calls" if calls else "stop"),
            "logprobs": None,
        }
        if body.get("logprobs"):
            as_ids = body.get("return_tokens_as_token_ids", False)
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{t}" if as_ids else chr(t),
                        "logprob": -0.01 * (i % 7),
                        "bytes": [t],
                        "top_logprobs": [],
                    }
                    for i, t in enumerate(completion_ids)
                ]
            }
        response: dict[str, Any] = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion_ids),
                "total_tokens": len(prompt_ids) + len(completion_ids),
            },
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = completion_ids
            response["prompt_token_ids"] = prompt_ids
        return response

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                n = len(server.requests)
                answer = server._next(body)
                if isinstance(answer, FakeError):
                    return self._send(answer.status, {"error": {"message": answer.message, "type": "fake_error"}})
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                self._send(200, server.completion(body, answer, n))

        return Handler
