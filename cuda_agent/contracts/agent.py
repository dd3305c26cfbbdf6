"""Contracts of the agent library: policy actions, tool observations and rollout trajectories.

A trajectory is the unit the job layer persists and the trainer reads: the conversation as the model saw it,
each turn's timings and tool results, the reward events of every compile/verify, and, where the serving engine
returned them, token ids and logprobs so RL can score exactly the tokens that were sampled.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, computed_field, field_validator

from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import MAX_NAME_CHARS, MAX_SOURCE_CHARS, Device, RequestModel, TolerancePreset
from cuda_agent.contracts.eval import MAX_EVAL_TIMEOUT_S, EvalOptions, EvalResult

# Token counts a request may ask for (context window, one completion).
MAX_CONTEXT_TOKENS = 2_000_000
MAX_COMPLETION_TOKENS = 262_144


def _now() -> datetime:
    return datetime.now(UTC)


class TerminationReason(StrEnum):
    FINISHED = "finished"  # the agent called `finish`
    MAX_TURNS = "max_turns"
    CONTEXT_EXHAUSTED = "context_exhausted"  # even the truncated conversation no longer fits the budget
    WALL_CLOCK = "wall_clock"
    CANCELLED = "cancelled"
    POLICY_ERROR = "policy_error"  # the policy could not produce an action (non-transient endpoint error, ...)


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str = Field("{}", description="Raw JSON text as the model produced it; may be malformed.")


class TokenUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class AssistantTurn(BaseModel):
    """One action of a policy: optional text plus tool calls, with whatever token data the server returned."""

    content: str | None = None
    reasoning: str | None = Field(None, description="Reasoning text when the server separates it from content.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: TokenUsage | None = None
    token_ids: list[int] | None = Field(None, description="Sampled completion token ids (vLLM extra field).")
    logprobs: list[float] | None = Field(None, description="Logprob of each sampled completion token.")
    prompt_token_ids: list[int] | None = Field(None, description="Prompt token ids as the server tokenized them.")
    model: str | None = None
    agent_role: str | None = Field(None, description="Multi-agent mode: the role that produced this turn.")

    def to_message(self) -> dict[str, Any]:
        """The OpenAI chat message that puts this turn back into the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


class ToolObservation(BaseModel):
    tool_call_id: str
    name: str
    content: str = Field(description="Text returned to the model.")
    ok: bool = Field(description="False when the call itself failed (bad arguments, unknown tool, tool error).")
    duration_s: float = 0.0


class RewardEvent(BaseModel):
    """The outcome of one compile or verify, as the reward signal sees it."""

    turn: int
    kind: str = Field(description="compile | verify")
    status: str
    reward: float | None = Field(None, description="Verify reward; None for compile events and sandbox errors.")
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    message: str = ""
    candidate_key: str | None = Field(
        None, description="Content key of the candidate compiled or verified (GET /v1/candidates/{key})."
    )


class TurnRecord(BaseModel):
    index: int
    assistant: AssistantTurn
    observations: list[ToolObservation] = Field(default_factory=list)
    reward_events: list[RewardEvent] = Field(default_factory=list)
    started_at: datetime = Field(default_factory=_now)
    generation_s: float = 0.0
    tools_s: float = 0.0
    context_tokens: int = Field(0, description="Estimated context size when this turn was generated.")
    truncated_turns: int = Field(0, description="Earlier turns elided from the prompt of this turn.")


class BestCandidate(BaseModel):
    turn: int
    candidate: CandidateSource
    result: EvalResult

    @computed_field  # type: ignore[prop-decorator]
    @property
    def candidate_key(self) -> str:
        """The candidate's content key, as its reward events name it (GET /v1/candidates/{key})."""
        return self.candidate.key


class RolloutConfig(EvalOptions):
    """Limits of one rollout, and how its candidates are judged (the evaluation options, inherited so that they are
    declared once and a rollout's JSON keeps them at the top level); None fields fall back to settings."""

    max_turns: int | None = Field(None, ge=1, le=200, description="None: settings.agent_max_turns.")
    context_tokens: int | None = Field(
        None, ge=1024, le=MAX_CONTEXT_TOKENS, description="None: settings.agent_context_tokens."
    )
    response_reserve_tokens: int = Field(
        4096, ge=0, le=MAX_COMPLETION_TOKENS, description="Context kept free for the next response."
    )
    wall_clock_s: float | None = Field(None, gt=0, le=7 * 86400, description="None: no wall-clock limit.")
    form: CandidateForm = CandidateForm.PROJECT
    bash_timeout_s: float = Field(120.0, gt=0, le=MAX_EVAL_TIMEOUT_S, description="Wall-clock limit of one bash call.")
    tool_output_chars: int = Field(
        16_000, ge=1000, le=1_000_000, description="Tool output beyond this is cut, with a note."
    )


class TensorSpec(BaseModel):
    kind: Literal["tensor"] = "tensor"
    shape: list[int]
    dtype: str = Field(description="torch dtype name without the module, e.g. float32, bfloat16, int64.")


class ScalarSpec(BaseModel):
    kind: Literal["scalar"] = "scalar"
    value: bool | int | float | str | None


class OtherSpec(BaseModel):
    """A value that is neither a tensor nor a scalar (a list, a tuple, an object): its type and a short repr."""

    kind: Literal["other"] = "other"
    type: str
    repr: str


ValueSpec = Annotated[TensorSpec | ScalarSpec | OtherSpec, Field(discriminator="kind")]


class ProblemSpec(BaseModel):
    """The problem as a policy reads it, instead of parsing the prompt: shapes and dtypes come from building the
    reference and calling it once on the meta device, so nothing of its size is allocated."""

    source: str
    device: Device
    tolerance: TolerancePreset
    init_inputs: list[ValueSpec] = Field(default_factory=list, description="What get_init_inputs() returns.")
    inputs: list[ValueSpec] = Field(default_factory=list, description="What get_inputs() returns (one call).")
    outputs: list[ValueSpec] | None = Field(
        None, description="What forward returns (a tuple flattened one level); None when the meta pass failed."
    )
    error: str = Field("", description="Why shapes are missing or partial (the problem's code failed on meta).")


class OpenAIPolicyOptions(BaseModel):
    """What a request may set on the `openai` policy. Where it sends requests and with which key is the operator's
    choice (settings.llm_endpoints): a request names one of the configured endpoints, never a URL or a key."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(
        "default", max_length=64, pattern=r"^[A-Za-z0-9._-]+$", description="A configured endpoint's name."
    )
    model: str | None = Field(
        None, max_length=MAX_NAME_CHARS, description="None: the endpoint's model; else one it allows."
    )
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1, le=MAX_COMPLETION_TOKENS)
    logprobs: bool = True
    return_token_ids: bool = Field(False, description="vLLM extension: token ids of prompt and completion.")
    timeout_s: float = Field(600.0, gt=0, le=3600.0, description="Limit of one chat-completions call.")
    max_retries: int = Field(5, ge=0, le=10)
    backoff_s: float = Field(1.0, ge=0.0, le=60.0)
    max_backoff_s: float = Field(60.0, ge=0.0, le=600.0)


class ReplayPolicyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectory: dict[str, Any] = Field(description="A recorded trajectory (JSON) whose actions are replayed.")


class HeuristicPolicyOptions(BaseModel):
    """The built-in kernel author: how long its variant search may take (within the rollout's wall clock)."""

    model_config = ConfigDict(extra="forbid")

    budget_s: float = Field(180.0, gt=0, le=3600, description="Seconds of variant search per problem.")


class MultiAgentPolicyOptions(OpenAIPolicyOptions):
    """The `multi` policy: the `openai` options of the one endpoint serving every role, and the block length."""

    turns_per_role: int = Field(5, ge=1, le=50, description="Turns each role takes before the next one acts.")


# The options each built-in policy takes from a request. An allow-list: anything else is refused by name.
POLICY_OPTIONS: dict[str, type[BaseModel]] = {
    "openai": OpenAIPolicyOptions,
    "multi": MultiAgentPolicyOptions,
    "replay": ReplayPolicyOptions,
    "heuristic": HeuristicPolicyOptions,
}
# Never taken from a request, whatever the policy: they would send the operator's key to the caller's server.
OPERATOR_ONLY_OPTIONS = ("base_url", "api_key")


class RolloutRequest(RequestModel):
    """One optimize job as the job layer submits it."""

    problem_source: str = Field(
        description="KernelBench problem file: Model, get_inputs, get_init_inputs.", max_length=MAX_SOURCE_CHARS
    )
    problem_id: str | None = Field(None, max_length=MAX_NAME_CHARS)
    policy: str | None = Field(
        None,
        max_length=64,
        description="Registered policy name. None: `openai` where an LLM endpoint with a model is configured, else "
        "`heuristic` (the built-in kernel author, no LLM).",
    )
    policy_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the policy (`openai`: endpoint, model, sampling; `multi`: the same plus "
        "turns_per_role; `replay`: trajectory). Endpoint "
        "URLs and keys are the operator's: a request names a configured endpoint.",
    )
    config: RolloutConfig = Field(default_factory=RolloutConfig)

    @field_validator("policy_options")
    @classmethod
    def _allowed_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        for name in OPERATOR_ONLY_OPTIONS:
            if name in options:
                raise ValueError(
                    f"{name} is operator configuration and cannot be set by a request: choose one of the "
                    "configured endpoints by name (policy_options.endpoint)"
                )
        schema = POLICY_OPTIONS.get(info.data.get("policy", ""))
        if schema is None:  # a policy registered by the operator's own code: it checks its own options
            return options
        try:
            checked = schema.model_validate(options)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(
                f"{where}: {first['msg']} (the {info.data['policy']} policy takes: "
                f"{', '.join(schema.model_fields) or 'no options'})"
            ) from None
        # Only what the request set, so the policy's own defaults still apply to the rest.
        return checked.model_dump(exclude_unset=True)


class Trajectory(BaseModel):
    id: str
    problem_id: str | None = None
    policy: str
    model: str | None = None
    config: RolloutConfig
    prompt: list[dict[str, Any]] = Field(description="System and first user message.")
    turns: list[TurnRecord] = Field(default_factory=list)
    termination: TerminationReason | None = None
    termination_detail: str = ""
    best: BestCandidate | None = None
    started_at: datetime = Field(default_factory=_now)
    finished_at: datetime | None = None

    @property
    def reward_events(self) -> list[RewardEvent]:
        return [e for t in self.turns for e in t.reward_events]

    @property
    def best_reward(self) -> float | None:
        return self.best.result.reward if self.best else None

    def messages(self) -> list[dict[str, Any]]:
        """The full, untruncated conversation in OpenAI format."""
        out = list(self.prompt)
        for turn in self.turns:
            out.append(turn.assistant.to_message())
            out.extend(
                {"role": "tool", "tool_call_id": o.tool_call_id, "content": o.content} for o in turn.observations
            )
        return out

    def token_sequence(self) -> TokenSequence | None:
        """Prompt ids, then response ids with a mask (1 model token, 0 tool/user token) and logprobs.

        Built from the server's prompt and completion ids of every turn: the tokens a turn's prompt adds after the
        previous prompt and completion are the observations. None when any turn lacks ids or the prompts are not
        prefixes of each other (the context was truncated), because then no single sequence was ever scored.
        """
        if not self.turns:
            return None
        first = self.turns[0].assistant
        if first.prompt_token_ids is None:
            return None
        prompt_ids = list(first.prompt_token_ids)
        seen = list(prompt_ids)
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        for turn in self.turns:
            a = turn.assistant
            if a.prompt_token_ids is None or a.token_ids is None:
                return None
            if a.prompt_token_ids[: len(seen)] != seen:
                return None
            added = a.prompt_token_ids[len(seen) :]
            ids += added
            mask += [0] * len(added)
            logprobs += [0.0] * len(added)
            ids += a.token_ids
            mask += [1] * len(a.token_ids)
            logprobs += (
                a.logprobs
                if a.logprobs is not None and len(a.logprobs) == len(a.token_ids)
                else [0.0] * len(a.token_ids)
            )
            seen = list(a.prompt_token_ids) + list(a.token_ids)
        return TokenSequence(prompt_ids=prompt_ids, response_ids=ids, response_mask=mask, response_logprobs=logprobs)


class TokenSequence(BaseModel):
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]


class RolloutProgress(BaseModel):
    """What the progress callback receives after each turn."""

    trajectory_id: str
    turn: int
    best_reward: float | None = None
    best_speedup: float | None = None
    tools: list[str] = Field(default_factory=list, description="The names of the tools this turn called.")
    events: list[RewardEvent] = Field(default_factory=list, description="This turn's compiles and verifications.")
