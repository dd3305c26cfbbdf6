"""PPO steps of a ~0.5B-parameter model (random init, built locally) on the GPU: tokens/s, MFU and peak memory over
a sweep of micro-batch sizes, eager and compiled.

Run on the H200 with `pytest tests/train/test_gpu_throughput.py -s -m gpu`; the GPU-NOTE lines it prints are the
report: one per configuration, then where its step spends its GPU time. One configuration: `-k b16-eager`.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Literal

import pytest
import torch

from cuda_agent.contracts.agent import AssistantTurn, RewardEvent, RolloutConfig, Trajectory, TurnRecord
from cuda_agent.contracts.train import RunState, TrainConfig
from cuda_agent.eval.reward import reward_for
from cuda_agent.train.ppo import Policy, Rollout
from cuda_agent.train.run import RunDir, run_stage
from cuda_agent.train.tiny import build_tiny_model

H200_BF16_DENSE_FLOPS = 989e12
# Step 0 warms up (CUDA context, allocator, cuBLAS heuristics, torch.compile's compilation), step 1 warms the
# profiler up, step 2 is profiled, steps 3-4 are timed. The profiler counts steps from 1 here:
# a rollout opens each step by stepping it.
STEPS = 5
TIMED_FROM = 3
# (micro-batch size, compile_model). The compiled graphs are a decoder layer's (Trainer._compile_blocks), with dynamic
# shapes, shared by every layer of every model: the second compiled configuration reuses the first one's graphs, and
# its warm-up step compiles nothing.
SWEEP: list[tuple[int, Literal["inductor"] | None]] = [(4, None), (16, None), (4, "inductor"), (16, "inductor")]
VOCAB = 32_000
PROMPT_TOKENS, COMPLETION_TOKENS = 512, 1536


def random_rollout(policy: Policy, config: TrainConfig, step: int, rank: int) -> list[Trajectory]:
    """Long single-turn trajectories of random tokens: the training step's throughput does not depend on what the
    tokens say, and sampling 1536 tokens autoregressively would time generation, not training."""
    generator = torch.Generator().manual_seed(step * 100 + rank)
    out = []
    for i in range(config.rollouts_per_step):
        ids = torch.randint(4, VOCAB, (PROMPT_TOKENS + COMPLETION_TOKENS,), generator=generator).tolist()
        reward = reward_for(i % 2 == 0, 1.0 + i % 3, 1.0, config.reward_threshold)
        turn = TurnRecord(
            index=0,
            assistant=AssistantTurn(
                token_ids=ids[PROMPT_TOKENS:],
                logprobs=[-10.0] * COMPLETION_TOKENS,
                prompt_token_ids=ids[:PROMPT_TOKENS],
            ),
            reward_events=[RewardEvent(turn=0, kind="verify", status="x", reward=reward)],
        )
        out.append(
            Trajectory(
                id=f"r{step}-{i}", policy="random", model=policy.name, config=RolloutConfig(), prompt=[], turns=[turn]
            )
        )
    return out


def profiled_rollout(profiler: torch.profiler.profile) -> Rollout:
    def rollout(policy: Policy, config: TrainConfig, step: int, rank: int) -> list[Trajectory]:
        profiler.step()  # a rollout starts each PPO step: the profiler's schedule counts steps by it
        return random_rollout(policy, config, step, rank)

    return rollout


HIDDEN, LAYERS, INTER = 1024, 28, 4096
# Matmul parameters per token: attention (q, k, v, o) and the gated MLP per layer; the actor adds its LM head (the
# critic's head is one row). Embedding lookups are not FLOPs.
BODY = LAYERS * (4 * HIDDEN * HIDDEN + 3 * HIDDEN * INTER)
ACTOR, CRITIC = BODY + VOCAB * HIDDEN, BODY
# Attention scores and their use (QK^T, AV) per token, forward and backward, as PaLM's MFU counts them
# (12 * layers * hidden * sequence, a full rather than causal mask).
ATTENTION = 12 * LAYERS * HIDDEN * (PROMPT_TOKENS + COMPLETION_TOKENS)
# Per token of a PPO step: the critic's no-grad forward, then forward+backward of actor and critic.
FLOPS_PER_TOKEN = (2 * CRITIC + ATTENTION / 3) + (6 * ACTOR + ATTENTION) + (6 * CRITIC + ATTENTION)


@pytest.fixture(scope="module")
def half_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    words = [f"w{i}" for i in range(VOCAB - 4)]  # with the 4 special tokens: a 32k vocabulary
    return build_tiny_model(
        tmp_path_factory.mktemp("half-b") / "model", words, hidden_size=HIDDEN, layers=LAYERS, heads=16,
        intermediate_size=INTER,
    )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize(("batch_size", "compile_model"), SWEEP, ids=[f"b{b}-{c or 'eager'}" for b, c in SWEEP])
def test_ppo_steps_of_a_half_billion_parameter_model(
    half_b: Path, tmp_path: Path, batch_size: int, compile_model: Literal["inductor"] | None
) -> None:
    name = f"b{batch_size}-{compile_model or 'eager'}"
    config = TrainConfig(
        model=str(half_b),
        model_name="half-b",
        steps=STEPS,
        rollouts_per_step=16,
        batch_size=batch_size,
        checkpoint_every=1000,
        compile_model=compile_model,
    )
    profiler = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=2, warmup=1, active=1, repeat=1),
    )
    gc.collect()  # the previous configuration's models and optimizer states
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with profiler:
        status = run_stage("ppo", config, tmp_path / name, rollout=profiled_rollout(profiler))
    assert status.state is RunState.FINISHED, (name, status.message)
    metrics = RunDir(tmp_path / name).read_metrics()
    assert metrics[-1]["value_loss"] is not None, name
    # The unprofiled steps after warm-up. MFU is the training step's (the goal's): the rollout, here random tokens,
    # would be generation on a real run, and is reported apart.
    tokens_per_s = min(m["train_tokens_per_s"] for m in metrics[TIMED_FROM:])
    note = {
        "config": name,
        "params": ACTOR,
        "tokens_per_s": tokens_per_s,
        "step_tokens_per_s": min(m["tokens_per_s"] for m in metrics[TIMED_FROM:]),
        "rollout_s": max(m["rollout_s"] for m in metrics[TIMED_FROM:]),
        "mfu": FLOPS_PER_TOKEN * tokens_per_s / H200_BF16_DENSE_FLOPS,
        "mfu_without_attention": (2 * CRITIC + 6 * ACTOR + 6 * CRITIC) * tokens_per_s / H200_BF16_DENSE_FLOPS,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }
    print("GPU-NOTE", json.dumps(note))
    # Where a step's GPU time goes, for the next round of throughput work.
    print(f"profile of {name}:")
    table = profiler.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)
    print(table)
    assert note["mfu"] > 0
