"""Datasets in Postgres (idempotent, versioned by name), JSONL/parquet files, and the CLI sub-app end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cuda_agent.dataset.export import (
    DatasetFileError,
    DatasetRecord,
    read_records,
    records_from_report,
    write_records,
)
from cuda_agent.dataset.pipeline import SynthesisReport
from cuda_agent.dataset.store import DatasetConflict, load_dataset, save_report
from cuda_agent.db import session_scope
from cuda_agent.db.models import Dataset, DatasetItem, Problem
from tests.conftest import cli


@pytest.mark.integration
def test_saving_is_idempotent_and_a_name_means_one_set(pg_url: str, synthesis: tuple[SynthesisReport, float]) -> None:
    report, _ = synthesis
    first = save_report("ops-test", report)
    assert save_report("ops-test", report) == first
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Dataset)) == 1
        assert session.scalar(select(func.count()).select_from(DatasetItem)) == 50
        assert session.scalar(select(func.count()).select_from(Problem)) == 50
        spec = session.get(Dataset, first).spec  # type: ignore[union-attr]
    # Rejected problems are statistics, never items.
    assert spec["stats"]["removed"] == report.stats.removed and len(spec["rejections"]) == len(report.rejections)
    fewer = report.model_copy(update={"kept": report.kept[:10]})
    with pytest.raises(DatasetConflict):
        save_report("ops-test", fewer)
    save_report("ops-test@2", fewer)  # a new version is a new name; its problems rows are shared
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Problem)) == 50
    _, records = load_dataset("ops-test")
    assert [r.code for r in records] == [k.problem.code for k in report.kept]
    assert records[0].filters == report.kept[0].verdict.results and records[0].ops == report.kept[0].problem.ops


def test_jsonl_round_trip_and_validation(tmp_path: Path, synthesis: tuple[SynthesisReport, float]) -> None:
    report, _ = synthesis
    records = records_from_report(report)
    path = tmp_path / "ops.jsonl"
    write_records(records, path)
    row = json.loads(path.read_text().splitlines()[0])
    assert {"code", "ops", "data_source", "op_count", "filters", "seed", "source_hash", "model_hash"} <= set(row)
    assert row["data_source"].startswith("torch#")
    assert read_records(path) == records
    lines = path.read_text().splitlines()
    lines[3] = json.dumps({**json.loads(lines[3]), "code": json.loads(lines[3])["code"] + "\n# edited\n"})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetFileError, match="line 4: source_hash does not match code"):
        read_records(path)
    with pytest.raises(ValueError, match="does not define get_inputs"):
        DatasetRecord(code="class Model: pass\ndef get_init_inputs(): return []\n", ops=[], data_source="x")


def test_parquet(tmp_path: Path, synthesis: tuple[SynthesisReport, float]) -> None:
    records = records_from_report(synthesis[0])
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(DatasetFileError, match="parquet needs pyarrow"):
            write_records(records, tmp_path / "ops.parquet")
        return
    write_records(records, tmp_path / "ops.parquet")
    assert read_records(tmp_path / "ops.parquet") == records


def test_cli_import_then_export(tmp_path: Path, synthesis: tuple[SynthesisReport, float]) -> None:
    records = records_from_report(synthesis[0])[:5]
    source = tmp_path / "in.jsonl"
    write_records(records, source)
    env = {"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")}
    imported = cli("dataset", "import", str(source), "--name", "five", env=env)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["problems"] == 5
    again = cli("dataset", "import", str(source), "--name", "five", env=env)
    assert json.loads(again.stdout)["dataset_id"] == json.loads(imported.stdout)["dataset_id"]
    exported = cli("dataset", "export", "five", "--out", str(tmp_path / "out.jsonl"), env=env)
    assert exported.returncode == 0, exported.stderr
    assert read_records(tmp_path / "out.jsonl") == [r.model_copy(update={"model_hash": None}) for r in records]
    missing = cli("dataset", "export", "nope", "--out", str(tmp_path / "x.jsonl"), env=env)
    assert missing.returncode == 2 and "no dataset named 'nope'" in missing.stderr


@pytest.mark.slow
def test_cli_synthesize_then_filter(tmp_path: Path) -> None:
    env = {"CUDA_AGENT_DATA_DIR": str(tmp_path / "data")}
    out = tmp_path / "synth.jsonl"
    fast = ["--small", "--compile-backend", "aot_eager", "--workers", "1"]
    progress = tmp_path / "progress.json"
    synthesize = ["dataset", "synthesize", "-n", "3", "--seed", "5", *fast, "--checkpoint", str(progress)]
    made = cli(*synthesize, "--out", str(out), env=env, timeout=400)
    assert made.returncode == 0, made.stderr
    stats = json.loads(made.stdout)
    assert stats["kept"] == 3 and sum(stats["op_counts"].values()) == 3 and len(read_records(out)) == 3
    # Run again on the finished checkpoint: nothing is checked again, the same problems come out.
    again = cli(*synthesize[:-2], "--checkpoint", str(progress), "--name", "again", "--out", str(tmp_path / "b.jsonl"),
                env=env, timeout=400)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert read_records(tmp_path / "b.jsonl") == read_records(out)
    assert json.loads(again.stdout)["candidates"] == stats["candidates"]
    other = cli(*synthesize[:-2], "--checkpoint", str(progress), "--seed", "6", env=env)
    assert other.returncode == 2 and f"checkpoint {progress} belongs to another synthesis" in other.stderr
    # A window no problem fits: every one is removed, and the removal is reported by its filter.
    kept = tmp_path / "kept.jsonl"
    window = ["--window", "0", "0.000001"]
    filtered = cli("dataset", "filter", str(out), "--out", str(kept), *fast[1:], *window, env=env, timeout=400)
    assert filtered.returncode == 0, filtered.stderr
    assert json.loads(filtered.stdout) == {"read": 3, "kept": 0, "removed": {"filter:time_window": 3}}
    assert read_records(kept) == []
