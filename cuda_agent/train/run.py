"""A training run: one stage (RFT, value pretraining or PPO) as a process, resumable from its last checkpoint.

The run directory is the whole interface to whoever manages the run (trainer_svc, a k8s Job, a person):

    run_dir/config.json        the TrainConfig the run started with
    run_dir/status.json        RunStatus: state, steps done, newest checkpoint, failure message
    run_dir/metrics.jsonl      one JSON object per step
    run_dir/checkpoints/step-000050/{policy/, critic/, optimizers.pt, rng.pt, state.json}
    run_dir/checkpoints/latest the name of the newest complete checkpoint

Every file is written to a temporary name and renamed into place, and a checkpoint folder is renamed only once
complete, so a SIGKILL at any moment leaves the previous checkpoint, status and metrics intact. A restarted
process resumes from `latest`; steps after it are redone (their metrics rewritten).

With WORLD_SIZE > 1 (torchrun) the same code runs data-parallel under DDP: each rank samples its own batches or
rollouts, gradients are averaged, metrics are averaged over ranks, and rank 0 alone writes to the run directory.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from cuda_agent.contracts.agent import TokenSequence, Trajectory
from cuda_agent.contracts.train import RunState, RunStatus, TrainConfig, TrainStage
from cuda_agent.train import toy  # noqa: F401  (registers the speedup_toy rollout)
from cuda_agent.train.data import (
    Batch,
    TrainDataError,
    TrainingSequence,
    collate,
    load_trajectories,
    masked_mean,
    retokenize,
    to_training_sequence,
    token_logprobs,
)
from cuda_agent.train.ppo import (
    Policy,
    Rollout,
    clip_range,
    clipped_objective,
    entropy_coef,
    get_rollout,
    kl_to_reference,
    whiten,
)
from cuda_agent.train.rft import rejection_filter, sft_loss
from cuda_agent.train.value import Critic, add_l2_gradient, explained_variance, gae, value_loss

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
LATEST = "latest"


class TrainingFailed(RuntimeError):
    """The run cannot go on (a non-finite loss, a run directory of another stage); checkpoints stay valid."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temporary file and rename it over ``path``: readers see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class Distributed:
    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> Distributed:
        """torchrun's environment; a plain process is rank 0 of 1."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
        if world_size > 1 and not torch_dist.is_initialized():
            torch_dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return cls(rank=rank, world_size=world_size, local_rank=local_rank)

    def device(self) -> torch.device:
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank)
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def mean(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each metric averaged over ranks (NaN stays NaN: one rank without a value poisons the mean honestly)."""
        if self.world_size == 1 or not metrics:
            return metrics
        values = torch.tensor(list(metrics.values()), dtype=torch.float64)
        if torch.cuda.is_available():
            values = values.cuda()
        torch_dist.all_reduce(values)
        return dict(zip(metrics, (values / self.world_size).tolist(), strict=True))


class RunDir:
    """The files of one run directory (layout in the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.checkpoints = root / CHECKPOINTS

    def create(self) -> None:
        self.checkpoints.mkdir(parents=True, exist_ok=True)

    def write_status(self, status: RunStatus) -> None:
        atomic_write_text(self.root / "status.json", status.model_dump_json(indent=2))

    def read_status(self) -> RunStatus:
        return RunStatus.model_validate_json((self.root / "status.json").read_text())

    def write_metrics(self, metrics: Sequence[dict[str, Any]]) -> None:
        atomic_write_text(self.root / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in metrics))

    def read_metrics(self) -> list[dict[str, Any]]:
        path = self.root / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def latest_checkpoint(self) -> Path | None:
        pointer = self.checkpoints / LATEST
        return self.checkpoints / pointer.read_text().strip() if pointer.exists() else None

    def commit_checkpoint(self, tmp: Path, step: int, keep: int) -> Path:
        """Rename a complete checkpoint folder into place, point `latest` at it, delete the oldest beyond ``keep``."""
        final = self.checkpoints / f"step-{step:06d}"
        if final.exists():  # written before a kill that came before `latest` moved: redone, replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        atomic_write_text(self.checkpoints / LATEST, final.name)
        for old in sorted(self.checkpoints.glob("step-*"))[:-keep]:
            shutil.rmtree(old)
        return final


def _autocast(device: torch.device, config: TrainConfig) -> AbstractContextManager[Any]:
    """bf16 autocast on CUDA (the H200's fast path); CPU trains in float32, where bf16 autocast is slow."""
    if device.type == "cuda" and config.mixed_precision:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def _causal_lm(folder: Path, device: torch.device) -> nn.Module:
    from transformers import AutoModelForCausalLM

    # Never the Hub's kernels (transformers 5 kernelizes by default): they would be fetched at load time (code from
    # the network, absent on an offline GPU host, where loading then fails) and differ from host to host.
    model: nn.Module = AutoModelForCausalLM.from_pretrained(folder, use_kernels=False)
    return model.to(device)


def _unwrap(module: nn.Module) -> nn.Module:
    return module.module if isinstance(module, DistributedDataParallel) else module


def _repeated_blocks(model: nn.Module) -> nn.ModuleList | None:
    """The model's stack of identical blocks (a transformers decoder's layers): of the nn.ModuleLists whose children
    are all of one class, the one with the most parameters, if it holds most of the model's; else None."""

    def size(module: nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    stacks = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len({type(c) for c in m}) == 1]
    largest = max(stacks, key=size, default=None)
    return largest if largest is not None and 2 * size(largest) > size(model) else None


class Trainer:
    """Models, optimizers and the step of one stage; ``step`` counts completed optimizer steps."""

    def __init__(
        self,
        stage: TrainStage,
        config: TrainConfig,
        dist: Distributed,
        checkpoint: Path | None,
        trajectories: Sequence[Trajectory] | None,
        rollout: Rollout | None,
    ) -> None:
        from transformers import AutoTokenizer

        self.stage, self.config, self.dist = stage, config, dist
        self.device = dist.device()
        initial = Path(config.init_from) / "policy" if config.init_from else Path(config.model)
        source = checkpoint or (Path(config.init_from) if config.init_from else None)
        policy_folder = checkpoint / "policy" if checkpoint else initial
        self.tokenizer = AutoTokenizer.from_pretrained(policy_folder)
        self.policy = _causal_lm(policy_folder, self.device)
        self.vocab_size = len(self.tokenizer)
        self.critic: nn.Module | None = None
        if stage in ("value", "ppo"):
            critic_folder = source / "critic" if source and (source / "critic").exists() else policy_folder
            self.critic = Critic.from_pretrained(critic_folder).to(self.device)
        self.reference: nn.Module | None = None
        if stage == "ppo" and config.kl_coef > 0:
            # The reference is the policy the stage started from, even after a resume.
            self.reference = _causal_lm(initial, self.device).eval()
            self.reference.requires_grad_(False)
        # Compiled in place on the plain modules, before DDP wraps them (the fallback below compiles the wrapped ones).
        models = [m for m in (self.policy, self.critic, self.reference) if m is not None]
        self._blocks_compiled = self._compile_blocks(models)
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        if stage in ("rft", "ppo"):
            self.policy = self._wrap(self.policy)
            self.optimizers["policy"] = self._adamw(self.policy, config.actor_lr, config.weight_decay)
        if self.critic is not None:
            # The critic's regularizer is an explicit L2 term (critic_l2, see _update), so no decoupled decay here.
            self.critic = self._wrap(self.critic)
            self.optimizers["critic"] = self._adamw(self.critic, config.critic_lr, 0.0)
        # The training forwards; compiled whole (over the possibly DDP-wrapped modules) only where no blocks were.
        self._logprobs: Callable[[nn.Module, Batch], tuple[torch.Tensor, torch.Tensor]] = self._compiled(token_logprobs)
        self._values: Callable[[Batch], torch.Tensor] | None = (
            self._compiled(self.critic) if self.critic is not None else None
        )
        self.step = 0
        if checkpoint is not None:
            self._restore(checkpoint)
        self.rollout = rollout
        self.sequences: list[TrainingSequence] = []
        if stage == "ppo":
            self.rollout = rollout or get_rollout(config.rollout)
        else:
            self.sequences = self._fixed_sequences(trajectories)

    def _adamw(self, module: nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        # One fused kernel over all parameters on CUDA: the per-tensor launches of the default cost more than the
        # arithmetic for a model of hundreds of tensors.
        fused = self.device.type == "cuda"
        return torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay, fused=fused)

    def _compile_options(self) -> dict[str, Any]:
        # Dynamic from the first call: sequence lengths (and the last minibatch's size) change from batch to batch,
        # and a graph per shape would compile on most steps.
        # Inductor's coalescing analysis asserts on the shifted logits' symbolic size (s0*s1 - s0) in torch 2.11's
        # Triton codegen (seen on the H200); without it, tiling falls back to the plain heuristic.
        options: dict[str, str | int | bool | Callable[..., Any]] | None = (
            {"triton.coalesce_tiling_analysis": False} if self.config.compile_model == "inductor" else None
        )
        return {"backend": self.config.compile_model, "dynamic": True, "options": options}

    def _compile_blocks(self, models: Sequence[nn.Module]) -> bool:
        """Compile each model's repeated blocks in place (regional compilation); False, compiling nothing, when
        compile_model is unset or a model has no such blocks.

        Inductor did not finish compiling the whole actor and critic forward and backward of a ~0.5B-parameter model
        in 290 s on the H200 (issue 16); one decoder layer's graph serves every layer of the policy, the critic and
        the reference: dynamo keeps compiled code per code object, guarded on the layer's class, its parameters'
        shapes and requires_grad, and the grad mode, never on which layer it is (a PPO step compiles three graphs:
        with grad, without, and the frozen reference's). The time compilation wins (float32 RMSNorm, rotary
        embeddings, the casts around bf16 autocast) is inside the layers. Module.compile leaves the module tree and
        its state_dict as they are, so optimizers, gradient clipping and checkpoints see the plain modules."""
        if self.config.compile_model is None:
            return False
        stacks = [stack for stack in map(_repeated_blocks, models) if stack is not None]
        if len(stacks) < len(models):
            return False
        for stack in stacks:
            for block in stack:
                block.compile(**self._compile_options())
        return True

    def _compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` compiled whole, when compile_model is set and the models have no repeated blocks to compile alone
        (one graph per forward, slow to compile for a deep model, but nothing smaller is known to repeat); else ``fn``
        itself."""
        if self.config.compile_model is None or self._blocks_compiled:
            return fn
        return torch.compile(fn, **self._compile_options())

    def _wrap(self, module: nn.Module) -> nn.Module:
        if self.dist.world_size == 1:
            return module
        return DistributedDataParallel(
            module, device_ids=[self.dist.local_rank] if self.device.type == "cuda" else None
        )

    # --- data -------------------------------------------------------------------------------------------------

    def _sequences(self, pairs: Sequence[tuple[Trajectory, TokenSequence | None]]) -> list[TrainingSequence]:
        model_name = self.config.model_name
        if self.config.retokenize:  # another policy's trajectories in this model's tokens
            from cuda_agent.agent.tools import default_tools

            tools = default_tools().schemas()
            pairs = [(t, s) if t.model == model_name else (retokenize(t, self.tokenizer, tools, model_name), None)
                     for t, s in pairs]  # fmt: skip
        sequences = [to_training_sequence(t, s, model_name, self.vocab_size) for t, s in pairs]
        kept = [s for s in sequences if len(s) <= self.config.max_seq_tokens]
        if len(kept) < len(sequences):
            log.warning("skipped %d sequences longer than %d tokens", len(sequences) - len(kept), len(kept))
        return kept

    def _fixed_sequences(self, trajectories: Sequence[Trajectory] | None) -> list[TrainingSequence]:
        """RFT and value pretraining train on a fixed set: the given trajectories, else the configured stored ones."""
        pairs: list[tuple[Trajectory, TokenSequence | None]] = (
            [(t, None) for t in trajectories]
            if trajectories is not None
            else load_trajectories(
                self.config.trajectory_ids, self.config.tenant, need_tokens=not self.config.retokenize
            )
        )
        if not pairs:
            raise TrainDataError("no trajectories to train on (the trajectory set is empty)")
        if self.stage == "rft":
            kept, rejections = rejection_filter([t for t, _ in pairs], self.config.loop_repeats)
            if not kept:
                raise TrainDataError(f"rejection sampling kept none of {len(pairs)} trajectories: {rejections}")
            kept_ids = {t.id for t in kept}
            pairs = [(t, s) for t, s in pairs if t.id in kept_ids]
        sequences = self._sequences(pairs)
        if not sequences:
            raise TrainDataError(f"every trajectory is longer than max_seq_tokens={self.config.max_seq_tokens}")
        return sequences

    def _fixed_batch(self, step: int) -> Batch:
        # Seeded by step and rank, so a resumed run draws the batches it would have drawn.
        generator = torch.Generator().manual_seed(self.config.seed * 1_000_003 + step * 1009 + self.dist.rank)
        size = min(self.config.batch_size, len(self.sequences))
        rows = torch.randperm(len(self.sequences), generator=generator)[:size]
        return collate([self.sequences[int(i)] for i in rows], self._pad_id, self.device)

    @property
    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    # --- optimization -----------------------------------------------------------------------------------------

    def _update(self, name: str, module: nn.Module, loss: torch.Tensor, l2: float = 0.0) -> float:
        """One optimizer step on ``loss`` (plus ``l2`` times the sum of squared parameters, whose gradient is added
        after backward); a non-finite loss or gradient stops the run before any weight moves."""
        if not torch.isfinite(loss):
            raise TrainingFailed(f"{name} loss is {loss.item()} at step {self.step + 1}; stopped before applying it")
        optimizer = self.optimizers[name]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        add_l2_gradient(module, l2)
        grad_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), self.config.max_grad_norm)
        if not torch.isfinite(grad_norm):
            raise TrainingFailed(f"{name} gradient norm is {grad_norm.item()} at step {self.step + 1}")
        optimizer.step()
        return float(loss.detach())

    def run_step(self) -> dict[str, float]:
        """One optimizer step of the stage (PPO: one rollout batch, ppo_epochs passes); returns its metrics."""
        started = time.monotonic()
        if self.stage == "rft":
            metrics, tokens = self._rft_step()
        elif self.stage == "value":
            metrics, tokens = self._value_step()
        else:
            metrics, tokens = self._ppo_step()
        elapsed = time.monotonic() - started
        metrics["tokens_per_s"] = tokens / max(elapsed, 1e-9)
        if "rollout_s" in metrics:  # the training step alone: what the trainer's own throughput work can move
            metrics["train_tokens_per_s"] = tokens / max(elapsed - metrics["rollout_s"], 1e-9)
        self.step += 1
        return self.dist.mean(metrics)

    def _rft_step(self) -> tuple[dict[str, float], int]:
        batch = self._fixed_batch(self.step)
        with _autocast(self.device, self.config):
            logprobs, entropy = self._logprobs(self.policy, batch)
        loss = self._update("policy", self.policy, sft_loss(logprobs, batch.action_mask))
        return {
            "loss": loss,
            "entropy": float(masked_mean(entropy.detach(), batch.action_mask)),
            "reward_mean": float(batch.outcomes.mean()),
            "pass_rate": float(batch.passed.mean()),
        }, batch.tokens

    def _value_step(self) -> tuple[dict[str, float], int]:
        assert self.critic is not None and self._values is not None
        batch = self._fixed_batch(self.step)
        with _autocast(self.device, self.config):
            values = self._values(batch)
        # TD(lambda) targets from the critic's own current values: regressed towards, never differentiated through.
        _, returns = gae(batch.rewards, values.detach(), batch.action_mask, self.config.gamma, self.config.gae_lambda)
        fit = value_loss(values, returns, batch.action_mask, None, self.config.value_clip)
        self._update("critic", self.critic, fit, self.config.critic_l2)
        return {
            "value_loss": float(fit.detach()),
            "explained_variance": explained_variance(values.detach(), returns, batch.action_mask),
            "reward_mean": float(batch.outcomes.mean()),
            "pass_rate": float(batch.passed.mean()),
        }, batch.tokens

    def _ppo_step(self) -> tuple[dict[str, float], int]:
        assert self.critic is not None and self._values is not None and self.rollout is not None
        config = self.config
        policy = Policy(_unwrap(self.policy), self.tokenizer, config.model_name, self.device)
        rollout_started = time.monotonic()
        # Sampling runs the policy eagerly, its compiled blocks too: its forwards (without grad, updating a KV cache
        # whose entry differs per layer) would compile graphs of their own for the few tokens each samples. The
        # stance is this process's alone: processes the rollout starts (evaluations, baselines) compile as usual.
        with torch.compiler.set_stance("force_eager"):
            trajectories = self.rollout(policy, config, self.step, self.dist.rank)
        rollout_s = time.monotonic() - rollout_started
        sequences = self._sequences([(t, None) for t in trajectories])
        if not sequences:
            raise TrainDataError(f"the rollout returned no trainable trajectories at step {self.step + 1}")
        batch = collate(sequences, self._pad_id, self.device)
        mask = batch.action_mask
        with torch.no_grad(), _autocast(self.device, config):
            old_values = self._values(batch)
            ref_logprobs = self._logprobs(self.reference, batch)[0] if self.reference is not None else None
        advantages, returns = gae(batch.rewards, old_values, mask, config.gamma, config.gae_lambda)
        advantages = whiten(advantages, mask)
        clip_low, clip_high = clip_range(config, self.step)
        bonus = entropy_coef(config, self.step)
        sums: dict[str, float] = {}
        updates = 0
        generator = torch.Generator().manual_seed(config.seed + self.step)
        for _ in range(config.ppo_epochs):
            order = torch.randperm(len(sequences), generator=generator).to(self.device)
            for rows in torch.split(order, config.batch_size):
                mb = batch.rows(rows)
                with _autocast(self.device, config):
                    logprobs, entropy = self._logprobs(self.policy, mb)
                pg_loss, clip_fraction = clipped_objective(
                    logprobs, mb.old_logprobs, advantages[rows], mb.action_mask, clip_low, clip_high
                )
                mean_entropy = masked_mean(entropy, mb.action_mask)
                actor_loss = pg_loss - bonus * mean_entropy
                step_metrics = {
                    "policy_loss": float(pg_loss.detach()),
                    "entropy": float(mean_entropy.detach()),
                    "clip_fraction": float(clip_fraction),
                    # How far this update has moved the policy from the one that sampled (k3 estimator).
                    "kl": float(masked_mean(kl_to_reference(logprobs.detach(), mb.old_logprobs), mb.action_mask)),
                }
                if ref_logprobs is not None:
                    kl_ref = masked_mean(kl_to_reference(logprobs, ref_logprobs[rows]), mb.action_mask)
                    actor_loss = actor_loss + config.kl_coef * kl_ref
                    step_metrics["kl_ref"] = float(kl_ref.detach())
                self._update("policy", self.policy, actor_loss)
                with _autocast(self.device, config):
                    values = self._values(mb)
                fit = value_loss(values, returns[rows], mb.action_mask, old_values[rows], config.value_clip)
                self._update("critic", self.critic, fit, config.critic_l2)
                step_metrics["value_loss"] = float(fit.detach())
                for key, value in step_metrics.items():
                    sums[key] = sums.get(key, 0.0) + value
                updates += 1
        metrics = {key: value / updates for key, value in sums.items()}
        metrics |= {
            "reward_mean": float(batch.outcomes.mean()),
            "pass_rate": float(batch.passed.mean()),
            # Of the values the advantages were computed with, before this step's critic updates.
            "explained_variance": explained_variance(old_values, returns, mask),
            "clip_low": clip_low,
            "clip_high": clip_high,
            "entropy_coef": bonus,
            "rollout_s": rollout_s,
        }
        return metrics, batch.tokens * config.ppo_epochs

    # --- checkpoints ------------------------------------------------------------------------------------------

    def save(self, run: RunDir) -> Path:
        """Write a complete checkpoint of this step under a temporary name, then commit it (rank 0 only)."""
        tmp = run.checkpoints / f".step-{self.step:06d}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        policy = _unwrap(self.policy)
        policy.save_pretrained(tmp / "policy")  # type: ignore[operator]
        self.tokenizer.save_pretrained(tmp / "policy")
        if self.critic is not None:
            _unwrap(self.critic).save_pretrained(tmp / "critic")  # type: ignore[operator]
        torch.save({name: opt.state_dict() for name, opt in self.optimizers.items()}, tmp / "optimizers.pt")
        rng = {
            "python": random.getstate(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        torch.save(rng, tmp / "rng.pt")
        atomic_write_text(tmp / "state.json", json.dumps({"stage": self.stage, "step": self.step}))
        return run.commit_checkpoint(tmp, self.step, self.config.keep_checkpoints)

    def _restore(self, checkpoint: Path) -> None:
        state = json.loads((checkpoint / "state.json").read_text())
        if state["stage"] != self.stage:
            raise TrainingFailed(f"the run directory holds a {state['stage']} run, not {self.stage}")
        optimizers = torch.load(checkpoint / "optimizers.pt", map_location=self.device, weights_only=True)
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(optimizers[name])
        rng = torch.load(checkpoint / "rng.pt", weights_only=False)  # our own file: python's RNG state is a tuple
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.step = int(state["step"])


def _finite(metrics: dict[str, float]) -> dict[str, float | None]:
    """JSON has no NaN: an undefined metric (explained variance of constant returns) is written as null."""
    return {key: value if math.isfinite(value) else None for key, value in metrics.items()}


def run_stage(
    stage: TrainStage,
    config: TrainConfig,
    run_dir: Path,
    *,
    trajectories: Sequence[Trajectory] | None = None,
    rollout: Rollout | None = None,
) -> RunStatus:
    """Run (or resume) one stage in ``run_dir`` to config.steps; returns the final status, also in status.json.

    RFT and value pretraining read ``trajectories`` if given, else config.trajectory_ids from the store; PPO samples
    from ``rollout`` if given, else the registered config.rollout. Bad input and non-finite losses end the run with
    state FAILED and a message, not an exception; checkpoints already written stay valid.
    """
    dist = Distributed.from_env()
    run = RunDir(run_dir)
    checkpoint = run.latest_checkpoint()
    # Until the trainer has loaded, the newest checkpoint is what the run has: a refused start must not hide it.
    done = json.loads((checkpoint / "state.json").read_text())["step"] if checkpoint else 0
    status = RunStatus(stage=stage, state=RunState.RUNNING, step=done, checkpoint_step=done if checkpoint else None)
    try:
        if dist.is_main:
            run.create()
            saved = run.root / "config.json"
            if (
                checkpoint is not None
                and saved.exists()
                and TrainConfig.model_validate_json(saved.read_text()) != config
            ):
                raise TrainingFailed("the run directory was started with another configuration; use a new one")
            atomic_write_text(saved, config.model_dump_json(indent=2))
        trainer = Trainer(stage, config, dist, checkpoint, trajectories, rollout)
        metrics = [m for m in run.read_metrics() if m["step"] <= trainer.step]
        status = RunStatus(
            stage=stage,
            state=RunState.RUNNING,
            step=trainer.step,
            checkpoint_step=trainer.step if checkpoint else None,
            resumed_from=trainer.step if checkpoint else None,
        )
        while trainer.step < config.steps:
            step_metrics = trainer.run_step()
            status.step = trainer.step
            due = trainer.step % config.checkpoint_every == 0 or trainer.step == config.steps
            if dist.is_main:  # every rank holds the same weights (DDP); one writes
                metrics.append({"step": trainer.step, "stage": stage, "time": time.time(), **_finite(step_metrics)})
                run.write_metrics(metrics)
                if due:
                    trainer.save(run)
            if due:
                status.checkpoint_step = trainer.step
            if dist.is_main:
                run.write_status(status)
        status.state = RunState.FINISHED
    except (TrainDataError, TrainingFailed) as exc:
        log.error("%s run in %s failed: %s", stage, run_dir, exc)
        status.state, status.message = RunState.FAILED, str(exc)
    if dist.is_main:
        run.create()
        run.write_status(status)
    return status
