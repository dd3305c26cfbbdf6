"""Contracts of a training run: the stage, its hyperparameters, and the status a run directory reports.

Defaults follow the paper's recipe (actor lr 3e-6, critic lr 6e-6, GAE with gamma 1 and lambda 0.95, PPO clip 0.2
low / 0.28 high, entropy bonus 0.01 decayed linearly). The same text documents each field here and in CLI help.
This module holds plain pydantic models only, so services that manage runs never import torch or transformers.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuda_agent.contracts.common import MAX_NAME_CHARS, MAX_PATH_CHARS

TrainStage = Literal["rft", "value", "ppo"]
MAX_TRAIN_STEPS = 1_000_000
MAX_TRAJECTORY_IDS = 100_000


class ClipSchedule(StrEnum):
    ASYMMETRIC = "asymmetric"  # constant clip_low / clip_high (the paper: 0.2 / 0.28)
    DECAYED = "decayed"  # symmetric clip_start, multiplied by (1 - clip_decay) every clip_decay_every steps


class RunState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"  # bad input or a non-finite loss: the message says which; checkpoints written stay valid


class TrainConfig(BaseModel):
    """Hyperparameters and inputs of one stage of a training run (RFT, value pretraining or PPO)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        max_length=MAX_PATH_CHARS,
        description="Base policy: a local transformers model folder (config, weights, tokenizer). Ignored when "
        "init_from is set.",
    )
    model_name: str = Field(
        max_length=MAX_NAME_CHARS,
        description="The name the policy served under when the trajectories were sampled (Trajectory.model); a "
        "trajectory with another model name was tokenized by another tokenizer and is refused.",
    )
    init_from: str | None = Field(
        None,
        max_length=MAX_PATH_CHARS,
        description="A checkpoint folder of an earlier stage (policy/, and critic/ after value pretraining) to "
        "start from; None: the base model, with the critic initialized from the policy's weights.",
    )
    trajectory_ids: list[str] = Field(
        default_factory=list,
        max_length=MAX_TRAJECTORY_IDS,
        description="Stored trajectories for RFT and value pretraining (ignored by PPO, which samples rollouts).",
    )
    tenant: str | None = Field(None, max_length=MAX_NAME_CHARS, description="Only this tenant's trajectories.")
    retokenize: bool = Field(
        False,
        description="RFT and value pretraining: also train on trajectories another policy sampled (the built-in "
        "kernel author's, another model's), their conversations rendered with this model's chat template and "
        "tokenizer; otherwise a trajectory of another model is refused.",
    )
    rollout: str = Field(
        "speedup_toy",
        max_length=MAX_NAME_CHARS,
        pattern=r"^[a-z0-9_]+$",
        description="PPO: the registered rollout function that samples trajectories from the current policy.",
    )
    rollouts_per_step: int = Field(32, ge=1, le=4096, description="PPO: trajectories sampled per step.")
    seed: int = Field(0, ge=0, le=2**31 - 1)
    steps: int = Field(100, ge=1, le=MAX_TRAIN_STEPS, description="Optimizer steps of this stage.")
    batch_size: int = Field(8, ge=1, le=4096, description="Sequences per micro-batch (RFT and value).")
    ppo_epochs: int = Field(1, ge=1, le=16, description="PPO: passes over each step's rollouts.")
    max_seq_tokens: int = Field(
        32_768, ge=8, le=1_048_576, description="Longer sequences are skipped (and counted), never truncated."
    )
    actor_lr: float = Field(3e-6, gt=0, le=1.0, description="Learning rate of the policy (RFT and PPO).")
    critic_lr: float = Field(6e-6, gt=0, le=1.0, description="Learning rate of the critic (value and PPO).")
    weight_decay: float = Field(0.0, ge=0, le=1.0, description="AdamW decoupled weight decay of the actor.")
    critic_l2: float = Field(
        1e-4, ge=0, le=10.0, description="Coefficient of the L2 penalty on the critic's parameters (regularizer)."
    )
    gamma: float = Field(1.0, ge=0, le=1.0, description="Discount of GAE / TD(lambda).")
    gae_lambda: float = Field(0.95, ge=0, le=1.0, description="Lambda of GAE / TD(lambda).")
    clip_schedule: ClipSchedule = ClipSchedule.ASYMMETRIC
    clip_low: float = Field(0.2, gt=0, lt=1.0, description="Asymmetric: the ratio may fall to 1 - clip_low.")
    clip_high: float = Field(0.28, gt=0, le=10.0, description="Asymmetric: the ratio may rise to 1 + clip_high.")
    clip_start: float = Field(0.1, gt=0, lt=1.0, description="Decayed: the symmetric clip at step 0.")
    clip_decay: float = Field(0.05, ge=0, lt=1.0, description="Decayed: fraction the clip shrinks by each period.")
    clip_decay_every: int = Field(50, ge=1, le=MAX_TRAIN_STEPS, description="Decayed: steps per period.")
    entropy_coef: float = Field(0.01, ge=0, le=1.0, description="Entropy bonus at step 0, decayed linearly.")
    entropy_decay_steps: int | None = Field(
        None, ge=1, le=MAX_TRAIN_STEPS, description="Steps over which the bonus reaches 0; None: the stage's steps."
    )
    kl_coef: float = Field(0.0, ge=0, le=10.0, description="KL penalty to the initial (reference) policy; 0: off.")
    value_clip: float | None = Field(
        None, gt=0, le=100.0, description="PPO: clip the critic's update around its rollout values; None: off."
    )
    max_grad_norm: float = Field(1.0, gt=0, le=1000.0, description="Gradient clipping (global L2 norm).")
    mixed_precision: bool = Field(True, description="bf16 autocast on CUDA; CPU always runs in float32.")
    compile_model: Literal["inductor", "aot_eager"] | None = Field(
        None,
        description="torch.compile backend for the training forwards (policy, critic, reference), with dynamic "
        "shapes: each decoder layer is compiled in place, one graph serving every layer (a model without a stack of "
        "identical layers is compiled whole, with its token logprobs); 'inductor' fuses the elementwise work into "
        "generated kernels, 'aot_eager' traces the same graphs without code generation (a quick check); None: eager. "
        "Sampling stays eager.",
    )
    checkpoint_every: int = Field(50, ge=1, le=MAX_TRAIN_STEPS, description="Steps between checkpoints.")
    keep_checkpoints: int = Field(2, ge=1, le=1000, description="Most recent checkpoints kept; older are deleted.")
    reward_threshold: float = Field(
        1.05, gt=0, le=100.0, description="Speedup a toy rollout's candidate must beat to count (reward_for)."
    )
    loop_repeats: int = Field(
        2, ge=2, le=100, description="RFT: this many identical tool calls in a row make a trajectory a loop."
    )

    @model_validator(mode="after")
    def _entropy_decay_defaults_to_steps(self) -> TrainConfig:
        if self.entropy_decay_steps is None:
            self.entropy_decay_steps = self.steps
        return self


class RunStatus(BaseModel):
    """run_dir/status.json: what a manager (trainer_svc) polls."""

    stage: TrainStage
    state: RunState
    step: int = Field(0, description="Optimizer steps completed (and covered by metrics).")
    checkpoint_step: int | None = Field(None, description="Step of the newest valid checkpoint.")
    resumed_from: int | None = Field(None, description="Checkpoint step this process resumed from, if any.")
    message: str = ""
