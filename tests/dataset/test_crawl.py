"""The seed crawl: what it catalogues, how, and what it leaves out with its reason."""

from __future__ import annotations

import torch

from cuda_agent.dataset.crawl import Catalogue, OperatorKind, ParamRole


def test_modules_and_functionals_with_signatures_ranks_and_bindings(catalogue: Catalogue) -> None:
    assert catalogue.provenance == f"torch#{torch.__version__.split('+')[0]}"
    conv = catalogue.get("torch.nn.Conv2d")
    assert conv.kind is OperatorKind.MODULE and conv.ranks == [4] and "float32" in conv.dtypes
    assert conv.signature.startswith("Conv2d(") and "in_channels" in conv.signature
    assert {p.name: p.role for p in conv.params} == {
        "in_channels": ParamRole.INPUT_CHANNELS,
        "out_channels": ParamRole.OUTPUT_SIZE,
        "kernel_size": ParamRole.KERNEL,
    }
    linear = catalogue.get("torch.nn.Linear")
    assert linear.ranks == [1, 2, 3, 4, 5]  # a probe of every rank, not a table
    gelu = catalogue.get("torch.nn.functional.gelu")  # a C builtin: its signature comes from its docstring
    assert gelu.kind is OperatorKind.FUNCTIONAL and gelu.signature.startswith("gelu(input")
    assert not gelu.stochastic and "bfloat16" in gelu.dtypes
    assert all(op.provenance == catalogue.provenance for op in catalogue.operators)


def test_stochastic_operators_are_flagged_with_their_evidence(catalogue: Catalogue) -> None:
    dropout = catalogue.get("torch.nn.Dropout")
    assert dropout.stochastic and "differ" in (dropout.stochastic_evidence or "")
    # F.rrelu samples only in training mode (off by default): the run-twice probe cannot see it, its name can.
    rrelu = catalogue.get("torch.nn.functional.rrelu")
    assert rrelu.stochastic and "name" in (rrelu.stochastic_evidence or "")
    assert not catalogue.get("torch.nn.ReLU").stochastic


def test_non_primitives_are_skipped_with_reasons(catalogue: Catalogue) -> None:
    reasons = {s.name: s.reason for s in catalogue.skipped}
    assert "not a primitive" in reasons["torch.nn.Sequential"]
    assert "not a primitive" in reasons["torch.nn.TransformerEncoderLayer"]
    assert "target" in reasons["torch.nn.MSELoss"]
    assert "weight" in reasons["torch.nn.functional.conv2d"]  # the module form is catalogued instead
    assert "in-place" in reasons["torch.nn.functional.relu_"]
    names = {op.name for op in catalogue.operators}
    assert not names & set(reasons)


def test_catalogue_round_trips_through_json(catalogue: Catalogue) -> None:
    again = Catalogue.model_validate_json(catalogue.model_dump_json())
    assert again == catalogue
