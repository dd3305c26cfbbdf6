"""Fine-tuning on another policy's trajectories (the built-in kernel author's): rendered with the model's own chat
template and tokenizer, trained on the replies only, and refused unless the run asks for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda_agent.agent.tools import default_tools
from cuda_agent.contracts.agent import (
    AssistantTurn,
    RewardEvent,
    RolloutConfig,
    ToolCall,
    ToolObservation,
    Trajectory,
    TurnRecord,
)
from cuda_agent.contracts.train import RunState, TrainConfig
from cuda_agent.train.data import retokenize, to_training_sequence
from cuda_agent.train.run import run_stage
from cuda_agent.train.serve import FALLBACK_CHAT_TEMPLATE
from cuda_agent.train.tiny import build_tiny_model

MODEL = "tiny-retok"
SEEN = "OBSERVED_ONLY_IN_TOOL_OUTPUT"


def call(i: int, name: str, **arguments: str) -> ToolCall:
    return ToolCall(id=f"c{i}", name=name, arguments=json.dumps(arguments))


def author_trajectory() -> Trajectory:
    """What the heuristic policy records: replies without token ids, tool output, a verify's reward."""
    write, verify = call(0, "write_file", path="kernels/a.cu", content="__global__ void k ( ) { }"), call(1, "verify")
    first = TurnRecord(
        index=0,
        assistant=AssistantTurn(content="Plan : one kernel", tool_calls=[write, verify]),
        observations=[
            ToolObservation(tool_call_id="c0", name="write_file", content="wrote kernels/a.cu", ok=True),
            ToolObservation(tool_call_id="c1", name="verify", content=f"correct {SEEN} reward 3", ok=True),
        ],
        reward_events=[RewardEvent(turn=0, kind="verify", status="correct", reward=3.0)],
    )
    last = TurnRecord(index=1, assistant=AssistantTurn(tool_calls=[call(2, "finish", summary="done")]))
    prompt = [{"role": "system", "content": "You write kernels ."}, {"role": "user", "content": "Make it fast ."}]
    return Trajectory(id="t-author", policy="heuristic", config=RolloutConfig(), prompt=prompt, turns=[first, last])


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose word-level vocabulary holds every word of the rendered conversation, as whole renderings
    and as the segments retokenize encodes (a segment may start inside a rendering's word)."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("retok") / "model"
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(folder, ["x"]))
    messages = author_trajectory().messages()

    def render(k: int, prompt: bool) -> str:
        return str(
            tokenizer.apply_chat_template(
                messages[:k],
                tools=default_tools().schemas(),
                chat_template=FALLBACK_CHAT_TEMPLATE,
                add_generation_prompt=prompt,
                tokenize=False,
            )
        )

    renders = [render(k, prompt) for k in range(1, len(messages) + 1) for prompt in (True, False)]
    # Every rendering less every rendering it extends (the empty one included): the segments, among others.
    segments = [b[len(a) :] for a in ["", *renders] for b in renders if b.startswith(a)]
    return build_tiny_model(folder, [word for text in segments for word in text.split()])


def test_replies_are_the_trained_tokens_and_tool_output_is_context(model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    original = author_trajectory()
    trajectory = retokenize(original, tokenizer, default_tools().schemas(), MODEL)
    sequence = to_training_sequence(trajectory, None, MODEL, len(tokenizer))
    replies = [t.assistant.token_ids or [] for t in trajectory.turns]
    assert sum(sequence.action_mask) == sum(len(r) for r in replies) > 0
    trained = [i for i, m in zip(sequence.input_ids, sequence.action_mask, strict=True) if m]
    assert trained == [i for r in replies for i in r]
    assert tokenizer.unk_token_id not in sequence.input_ids  # the vocabulary covers the rendering
    # The reply's tool call is trained on; the tool's output is only ever context.
    assert tokenizer.convert_tokens_to_ids('"write_file",') in trained
    seen = tokenizer.convert_tokens_to_ids(SEEN)
    assert seen in sequence.input_ids and seen not in trained
    # Each reply ends where the policy should stop; its reward sits on the turn's last trained token.
    assert all(r[-1] == tokenizer.eos_token_id for r in replies)
    assert sequence.rewards[sequence.action_mask.index(1) + len(replies[0]) - 1] == 3.0
    assert original.turns[0].assistant.token_ids is None  # the stored trajectory is left as it was


def test_rft_trains_on_the_kernel_authors_trajectories_only_when_asked(
    model: Path, tmp_path: Path, embedded_db: None
) -> None:
    """From the store, as a run launched by trainer_svc reads them: the author's trajectory has no token sequence."""
    from cuda_agent.agent.jobs import store_trajectory

    store_trajectory(author_trajectory())
    values = {"model": str(model), "model_name": MODEL, "steps": 3, "batch_size": 1, "actor_lr": 1e-3}
    values |= {"trajectory_ids": ["t-author"]}
    refused = run_stage("rft", TrainConfig(**values), tmp_path / "as-is")
    assert refused.state is RunState.FAILED and "without a token sequence" in refused.message, refused.message
    refused = run_stage("rft", TrainConfig(**values), tmp_path / "in-memory", trajectories=[author_trajectory()])
    assert refused.state is RunState.FAILED and "sampled from model None" in refused.message, refused.message
    done = run_stage("rft", TrainConfig(**values, retokenize=True), tmp_path / "retok")
    assert done.state is RunState.FINISHED, done.message
    assert (tmp_path / "retok/checkpoints/step-000003/policy").is_dir()
