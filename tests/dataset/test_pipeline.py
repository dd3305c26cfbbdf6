"""synthesize(50) with the programmatic composer: every kept problem loads and passes the filters, the statistics
account for every candidate, and the same seed gives the same set."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from cuda_agent.dataset.compose import PAPER_OP_COUNTS, SMALL_SHAPES, ComposeOptions, compose_chain
from cuda_agent.dataset.crawl import Catalogue
from cuda_agent.dataset.filters import FilterName, FilterOptions, ProblemVerdict, check_problem, filter_problems
from cuda_agent.dataset.pipeline import (
    LLMOptions,
    Stage,
    SynthesisError,
    SynthesisProgress,
    SynthesisReport,
    synthesize,
)
from cuda_agent.problem import load_problem, problem_hash
from tests.dataset.conftest import SEED, cpu_options
from tests.fakes.openai_server import FakeOpenAIServer, reply

log = logging.getLogger(__name__)


def test_fifty_kept_problems_load_and_pass_every_filter(
    synthesis: tuple[SynthesisReport, float], catalogue: Catalogue
) -> None:
    report, elapsed = synthesis
    stats = report.stats
    log.warning(
        "synthesize(50): %.1f s, %.1f kept/min, %d candidates, removed %s, op counts %s",
        elapsed,
        stats.kept_per_minute,
        stats.candidates,
        stats.removed,
        stats.op_counts,
    )
    assert len(report.kept) == 50 and stats.kept == 50
    assert len({k.problem.source_hash for k in report.kept}) == 50
    stochastic = {op.name for op in catalogue.operators if op.stochastic}
    for kept in report.kept:
        assert kept.verdict.passed and not set(kept.problem.ops) & stochastic
        assert [r.name for r in kept.verdict.results][-1] is FilterName.COMPILE  # ran under torch.compile too
        assert kept.problem.source_hash == problem_hash(kept.problem.code)
        problem = load_problem(kept.problem.code)
        problem.model_cls(*problem.get_init_inputs())(*problem.get_inputs())
    # One re-check in this process agrees with the sandboxed verdict.
    again = check_problem(report.kept[0].problem.code, report.options.filters)
    assert again.passed


def test_statistics_account_for_every_candidate(synthesis: tuple[SynthesisReport, float]) -> None:
    report, _ = synthesis
    stats = report.stats
    assert stats.candidates == stats.kept + sum(stats.removed.values()) == stats.kept + len(report.rejections)
    assert sorted([k.problem.index for k in report.kept] + [r.index for r in report.rejections]) == list(
        range(stats.candidates)
    )
    for rejection in report.rejections:
        assert rejection.reason and rejection.stage in stats.removed
        assert rejection.reason in stats.reasons[rejection.stage] or len(stats.reasons[rejection.stage]) == 5
    assert Stage.INFRASTRUCTURE not in stats.removed
    # Chains whose kernel outgrew the input were given up at composition; the stochastic ones let in were filtered.
    assert stats.removed[Stage.COMPOSE] > 0 and "kernel" in " ".join(stats.reasons[Stage.COMPOSE]).lower()
    assert stats.removed[Stage.filter(FilterName.STOCHASTIC)] > 0
    assert sum(stats.op_counts.values()) == 50 and set(stats.op_counts) <= set(PAPER_OP_COUNTS)
    assert stats.op_counts[2] >= 30  # the paper's 83.8% two-operator share, give or take the filters
    assert stats.paper_op_count_share == PAPER_OP_COUNTS
    assert stats.kept_per_minute > 0


def test_same_seed_same_set_whatever_the_batching(synthesis: tuple[SynthesisReport, float], tmp_path: Path) -> None:
    """A rerun asking for fewer problems decides on fewer candidates, in other batches: it keeps exactly the
    first ones of the full run, with the same rejections before them."""
    report, _ = synthesis
    rerun = synthesize(12, SEED, cpu_options(tmp_path))
    assert [k.problem for k in rerun.kept] == [k.problem for k in report.kept[:12]]
    last = rerun.kept[-1].problem.index
    assert rerun.rejections == [r for r in report.rejections if r.index < last]


class Stopped(Exception):
    """The process running the synthesis dies (the device call's time ran out)."""


@pytest.mark.slow  # two synthesis runs, one cut short
def test_a_stopped_synthesis_goes_on_from_its_checkpoint(
    synthesis: tuple[SynthesisReport, float], tmp_path: Path
) -> None:
    """Stopped after its first batch, a synthesis resumed from the checkpoint decides on the candidates after it
    only, and keeps what the uninterrupted run keeps (the deduplicator rebuilt from the kept problems)."""
    report, _ = synthesis
    checkpoint = tmp_path / "progress.json"
    options = cpu_options(tmp_path).model_copy(update={"batch_limit": 12})

    def stop(kept: int, requested: int) -> None:
        raise Stopped

    with pytest.raises(Stopped):
        synthesize(20, SEED, options, progress=stop, checkpoint=checkpoint)
    first = SynthesisProgress.model_validate_json(checkpoint.read_text())
    assert 0 < len(first.kept) < 20 and first.elapsed_s > 0
    checked: list[int] = []

    def check(problems: list[tuple[str, str]], filters: FilterOptions) -> dict[str, ProblemVerdict]:
        checked.extend(int(key) for key, _ in problems)
        return filter_problems(problems, filters)

    resumed = synthesize(20, SEED, options, check=check, checkpoint=checkpoint)
    assert checked and min(checked) == first.next_index
    assert [k.problem for k in resumed.kept] == [k.problem for k in report.kept[:20]]
    assert resumed.rejections == [r for r in report.rejections if r.index < resumed.kept[-1].problem.index]
    assert resumed.stats.elapsed_s > first.elapsed_s
    # Another synthesis's checkpoint is refused, by name, before anything runs.
    with pytest.raises(SynthesisError, match=f"checkpoint {checkpoint} belongs to another synthesis.*seed={SEED + 1}"):
        synthesize(20, SEED + 1, options, checkpoint=checkpoint)
    checkpoint.write_text("{not json")
    with pytest.raises(SynthesisError, match="not a synthesis checkpoint"):
        synthesize(20, SEED, options, checkpoint=checkpoint)
    # A link left at the path is refused, not followed (nor is what it points to overwritten).
    checkpoint.unlink()
    checkpoint.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(SynthesisError, match=f"checkpoint {checkpoint}: "):
        synthesize(20, SEED, options, checkpoint=checkpoint)
    assert not (tmp_path / "elsewhere.json").exists()


def test_llm_composer_through_the_pipeline(
    tmp_path: Path, catalogue: Catalogue, fake_openai: Callable[..., FakeOpenAIServer]
) -> None:
    """An endpoint that answers every request with the same problem: the first is kept, with its exchange
    recorded; the others are duplicates of it."""
    code = compose_chain(["torch.nn.Conv2d", "torch.nn.SiLU"], catalogue, 0, ComposeOptions(shapes=SMALL_SHAPES))
    server = fake_openai([], then=reply(f"```python\n{code}```"))
    options = cpu_options(tmp_path, compile=False).model_copy(
        update={"composer": "llm", "llm": LLMOptions(base_url=server.base_url, model="fake-model"), "max_candidates": 3}
    )
    report = synthesize(2, SEED, options)
    assert [k.problem.code for k in report.kept] == [code]
    assert report.kept[0].problem.llm is not None and report.kept[0].problem.llm.response.startswith("```python")
    assert report.stats.removed == {Stage.DUPLICATE: 2} and len(server.requests) == 3


def test_a_broken_sandbox_fails_the_synthesis_instead_of_rejecting_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cuda_agent.sandbox.bwrap as bwrap

    monkeypatch.setattr(bwrap.shutil, "which", lambda name, path=None: None)
    with pytest.raises(SynthesisError, match="bubblewrap"):
        synthesize(3, SEED, cpu_options(tmp_path))
