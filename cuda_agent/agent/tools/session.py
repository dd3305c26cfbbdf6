"""Tools about the session rather than the code: the agent's plan (todo list) and ending the rollout."""

from __future__ import annotations

from typing import Any, ClassVar

from cuda_agent.agent.tools.base import Tool, ToolError, ToolHost, string_param
from cuda_agent.agent.tools.kernel import format_eval

TODO_MARKS = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}


class TodoWriteTool(Tool):
    name = "todo_write"
    description = "Replace your todo list (plan). Each item has content and status pending|in_progress|done."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": list(TODO_MARKS)},
                    },
                    "required": ["content", "status"],
                },
            }
        },
        "required": ["todos"],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        todos: list[dict[str, str]] = []
        for i, item in enumerate(args["todos"], start=1):
            if not isinstance(item, dict) or not isinstance(item.get("content"), str):
                raise ToolError(f"todo {i}: needs a string content")
            status = item.get("status", "pending")
            if status not in TODO_MARKS:
                raise ToolError(f"todo {i}: status must be pending, in_progress or done, got {status!r}")
            todos.append({"content": item["content"], "status": status})
        host.todos = todos
        if not todos:
            return "cleared"
        return "todo list:\n" + "\n".join(f"{TODO_MARKS[t['status']]} {t['content']}" for t in todos)


class FinishTool(Tool):
    name = "finish"
    description = "End the session. The best verified candidate so far is returned, not necessarily the last one."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"summary": string_param("What you did and why the result is correct and fast.")},
        "required": [],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        host.finish(args.get("summary", ""))
        best = host.best
        if best is None:
            return "finished without a verified candidate"
        return f"finished; best candidate from turn {best.turn}: {format_eval(best.result).splitlines()[0]}"
