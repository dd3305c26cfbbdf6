"""How the environment reaches compilation, verification and profiling.

The environment only knows this protocol. The default backend calls the library functions in this process;
the job layer supplies one that goes through the services' queues, so a rollout worker needs no GPU.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel

from cuda_agent.contracts.common import JobKind
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.contracts.eval import EvalRequest, EvalResult, ProfileRequest, ProfileResult


class ToolBackend(Protocol):
    def compile(self, request: CompileRequest) -> CompileResult: ...

    def evaluate(self, request: EvalRequest) -> EvalResult: ...

    def profile(self, request: ProfileRequest) -> ProfileResult: ...


class LocalBackend:
    """In-process compile/eval/profile (cuda_agent.compile and cuda_agent.eval)."""

    def compile(self, request: CompileRequest) -> CompileResult:
        # Imported here so that the agent package imports without the compile/eval stacks (and torch).
        from cuda_agent.compile import compile_candidate

        return compile_candidate(request)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        from cuda_agent.eval import evaluate

        return evaluate(request)

    def profile(self, request: ProfileRequest) -> ProfileResult:
        from cuda_agent.eval import profile_candidate

        return profile_candidate(request)


class JobBackend:
    """Compile/eval/profile as jobs: through the `compile`, `eval` and `profile` queues when a broker is configured
    (so a rollout worker needs no GPU), in-process on the embedded default. Either way each call leaves a job and
    a result row in the database."""

    def __init__(self, timeout_s: float = 3600.0, tenant: str | None = None) -> None:
        self.timeout_s = timeout_s
        self.tenant = tenant  # the rollout's tenant owns its compile/eval jobs and so the artifacts they build

    def _run(self, kind: JobKind, request: BaseModel) -> dict[str, Any]:
        from cuda_agent.jobs import run_to_result

        # JobFailed is an infrastructure fault, not the candidate's: tools report it as such, never as -1.
        return run_to_result(kind, request, timeout_s=self.timeout_s, tenant=self.tenant)

    def compile(self, request: CompileRequest) -> CompileResult:
        return CompileResult.model_validate(self._run(JobKind.COMPILE, request))

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return EvalResult.model_validate(self._run(JobKind.EVALUATE, request))

    def profile(self, request: ProfileRequest) -> ProfileResult:
        return ProfileResult.model_validate(self._run(JobKind.PROFILE, request))
