"""Sizing: the cost counted on the meta device, and batches fitted to a target eager time."""

from __future__ import annotations

import math
import random

import pytest
import torch
from torch import nn

from cuda_agent.dataset.compose import ComposedProblem, ComposeOptions, ShapeOptions, compose_one
from cuda_agent.dataset.crawl import Catalogue
from cuda_agent.dataset.sizing import CostModel, chain_cost, fitted_batch
from cuda_agent.eval.memory import meta_call
from cuda_agent.problem import load_problem


def test_the_cost_counts_bytes_flops_and_launches_of_the_forward() -> None:
    cost = chain_cost(lambda: [nn.Linear(64, 32), torch.relu], (8, 64))
    # Linear: input, weight, bias, output; relu: its input and output. Views (the weight's transpose) move nothing.
    assert cost.bytes == 4 * (8 * 64 + 32 * 64 + 32 + 8 * 32) + 4 * 2 * 8 * 32
    assert cost.flops == 2 * 8 * 64 * 32
    assert cost.launches == 2


MODEL = CostModel(target_ms=(4.0, 4.0), bytes_per_ms=1e9, flops_per_ms=1e12, launch_ms=0.01)


def test_the_batch_meets_the_target_within_a_power_of_two() -> None:
    def make() -> list[object]:
        return [torch.sigmoid, torch.tanh]

    batch = fitted_batch(make, (16, 1024), 16 * 1024, 2**40, MODEL, random.Random(0))
    assert batch & (batch - 1) == 0  # a power of two
    ms = chain_cost(make, (batch, 1024)).ms(MODEL)
    assert 4.0 / math.sqrt(2) <= ms <= 4.0 * math.sqrt(2), (batch, ms)


def test_the_batch_stops_where_a_tensor_would_pass_the_element_limit() -> None:
    batch = fitted_batch(lambda: [torch.sigmoid], (16, 1024), 16 * 1024, 2**20, MODEL, random.Random(0))
    assert batch == 2**20 // 1024


def test_a_chain_that_reads_dimension_0_as_no_batch_keeps_the_drawn_batch() -> None:
    # Pairs of rows, then a norm over exactly that many: at another batch the norm refuses its input.
    pairs = 16 * 15 // 2
    batch = fitted_batch(lambda: [torch.pdist, nn.RMSNorm(pairs)], (16, 256), 16 * 256, 2**40, MODEL, random.Random(0))
    assert batch == 16


@pytest.mark.parametrize("index", range(12))
def test_composed_problems_are_sized_towards_the_window(catalogue: Catalogue, index: int) -> None:
    """Default shapes: each problem is fitted (its estimate near its target, or a tensor at the element limit), and
    the written file runs on meta at the size its constants say."""
    shapes = ShapeOptions(fit=CostModel(target_ms=(5.0, 5.0)))
    problem = compose_one(7, index, catalogue, ComposeOptions(shapes=shapes))
    if not isinstance(problem, ComposedProblem):
        pytest.skip(problem.reason)  # a drawn chain that does not compose says nothing about sizing
    loaded = load_problem(problem.code, name="kb_sized")
    init = list(loaded.get_init_inputs())
    model, inputs, out = meta_call(loaded, init)
    if inputs[0].dim() < 2:
        return  # no batch dimension to fit
    ms = chain_cost(lambda: [model], tuple(inputs[0].shape)).ms(shapes.fit)
    largest = max(inputs[0].numel(), out.numel())
    at_limit = 2 * largest > shapes.max_elements
    assert at_limit or 5.0 / 2 <= ms <= 5.0 * 2, (problem.ops, list(inputs[0].shape), ms)
