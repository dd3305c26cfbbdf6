"""A tiny locally built model and the toy task, shared by the training tests."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

from cuda_agent.contracts.agent import Trajectory
from cuda_agent.contracts.train import TrainConfig
from cuda_agent.train.data import trajectory_reward
from cuda_agent.train.ppo import Policy
from cuda_agent.train.tiny import build_tiny_model
from cuda_agent.train.toy import TOY_WORDS, speedup_toy

MODEL_NAME = "tiny-toy"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", TOY_WORDS, seed=0)


def toy_rollouts(folder: Path, n: int, step: int) -> list[Trajectory]:
    """n toy trajectories sampled from the policy saved in ``folder`` (the step seeds the sampling)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = Policy(
        AutoModelForCausalLM.from_pretrained(folder),
        AutoTokenizer.from_pretrained(folder),
        MODEL_NAME,
        torch.device("cpu"),
    )
    return speedup_toy(policy, TrainConfig(model=str(folder), model_name=MODEL_NAME, rollouts_per_step=n), step, 0)


def mean_reward(trajectories: list[Trajectory]) -> float:
    return statistics.mean(trajectory_reward(t) or 0.0 for t in trajectories)
