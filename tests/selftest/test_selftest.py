"""`cuda-agent selftest`: the report table, and small real parts on a real stack it starts and stops itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from cuda_agent.selftest import PartReport, passed, render, to_json
from tests.conftest import PG_ADMIN_URL, cli


def test_table_counts_and_failures_with_reasons() -> None:
    sandbox = PartReport("sandbox", duration_s=12.0)
    sandbox.add("run_read_canary", True)
    sandbox.add("build_fifo", False, "no verdict within 90 s\n(the host is stuck)")
    empty = PartReport("hacks")
    console = Console(record=True, width=200)
    render([sandbox, empty], console)
    text = console.export_text()
    assert "│ sandbox │ 2     │ 1    │ 1      │ 12 s │" in text
    assert "FAILED sandbox/build_fifo: no verdict within 90 s (the host is stuck)" in text
    assert "FAILED hacks: tried nothing" in text
    assert not passed([sandbox]) and not passed([empty])
    document = to_json([sandbox])
    assert document["passed"] is False
    assert document["parts"][0]["checks"][1] == {
        "name": "build_fifo",
        "held": False,
        "reason": "no verdict within 90 s (the host is stuck)",
    }


def test_unknown_part_or_attack_is_a_clear_error() -> None:
    done = cli("selftest", "--parts", "tenancy,nosuch")
    assert done.returncode == 2
    assert "unknown part(s) nosuch; choose from tenancy, sandbox" in done.stderr
    done = cli("selftest", "--parts", "sandbox", "--only", "run_control,run_typo")
    assert done.returncode == 2
    assert "unknown attack or hack name(s) run_typo" in done.stderr


def _selftest_databases() -> set[str]:
    from sqlalchemy import create_engine, text

    engine = create_engine(PG_ADMIN_URL)
    with engine.connect() as conn:
        names = set(
            conn.execute(text("SELECT datname FROM pg_database WHERE datname LIKE 'cuda_agent_selftest_%'")).scalars()
        )
    engine.dispose()
    return names


@pytest.mark.integration
@pytest.mark.sandbox
@pytest.mark.slow
def test_real_parts_on_a_real_stack(tmp_path: Path) -> None:
    """Sandbox attacks through the eval worker of a private stack: the run drops its database, and the table and
    JSON agree. (The tenancy and badinput parts run on every CI run through scripts/test.sh's own selftest call.)"""
    before = _selftest_databases()
    out = tmp_path / "report.json"
    only = "run_control,run_read_canary,run_network"
    done = cli("selftest", "--parts", "sandbox", "--only", only, "--json", str(out), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    parts = {p["part"]: p for p in report["parts"]}
    assert report["passed"] is True
    checks = {c["name"]: c for c in parts["sandbox"]["checks"]}
    assert set(checks) == {*only.split(","), "host_responsive"}
    assert all(c["held"] for c in checks.values()), checks
    # The stack's own start-up is reported as a part of its own, so a stack that never came up fails the run.
    assert set(parts) == {"stack", "sandbox"} and all(c["held"] for c in parts["stack"]["checks"])
    assert "│ sandbox │ 4 " in done.stdout
    assert _selftest_databases() == before
