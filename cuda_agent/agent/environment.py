"""The kernel-writing environment: one per rollout, Gym-like ``reset``/``step``/``close``, no service dependencies.

The workspace holds the problem (``model.py``), ``SKILL.md`` and the files the agent writes. The problem the
candidate is verified against is the string this object holds, never the workspace's ``model.py``.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from cuda_agent.agent.backend import ToolBackend
from cuda_agent.agent.problem_spec import describe_problem
from cuda_agent.agent.tools import ToolRegistry, default_tools
from cuda_agent.agent.workspace import MODEL_FILE, SKILL_FILE, Workspace
from cuda_agent.contracts.agent import (
    AssistantTurn,
    BestCandidate,
    ProblemSpec,
    RewardEvent,
    RolloutConfig,
    ToolObservation,
)
from cuda_agent.contracts.candidate import KERNEL_SUFFIXES, KERNELS_DIR, CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.contracts.eval import EvalResult, ProfileRequest, ProfileResult
from cuda_agent.settings import get_settings
from cuda_agent.verify import LocalBackend, verify_candidate
from cuda_agent.workdir.layout import PLATFORM_FILES

log = logging.getLogger(__name__)
# Background builds at once: each is itself parallel (a unit per core), so a few keep a host's cores busy.
PREBUILD_WORKERS = max(1, min(4, (os.cpu_count() or 2) // 4))

SYSTEM_PROMPT = (
    "You are an expert CUDA and C++ performance engineer working in a sandboxed workspace through tools. "
    "Follow SKILL.md. Act only through tool calls; every reply should call at least one tool. "
    "Call `finish` when you are done."
)
NO_TOOL_NUDGE = "No tool was called. Continue with tool calls (compile, verify, ...) or call `finish` when done."
SKIPPED = "not run: finish was called earlier in this turn"
# Package data (pyproject's package-data), so an installed agent embeds the same full contract as a checkout.
AGENT_DOCS = resources.files("cuda_agent.agent") / "docs"


@dataclass
class StepResult:
    observations: list[ToolObservation]
    messages: list[dict[str, Any]] = field(default_factory=list)  # to append to the conversation
    reward_events: list[RewardEvent] = field(default_factory=list)
    done: bool = False


def render_skill(config: RolloutConfig) -> str:
    if config.form is CandidateForm.WORKDIR:
        # The released CUDA Agent environment's layout, for policies trained in it: its own skill text.
        return (AGENT_DOCS / "workdir_skill.md").read_text(encoding="utf-8").format(device=config.device.value)
    template = (AGENT_DOCS / "skill_template.md").read_text(encoding="utf-8")
    contract = (AGENT_DOCS / "candidate_contract.md").read_text(encoding="utf-8")
    project = config.form is CandidateForm.PROJECT
    return template.format(
        device=config.device.value,
        form=config.form.value,
        kernel_files=", ".join(f"`{KERNELS_DIR}/*{suffix}`" for suffix in KERNEL_SUFFIXES)
        if project
        else "inline sources inside `model_new.py`",
        kernel_note=" and `kernels/*`" if project else "",
        contract=contract,
    )


class KernelEnv:
    """One rollout's environment; the tools' ``ToolHost``."""

    def __init__(
        self,
        problem_source: str,
        *,
        config: RolloutConfig | None = None,
        backend: ToolBackend | None = None,
        tools: ToolRegistry | None = None,
        workspace_dir: Path | None = None,
        env_id: str | None = None,
        keep_workspace: bool = False,
    ) -> None:
        self.id = env_id or uuid.uuid4().hex
        self.problem_source = problem_source
        self.config = config or RolloutConfig()
        self.backend: ToolBackend = backend or LocalBackend()
        self.tools = tools or default_tools()
        self.workspace = Workspace(workspace_dir or get_settings().workspaces_dir / self.id)
        self.keep_workspace = keep_workspace
        self.turn = 0  # index of the step being run, as in TurnRecord.index
        self.todos: list[dict[str, str]] = []
        self.best: BestCandidate | None = None
        self.finished = False
        self.finish_summary = ""
        self._events: list[RewardEvent] = []
        self._compiled: dict[str, CompileResult] = {}
        self._prebuilds: ThreadPoolExecutor | None = None

    # Gym-like interface -------------------------------------------------------------------------------------

    def reset(self) -> list[dict[str, Any]]:
        """Create the workspace; return the opening conversation (system prompt, then skill and problem)."""
        self.workspace.create()
        skill = render_skill(self.config)
        self.workspace.write_text(MODEL_FILE, self.problem_source)
        self.workspace.write_text(SKILL_FILE, skill)
        if self.config.form is not CandidateForm.KERNELBENCH:
            (self.workspace.root / KERNELS_DIR).mkdir()
        if self.config.form is CandidateForm.WORKDIR:
            for name, text in PLATFORM_FILES.items():  # to read: the build uses the platform's own copies
                self.workspace.write_text(name, text)
        user = f"{skill}\n\n## The problem (`{MODEL_FILE}`)\n```python\n{self.problem_source}\n```"
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def step(self, action: AssistantTurn) -> StepResult:
        """Run the action's tool calls in order; a `finish` call ends the episode after the calls before it."""
        self._events = []
        observations: list[ToolObservation] = []
        for call in action.tool_calls:
            if self.finished:
                # Calls after `finish` are answered so that the conversation stays well-formed, but not run.
                observations.append(ToolObservation(tool_call_id=call.id, name=call.name, content=SKIPPED, ok=False))
                continue
            observations.append(self.tools.call(self, call))
        messages: list[dict[str, Any]] = [
            {"role": "tool", "tool_call_id": o.tool_call_id, "content": o.content} for o in observations
        ]
        if not action.tool_calls:
            messages.append({"role": "user", "content": NO_TOOL_NUDGE})
        self.turn += 1
        return StepResult(observations=observations, messages=messages, reward_events=self._events, done=self.finished)

    def close(self) -> None:
        if self._prebuilds is not None:  # queued builds are dropped; running ones finish into the cache
            self._prebuilds.shutdown(wait=False, cancel_futures=True)
        if not self.keep_workspace:
            self.workspace.remove()

    def prebuild(self, candidates: Sequence[CandidateSource]) -> list[Future[None]]:
        """Build candidates a policy means to try later, in the background: their builds land in the compile cache,
        so compiling one of them then is a cache hit rather than a build on the rollout's clock. Nothing is
        recorded: a build nobody asked for is not an action of the policy's."""
        if self._prebuilds is None:
            self._prebuilds = ThreadPoolExecutor(PREBUILD_WORKERS, thread_name_prefix=f"prebuild-{self.id[:8]}")
        device = self.config.device
        return [self._prebuilds.submit(self._prebuild, CompileRequest(candidate=c, device=device)) for c in candidates]

    def _prebuild(self, request: CompileRequest) -> None:
        try:
            self.backend.compile(request)
        except Exception:  # costs the later compile its head start, nothing else
            log.warning("background build of candidate %s failed", request.candidate.key, exc_info=True)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.tools.schemas()

    @cached_property
    def problem_spec(self) -> ProblemSpec:
        """The problem as data (shapes, dtypes, device, tolerance) for policies, so none parses the prompt; worked
        out on first use, in a sandbox (a few seconds: the child imports torch)."""
        return describe_problem(self.problem_source, self.config.device, self.config.tolerance)

    # The ToolHost protocol (tools.base) ------------------------------------------------------------------------

    def compile(self, candidate: CandidateSource) -> CompileResult:
        """Compile, reusing the result for an unchanged candidate so verify after compile costs no second build."""
        key = candidate.key
        if key not in self._compiled:
            result = self.backend.compile(CompileRequest(candidate=candidate, device=self.config.device))
            self._events.append(
                RewardEvent(
                    turn=self.turn,
                    kind="compile",
                    status=result.status.value,
                    message=result.message,
                    candidate_key=key,
                )
            )
            self._compiled = {key: result}  # only the latest: older candidates are not compiled again anyway
        return self._compiled[key]

    def verify(self, candidate: CandidateSource) -> tuple[CompileResult, EvalResult | None]:
        compiled, result = verify_candidate(
            self.problem_source, candidate, self.config, self.backend, compiled=self.compile(candidate)
        )
        if result is None:
            return compiled, None
        # The evaluation decided the reward (None on a sandbox error): the event carries it as it is.
        self._events.append(
            RewardEvent(
                turn=self.turn,
                kind="verify",
                status=result.status.value,
                reward=result.reward,
                speedup_vs_eager=result.speedup_vs_eager,
                speedup_vs_compile=result.speedup_vs_compile,
                message=result.message,
                candidate_key=candidate.key,
            )
        )
        if result.reward is not None and (self.best is None or _rank(result) > _rank(self.best.result)):
            self.best = BestCandidate(turn=self.turn, candidate=candidate, result=result)
        return compiled, result

    def profile(self, candidate: CandidateSource) -> tuple[CompileResult, ProfileResult | None]:
        compiled = self.compile(candidate)
        if compiled.status is not CompileStatus.OK:
            return compiled, None
        request = ProfileRequest(
            problem_source=self.problem_source, candidate=candidate, artifact_key=compiled.artifact_key
        )
        return compiled, self.backend.profile(request)

    def finish(self, summary: str) -> None:
        self.finished = True
        self.finish_summary = summary


def _rank(result: EvalResult) -> tuple[float, float]:
    return (result.reward if result.reward is not None else float("-inf"), result.speedup_vs_eager or 0.0)
