"""Problem and candidate loading: fresh namespaces and one-line errors naming what is wrong."""

from __future__ import annotations

import pytest

from cuda_agent.problem import ProblemError, call_inputs, load_candidate, load_problem, problem_hash
from tests.eval.helpers import RELU_ADD, TRANSPOSE_NEW


def test_loads_problem_and_builds_model() -> None:
    problem = load_problem(RELU_ADD)
    model = problem.model_cls(*call_inputs(problem.get_init_inputs, "get_init_inputs"))
    (x,) = call_inputs(problem.get_inputs, "get_inputs")
    assert model(x).shape == (64, 1024)


def test_problem_and_candidate_get_separate_namespaces() -> None:
    problem = load_problem(RELU_ADD, name="p_ns")
    load_candidate(TRANSPOSE_NEW.replace("import torch\n", "import torch\nsize = 1\n"), name="c_ns")
    assert problem.module.size == 1024


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("import torch\nclass Model: pass\ndef get_init_inputs(): return []\n", "missing get_inputs"),
        ("def get_inputs(): return []\ndef get_init_inputs(): return []\n", "missing Model"),
        ("class Model:\n  def f(:\n", "syntax error at line 2"),
        ("raise ValueError('boom')\n", "ValueError at line 1 while loading: boom"),
        ("Model = 3\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n", "Model must be a class"),
    ],
)
def test_bad_problems_name_the_problem(source: str, needle: str) -> None:
    with pytest.raises(ProblemError, match=needle):
        load_problem(source)


def test_bad_candidates_name_the_problem() -> None:
    with pytest.raises(ProblemError, match="no ModelNew"):
        load_candidate("import torch\n")
    with pytest.raises(ProblemError, match="syntax error at line 1"):
        load_candidate("class ModelNew(\n")


def test_inputs_must_be_a_list() -> None:
    with pytest.raises(ProblemError, match="must return a list"):
        call_inputs(lambda: 3, "get_inputs")
    with pytest.raises(ProblemError, match="get_inputs\\(\\) raised ZeroDivisionError"):
        call_inputs(lambda: 1 / 0, "get_inputs")


def test_problem_hash_ignores_line_endings_and_trailing_blanks() -> None:
    assert problem_hash("a = 1\nb = 2\n") == problem_hash("a = 1  \r\nb = 2\n\n")
    assert problem_hash("a = 1\n") != problem_hash("a = 2\n")
