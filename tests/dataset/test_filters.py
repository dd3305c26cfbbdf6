"""The execution filters: each rejection carries its filter and reason; sandboxed workers survive hangs and
crashes; the inductor compile check runs for real."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cuda_agent.dataset.filters import FilterName, FilterOptions, check_problem, filter_problems

TEMPLATE = """
import torch
import torch.nn as nn

N = 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(N, N)

    def forward(self, x):
        {body}


def get_inputs():
    return [torch.randn(4, N)]


def get_init_inputs():
    return []
"""

GOOD = TEMPLATE.format(body="return torch.relu(self.linear(x))")
NO_COMPILE = FilterOptions(compile=False)


@pytest.mark.parametrize(
    ("body", "name", "reason"),
    [
        ("raise RuntimeError('op that raises')", FilterName.EAGER, "RuntimeError: op that raises"),
        ("return self.linear(x[:, :3])", FilterName.EAGER, "shapes cannot be multiplied"),  # shape mismatch
        ("return nn.functional.dropout(self.linear(x), 0.5)", FilterName.STOCHASTIC, "dropout"),
        ("return self.linear(x) + torch.rand_like(x)", FilterName.STOCHASTIC, "differ"),
        ("return torch.log(self.linear(x) - 100.0)", FilterName.FINITE, "NaN or infinite"),
        ("return self.linear(x) * 0.0", FilterName.INPUT_SENSITIVE, "agree within"),
        ("return torch.softmax(self.linear(x)[:, :1], dim=1)", FilterName.INPUT_SENSITIVE, "agree within"),
    ],
)
def test_each_filter_rejects_with_its_reason(body: str, name: FilterName, reason: str) -> None:
    verdict = check_problem(TEMPLATE.format(body=body), NO_COMPILE)
    assert not verdict.passed
    assert verdict.failure is not None and verdict.failure.name is name
    assert reason in (verdict.failure.reason or "")


def test_a_file_that_does_not_load_is_rejected() -> None:
    verdict = check_problem(GOOD.replace("class Model", "class Other"), NO_COMPILE)
    assert verdict.failure is not None and verdict.failure.name is FilterName.LOADS
    assert "missing Model" in (verdict.failure.reason or "")


def test_time_window() -> None:
    slow = check_problem(GOOD, FilterOptions(compile=False, time_window_ms=(0.0, 1e-6)))
    assert slow.failure is not None and slow.failure.name is FilterName.TIME_WINDOW
    assert slow.eager_ms is None
    fine = check_problem(GOOD, NO_COMPILE)
    assert fine.passed and fine.eager_ms is not None and fine.eager_ms > 0
    assert [r.name for r in fine.results] == [
        FilterName.LOADS,
        FilterName.EAGER,
        FilterName.STOCHASTIC,
        FilterName.FINITE,
        FilterName.INPUT_SENSITIVE,
        FilterName.TIME_WINDOW,
    ]


@pytest.mark.sandbox
@pytest.mark.slow
def test_sandboxed_workers_with_inductor_survive_hangs_and_crashes(tmp_path: Path) -> None:
    """The default backend (inductor: C++ code generation and g++) in the sandbox, two workers, a problem that
    hangs (killed at its timeout) and one that kills its process: each costs only itself. The workers take turns
    at timing through a lock file they see read-only (what filter_problems does on cuda)."""
    (tmp_path / "locks").mkdir()
    lock = tmp_path / "locks" / "timing.lock"
    lock.touch()
    problems = [
        ("good", GOOD),
        ("gelu", TEMPLATE.format(body="return nn.functional.gelu(self.linear(x)) * 2.0")),
        ("hang", TEMPLATE.format(body="import time; time.sleep(600)")),
        ("crash", TEMPLATE.format(body="import os; os.abort()")),
    ]
    started = time.monotonic()
    options = FilterOptions(workers=2, timeout_s=40, cache_dir=tmp_path / "cache", timing_lock=lock)
    verdicts = filter_problems(problems, options)
    elapsed = time.monotonic() - started
    assert verdicts["good"].passed and verdicts["gelu"].passed, (verdicts["good"], verdicts["gelu"])
    assert verdicts["good"].results[-1].name is FilterName.COMPILE
    hang, crash = verdicts["hang"].failure, verdicts["crash"].failure
    assert hang is not None and hang.name is FilterName.HARNESS and "did not finish within 40 s" in (hang.reason or "")
    assert crash is not None and crash.name is FilterName.HARNESS and "SIGABRT" in (crash.reason or "")
    assert elapsed < 400


def test_timed_runs_wait_for_the_timing_lock(tmp_path: Path) -> None:
    """Workers sharing a GPU take turns at timing: a check whose lock another holder keeps does not finish its
    timing until the lock is let go."""
    import fcntl
    import threading

    lock = tmp_path / "timing.lock"
    lock.touch()
    verdicts = []
    with open(lock, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        checking = threading.Thread(
            target=lambda: verdicts.append(check_problem(GOOD, NO_COMPILE.model_copy(update={"timing_lock": lock})))
        )
        checking.start()
        checking.join(timeout=3.0)
        assert checking.is_alive() and not verdicts  # waiting at the lock: everything before timing is done in ms
    checking.join(timeout=60.0)
    assert verdicts and verdicts[0].passed, verdicts


def test_a_timing_lock_that_is_not_a_regular_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)  # opened for reading without O_NONBLOCK, a FIFO would block until a writer came
    link = tmp_path / "link.lock"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="not a regular file"):
        check_problem(GOOD, NO_COMPILE.model_copy(update={"timing_lock": fifo}))
    with pytest.raises(OSError):
        check_problem(GOOD, NO_COMPILE.model_copy(update={"timing_lock": link}))
