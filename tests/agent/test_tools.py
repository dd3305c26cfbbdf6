"""File tools, path confinement and the tool registry, on a real workspace."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from cuda_agent.agent import KernelEnv, PathError, Tool, ToolRegistry, default_tools
from cuda_agent.agent.tools import truncate
from cuda_agent.contracts.agent import ToolCall
from cuda_agent.contracts.candidate import CandidateForm
from cuda_agent.settings import get_settings
from tests.agent.agent_fixtures import PROBLEM, make_env


@pytest.fixture
def env() -> Iterator[KernelEnv]:
    env = make_env()
    env.reset()
    yield env
    env.close()


def call(env: KernelEnv, name: str, _raw: str | None = None, **args: Any) -> tuple[bool, str]:
    obs = env.tools.call(env, ToolCall(id="c1", name=name, arguments=_raw if _raw is not None else json.dumps(args)))
    return obs.ok, obs.content


def test_reset_lays_out_workspace_under_settings_dir(env: KernelEnv) -> None:
    root = env.workspace.root
    assert root.parent == get_settings().workspaces_dir.resolve()
    assert (root / "model.py").read_text() == PROBLEM
    skill = (root / "SKILL.md").read_text()
    assert "No PyTorch fallback" in skill and "Candidate contract" in skill
    assert (root / "kernels").is_dir()


def test_close_removes_workspace() -> None:
    env = make_env()
    env.reset()
    root = env.workspace.root
    env.close()
    assert not root.exists()


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "kernels/../../x", ""])
def test_paths_outside_workspace_are_rejected(env: KernelEnv, path: str) -> None:
    ok, text = call(env, "read_file", path=path)
    assert not ok and text.startswith("Error:")
    ok, text = call(env, "write_file", path=path, content="x")
    assert not ok and text.startswith("Error:")


def test_symlink_escape_is_rejected(env: KernelEnv, tmp_path: Any) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("top secret")
    os.symlink(tmp_path, env.workspace.root / "link")
    with pytest.raises(PathError, match="symbolic link"):
        env.workspace.read_text("link/secret.txt")
    ok, text = call(env, "read_file", path="link/secret.txt")
    assert not ok and "top secret" not in text
    ok, _ = call(env, "write_file", path="link/new.txt", content="x")
    assert not ok and not (tmp_path / "new.txt").exists()
    ok, text = call(env, "grep", pattern="secret")
    assert "top secret" not in text
    # A symlinked kernel is never shipped as candidate source.
    (env.workspace.root / "model_new.py").write_text("class ModelNew: pass\n")
    os.symlink(outside, env.workspace.root / "kernels" / "k.cu")
    assert set(env.workspace.candidate(CandidateForm.PROJECT).files) == {"model_new.py"}


def test_write_read_with_offsets(env: KernelEnv) -> None:
    ok, text = call(env, "write_file", path="kernels/a.cu", content="\n".join(f"line {i}" for i in range(1, 11)))
    assert ok and "10 lines" in text
    ok, text = call(env, "read_file", path="kernels/a.cu", offset=3, limit=2)
    assert ok
    assert "     3\tline 3" in text and "     4\tline 4" in text and "line 5\n" not in text
    assert "pass offset=5" in text


def test_edit_file_multi_edit_and_errors(env: KernelEnv) -> None:
    call(env, "write_file", path="k.cu", content="int a = 1;\nint b = 1;\nint c = 2;\n")
    ok, text = call(env, "edit_file", path="k.cu", edits=[{"old_string": "int a", "new_string": "long a"}])
    assert ok, text
    ok, text = call(env, "edit_file", path="k.cu", edits=[{"old_string": "= 1;", "new_string": "= 3;"}])
    assert not ok and "occurs 2 times" in text
    ok, text = call(env, "edit_file", path="k.cu", edits=[{"old_string": "nope", "new_string": "x"}])
    assert not ok and "not found" in text
    # All-or-nothing: the second edit fails, so the first one is not applied either.
    edits = [{"old_string": "int c", "new_string": "int d"}, {"old_string": "missing", "new_string": ""}]
    ok, text = call(env, "edit_file", path="k.cu", edits=edits)
    assert not ok and "edit 2" in text
    assert env.workspace.read_text("k.cu") == "long a = 1;\nint b = 1;\nint c = 2;\n"
    edits = [
        {"old_string": "= 1;", "new_string": "= 3;", "replace_all": True},
        {"old_string": "int c", "new_string": "int d"},
    ]
    ok, text = call(env, "edit_file", path="k.cu", edits=edits)
    assert ok, text
    assert env.workspace.read_text("k.cu") == "long a = 3;\nint b = 3;\nint d = 2;\n"


def test_glob_grep_todo(env: KernelEnv) -> None:
    call(env, "write_file", path="kernels/add.cu", content="__global__ void add_kernel() {}\n")
    call(env, "write_file", path="kernels/add.h", content="void add();\n")
    ok, text = call(env, "glob", pattern="**/*.cu")
    assert ok and text == "kernels/add.cu"
    ok, text = call(env, "grep", pattern="ADD_kernel", ignore_case=True, glob="*.cu")
    assert ok and text == "kernels/add.cu:1:__global__ void add_kernel() {}"
    ok, text = call(env, "grep", pattern="(")
    assert not ok and "invalid regular expression" in text
    ok, text = call(
        env,
        "todo_write",
        todos=[{"content": "write kernel", "status": "done"}, {"content": "verify", "status": "pending"}],
    )
    assert ok and "[x] write kernel" in text and "[ ] verify" in text
    assert env.todos[1] == {"content": "verify", "status": "pending"}


def test_bad_calls_become_error_text(env: KernelEnv) -> None:
    ok, text = call(env, "no_such_tool")
    assert not ok and "unknown tool 'no_such_tool'" in text and "write_file" in text
    ok, text = call(env, "write_file", _raw='{"path": "a.txt", "content": ')
    assert not ok and "not valid JSON" in text
    ok, text = call(env, "write_file", _raw="[1, 2]")
    assert not ok and "JSON object" in text
    ok, text = call(env, "write_file", path="a.txt")
    assert not ok and "missing required argument(s): content" in text
    ok, text = call(env, "write_file", path="a.txt", content=3)
    assert not ok and "'content' must be of JSON type string" in text
    ok, text = call(env, "read_file", path="a.txt", bogus=1)
    assert not ok and "unknown argument(s): bogus" in text
    ok, text = call(env, "verify")
    assert not ok and "model_new.py does not exist" in text


def test_tool_exception_is_reported_not_raised(env: KernelEnv) -> None:
    class Broken(Tool):
        name = "broken"
        description = "always fails"

        def run(self, env: KernelEnv, args: dict[str, Any]) -> str:
            raise RuntimeError("boom")

    env.tools.register(Broken())
    ok, text = call(env, "broken")
    assert not ok and "failed internally: RuntimeError: boom" in text


def test_registry_rejects_duplicates_and_unknown() -> None:
    registry = default_tools()
    assert registry.names() == [
        "bash", "read_file", "write_file", "edit_file", "glob", "grep", "todo_write", "compile", "verify", "profile",
        "finish",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("bash"))
    with pytest.raises(KeyError, match="unknown tool 'nope'"):
        ToolRegistry().get("nope")
    for schema in registry.schemas():
        assert schema["type"] == "function"
        assert schema["function"]["parameters"]["type"] == "object"


def test_truncate_says_which_side_was_cut() -> None:
    text = "a" * 50 + "b" * 50
    assert truncate(text, 200) == text
    assert truncate(text, 10, keep="head").endswith("[output truncated: last 90 of 100 characters cut]")
    assert truncate(text, 10, keep="tail").startswith("[output truncated: first 90 of 100 characters cut]")
    middle = truncate(text, 10)
    assert middle.startswith("aaaaa\n") and middle.endswith("\nbbbbb") and "cut from the middle" in middle


def test_long_tool_output_is_truncated(env: KernelEnv) -> None:
    env.workspace.write_text("big.txt", "x" * 100_000)
    ok, text = call(env, "read_file", path="big.txt")
    assert ok and len(text) < 20_000 and "cut from the middle" in text
