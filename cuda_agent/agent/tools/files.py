"""Tools over the workspace's files: read, write, edit, glob and grep. Every path goes through the workspace, which
refuses anything outside it and never follows a link the agent's bash left behind."""

from __future__ import annotations

import fnmatch
import re
from pathlib import PurePosixPath
from typing import Any, ClassVar

from cuda_agent import safefs
from cuda_agent.agent.tools.base import Tool, ToolError, ToolHost, string_param
from cuda_agent.agent.workspace import PathError

READ_LINES_DEFAULT = 2000
GREP_MAX_MATCHES = 200
GLOB_MAX_PATHS = 500
GREP_MAX_FILE_BYTES = 8 * 1024 * 1024
PATH_PARAM = string_param("Path relative to the workspace.")


class ReadFileTool(Tool):
    name = "read_file"
    description = "Read a text file of the workspace, with line numbers. Use offset/limit (lines) for big files."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": PATH_PARAM,
            "offset": {"type": "integer", "description": "First line to show, 1-based (default 1)."},
            "limit": {"type": "integer", "description": f"Lines to show (default {READ_LINES_DEFAULT})."},
        },
        "required": ["path"],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        lines = host.workspace.read_text(args["path"]).splitlines()
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
        "properties": {"path": PATH_PARAM, "content": string_param("Full file content.")},
        "required": ["path", "content"],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        host.workspace.write_text(args["path"], args["content"])
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
            "path": PATH_PARAM,
            "edits": {
                "type": "array",
                "description": "Replacements to apply in order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "old_string": string_param("Exact text to replace, including whitespace."),
                        "new_string": string_param("Replacement text."),
                        "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
                    },
                    "required": ["old_string", "new_string"],
                },
            },
        },
        "required": ["path", "edits"],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        path = args["path"]
        text = host.workspace.read_text(path)
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
        host.workspace.write_text(path, text)
        return f"applied {len(args['edits'])} edit(s) to {path}"


class GlobTool(Tool):
    name = "glob"
    description = "List workspace files matching a glob pattern such as '**/*.cu' (relative paths, sorted)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"pattern": string_param("Glob pattern relative to the workspace.")},
        "required": ["pattern"],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        pattern = args["pattern"]
        try:
            paths = host.workspace.files(pattern)
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
            "pattern": string_param("Python regular expression."),
            "path": string_param("File or folder to search, relative to the workspace (default: all)."),
            "glob": string_param("Only files whose name matches this glob, e.g. '*.cu'."),
            "ignore_case": {"type": "boolean", "description": "Case-insensitive match."},
        },
        "required": ["pattern"],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        try:
            regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression: {exc}") from None
        workspace = host.workspace
        base = PurePosixPath(workspace.check(args.get("path", "."))).as_posix()
        if base != "." and safefs.exists(workspace.root, base):
            files = [base]
        else:
            try:
                files = workspace.files("**/*" if base == "." else f"{base}/**/*")
            except ValueError as exc:  # pathlib refuses glob syntax it cannot use, e.g. '**' inside a name
                raise ToolError(f"invalid path {base!r}: {exc}") from None
        name_glob = args.get("glob")
        matches: list[str] = []
        for path in files:
            if name_glob and not fnmatch.fnmatch(PurePosixPath(path).name, name_glob):
                continue
            try:
                text = safefs.read_bytes(workspace.root, path, GREP_MAX_FILE_BYTES).decode("utf-8")
            except (UnicodeDecodeError, safefs.UnsafePath):
                continue  # binary files (built objects), big files and whatever changed under us are not searched
            for n, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    matches.append(f"{path}:{n}:{line}")
                    if len(matches) >= GREP_MAX_MATCHES:
                        return "\n".join(matches) + f"\n[stopped at {GREP_MAX_MATCHES} matches; narrow the search]"
        return "\n".join(matches) if matches else "no matches"
