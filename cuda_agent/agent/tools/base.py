"""What every tool shares: the host protocol tools run against, the Tool base class, argument checking, the
registry that turns every failure into an observation, and output truncation.

Tools depend on ``ToolHost`` only, never on the environment class: the environment imports the tools, not the
other way round, and a test or another environment can host them with anything that has these members.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

from cuda_agent.agent.workspace import PathError, Workspace
from cuda_agent.contracts.agent import BestCandidate, RolloutConfig, ToolCall, ToolObservation
from cuda_agent.contracts.candidate import CandidateFileError, CandidateSource
from cuda_agent.contracts.compile import CompileResult
from cuda_agent.contracts.eval import EvalResult, ProfileResult

INFRA_NOTE = " (infrastructure error, not a verdict on your code: retry later)"


class ToolHost(Protocol):
    """The environment as the tools see it."""

    config: RolloutConfig  # tool_output_chars, bash_timeout_s, form and device
    workspace: Workspace
    todos: list[dict[str, str]]

    @property
    def best(self) -> BestCandidate | None: ...

    def compile(self, candidate: CandidateSource) -> CompileResult: ...

    def verify(self, candidate: CandidateSource) -> tuple[CompileResult, EvalResult | None]:
        """Compile, then judge against the host's own copy of the problem; no result when it does not compile."""
        ...

    def profile(self, candidate: CandidateSource) -> tuple[CompileResult, ProfileResult | None]: ...

    def finish(self, summary: str) -> None: ...


class ToolError(Exception):
    """A tool call the model got wrong; the message goes back to it."""


def truncate(text: str, limit: int, keep: str = "middle") -> str:
    """Cut ``text`` to about ``limit`` characters, saying what was cut so the model knows output is missing.

    keep="head" cuts the end, keep="tail" cuts the start, keep="middle" keeps both ends (first errors and the
    final summary of a build are both at the ends).
    """
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "head":
        return f"{text[:limit]}\n[output truncated: last {cut} of {len(text)} characters cut]"
    if keep == "tail":
        return f"[output truncated: first {cut} of {len(text)} characters cut]\n{text[-limit:]}"
    half = limit // 2
    return f"{text[:half]}\n[output truncated: {cut} of {len(text)} characters cut from the middle]\n{text[-half:]}"


def string_param(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def check_args(schema: dict[str, Any], args: dict[str, Any]) -> None:
    """Required keys present, no unknown keys, top-level JSON types right: enough to give the model a precise error."""
    props: dict[str, Any] = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in args]
    if missing:
        raise ToolError(f"missing required argument(s): {', '.join(missing)}")
    unknown = [k for k in args if k not in props]
    if unknown:
        raise ToolError(f"unknown argument(s): {', '.join(unknown)}; expected: {', '.join(props) or 'none'}")
    types: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "array": list,
        "object": dict,
    }
    for key, value in args.items():
        want = props[key].get("type")
        if want not in types:
            continue
        # bool is an int in Python; JSON keeps them apart.
        bad_bool = isinstance(value, bool) and want in ("integer", "number")
        if bad_bool or not isinstance(value, types[want]):
            raise ToolError(f"argument {key!r} must be of JSON type {want}, got {type(value).__name__}")


class Tool(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "required": []}

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @abstractmethod
    def run(self, host: ToolHost, args: dict[str, Any]) -> str: ...


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(f"unknown tool {name!r}; available: {', '.join(self._tools)}") from None

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._tools.values()]

    def call(self, host: ToolHost, call: ToolCall) -> ToolObservation:
        """Run one call; every failure becomes an error observation rather than an exception."""
        start = time.monotonic()
        ok = False
        try:
            tool = self._tools.get(call.name)
            if tool is None:
                raise ToolError(f"unknown tool {call.name!r}; available tools: {', '.join(self._tools)}")
            try:
                args = json.loads(call.arguments or "{}")
            except json.JSONDecodeError as exc:
                raise ToolError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos}); resend") from None
            if not isinstance(args, dict):
                raise ToolError("arguments must be a JSON object")
            check_args(tool.parameters, args)
            content = tool.run(host, args)
            ok = True
        except (ToolError, PathError, CandidateFileError) as exc:
            content = f"Error: {exc}"
        except Exception as exc:  # a bug in a tool or backend: report it to the model, keep the rollout alive
            content = f"Error: tool {call.name!r} failed internally: {type(exc).__name__}: {exc}"
        content = truncate(content, host.config.tool_output_chars)
        return ToolObservation(
            tool_call_id=call.id, name=call.name, content=content, ok=ok, duration_s=time.monotonic() - start
        )
