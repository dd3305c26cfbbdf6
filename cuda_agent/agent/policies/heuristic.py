"""The `heuristic` policy: the embedded kernel author (cuda_agent.author) acting through the agent's tools.

No LLM. Bound to the environment, it takes the problem as data (``env.problem_spec``: source, device), has the
author capture, plan and emit it in a sandboxed child (the problem's code is the tenant's), then writes each
variant with `write_file` and runs `verify` while its time budget lasts, and calls `finish`. Its rollouts are
ordinary trajectories, reward events included; the environment keeps the best verified variant. A problem holding
an operation the author cannot express ends at once with the summary "unsupported: <op>" and no candidate: there
is no PyTorch fallback.
"""

from __future__ import annotations

import json
from typing import Any

from cuda_agent.author import Search, author_sandboxed
from cuda_agent.author.search import DEFAULT_BUDGET_S, Trial
from cuda_agent.contracts.agent import AssistantTurn, ToolCall
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.eval.tolerance import admits_tf32

# Its kernels are .cu files with extern "C" launchers, which the kernelbench form (sources inline in model_new.py)
# has no place for.
_NO_KERNELBENCH_FORM = (
    "the kernel author writes the project and workdir forms (kernels in kernels/*.cu), not the kernelbench form: "
    "run it with form project (the default) or workdir"
)


class HeuristicPolicy:
    name = "heuristic"
    model = None

    def __init__(self, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.budget_s = float(budget_s)
        self._step = 0
        self._env: Any = None
        self._search: Search | None = None
        self._label = ""

    def bind(self, env: Any) -> None:
        """The rollout loop hands over the environment before the first turn."""
        self._env = env

    def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        step = self._step
        self._step += 1
        if self._search is None:
            return self._start(step)
        trial = self._record(conversation)
        return self._next(step, f"{self._label}: {'correct' if trial.correct else 'not correct'}")

    def closing_note(self, conversation: list[dict[str, Any]]) -> str:
        """The search so far, for a rollout the loop ends before this policy finishes (its wall clock ran out
        during a variant's verification): every variant's figure, the last one's verdict included."""
        if self._search is None or not self._label:
            return ""
        self._record(conversation)
        return self._summary()

    def _record(self, conversation: list[dict[str, Any]]) -> Trial:
        """What the verify tool said about the variant last written (the conversation's last message)."""
        assert self._search is not None
        last = conversation[-1].get("content") or "" if conversation and conversation[-1]["role"] == "tool" else ""
        return self._search.record(self._label, last)

    def _summary(self) -> str:
        assert self._search is not None
        trials = self._search.trials
        best = self._search.best()
        summary = (
            f"kernel author: best variant {best.label} ({best.median_ms} ms) of {len(trials)} tried"
            if best
            else f"kernel author: no variant verified correct ({len(trials)} tried)"
        )
        # Every variant's figure, in the order tried: what a benchmark's table keeps of the search (which layouts and
        # caches pay off where), not only its winner.
        figures = [f"{t.label} = {f'{t.median_ms} ms' if t.correct else f'not correct ({t.why})'}" for t in trials]
        return f"{summary}; tried: {'; '.join(figures)}"

    def _start(self, step: int) -> AssistantTurn:
        if self._env is None:
            return _turn(step, [("finish", {"summary": "the heuristic policy reads the problem from its environment; "
                                                       "run it in the rollout loop, which binds one"})])  # fmt: skip
        config = self._env.config
        if config.form is CandidateForm.KERNELBENCH:
            return _turn(step, [("finish", {"summary": _NO_KERNELBENCH_FORM})])
        spec = self._env.problem_spec
        form = config.form  # project or workdir (whose rules forbid the embedded reference: written as such)
        tf32 = admits_tf32(config.judged_tolerance(form))
        authored = author_sandboxed(spec.source, spec.device.value, tf32, form.value)
        if authored.unsupported:
            return _turn(step, [("finish", {"summary": f"unsupported: {authored.unsupported}"})])
        budget = self.budget_s
        wall_clock = self._env.config.wall_clock_s
        if wall_clock is not None:  # leave a fifth of the rollout's limit for the last variant's verification
            budget = min(budget, 0.8 * wall_clock)
        self._search = Search(authored, budget_s=budget)
        # The variants after the first build while the first is verified: each verify then starts from the cache.
        later = [CandidateSource(form=form, files=files) for _, files in authored.variants[1:]]
        self._env.prebuild(later)
        return self._next(step, "Plan:\n" + authored.plan)

    def _next(self, step: int, note: str) -> AssistantTurn:
        assert self._search is not None
        following = self._search.next_files()
        if following is None:
            return _turn(step, [("finish", {"summary": self._summary()})], note)
        self._label, files = following
        calls = [("write_file", {"path": path, "content": text}) for path, text in files.items()]
        return _turn(step, [*calls, ("verify", {})], f"{note}\nNext: {self._label}")


def _turn(step: int, calls: list[tuple[str, dict[str, Any]]], content: str | None = None) -> AssistantTurn:
    return AssistantTurn(
        content=content,
        tool_calls=[
            ToolCall(id=f"heuristic_{step}_{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ],
    )
