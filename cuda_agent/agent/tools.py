"""The agent's tools, as OpenAI function-calling tools.

Each tool returns text the model can act on. Mistakes of the model (bad arguments, missing files, a path
outside the workspace) raise ``ToolError`` and go back to it as an error text; they never end the rollout.
compile/verify/profile run in our process and read the workspace; verification uses the environment's own copy
of the problem, so nothing the agent writes can change what it is checked against.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

from cuda_agent import safefs
from cuda_agent.agent.workspace import CandidateError, PathError
from cuda_agent.contracts.agent import RewardEvent, ToolCall, ToolObservation
from cuda_agent.contracts.candidate import CandidateSource
from cuda_agent.contracts.common import CompileStatus, Device, EvalStatus
from cuda_agent.contracts.compile import CompileResult
from cuda_agent.contracts.eval import EvalRequest, EvalResult, ProfileRequest

if TYPE_CHECKING:
    from cuda_agent.agent.environment import KernelEnv

# Added to the sandbox's minimal environment; nothing of ours (API keys, database URLs) is passed.
BASH_ENV = {"CUDA_HOME": "/usr/local/cuda"}
# Quotas of one bash call over the whole workspace (all files together) and all its processes (tmpfs included).
BASH_DISK_BYTES = 2 * 1024**3
BASH_MEMORY_BYTES = 8 * 1024**3
READ_LINES_DEFAULT = 2000
GREP_MAX_MATCHES = 200
GLOB_MAX_PATHS = 500
GREP_MAX_FILE_BYTES = 8 * 1024 * 1024
INFRA_NOTE = " (infrastructure error, not a verdict on your code: retry later)"


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


def _check_args(schema: dict[str, Any], args: dict[str, Any]) -> None:
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
    def run(self, env: KernelEnv, args: dict[str, Any]) -> str: ...


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

    def call(self, env: KernelEnv, call: ToolCall) -> ToolObservation:
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
            _check_args(tool.parameters, args)
            content = tool.run(env, args)
            ok = True
        except (ToolError, PathError, CandidateError) as exc:
            content = f"Error: {exc}"
        except Exception as exc:  # a bug in a tool or backend: report it to the model, keep the rollout alive
            content = f"Error: tool {call.name!r} failed internally: {type(exc).__name__}: {exc}"
        content = truncate(content, env.config.tool_output_chars)
        return ToolObservation(
            tool_call_id=call.id, name=call.name, content=content, ok=ok, duration_s=time.monotonic() - start
        )


def _string(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a bash command in the workspace inside a sandbox: the workspace is the only writable directory, "
        "there is no network, the call is time-limited and long output is truncated. Returns exit code, stdout, stderr."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": _string("The command line to run with bash -c.")},
        "required": ["command"],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        from cuda_agent.sandbox import SandboxLimits, SandboxSpec, run_sandboxed

        cfg = env.config
        spec = SandboxSpec(
            argv=["/bin/bash", "-c", args["command"]],
            cwd=env.workspace.root,
            writable_paths=[env.workspace.root],
            env={**BASH_ENV, "HOME": str(env.workspace.root)},
            gpu=False,
            network=False,
            limits=SandboxLimits(
                wall_time_s=cfg.bash_timeout_s,
                cpu_time_s=int(cfg.bash_timeout_s * 2),
                address_space_bytes=8 * 1024**3,
                max_processes=256,
                max_file_bytes=256 * 1024**2,
                max_output_bytes=cfg.tool_output_chars * 4,
                disk_bytes=BASH_DISK_BYTES,
                memory_bytes=BASH_MEMORY_BYTES,
            ),
        )
        result = run_sandboxed(spec)
        if result.sandbox_error:
            return f"bash: the sandbox failed to start{INFRA_NOTE}: {result.sandbox_error}"
        half = cfg.tool_output_chars // 2
        parts = [f"exit code: {result.exit_code}" + (f" (killed by signal {result.signal})" if result.signal else "")]
        if result.timed_out:
            parts.append(f"timed out after {cfg.bash_timeout_s:g} s")
        if result.limit_exceeded == "disk":
            parts.append(f"killed: the workspace passed its disk quota ({BASH_DISK_BYTES // 2**20} MiB); delete files")
        elif result.limit_exceeded == "memory":
            parts.append(f"killed: the command passed its memory quota ({BASH_MEMORY_BYTES // 2**20} MiB)")
        parts.append("stdout:\n" + truncate(_text(result.stdout), half))
        parts.append("stderr:\n" + truncate(_text(result.stderr), half))
        return "\n".join(parts)


def _text(data: str | bytes) -> str:
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data


class ReadFileTool(Tool):
    name = "read_file"
    description = "Read a text file of the workspace, with line numbers. Use offset/limit (lines) for big files."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": _string("Path relative to the workspace."),
            "offset": {"type": "integer", "description": "First line to show, 1-based (default 1)."},
            "limit": {"type": "integer", "description": f"Lines to show (default {READ_LINES_DEFAULT})."},
        },
        "required": ["path"],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        lines = env.workspace.read_text(args["path"]).splitlines()
        offset = max(1, args.get("offset", 1))
        limit = max(1, args.get("limit", READ_LINES_DEFAULT))
        shown = lines[offset - 1 : offset - 1 + limit]
        if not lines:
            return f"{args['path']} is empty"
        body = "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(shown, start=offset))
        last = offset - 1 + len(shown)
        if last < len(lines):
            body += f"\n[showing lines {offset}-{last} of {len(lines)}; pass offset={last + 1} to read on]"
        return body


class WriteFileTool(Tool):
    name = "write_file"
    description = "Create or overwrite a file of the workspace with the given content (parent folders are created)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": _string("Path relative to the workspace."), "content": _string("Full file content.")},
        "required": ["path", "content"],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        env.workspace.write_text(args["path"], args["content"])
        return f"wrote {args['path']} ({len(args['content'].splitlines())} lines)"


class EditFileTool(Tool):
    name = "edit_file"
    description = (
        "Replace exact strings in a workspace file. Each edit's old_string must occur exactly once unless "
        "replace_all is true. Edits apply in order and all-or-nothing."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": _string("Path relative to the workspace."),
            "edits": {
                "type": "array",
                "description": "Replacements to apply in order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "old_string": _string("Exact text to replace, including whitespace."),
                        "new_string": _string("Replacement text."),
                        "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
                    },
                    "required": ["old_string", "new_string"],
                },
            },
        },
        "required": ["path", "edits"],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        path = args["path"]
        text = env.workspace.read_text(path)
        if not args["edits"]:
            raise ToolError("edits is empty; give at least one {old_string, new_string}")
        for i, edit in enumerate(args["edits"], start=1):
            if not isinstance(edit, dict) or not isinstance(edit.get("old_string"), str):
                raise ToolError(f"edit {i}: needs string fields old_string and new_string")
            old, new = edit["old_string"], edit.get("new_string")
            if not isinstance(new, str):
                raise ToolError(f"edit {i}: new_string must be a string")
            if old == "":
                raise ToolError(f"edit {i}: old_string is empty; use write_file to create content")
            count = text.count(old)
            if count == 0:
                raise ToolError(f"edit {i}: old_string not found in {path}; no edit was applied (read the file again)")
            if count > 1 and not edit.get("replace_all", False):
                raise ToolError(
                    f"edit {i}: old_string occurs {count} times in {path}; add surrounding context to make it unique "
                    "or set replace_all; no edit was applied"
                )
            text = text.replace(old, new)
        env.workspace.write_text(path, text)
        return f"applied {len(args['edits'])} edit(s) to {path}"


class GlobTool(Tool):
    name = "glob"
    description = "List workspace files matching a glob pattern such as '**/*.cu' (relative paths, sorted)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"pattern": _string("Glob pattern relative to the workspace.")},
        "required": ["pattern"],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        pattern = args["pattern"]
        try:
            paths = env.workspace.files(pattern)
        except PathError as exc:
            raise ToolError(f"pattern must be relative to the workspace and must not contain '..' ({exc})") from None
        except ValueError as exc:  # pathlib's own complaints about a pattern, e.g. a '**' inside a name
            raise ToolError(f"invalid glob pattern {pattern!r}: {exc}") from None
        if not paths:
            return f"no files match {pattern!r}"
        more = f"\n[{len(paths) - GLOB_MAX_PATHS} more not shown]" if len(paths) > GLOB_MAX_PATHS else ""
        return "\n".join(paths[:GLOB_MAX_PATHS]) + more


class GrepTool(Tool):
    name = "grep"
    description = "Search workspace files for a regular expression; prints path:line:text for each match."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": _string("Python regular expression."),
            "path": _string("File or folder to search, relative to the workspace (default: all)."),
            "glob": _string("Only files whose name matches this glob, e.g. '*.cu'."),
            "ignore_case": {"type": "boolean", "description": "Case-insensitive match."},
        },
        "required": ["pattern"],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        try:
            regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression: {exc}") from None
        base = PurePosixPath(env.workspace.check(args.get("path", "."))).as_posix()
        if base != "." and safefs.exists(env.workspace.root, base):
            files = [base]
        else:
            try:
                files = env.workspace.files("**/*" if base == "." else f"{base}/**/*")
            except ValueError as exc:  # pathlib refuses glob syntax it cannot use, e.g. '**' inside a name
                raise ToolError(f"invalid path {base!r}: {exc}") from None
        name_glob = args.get("glob")
        matches: list[str] = []
        for path in files:
            if name_glob and not fnmatch.fnmatch(PurePosixPath(path).name, name_glob):
                continue
            try:
                text = safefs.read_bytes(env.workspace.root, path, GREP_MAX_FILE_BYTES).decode("utf-8")
            except (UnicodeDecodeError, safefs.UnsafePath):
                continue  # binary files (built objects), big files and whatever changed under us are not searched
            for n, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    matches.append(f"{path}:{n}:{line}")
                    if len(matches) >= GREP_MAX_MATCHES:
                        return "\n".join(matches) + f"\n[stopped at {GREP_MAX_MATCHES} matches; narrow the search]"
        return "\n".join(matches) if matches else "no matches"


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
                        "status": {"type": "string", "enum": ["pending", "in_progress", "done"]},
                    },
                    "required": ["content", "status"],
                },
            }
        },
        "required": ["todos"],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        todos: list[dict[str, str]] = []
        for i, item in enumerate(args["todos"], start=1):
            if not isinstance(item, dict) or not isinstance(item.get("content"), str):
                raise ToolError(f"todo {i}: needs a string content")
            status = item.get("status", "pending")
            if status not in ("pending", "in_progress", "done"):
                raise ToolError(f"todo {i}: status must be pending, in_progress or done, got {status!r}")
            todos.append({"content": item["content"], "status": status})
        env.todos = todos
        marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}
        return "todo list:\n" + "\n".join(f"{marks[t['status']]} {t['content']}" for t in todos) if todos else "cleared"


def format_compile(result: CompileResult) -> str:
    infra = INFRA_NOTE if result.status is CompileStatus.SANDBOX_ERROR else ""
    lines = [f"compile: {result.status.value}{infra}" + (f" — {result.message}" if result.message else "")]
    for d in result.diagnostics:
        where = ":".join(str(x) for x in (d.file, d.line, d.column) if x is not None)
        hint = f" (hint: {d.hint})" if d.hint else ""
        lines.append(f"{d.severity}: {where + ': ' if where else ''}{d.message}{hint}")
    for r in result.resources:
        lines.append(
            f"kernel {r.kernel}: registers={r.registers} shared={r.shared_bytes}B "
            f"spill_stores={r.spill_stores_bytes}B spill_loads={r.spill_loads_bytes}B"
        )
    if result.status is not CompileStatus.OK and not result.diagnostics and result.log:
        lines.append("log:\n" + truncate(result.log, 8000))
    return "\n".join(lines)


def format_eval(result: EvalResult) -> str:
    infra = INFRA_NOTE if result.status is EvalStatus.SANDBOX_ERROR else ""
    lines = [f"verify: {result.status.value}{infra}" + (f" — {result.message}" if result.message else "")]
    lines.append(f"correct: {result.correct} ({result.trials_passed}/{result.trials_run} trials)")
    if result.max_abs_error is not None:
        lines.append(f"max abs error: {result.max_abs_error:.3g}")
    if result.reward is not None:
        lines.append(f"reward: {result.reward:g}")
    if result.speedup_vs_eager is not None:
        lines.append(f"speedup vs eager: {result.speedup_vs_eager:.3f}x")
    if result.speedup_vs_compile is not None:
        lines.append(f"speedup vs torch.compile: {result.speedup_vs_compile:.3f}x")
    if result.candidate_timing is not None:
        lines.append(f"candidate median: {result.candidate_timing.median_ms:.4f} ms")
    lines.extend(f"finding {f.code}: {f.message}" for f in result.findings)
    lines.extend(f"note: {n}" for n in result.notes)
    return "\n".join(lines)


class CompileTool(Tool):
    name = "compile"
    description = "Build the candidate in the workspace (model_new.py and kernels/). Returns diagnostics with hints."

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        candidate = env.workspace.candidate(env.config.form)
        result = env.compile(candidate)
        return format_compile(result)


class VerifyTool(Tool):
    name = "verify"
    description = (
        "Compile, check correctness against the reference problem on random inputs, and time the candidate. "
        "Returns the verdict, the reward and the speedups. The best verified candidate so far is kept."
    )

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        candidate = env.workspace.candidate(env.config.form)
        compiled = env.compile(candidate)
        if compiled.status is not CompileStatus.OK:
            return format_compile(compiled) + "\nverify: not run, the candidate does not compile"
        result = env.verify(candidate, compiled)
        return format_eval(result)


class ProfileTool(Tool):
    name = "profile"
    description = "Profile the candidate's kernels (Nsight Compute): per-kernel metrics and a checklist of fixes."

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        if env.config.device is not Device.CUDA:
            raise ToolError("profiling needs a CUDA device; this rollout runs on the CPU")
        candidate = env.workspace.candidate(env.config.form)
        compiled = env.compile(candidate)
        if compiled.status is not CompileStatus.OK:
            return format_compile(compiled) + "\nprofile: not run, the candidate does not compile"
        result = env.backend.profile(
            ProfileRequest(problem_source=env.problem_source, candidate=candidate, artifact_key=compiled.artifact_key)
        )
        head = f"profile: {'ok' if result.ok else 'failed'}" + (f" — {result.message}" if result.message else "")
        return "\n".join([head, result.report, *result.checklist]).strip()


class FinishTool(Tool):
    name = "finish"
    description = "End the session. The best verified candidate so far is returned, not necessarily the last one."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"summary": _string("What you did and why the result is correct and fast.")},
        "required": [],
    }

    def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
        env.finished = True
        env.finish_summary = args.get("summary", "")
        if env.best is None:
            return "finished without a verified candidate"
        return f"finished; best candidate from turn {env.best.turn}: {format_eval(env.best.result).splitlines()[0]}"


def default_tools() -> ToolRegistry:
    return ToolRegistry(
        [
            BashTool(),
            ReadFileTool(),
            WriteFileTool(),
            EditFileTool(),
            GlobTool(),
            GrepTool(),
            TodoWriteTool(),
            CompileTool(),
            VerifyTool(),
            ProfileTool(),
            FinishTool(),
        ]
    )


def eval_request(env: KernelEnv, candidate: CandidateSource, artifact_key: str | None) -> EvalRequest:
    cfg = env.config
    return EvalRequest(
        problem_source=env.problem_source,
        candidate=candidate,
        artifact_key=artifact_key,
        device=cfg.device,
        tolerance=cfg.tolerance,
        correctness_trials=cfg.correctness_trials,
        timing_trials=cfg.timing_trials,
        warmup=cfg.warmup,
        allow_torch_compute=cfg.allow_torch_compute,
        measure_baselines=cfg.measure_baselines,
    )


def reward_event(turn: int, result: EvalResult) -> RewardEvent:
    return RewardEvent(
        turn=turn,
        kind="verify",
        status=result.status.value,
        reward=None if result.status is EvalStatus.SANDBOX_ERROR else result.reward,
        speedup_vs_eager=result.speedup_vs_eager,
        speedup_vs_compile=result.speedup_vs_compile,
        message=result.message,
    )
