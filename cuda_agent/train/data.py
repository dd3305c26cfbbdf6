"""Stored trajectories -> training sequences, and the batched tensors the algorithms read.

A training sequence is the whole conversation as the policy saw it (prompt, then every turn's observations and
completion), with a mask that is 1 only on tokens the policy sampled, the logprob each had when sampled, and the
reward of each turn placed on that turn's last sampled token. Tool output, user text and the prompt are context:
the model is never trained to produce them and they never carry reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from cuda_agent.contracts.agent import TokenSequence, Trajectory

if TYPE_CHECKING:
    from torch import nn


class TrainDataError(ValueError):
    """Input a run cannot train on (mismatched tokenizer, inconsistent token data, no trajectories)."""


@dataclass(frozen=True)
class TrainingSequence:
    trajectory_id: str
    input_ids: list[int]
    action_mask: list[int]  # 1: sampled by the policy (trained on); 0: prompt, tool output, user text
    old_logprobs: list[float]  # logprob of each token when sampled (0.0 where action_mask is 0)
    rewards: list[float]  # each turn's reward on its last sampled token, 0.0 elsewhere
    outcome: float  # the trajectory's reward: its best verify reward, 0.0 when it never verified
    passed: bool  # some verify found the candidate correct

    def __len__(self) -> int:
        return len(self.input_ids)


def trajectory_reward(trajectory: Trajectory) -> float | None:
    """The best reward of the trajectory's verifies (None: nothing was verified, or only sandbox errors)."""
    rewards = [e.reward for e in trajectory.reward_events if e.kind == "verify" and e.reward is not None]
    return max(rewards) if rewards else None


def turn_rewards(trajectory: Trajectory) -> list[float]:
    """The reward each turn earned: how much it raised the best verify reward so far (the first verify's reward in
    full, even when negative). With gamma = 1 the return from the start is then the trajectory's reward, the number
    the platform reports, and each improvement is credited to the turn whose candidate achieved it."""
    best: float | None = None
    out: list[float] = []
    for turn in trajectory.turns:
        before = best
        for event in turn.reward_events:
            if event.kind == "verify" and event.reward is not None:
                best = event.reward if best is None else max(best, event.reward)
        out.append(0.0 if best is None else best - (before if before is not None else 0.0))
    return out


def _turn_ends(trajectory: Trajectory, first_prompt_len: int) -> list[int]:
    """Where each turn's part (its observations, then its completion) ends in the response: the turn's whole context
    less the first prompt. The same arithmetic agent.jobs.turn_tokens splits the stored sequence into rows with."""
    return [
        len(t.assistant.prompt_token_ids or []) + len(t.assistant.token_ids or []) - first_prompt_len
        for t in trajectory.turns
    ]


def to_training_sequence(
    trajectory: Trajectory, sequence: TokenSequence | None, model_name: str, vocab_size: int
) -> TrainingSequence:
    """The training sequence of one trajectory; ``sequence`` is its stored token sequence (None: rebuilt from the
    turns' ids). Raises TrainDataError when it was sampled by another model (whose tokenizer gave other ids) or its
    token data do not line up."""
    if trajectory.model != model_name:
        raise TrainDataError(
            f"trajectory {trajectory.id} was sampled from model {trajectory.model!r} but this run trains "
            f"{model_name!r}: its token ids come from another tokenizer"
        )
    sequence = sequence or trajectory.token_sequence()
    if sequence is None:
        raise TrainDataError(f"trajectory {trajectory.id} has no token sequence (ids missing or context truncated)")
    n = len(sequence.response_ids)
    if not len(sequence.response_mask) == len(sequence.response_logprobs) == n:
        raise TrainDataError(f"trajectory {trajectory.id}: response ids, mask and logprobs differ in length")
    if set(sequence.response_mask) - {0, 1}:
        raise TrainDataError(f"trajectory {trajectory.id}: the response mask holds values other than 0 and 1")
    input_ids = sequence.prompt_ids + sequence.response_ids
    if input_ids and not 0 <= min(input_ids) <= max(input_ids) < vocab_size:
        raise TrainDataError(
            f"trajectory {trajectory.id} has token ids outside this tokenizer's vocabulary of {vocab_size}"
        )
    ends = _turn_ends(trajectory, len(sequence.prompt_ids))
    if ends and ends[-1] != n:
        raise TrainDataError(f"trajectory {trajectory.id}: its turns cover {ends[-1]} response tokens, not {n}")
    prompt_len = len(sequence.prompt_ids)
    rewards = [0.0] * len(input_ids)
    for end, reward in zip(ends, turn_rewards(trajectory), strict=True):
        if reward == 0.0:
            continue
        sampled = [i for i in range(end) if sequence.response_mask[i] == 1]
        if not sampled:
            raise TrainDataError(f"trajectory {trajectory.id} earned a reward before the policy sampled a token")
        rewards[prompt_len + sampled[-1]] += reward
    outcome = trajectory_reward(trajectory)
    return TrainingSequence(
        trajectory_id=trajectory.id,
        input_ids=input_ids,
        action_mask=[0] * prompt_len + list(sequence.response_mask),
        old_logprobs=[0.0] * prompt_len + list(sequence.response_logprobs),
        rewards=rewards,
        outcome=outcome if outcome is not None else 0.0,
        passed=any(e.kind == "verify" and e.reward is not None and e.reward > 0 for e in trajectory.reward_events),
    )


def load_trajectories(
    trajectory_ids: Sequence[str], tenant: str | None, *, need_tokens: bool = True
) -> list[tuple[Trajectory, TokenSequence | None]]:
    """Trajectories and their stored token sequences (with the masks agent_svc stored) from the database; with
    ``need_tokens`` off, a trajectory stored without one (another policy's, to retokenize) comes with None."""
    from cuda_agent.agent.jobs import load_token_sequence, load_trajectory

    out: list[tuple[Trajectory, TokenSequence | None]] = []
    for trajectory_id in trajectory_ids:
        trajectory = load_trajectory(trajectory_id, tenant)
        sequence = load_token_sequence(trajectory_id, tenant)
        if trajectory is None:
            raise TrainDataError(f"trajectory {trajectory_id} does not exist (or is another tenant's)")
        if sequence is None and need_tokens:
            raise TrainDataError(f"trajectory {trajectory_id} was stored without a token sequence")
        out.append((trajectory, sequence))
    return out


def retokenize(trajectory: Trajectory, tokenizer: Any, tools: list[dict[str, Any]], model_name: str) -> Trajectory:
    """Another policy's trajectory (the built-in kernel author's, another model's) in this model's tokens, as if it
    had written the replies: each turn's prompt is the conversation so far rendered by the tokenizer's chat template
    (with the agent's tools), its completion what the template adds for the reply, then end-of-sequence. Text is
    tokenized segment by segment, so each prompt extends the previous prompt and completion token for token. The
    logprobs are not this model's (None): for supervised fine-tuning and value targets, not for PPO's ratios."""
    from cuda_agent.train.serve import FALLBACK_CHAT_TEMPLATE

    template = tokenizer.chat_template or FALLBACK_CHAT_TEMPLATE

    def render(messages: list[dict[str, Any]], prompt: bool) -> str:
        return str(
            tokenizer.apply_chat_template(
                messages, tools=tools, chat_template=template, add_generation_prompt=prompt, tokenize=False
            )
        )

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def extension(longer: str, shorter: str, what: str) -> str:
        if not longer.startswith(shorter):
            raise TrainDataError(
                f"trajectory {trajectory.id}: the chat template does not render {what} as an extension of what "
                "came before, so no single token sequence holds the conversation"
            )
        return longer[len(shorter) :]

    conversation = trajectory.messages()
    start = len(trajectory.prompt)  # where the turn's reply is in the conversation
    seen_text, seen_ids = "", list[int]()
    turns = []
    for turn in trajectory.turns:
        prompt_text = render(conversation[:start], prompt=True)
        prompt_ids = seen_ids + encode(extension(prompt_text, seen_text, f"turn {turn.index}'s prompt"))
        full_text = render(conversation[: start + 1], prompt=False)
        completion = encode(extension(full_text, prompt_text, f"turn {turn.index}'s reply"))
        if tokenizer.eos_token_id is not None and completion[-1:] != [tokenizer.eos_token_id]:
            completion.append(tokenizer.eos_token_id)  # where the policy learns to stop
        assistant = turn.assistant.model_copy(
            update={"prompt_token_ids": prompt_ids, "token_ids": completion, "logprobs": None}
        )
        turns.append(turn.model_copy(update={"assistant": assistant}))
        seen_text, seen_ids = full_text, prompt_ids + completion
        start += 1 + len(turn.observations)
    return trajectory.model_copy(update={"turns": turns, "model": model_name})


@dataclass
class Batch:
    """Padded tensors, all but input_ids/attention_mask aligned with the *targets* input_ids[:, 1:] (position t
    holds what the model predicts from the prefix ending at t).

    Models run on input_ids without the attention mask: rows are right-padded, so under the causal mask no real
    token sees padding, and positions count from 0 in every row either way. What the model says at real tokens is
    then what it says with the mask, while scaled-dot-product attention takes its causal fast path (flash attention)
    instead of a materialized [B, 1, L, L] mask, which transformers always builds when torch.compile traces the mask
    tensor. Outputs at padding differ, and every loss masks them out."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    action_mask: torch.Tensor  # [B, L-1] float
    old_logprobs: torch.Tensor  # [B, L-1]
    rewards: torch.Tensor  # [B, L-1]
    outcomes: torch.Tensor  # [B]
    passed: torch.Tensor  # [B] float

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum())

    def rows(self, index: torch.Tensor) -> Batch:
        """The sub-batch of these rows (a PPO minibatch)."""
        return Batch(**{name: getattr(self, name)[index] for name in self.__dataclass_fields__})


def collate(sequences: Sequence[TrainingSequence], pad_id: int, device: torch.device | str = "cpu") -> Batch:
    """Right-pad the sequences into one batch; padding is masked out of every loss (and, coming last, out of what a
    causal model computes at real tokens)."""
    if not sequences:
        raise TrainDataError("empty batch")
    length = max(len(s) for s in sequences)

    def padded(values: list[Any], fill: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([v + [fill] * (length - len(v)) for v in values], dtype=dtype, device=device)

    ids = padded([s.input_ids for s in sequences], pad_id, torch.long)
    return Batch(
        input_ids=ids,
        attention_mask=padded([[1] * len(s) for s in sequences], 0, torch.long),
        action_mask=padded([s.action_mask for s in sequences], 0, torch.float32)[:, 1:],
        old_logprobs=padded([s.old_logprobs for s in sequences], 0.0, torch.float32)[:, 1:],
        rewards=padded([s.rewards for s in sequences], 0.0, torch.float32)[:, 1:],
        outcomes=torch.tensor([s.outcome for s in sequences], dtype=torch.float32, device=device),
        passed=torch.tensor([float(s.passed) for s in sequences], dtype=torch.float32, device=device),
    )


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the positions where mask is 1 (0 when there are none, so an empty mask never yields NaN)."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


class _LogprobsAndEntropy(torch.autograd.Function):
    """log p(target) and the entropy of softmax(logits) in float32, saving only the logits (in their own, often
    bf16, dtype) and two numbers per position for the backward, which recomputes the log-softmax. Autograd through
    log_softmax, exp and their product would keep two float32 copies of the full-vocabulary logits per micro-batch
    and read and write each several times."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        target_logits = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).float()
        taken = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        lse = target_logits - taken  # log-sum-exp of the row: log_softmax does not return it
        entropy = -(log_probs.exp().mul_(log_probs)).sum(-1)
        ctx.save_for_backward(logits, targets, lse, entropy)
        return taken, entropy

    @staticmethod
    def backward(ctx: Any, grad_taken: torch.Tensor, grad_entropy: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, targets, lse, entropy = ctx.saved_tensors
        # d taken / dz = onehot - p;  d entropy / dz = -p * (log p + entropy).
        log_probs = logits.float() - lse.unsqueeze(-1)
        probs = log_probs.exp()
        grad = log_probs.add_(entropy.unsqueeze(-1)).mul_(grad_entropy.unsqueeze(-1))
        grad = grad.add_(grad_taken.unsqueeze(-1)).mul_(probs).neg_()
        grad.scatter_add_(-1, targets.unsqueeze(-1), grad_taken.unsqueeze(-1))
        return grad.to(logits.dtype), None


def token_logprobs(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each target token under the model, and the entropy of each predicted distribution ([B, L-1])."""
    # No attention mask: see Batch. No KV cache: transformers builds one by default even for a training forward, and
    # under compilation its per-layer entry (cache.layers[layer_idx]) would give each decoder layer a graph of its own.
    logits = model(input_ids=batch.input_ids, use_cache=False).logits[:, :-1]
    taken, entropy = _LogprobsAndEntropy.apply(logits, batch.input_ids[:, 1:])
    return taken, entropy
