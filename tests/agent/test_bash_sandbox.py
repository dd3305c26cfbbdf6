"""The agent's bash runs in a real bubblewrap sandbox: no network, no data dir, no secrets, only its workspace."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cuda_agent.agent import KernelEnv
from cuda_agent.contracts.agent import ToolCall
from cuda_agent.contracts.candidate import CandidateForm
from cuda_agent.contracts.common import CompileStatus, EvalStatus
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.contracts.eval import EvalRequest, EvalResult
from cuda_agent.settings import get_settings
from cuda_agent.verify import LocalBackend
from tests.agent.agent_fixtures import PROBLEM, make_env
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.sandbox


@pytest.fixture
def env() -> Iterator[KernelEnv]:
    env = make_env(bash_timeout_s=20)
    env.reset()
    yield env
    env.close()


def bash(env: KernelEnv, command: str) -> str:
    obs = env.tools.call(env, ToolCall(id="b", name="bash", arguments=json.dumps({"command": command})))
    assert obs.ok, obs.content
    assert "sandbox failed to start" not in obs.content, obs.content
    return obs.content


def test_workspace_is_writable_and_cwd(env: KernelEnv) -> None:
    out = bash(env, "pwd && echo hello > made.txt && cat model.py | head -1")
    assert "exit code: 0" in out and "import torch" in out
    assert (env.workspace.root / "made.txt").read_text() == "hello\n"


def test_no_network(env: KernelEnv, fake_openai: Callable[..., FakeOpenAIServer]) -> None:
    server = fake_openai([])
    # Control: the port is reachable from this process, so a refusal inside the sandbox is the sandbox's doing.
    socket.create_connection(("127.0.0.1", server.port), timeout=3).close()
    out = bash(
        env,
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {server.port}), timeout=3)\"; "
        f"echo rc=$?; (exec 3<>/dev/tcp/127.0.0.1/{server.port}) 2>/dev/null; echo tcp=$?",
    )
    assert "rc=1" in out and "tcp=1" in out
    assert server.requests == []


def test_cannot_read_data_dir_or_secrets(env: KernelEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = get_settings().data_dir
    secret = data_dir / "cuda-agent.db"
    secret.write_text("S3CRET-DB-CONTENT")
    monkeypatch.setenv("CUDA_AGENT_OPENAI_API_KEY", "sk-LEAKED-KEY")
    monkeypatch.setenv("DATABASE_URL", "postgresql://user:pw-LEAKED@db/x")
    out = bash(env, f"cat {secret}")
    assert "exit code: 1" in out and "No such file or directory" in out and "S3CRET" not in out
    # Only the path down to this workspace exists in the sandbox: no other file of the data dir.
    out = bash(env, f"ls -A {data_dir}; ls -A {data_dir / 'workspaces'}")
    assert out.split("stdout:\n")[1].split("stderr:")[0].split() == ["workspaces", env.id]
    out = bash(env, "env")
    assert "LEAKED" not in out and "CUDA_AGENT" not in out


def test_cannot_write_outside_workspace(env: KernelEnv, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    sibling = env.workspace.root.parent / "other-rollout.txt"
    bash(env, f"echo x > {outside}; echo x > {sibling}; echo x > /usr/evil; echo done")
    assert not outside.exists() and not sibling.exists() and not Path("/usr/evil").exists()


def test_reference_problem_is_our_copy(env: KernelEnv) -> None:
    bash(env, "echo 'class Model: pass' > model.py && echo 'class ModelNew: pass' > model_new.py")
    assert env.workspace.read_text("model.py") == "class Model: pass\n"
    requests: list[EvalRequest] = []

    class Recording(LocalBackend):  # records what verify submits instead of building and judging it
        def compile(self, request: CompileRequest) -> CompileResult:
            return CompileResult(status=CompileStatus.OK, cache_key="k")

        def evaluate(self, request: EvalRequest) -> EvalResult:
            requests.append(request)
            return EvalResult(status=EvalStatus.INCORRECT, correct=False, reward=-1.0)

    env.backend = Recording()
    ok, text = tool(env, "verify")
    assert ok and "verify: incorrect" in text, text
    assert [r.problem_source for r in requests] == [PROBLEM]


def test_time_limit_and_truncation() -> None:
    env = make_env(bash_timeout_s=2)
    env.reset()
    try:
        start = time.monotonic()
        out = bash(env, "sleep 30")
        assert "timed out after 2 s" in out and time.monotonic() - start < 15
        out = bash(env, "head -c 100000 /dev/zero | tr '\\0' a")
        assert "cut from the middle" in out and len(out) < 20_000
    finally:
        env.close()


def tool(env: KernelEnv, name: str, **args: object) -> tuple[bool, str]:
    obs = env.tools.call(env, ToolCall(id="t", name=name, arguments=json.dumps(args)))
    return obs.ok, obs.content


def test_links_planted_by_bash_are_never_followed(env: KernelEnv, tmp_path: Path) -> None:
    """bash writes the workspace from inside the sandbox, where a link to a host path is just text; the host-side
    file tools must not follow it (the worker runs as root and would read /etc/shadow or the database)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-91c2")
    bash(
        env,
        f"ln -s {secret} leak.txt && ln -s {tmp_path} dirlink && ln -s /etc/shadow shadow "
        f"&& ln -s {secret} kernels/k.cu && ln -s {secret} model_new.py && echo planted",
    )
    for path in ("leak.txt", "dirlink/secret.txt", "shadow"):
        ok, text = tool(env, "read_file", path=path)
        assert not ok and "symbolic link" in text and "HOST-SECRET" not in text, text
    ok, text = tool(env, "edit_file", path="leak.txt", edits=[{"old_string": "HOST", "new_string": "X"}])
    assert not ok and "symbolic link" in text
    ok, text = tool(env, "write_file", path="dirlink/secret.txt", content="overwritten")
    assert not ok and "symbolic link" in text
    ok, _ = tool(env, "write_file", path="leak.txt", content="replaced")  # the link is replaced, not written through
    assert ok and not (env.workspace.root / "leak.txt").is_symlink()
    assert secret.read_text() == "HOST-SECRET-91c2"
    for name, args in (("grep", {"pattern": "HOST"}), ("glob", {"pattern": "**/*"})):
        ok, text = tool(env, name, **args)
        assert ok and "HOST-SECRET" not in text and "k.cu" not in text and "shadow" not in text, text
    ok, text = tool(env, "compile")
    assert not ok and "model_new.py does not exist (or is not a regular file)" in text
    bash(env, "rm model_new.py && echo 'class ModelNew: pass' > model_new.py")
    assert set(env.workspace.candidate(CandidateForm.PROJECT).files) == {"model_new.py"}


def test_fifos_and_huge_files_left_by_bash_never_hang_or_flood(env: KernelEnv) -> None:
    bash(env, "mkfifo pipe.txt kernels/k.cu && truncate -s 100M big.txt && echo 'class ModelNew: pass' > model_new.py")
    started = time.monotonic()
    ok, text = tool(env, "read_file", path="pipe.txt")
    assert not ok and "not a regular file" in text
    ok, text = tool(env, "read_file", path="big.txt")
    assert not ok and "allowed" in text
    ok, text = tool(env, "grep", pattern="x")
    assert ok
    assert set(env.workspace.candidate(CandidateForm.PROJECT).files) == {"model_new.py"}
    assert time.monotonic() - started < 10


def test_filling_the_disk_from_bash_is_stopped(env: KernelEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    # The quota's size, not its mechanism, is scaled down.
    monkeypatch.setenv("CUDA_AGENT_AGENT_BASH_DISK_BYTES", str(64 * 1024**2))
    get_settings.cache_clear()
    fill = "for i in range(3000):\n    open(f'f{i}', 'wb').write(bytes(1 << 20))\nprint('finished')"
    out = bash(env, f'python3 -c "{fill}"')
    assert "disk quota (64 MiB)" in out and "finished" not in out
