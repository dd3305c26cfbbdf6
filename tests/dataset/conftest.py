"""Fixtures of the dataset tests: the crawled catalogue and one 50-problem synthesis, shared by the module's tests
because the synthesis (a sandboxed compile check per problem) is the slow part."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cuda_agent.dataset.compose import SMALL_SHAPES, ComposeOptions
from cuda_agent.dataset.crawl import Catalogue, crawl
from cuda_agent.dataset.filters import FilterOptions
from cuda_agent.dataset.pipeline import SynthesisOptions, SynthesisReport, synthesize
from tests.agent.conftest import fake_openai  # noqa: F401  (the scripted OpenAI-compatible servers fixture)

SEED = 7


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return crawl()


def cpu_options(tmp: Path, **filters: object) -> SynthesisOptions:
    """Small shapes, with a kernel as large as the smallest input (some chains cannot be composed) and stochastic
    operators let into chains (the filter must take them out): the statistics then show removals with reasons.
    The compile filter runs on the aot_eager backend: dynamo capture and AOT tracing (where composed problems
    break) without inductor's C++ code generation, which costs ~5 s per problem on this shared 2-core machine
    (test_filters runs inductor itself)."""
    shapes = SMALL_SHAPES.model_copy(update={"kernel": [1, 3, 8]})
    return SynthesisOptions(
        compose=ComposeOptions(shapes=shapes, allow_stochastic=True),
        filters=FilterOptions(compile_backend="aot_eager", workers=2, timeout_s=120, cache_dir=tmp, **filters),
    )


@pytest.fixture(scope="session")
def synthesis(tmp_path_factory: pytest.TempPathFactory) -> tuple[SynthesisReport, float]:
    """(report, wall seconds) of synthesize(50) with the programmatic composer."""
    options = cpu_options(tmp_path_factory.mktemp("inductor"))
    started = time.monotonic()
    report = synthesize(50, SEED, options)
    return report, time.monotonic() - started
