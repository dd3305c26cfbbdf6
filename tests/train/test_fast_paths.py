"""The training step's fast paths give the plain computation's results: token logprobs and entropies with their own
backward, models run on right-padded batches without an attention mask, and compiled forwards (compile_model: each
decoder layer compiled in place, one graph for all), whose checkpoints resume eager runs; the critic's L2 gradient
added in one fused update."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch._dynamo.utils import counters

from cuda_agent.contracts.agent import AssistantTurn, RewardEvent, RolloutConfig, Trajectory, TurnRecord
from cuda_agent.contracts.train import RunState, TrainConfig
from cuda_agent.eval.reward import reward_for
from cuda_agent.train.data import TrainingSequence, collate, token_logprobs
from cuda_agent.train.ppo import Policy
from cuda_agent.train.run import Distributed, RunDir, Trainer, _repeated_blocks, run_stage
from cuda_agent.train.toy import TOY_WORDS
from cuda_agent.train.value import Critic, add_l2_gradient
from tests.train.conftest import MODEL_NAME

STEPS = 3
ACTOR_AND_CRITIC_LR = 3e-3  # large enough for a random tiny model to move in a few steps


def model_returning(logits: torch.Tensor) -> Any:
    """A stand-in for a causal LM whose output is these logits, whatever its input."""
    return lambda input_ids, use_cache: SimpleNamespace(logits=logits)


def test_token_logprobs_and_their_gradients_match_log_softmax() -> None:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, 50, (3, 8), generator=generator)
    batch = collate(
        [TrainingSequence("t", row.tolist(), [1] * 8, [0.0] * 8, [0.0] * 8, 0.0, False) for row in input_ids], 0
    )
    for dtype in (torch.float32, torch.bfloat16):
        logits = (3 * torch.randn(3, 8, 50, generator=generator)).to(dtype).requires_grad_()
        weights = torch.randn(2, 3, 7, generator=generator)
        taken, entropy = token_logprobs(model_returning(logits), batch)
        (grad,) = torch.autograd.grad((weights[0] * taken + weights[1] * entropy).sum(), logits)
        log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        expected_taken = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
        expected_entropy = -(log_probs.exp() * log_probs).sum(-1)
        objective = (weights[0] * expected_taken + weights[1] * expected_entropy).sum()
        (expected_grad,) = torch.autograd.grad(objective, logits)
        torch.testing.assert_close(taken, expected_taken)
        torch.testing.assert_close(entropy, expected_entropy)
        assert grad.dtype == dtype and grad[:, -1].abs().max() == 0  # the last position predicts nothing
        torch.testing.assert_close(grad, expected_grad)


def test_padding_changes_nothing_at_real_tokens(tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model)
    critic = Critic.from_pretrained(tiny_model)
    torch.nn.init.normal_(critic.head.weight)  # the fresh head is zero: every value would match trivially
    generator = torch.Generator().manual_seed(0)
    sequences = []
    for length in (9, 4, 6):
        ids = torch.randint(4, len(TOY_WORDS) + 4, (length,), generator=generator).tolist()
        sequences.append(TrainingSequence("t", ids, [1] * length, [0.0] * length, [0.0] * length, 0.0, False))
    with torch.no_grad():
        batch = collate(sequences, pad_id=0)
        taken, entropy = token_logprobs(policy, batch)
        values = critic(batch)
        for row, sequence in enumerate(sequences):
            alone = collate([sequence], pad_id=0)
            real = len(sequence) - 1
            for padded, single in zip(
                (taken, entropy, values), (*token_logprobs(policy, alone), critic(alone)), strict=True
            ):
                torch.testing.assert_close(padded[row, :real], single[0])


def varied_rollout(policy: Policy, config: TrainConfig, step: int, rank: int) -> list[Trajectory]:
    """Random tokens, a different length per trajectory and per step (so the compiled graphs see shapes change), the
    same whatever the policy: the compiled and eager runs train on the same data however their weights round."""
    vocab = len(TOY_WORDS) + 4
    generator = torch.Generator().manual_seed(step * 100 + rank)
    out = []
    for i in range(config.rollouts_per_step):
        prompt, completion = 2 + i % 3, 3 + (i + step) % 5
        ids = torch.randint(4, vocab, (prompt + completion,), generator=generator).tolist()
        turn = TurnRecord(
            index=0,
            assistant=AssistantTurn(
                token_ids=ids[prompt:], logprobs=[-2.0] * completion, prompt_token_ids=ids[:prompt]
            ),
            reward_events=[
                RewardEvent(turn=0, kind="verify", status="x", reward=reward_for(i % 2 == 0, 1.0 + i % 3, 1.0, 1.05))
            ],
        )
        out.append(
            Trajectory(
                id=f"r{step}-{i}", policy="random", model=MODEL_NAME, config=RolloutConfig(), prompt=[], turns=[turn]
            )
        )
    return out


def ppo_config(model: Path, compile_model: str | None) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "model": str(model),
            "model_name": MODEL_NAME,
            "actor_lr": ACTOR_AND_CRITIC_LR,
            "critic_lr": ACTOR_AND_CRITIC_LR,
            "steps": STEPS,
            "rollouts_per_step": 6,
            "batch_size": 4,  # minibatches of 4 and 2 rows
            "kl_coef": 0.1,  # a reference model too
            "checkpoint_every": 1,
            "compile_model": compile_model,
        }
    )


def trained_metrics(metrics: dict[str, float]) -> dict[str, float]:
    return {
        key: value
        for key, value in metrics.items()
        if key not in ("step", "stage", "time", "tokens_per_s", "train_tokens_per_s", "rollout_s")
    }


# aot_eager traces and differentiates the same graphs as inductor, in seconds; inductor's C++ code generation takes
# over a minute on two cores.
@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_ppo_steps_match_eager_and_resume_eager(tiny_model: Path, tmp_path: Path, backend: str) -> None:
    eager = run_stage("ppo", ppo_config(tiny_model, None), tmp_path / "eager", rollout=varied_rollout)
    compiled = run_stage("ppo", ppo_config(tiny_model, backend), tmp_path / "compiled", rollout=varied_rollout)
    assert eager.state is compiled.state is RunState.FINISHED, (eager.message, compiled.message)
    eager_metrics = [trained_metrics(m) for m in RunDir(tmp_path / "eager").read_metrics()]
    compiled_metrics = [trained_metrics(m) for m in RunDir(tmp_path / "compiled").read_metrics()]
    assert len(compiled_metrics) == STEPS and compiled_metrics[0]["kl_ref"] is not None
    # The policy moves (a loss that ignored the trained weights would match trivially).
    assert compiled_metrics[-1]["kl_ref"] > 0
    for eager_step, compiled_step in zip(eager_metrics, compiled_metrics, strict=True):
        assert compiled_step == pytest.approx(eager_step, rel=1e-4, abs=1e-6)

    # A compiled run's checkpoint holds the plain modules' weights, under their plain names. Adam divides each
    # gradient by its own scale, so a rounding difference in a near-zero gradient can move that weight by a percent
    # of the learning rate.
    checkpoint = tmp_path / "compiled/checkpoints/step-000002"
    eager_checkpoint = tmp_path / "eager/checkpoints/step-000002"
    for part in ("policy/model.safetensors", "critic/model.safetensors", "critic/value_head.pt"):
        read = load_file if part.endswith(".safetensors") else torch.load
        eager_weights, compiled_weights = read(eager_checkpoint / part), read(checkpoint / part)
        assert compiled_weights.keys() == eager_weights.keys()
        for name, weight in compiled_weights.items():
            torch.testing.assert_close(weight, eager_weights[name], rtol=1e-4, atol=1e-2 * ACTOR_AND_CRITIC_LR)
    # An eager trainer resumes from it (weights, optimizer state, step) to the compiled run's next step.
    resumed = Trainer("ppo", ppo_config(tiny_model, None), Distributed(0, 1, 0), checkpoint, None, varied_rollout)
    assert resumed.step == 2
    assert trained_metrics(resumed.run_step()) == pytest.approx(compiled_metrics[2], rel=1e-4, abs=1e-6)


def test_the_repeated_blocks_are_the_decoder_layers(tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    assert _repeated_blocks(policy := AutoModelForCausalLM.from_pretrained(tiny_model)) is policy.model.layers
    assert _repeated_blocks(critic := Critic.from_pretrained(tiny_model)) is critic.backbone.layers
    # Identical blocks that hold little of the weights are not where the time goes: the model is compiled whole.
    small_blocks = nn.Sequential(nn.Embedding(1000, 16), nn.ModuleList([nn.Linear(16, 16), nn.Linear(16, 16)]))
    assert _repeated_blocks(small_blocks) is None
    assert _repeated_blocks(nn.Sequential(nn.Linear(16, 16), nn.ReLU())) is None


def test_compiled_training_compiles_each_decoder_layer_once_and_samples_eagerly(tiny_model: Path) -> None:
    torch._dynamo.reset()  # compiled code outlives the tests that compiled it: count this test's alone
    counters.clear()
    compiled_while_sampling = []

    def generating_rollout(policy: Policy, config: TrainConfig, step: int, rank: int) -> list[Trajectory]:
        compiled_before = counters["frames"]["total"]
        prompt = torch.tensor([[1, 4, 5]])
        policy.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False)
        compiled_while_sampling.append(counters["frames"]["total"] - compiled_before)
        return varied_rollout(policy, config, step, rank)

    eager = Trainer("ppo", ppo_config(tiny_model, None), Distributed(0, 1, 0), None, None, generating_rollout)
    compiled = Trainer("ppo", ppo_config(tiny_model, "aot_eager"), Distributed(0, 1, 0), None, None, generating_rollout)
    assert compiled.critic is not None and compiled.reference is not None and eager.critic is not None
    models = {"policy": compiled.policy, "critic": compiled.critic, "reference": compiled.reference}
    layers = {"policy": "model.layers", "critic": "backbone.layers", "reference": "model.layers"}
    for name, model in models.items():
        compiled_modules = {path for path, m in model.named_modules() if m._compiled_call_impl is not None}
        assert compiled_modules == {f"{layers[name]}.0", f"{layers[name]}.1"}, name
    # Module.compile leaves the module tree as it is: no _orig_mod in the names checkpoints are saved under.
    assert compiled.policy.state_dict().keys() == eager.policy.state_dict().keys()
    assert compiled.critic.state_dict().keys() == eager.critic.state_dict().keys()

    generator = torch.Generator().manual_seed(0)
    sequences = []
    for length in (9, 4, 6):
        ids = torch.randint(4, len(TOY_WORDS) + 4, (length,), generator=generator).tolist()
        sequences.append(TrainingSequence("t", ids, [1] * length, [0.0] * length, [0.0] * length, 0.0, False))
    batch = collate(sequences, pad_id=0)
    for got, expected in zip(
        (*compiled._logprobs(compiled.policy, batch), compiled.critic(batch)),
        (*eager._logprobs(eager.policy, batch), eager.critic(batch)),
        strict=True,
    ):
        torch.testing.assert_close(got, expected)
    assert counters["stats"]["unique_graphs"] == 1  # one layer graph, run by the policy's and the critic's layers

    compiled.run_step()
    assert compiled_while_sampling == [0]  # generate ran the compiled layers eagerly
    # The step added the graphs without grad (the critic's rollout values) and of the frozen reference; neither a
    # layer's index nor its model asked for one of its own.
    assert counters["stats"]["unique_graphs"] == 3


def test_the_l2_gradient_is_the_penalty_term_s() -> None:
    torch.manual_seed(0)
    explicit, fused = torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(5, 6)
    penalty = sum(p.pow(2).sum() for p in explicit.parameters())
    (explicit(x).square().mean() + 0.25 * penalty).backward()
    fused(x).square().mean().backward()
    add_l2_gradient(fused, 0.25)
    for a, b in zip(explicit.parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad)


def test_models_load_without_the_hubs_kernels(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU host has no `kernels` package (and no network): transformers 5 kernelizes every load by default and
    then refuses to load. The trainer's and the server's models are torch's own everywhere."""
    import transformers.modeling_utils

    from cuda_agent.train.run import _causal_lm
    from cuda_agent.train.serve import PolicyServer

    monkeypatch.setattr(transformers.modeling_utils, "is_kernels_available", lambda: False)
    assert not _causal_lm(tiny_model, torch.device("cpu")).use_kernels
    assert not Critic.from_pretrained(tiny_model).backbone.use_kernels
    assert not PolicyServer(tiny_model, device="cpu").model.use_kernels
