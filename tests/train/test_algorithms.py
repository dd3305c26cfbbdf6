"""The algorithms on hand-computed cases: masks, reward placement, GAE, the clipped objective, schedules, RFT."""

from __future__ import annotations

import math

import pytest
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
from cuda_agent.contracts.train import ClipSchedule, TrainConfig
from cuda_agent.train.data import TrainDataError, collate, to_training_sequence
from cuda_agent.train.ppo import clip_range, clipped_objective, entropy_coef
from cuda_agent.train.rft import rejection_filter, sft_loss
from cuda_agent.train.value import explained_variance, gae


def turn(index: int, prompt: list[int], completion: list[int], *, calls=(("compile", "{}"),), ok=True, rewards=()):
    return TurnRecord(
        index=index,
        assistant=AssistantTurn(
            tool_calls=[ToolCall(id=f"c{index}-{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)],
            token_ids=completion,
            logprobs=[-0.5] * len(completion),
            prompt_token_ids=prompt,
        ),
        observations=[ToolObservation(tool_call_id=f"c{index}-0", name=calls[0][0], content="", ok=ok)],
        reward_events=[RewardEvent(turn=index, kind="verify", status="x", reward=r) for r in rewards],
    )


def trajectory(turns: list[TurnRecord], model: str = "m", id: str = "t") -> Trajectory:
    return Trajectory(id=id, policy="p", model=model, config=RolloutConfig(), prompt=[], turns=turns)


def three_turns(rewards=((), (-1.0,), (2.0,)), **kw) -> Trajectory:
    # prompt [1, 2]; turn 0 samples [3, 4]; observation [9]; turn 1 samples [5]; observation [9, 9]; turn 2 samples [6]
    return trajectory(
        [
            turn(0, [1, 2], [3, 4], rewards=rewards[0], **kw),
            turn(1, [1, 2, 3, 4, 9], [5], calls=(("verify", "{}"),), rewards=rewards[1]),
            turn(2, [1, 2, 3, 4, 9, 5, 9, 9], [6], calls=(("compile", '{"v": 2}'),), rewards=rewards[2]),
        ]
    )


def test_sequence_masks_only_sampled_tokens_and_places_turn_rewards_on_their_last_token() -> None:
    sequence = to_training_sequence(three_turns(), None, "m", vocab_size=10)
    assert sequence.input_ids == [1, 2, 3, 4, 9, 5, 9, 9, 6]
    assert sequence.action_mask == [0, 0, 1, 1, 0, 1, 0, 0, 1]
    assert sequence.old_logprobs == [0, 0, -0.5, -0.5, 0, -0.5, 0, 0, -0.5]
    # Turn 1 verified at -1 (its reward in full), turn 2 raised the best to 2 (+3): the return is the best reward.
    assert sequence.rewards == [0, 0, 0, 0, 0, -1.0, 0, 0, 3.0]
    assert sequence.outcome == 2.0 and sequence.passed


def test_trajectory_of_another_model_or_vocabulary_is_refused() -> None:
    with pytest.raises(TrainDataError, match=r"sampled from model 'other'.*another tokenizer"):
        to_training_sequence(trajectory(three_turns().turns, model="other"), None, "m", vocab_size=10)
    with pytest.raises(TrainDataError, match="outside this tokenizer's vocabulary"):
        to_training_sequence(three_turns(), None, "m", vocab_size=7)


def test_masked_loss_ignores_observation_and_prompt_tokens() -> None:
    batch = collate([to_training_sequence(three_turns(), None, "m", 10)], pad_id=0)
    logprobs = torch.tensor([[-9.0, -1.0, -2.0, -9.0, -3.0, -9.0, -9.0, -4.0]])  # -9 where the targets are context
    assert batch.action_mask.tolist() == [[0, 1, 1, 0, 1, 0, 0, 1]]
    assert sft_loss(logprobs, batch.action_mask).item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    changed = logprobs.clone()
    changed[batch.action_mask == 0] = -100.0
    assert sft_loss(changed, batch.action_mask).item() == pytest.approx(2.5)


def test_gae_with_gamma_1_lambda_095_equals_the_direct_sum_and_skips_observations() -> None:
    gamma, lam = 1.0, 0.95
    # Actions at positions 0, 1, 3, 6 (2, 4, 5 are tool output); rewards on two turns' last tokens.
    mask = torch.tensor([[1, 1, 0, 1, 0, 0, 1]], dtype=torch.float32)
    rewards = torch.tensor([[0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 3.0]])
    values = torch.tensor([[0.5, 0.2, 7.0, -0.3, 7.0, 7.0, 1.1]])
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    steps = [0, 1, 3, 6]
    v = [values[0, i].item() for i in steps] + [0.0]  # the episode ends after the last action
    r = [rewards[0, i].item() for i in steps]
    delta = [r[k] + gamma * v[k + 1] - v[k] for k in range(4)]
    direct = [sum((gamma * lam) ** j * delta[k + j] for j in range(4 - k)) for k in range(4)]
    assert [advantages[0, i].item() for i in steps] == pytest.approx(direct)
    assert [returns[0, i].item() for i in steps] == pytest.approx([a + v[k] for k, a in enumerate(direct)])
    assert advantages[0, [2, 4, 5]].tolist() == [0, 0, 0]
    # lambda = 1, gamma = 1: the advantage is the undiscounted return-to-go minus the value.
    advantages, _ = gae(rewards, values, mask, 1.0, 1.0)
    assert [advantages[0, i].item() for i in steps] == pytest.approx([2 - 0.5, 2 - 0.2, 2 + 0.3, 3 - 1.1])


def test_clipped_objective_clips_asymmetrically() -> None:
    old = torch.zeros(1, 4)
    mask = torch.ones(1, 4)
    ratios = torch.tensor([[1.5, 1.5, 0.5, 0.5]])
    advantages = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    loss, clip_fraction = clipped_objective(ratios.log(), old, advantages, mask, clip_low=0.2, clip_high=0.28)
    # +A with ratio 1.5 is capped at 1.28; -A with ratio 0.5 is held at 0.8; the other two are not clipped.
    assert loss.item() == pytest.approx(-(1.28 - 1.5 + 0.5 - 0.8) / 4)
    assert clip_fraction.item() == pytest.approx(0.5)
    inside = torch.tensor([[1.25, 0.85, 1.0, 1.0]]).log()
    loss, clip_fraction = clipped_objective(inside, old, advantages, mask, 0.2, 0.28)
    assert clip_fraction.item() == 0.0 and loss.item() == pytest.approx(-(1.25 - 0.85 + 1.0 - 1.0) / 4)
    # The asymmetry: a ratio of 1.25 for a positive advantage is inside [0.8, 1.28] but 0.75 for a negative one is not.
    _, low = clipped_objective(
        torch.tensor([[0.75]]).log(), torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1), 0.2, 0.28
    )
    assert low.item() == 1.0


def test_schedules_give_the_stated_values() -> None:
    asymmetric = TrainConfig(model="m", model_name="m", steps=200)
    assert clip_range(asymmetric, 0) == clip_range(asymmetric, 199) == (0.2, 0.28)
    decayed = TrainConfig(model="m", model_name="m", clip_schedule=ClipSchedule.DECAYED)
    assert clip_range(decayed, 0) == clip_range(decayed, 49) == (0.1, 0.1)
    assert clip_range(decayed, 50)[0] == pytest.approx(0.095)
    assert clip_range(decayed, 149)[0] == pytest.approx(0.1 * 0.95**2)
    assert [entropy_coef(asymmetric, s) for s in (0, 50, 100, 200, 300)] == pytest.approx([0.01, 0.0075, 0.005, 0, 0])
    assert asymmetric.actor_lr == 3e-6 and asymmetric.critic_lr == 6e-6
    assert (asymmetric.gamma, asymmetric.gae_lambda) == (1.0, 0.95)


def test_rft_keeps_only_positive_trajectories_without_loops_or_invalid_calls() -> None:
    good = three_turns()
    negative = three_turns(rewards=((), (-1.0,), ()))
    looping = trajectory(
        [
            turn(0, [1], [3], calls=(("bash", '{"c": "ls"}'),)),
            turn(1, [1, 3, 9], [4], calls=(("bash", '{"c": "ls"}'),), rewards=(1.0,)),
        ]
    )
    same_call_apart = trajectory(
        [
            turn(0, [1], [3], calls=(("bash", '{"c": "ls"}'), ("compile", "{}"), ("bash", '{"c": "ls"}'))),
            turn(1, [1, 3, 9], [4], rewards=(1.0,)),
        ],
        id="apart",
    )
    refused_call = three_turns(ok=False)
    bad_json = trajectory([turn(0, [1], [3], calls=(("compile", "{oops"),), rewards=(3.0,))])
    kept, rejections = rejection_filter([good, negative, looping, same_call_apart, refused_call, bad_json], 2)
    assert [t.id for t in kept] == ["t", "apart"]
    assert (rejections.no_reward, rejections.loop, rejections.invalid_call) == (1, 1, 2)


def test_explained_variance() -> None:
    returns = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns, returns, mask) == 1.0
    assert explained_variance(torch.full_like(returns, 2.0), returns, mask) == pytest.approx(0.0)
    assert math.isnan(explained_variance(returns, torch.ones_like(returns), mask))
