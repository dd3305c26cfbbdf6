"""Compile a candidate, then judge it against a problem: the one flow behind `cuda-agent verify`, the agent's
`verify` tool and (for a candidate not compiled yet) the evaluate job.

Where the work runs is the caller's choice of ``backend``: in this process (``LocalBackend``) or as compile and
eval jobs (``JobBackend``, so the caller needs no GPU). The evaluation decides the reward; nothing here changes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from cuda_agent.contracts.candidate import CandidateSource
from cuda_agent.contracts.common import CompileStatus
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.contracts.eval import EvalOptions, EvalRequest, EvalResult, ProfileRequest, ProfileResult

if TYPE_CHECKING:  # the job layer (database models) is loaded only when a job backend runs one
    from cuda_agent.jobs.registry import JobSpec, RequestT, ResultT


class VerifyBackend(Protocol):
    def compile(self, request: CompileRequest) -> CompileResult: ...

    def evaluate(self, request: EvalRequest) -> EvalResult: ...


def eval_request(
    problem_source: str, candidate: CandidateSource, artifact_key: str | None, options: EvalOptions
) -> EvalRequest:
    """The request judging ``candidate``; ``options`` may be any model that carries the evaluation options (a
    rollout config, another request): only those fields are taken."""
    return EvalRequest(
        problem_source=problem_source,
        candidate=candidate,
        artifact_key=artifact_key,
        **options.model_dump(include=set(EvalOptions.model_fields)),
    )


def verify_candidate(
    problem_source: str,
    candidate: CandidateSource,
    options: EvalOptions,
    backend: VerifyBackend,
    *,
    compiled: CompileResult | None = None,
) -> tuple[CompileResult, EvalResult | None]:
    """(build, verdict): the verdict is None when the candidate does not compile (a build that failed in the sandbox
    included: there is nothing to judge). Pass ``compiled`` to judge a build made earlier without compiling again."""
    if compiled is None:
        compiled = backend.compile(CompileRequest(candidate=candidate, device=options.device))
    if compiled.status is not CompileStatus.OK:
        return compiled, None
    return compiled, backend.evaluate(eval_request(problem_source, candidate, compiled.artifact_key, options))


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

    def _run(self, job: JobSpec[RequestT, ResultT], request: RequestT) -> ResultT:
        from cuda_agent.jobs import run_to_result

        # JobFailed is an infrastructure fault, not the candidate's: tools report it as such, never as -1.
        return run_to_result(job, request, timeout_s=self.timeout_s, tenant=self.tenant)

    def compile(self, request: CompileRequest) -> CompileResult:
        from cuda_agent.jobs.registry import COMPILE_JOB

        return self._run(COMPILE_JOB, request)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        from cuda_agent.jobs.registry import EVALUATE_JOB

        return self._run(EVALUATE_JOB, request)

    def profile(self, request: ProfileRequest) -> ProfileResult:
        from cuda_agent.jobs.registry import PROFILE_JOB

        return self._run(PROFILE_JOB, request)
