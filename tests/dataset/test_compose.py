"""The composers: reproducible, shape-consistent KernelBench files; the LLM one against a scripted endpoint."""

from __future__ import annotations

import collections
from collections.abc import Callable

import pytest

from cuda_agent.dataset.compose import (
    PAPER_OP_COUNTS,
    SMALL_SHAPES,
    ComposedProblem,
    ComposeOptions,
    CompositionError,
    CompositionFailure,
    LLMComposer,
    check_on_meta,
    compose_chain,
    compose_one,
)
from cuda_agent.dataset.crawl import Catalogue
from cuda_agent.problem import load_problem
from tests.fakes.openai_server import FakeOpenAIServer, reply

OPTIONS = ComposeOptions(shapes=SMALL_SHAPES)


def test_same_seed_same_problems_other_seed_other_problems(catalogue: Catalogue) -> None:
    first = [compose_one(3, i, catalogue, OPTIONS) for i in range(20)]
    again = [compose_one(3, i, catalogue, OPTIONS) for i in reversed(range(20))][::-1]  # order does not matter
    other = [compose_one(4, i, catalogue, OPTIONS) for i in range(20)]
    assert first == again
    assert {p.source_hash for p in first if isinstance(p, ComposedProblem)} != {
        p.source_hash for p in other if isinstance(p, ComposedProblem)
    }


def test_op_counts_follow_the_configured_distribution(catalogue: Catalogue) -> None:
    problems = [compose_one(0, i, catalogue, OPTIONS) for i in range(300)]
    counts = collections.Counter(p.op_count for p in problems if isinstance(p, ComposedProblem))
    assert sum(counts.values()) >= 290  # composition almost never gives up
    assert set(counts) <= set(PAPER_OP_COUNTS)
    assert 0.75 < counts[2] / sum(counts.values()) < 0.92  # the paper's 83.8%
    only_three = ComposeOptions(shapes=SMALL_SHAPES, op_counts={3: 1.0})
    assert {p.op_count for p in (compose_one(0, i, catalogue, only_three) for i in range(10))} == {3}  # type: ignore[union-attr]


def test_written_file_is_kernelbench_format_and_matches_propagation(catalogue: Catalogue) -> None:
    code = compose_chain(["torch.nn.Conv2d", "torch.nn.BatchNorm2d", "torch.nn.functional.gelu"], catalogue, 1, OPTIONS)
    problem = load_problem(code)
    assert {"BATCH_SIZE", "CHANNELS", "HEIGHT", "WIDTH", "CONV2D_OUT_CHANNELS"} <= set(vars(problem.module))
    init = problem.get_init_inputs()
    model = problem.model_cls(*init)
    out = model(*problem.get_inputs())
    assert tuple(out.shape) == check_on_meta(code)
    # BatchNorm2d was bound to the convolution's output channels.
    assert model.batch_norm2d.num_features == model.conv2d.out_channels


def test_shape_mismatch_is_rejected_with_its_reason(catalogue: Catalogue) -> None:
    with pytest.raises(CompositionError, match=r"torch\.nn\.functional\.pixel_shuffle on \[\d+, \d+\]"):
        compose_chain(["torch.nn.Linear", "torch.nn.functional.pixel_shuffle"], catalogue, 0, OPTIONS)
    broken = compose_chain(["torch.nn.Linear"], catalogue, 0, OPTIONS).replace(
        "in_features=linear_in_features", "in_features=3"
    )
    with pytest.raises(CompositionError, match="does not run on the meta device"):
        check_on_meta(broken)


def test_stochastic_operators_stay_out_unless_allowed(catalogue: Catalogue) -> None:
    stochastic = {op.name for op in catalogue.operators if op.stochastic}
    drawn = [compose_one(0, i, catalogue, OPTIONS) for i in range(100)]
    assert not {op for p in drawn if isinstance(p, ComposedProblem) for op in p.ops} & stochastic


def test_llm_composer_records_prompt_and_response(
    catalogue: Catalogue, fake_openai: Callable[..., FakeOpenAIServer]
) -> None:
    written = compose_chain(["torch.nn.Linear", "torch.nn.ReLU"], catalogue, 0, OPTIONS)
    server = fake_openai([reply(f"Here it is:\n```python\n{written}```\n"), reply("I cannot do that.")])
    composer = LLMComposer(server.base_url, "fake-model")
    problem = composer.compose_one(5, 0, catalogue, OPTIONS)
    assert isinstance(problem, ComposedProblem)
    assert problem.code == written and problem.composer == "llm:fake-model"
    assert problem.llm is not None and problem.llm.temperature == 0.7
    assert server.requests[0]["temperature"] == 0.7
    assert problem.llm.prompt == server.requests[0]["messages"]
    assert all(op.rsplit(".", 1)[-1] in problem.llm.prompt[1]["content"] for op in problem.ops)
    assert "```python" in problem.llm.response
    refused = composer.compose_one(5, 1, catalogue, OPTIONS)
    assert isinstance(refused, CompositionFailure) and "no python code block" in refused.reason
