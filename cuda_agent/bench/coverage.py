"""``cuda-agent bench coverage``: the share of problems the kernel author can express, on problems written for no
one: fused chains of 1-5 operators that the dataset's programmatic composer draws from what it crawled out of
``torch.nn`` and ``torch.nn.functional``.

It runs on the CPU in seconds (capture and planning work on the meta device; nothing is compiled or timed), so CI
gates on it: a change that makes the author less general shows here before any GPU run, and the reasons it gives
up name what to build next. The composed problems are the platform's own code (rendered from its templates), so
they are authored in this process rather than in the sandboxed child a tenant's problem gets.
"""

from __future__ import annotations

import warnings
from collections import Counter

from pydantic import BaseModel, Field, computed_field
from rich.console import Console


class CoverageFigures(BaseModel):
    seed: int
    drawn: int = Field(description="Compositions attempted.")
    composed: int = Field(0, description="Problems the composer produced (the rest failed its own shape checks).")
    authored: int = Field(0, description="Problems the author planned and emitted kernels for.")
    unsupported: dict[str, int] = Field(default_factory=dict, description="Why the others were not, most common first.")
    by_op_count: dict[int, list[int]] = Field(
        default_factory=dict, description="Operators in the chain -> [authored, composed]."
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def share(self) -> float:
        return self.authored / self.composed if self.composed else 0.0


def run_coverage(count: int, seed: int) -> CoverageFigures:
    """Compose problems 0..count-1 of the set drawn with ``seed`` and author each for device cuda."""
    from cuda_agent.author import author_problem
    from cuda_agent.dataset.compose import ComposedProblem, ComposeOptions, compose_one
    from cuda_agent.dataset.crawl import crawl

    figures = CoverageFigures(seed=seed, drawn=count)
    catalogue, options = crawl(), ComposeOptions()
    reasons: Counter[str] = Counter()
    for index in range(count):
        with warnings.catch_warnings():  # modules built at odd sizes warn (e.g. InstanceNorm's num_features)
            warnings.simplefilter("ignore")
            problem = compose_one(seed, index, catalogue, options)
            if not isinstance(problem, ComposedProblem):
                continue
            authored = author_problem(problem.code, "cuda")
        figures.composed += 1
        tally = figures.by_op_count.setdefault(problem.op_count, [0, 0])
        tally[1] += 1
        if authored.variants:
            figures.authored += 1
            tally[0] += 1
        else:
            reasons[authored.unsupported[:100]] += 1
    figures.unsupported = dict(reasons.most_common())
    figures.by_op_count = dict(sorted(figures.by_op_count.items()))
    return figures


def render(figures: CoverageFigures, threshold: float, console: Console) -> None:
    console.print(
        f"coverage: the author expressed {figures.authored}/{figures.composed} composed problems "
        f"({figures.share:.1%}; seed {figures.seed}, {figures.drawn} drawn)",
        highlight=False,
    )
    chains = ", ".join(f"{n} ops {a}/{c}" for n, (a, c) in figures.by_op_count.items())
    console.print(f"by chain length: {chains}", highlight=False)
    for reason, n in list(figures.unsupported.items())[:15]:
        console.print(f"  unsupported x{n}: {reason}", highlight=False)
    verdict = "ok" if figures.share >= threshold else "FAILED"
    console.print(f"gate: coverage at least {threshold:.0%} -> {verdict}", highlight=False)
