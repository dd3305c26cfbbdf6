"""Decontamination against an evaluation directory and dedup within the dataset, by normalized-AST similarity."""

from __future__ import annotations

import re
from pathlib import Path

from cuda_agent.dataset.compose import ComposedProblem, compose_chain, compose_one
from cuda_agent.dataset.crawl import Catalogue
from cuda_agent.dataset.dedupe import Deduplicator, model_units, similarity
from cuda_agent.dataset.pipeline import Stage, synthesize
from tests.dataset.conftest import cpu_options

EVAL_PROBLEM = '''
import torch
import torch.nn as nn

batch_size = 128
in_channels = 3
out_channels = 16


class Model(nn.Module):
    """Conv, then two branches summed."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(4, out_channels)
        self.scale = 2.0

    def forward(self, x):
        x = self.conv(x)
        a = torch.sigmoid(x)
        b = self.norm(x)
        return a * b * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_channels, 32, 32)]


def get_init_inputs():
    return [in_channels, out_channels, 3]
'''

# Renamed identifiers, the independent lines of both methods swapped, no docstring, other constants.
LIGHTLY_EDITED = """
import torch
import torch.nn as nn

N, C_IN, C_OUT = 64, 3, 32


class Model(nn.Module):
    def __init__(self, c_in, c_out, k):
        super(Model, self).__init__()
        self.gn = nn.GroupNorm(8, c_out)
        self.scale = 0.5
        self.conv2d = nn.Conv2d(c_in, c_out, k)

    def forward(self, inp):
        h = self.conv2d(inp)
        normed = self.gn(h)
        gate = torch.sigmoid(h)
        return gate * normed * self.scale


def get_inputs():
    return [torch.randn(N, C_IN, 16, 16)]


def get_init_inputs():
    return [C_IN, C_OUT, 5]
"""


def test_lightly_edited_copy_is_contaminated_and_an_unrelated_problem_is_not(
    tmp_path: Path, catalogue: Catalogue
) -> None:
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "42_Conv_GroupNorm_Sigmoid.py").write_text(EVAL_PROBLEM)
    (tmp_path / "broken.py").write_text("this is not python (")
    dedupe = Deduplicator(threshold=0.9)
    assert dedupe.load_eval_dir(tmp_path) == 1
    match = dedupe.contamination(LIGHTLY_EDITED)
    assert match is not None and match.name == "level2/42_Conv_GroupNorm_Sigmoid.py" and match.score > 0.9
    unrelated = compose_chain(["torch.nn.Linear", "torch.nn.functional.softplus"], catalogue)
    assert dedupe.contamination(unrelated) is None


def test_order_that_carries_meaning_is_kept() -> None:
    # The same two operators, applied in the other order, is another problem.
    swapped = EVAL_PROBLEM.replace(
        "        x = self.conv(x)\n        a = torch.sigmoid(x)",
        "        x = torch.sigmoid(x)\n        a = self.conv(x)",
    )
    units, other = model_units(EVAL_PROBLEM), model_units(swapped)
    assert units is not None and other is not None
    assert similarity(units, other) < 1.0
    assert similarity(units, model_units(LIGHTLY_EDITED) or []) == 1.0


def test_exact_and_near_duplicates_within_the_dataset(catalogue: Catalogue) -> None:
    first = compose_chain(["torch.nn.Conv2d", "torch.nn.ReLU"], catalogue, seed=1)
    same_ops_other_sizes = compose_chain(["torch.nn.Conv2d", "torch.nn.ReLU"], catalogue, seed=2)
    other_activation = compose_chain(["torch.nn.Conv2d", "torch.nn.Tanh"], catalogue, seed=1)
    assert first != same_ops_other_sizes
    dedupe = Deduplicator(threshold=0.9)
    dedupe.keep("first", first)
    assert dedupe.duplicate(first) is not None
    match = dedupe.duplicate(same_ops_other_sizes)
    assert match is not None and match.name == "first" and match.score == 1.0
    assert dedupe.duplicate(other_activation) is None  # one operator of two differs: 0.8


def test_synthesis_drops_a_problem_found_in_the_eval_dir(tmp_path: Path, catalogue: Catalogue) -> None:
    options = cpu_options(tmp_path / "cache", compile=False)
    first = compose_one(11, 0, catalogue, options.compose)
    assert isinstance(first, ComposedProblem)
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "copy.py").write_text(re.sub(r"\bx\b", "inp", first.code))
    report = synthesize(2, 11, options.model_copy(update={"eval_dir": eval_dir}))
    assert report.rejections, report.stats
    assert report.rejections[0].index == 0 and report.rejections[0].stage == Stage.DECONTAMINATE
    assert "copy.py" in report.rejections[0].reason
    assert report.stats.removed == {Stage.DECONTAMINATE: 1}
    assert 0 not in {k.problem.index for k in report.kept}
