"""Tools that build and judge the candidate in the workspace: compile, verify and profile, and the text they show.

They run through the host, which verifies against its own copy of the problem: nothing the agent writes into the
workspace can change what the candidate is checked against.
"""

from __future__ import annotations

from typing import Any

from cuda_agent.agent.tools.base import INFRA_NOTE, Tool, ToolError, ToolHost, truncate
from cuda_agent.contracts.common import CompileStatus, Device, EvalStatus
from cuda_agent.contracts.compile import CompileResult
from cuda_agent.contracts.eval import EvalResult


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

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        return format_compile(host.compile(host.workspace.candidate(host.config.form)))


class VerifyTool(Tool):
    name = "verify"
    description = (
        "Compile, check correctness against the reference problem on random inputs, and time the candidate. "
        "Returns the verdict, the reward and the speedups. The best verified candidate so far is kept."
    )

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        compiled, result = host.verify(host.workspace.candidate(host.config.form))
        if result is None:
            return format_compile(compiled) + "\nverify: not run, the candidate does not compile"
        return format_eval(result)


class ProfileTool(Tool):
    name = "profile"
    description = "Profile the candidate's kernels (Nsight Compute): per-kernel metrics and a checklist of fixes."

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        if host.config.device is not Device.CUDA:
            raise ToolError("profiling needs a CUDA device; this rollout runs on the CPU")
        compiled, result = host.profile(host.workspace.candidate(host.config.form))
        if result is None:
            return format_compile(compiled) + "\nprofile: not run, the candidate does not compile"
        head = f"profile: {'ok' if result.ok else 'failed'}" + (f" — {result.message}" if result.message else "")
        return "\n".join([head, result.report, *result.checklist]).strip()
