"""A toy task whose reward is the platform's own (cuda_agent.eval.reward.reward_for), for CPU runs of the whole
pipeline: two turns, one token each. The policy first names a tool (only `compile` is a valid call), then reports
a result: `fail` (an incorrect kernel), `x1` (correct, no faster), `x2e` (twice as fast as eager, slower than
torch.compile) or `x2b` (faster than both); a result reported without a successful compile is incorrect (-1),
so the state after the first turn matters and a critic has something to learn. Any other second token verifies
nothing (reward 0)."""

from __future__ import annotations

import json

import torch

from cuda_agent.contracts.agent import (
    AssistantTurn,
    RewardEvent,
    RolloutConfig,
    ToolCall,
    ToolObservation,
    Trajectory,
    TurnRecord,
)
from cuda_agent.contracts.train import TrainConfig
from cuda_agent.eval.reward import reward_for
from cuda_agent.train.ppo import Policy, register_rollout

# result token -> (correct, speedup vs eager, speedup vs torch.compile)
RESULTS: dict[str, tuple[bool, float | None, float | None]] = {
    "fail": (False, None, None),
    "x1": (True, 1.0, 0.8),
    "x2e": (True, 2.0, 0.9),
    "x2b": (True, 2.0, 1.5),
}
TOY_WORDS = ("task", "obs", "ok", "error", "compile", *RESULTS)


def _sample(policy: Policy, contexts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row after ``contexts`` ([B, T]): the token ids and their logprobs (temperature 1)."""
    with torch.no_grad():
        logits = policy.model(input_ids=contexts.to(policy.device)).logits[:, -1].float().cpu()
    log_probs = torch.log_softmax(logits, dim=-1)
    tokens = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
    return tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def speedup_toy(policy: Policy, config: TrainConfig, step: int, rank: int) -> list[Trajectory]:
    tokenizer = policy.tokenizer
    ids = {word: tokenizer.convert_tokens_to_ids(word) for word in (tokenizer.bos_token, *TOY_WORDS)}
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step * 1009 + rank)
    n = config.rollouts_per_step
    prompt = torch.tensor([[ids[tokenizer.bos_token], ids["task"]]] * n)
    tools, tool_logprobs = _sample(policy, prompt, generator)
    valid = tools == ids["compile"]
    observations = torch.stack([torch.full((n,), ids["obs"]), torch.where(valid, ids["ok"], ids["error"])], dim=1)
    second_prompt = torch.cat([prompt, tools.unsqueeze(1), observations], dim=1)
    results, result_logprobs = _sample(policy, second_prompt, generator)
    trajectories = []
    for i in range(n):
        tool = tokenizer.convert_ids_to_tokens(int(tools[i]))
        result = tokenizer.convert_ids_to_tokens(int(results[i]))
        events = []
        if result in RESULTS:
            correct, vs_eager, vs_compile = RESULTS[result]
            correct = correct and bool(valid[i])
            reward = reward_for(correct, vs_eager, vs_compile, config.reward_threshold)
            events.append(RewardEvent(turn=1, kind="verify", status=result, reward=reward, speedup_vs_eager=vs_eager))
        first = TurnRecord(
            index=0,
            assistant=AssistantTurn(
                tool_calls=[ToolCall(id="call-0", name=tool)],
                token_ids=[int(tools[i])],
                logprobs=[float(tool_logprobs[i])],
                prompt_token_ids=prompt[i].tolist(),
            ),
            observations=[ToolObservation(tool_call_id="call-0", name=tool, content="", ok=bool(valid[i]))],
        )
        second = TurnRecord(
            index=1,
            assistant=AssistantTurn(
                tool_calls=[ToolCall(id="call-1", name="verify", arguments=json.dumps({"result": result}))],
                token_ids=[int(results[i])],
                logprobs=[float(result_logprobs[i])],
                prompt_token_ids=second_prompt[i].tolist(),
            ),
            reward_events=events,
        )
        trajectories.append(
            Trajectory(
                id=f"toy-{step}-{rank}-{i}",
                policy="toy",
                model=policy.name,
                config=RolloutConfig(),
                prompt=[{"role": "user", "content": "task"}],
                turns=[first, second],
            )
        )
    return trajectories


register_rollout("speedup_toy", speedup_toy)
