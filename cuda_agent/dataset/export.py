"""Dataset files: JSONL and parquet with one record per problem.

The schema is the released set's (``code``, ``ops``, ``data_source``) plus ours (``op_count``, ``filters``,
``seed``, ``index``, ``source_hash``, ``model_hash``). Import validates every record: a record whose hash does not
match its code, whose op count disagrees with its ops, or whose code does not define the KernelBench names is
refused with its line, so a dataset file read back is one we could have written.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cuda_agent.dataset.dedupe import model_units, units_hash
from cuda_agent.dataset.filters import FilterResult
from cuda_agent.dataset.pipeline import SynthesisReport
from cuda_agent.problem import problem_hash

_KERNELBENCH_NAMES = ("Model", "get_inputs", "get_init_inputs")


class DatasetFileError(ValueError):
    """A dataset file that cannot be written or read; the message names the file (and line) and what is wrong."""


class DatasetRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, description="The KernelBench-format problem file.")
    ops: list[str] = Field(description="Qualified names of its operators, in order.")
    data_source: str = Field(min_length=1, description="Where its operators came from, e.g. torch#2.14.1.")
    op_count: int | None = None
    filters: list[FilterResult] | None = Field(None, description="The execution filters it passed.")
    seed: int | None = None
    index: int | None = None
    composer: str | None = None
    source_hash: str | None = Field(None, description="cuda_agent.problem.problem_hash of code.")
    model_hash: str | None = Field(None, description="Hash of the normalized Model (dedupe.model_units).")

    @model_validator(mode="after")
    def _consistent(self) -> DatasetRecord:
        try:
            tree = ast.parse(self.code)
        except SyntaxError as exc:
            raise ValueError(f"code does not parse: line {exc.lineno}: {exc.msg}") from None
        defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
        missing = [n for n in _KERNELBENCH_NAMES if n not in defined]
        if missing:
            raise ValueError(f"code does not define {', '.join(missing)}")
        if self.op_count is not None and self.op_count != len(self.ops):
            raise ValueError(f"op_count {self.op_count} but {len(self.ops)} ops")
        if self.source_hash is not None and self.source_hash != problem_hash(self.code):
            raise ValueError("source_hash does not match code")
        return self


def records_from_report(report: SynthesisReport) -> list[DatasetRecord]:
    records = []
    for kept in report.kept:
        p = kept.problem
        units = model_units(p.code)
        records.append(
            DatasetRecord(
                code=p.code,
                ops=p.ops,
                data_source=p.data_source,
                op_count=p.op_count,
                filters=kept.verdict.results,
                seed=p.seed,
                index=p.index,
                composer=p.composer,
                source_hash=p.source_hash,
                model_hash=units_hash(units) if units is not None else None,
            )
        )
    return records


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise DatasetFileError("parquet needs pyarrow, which is not installed (pip install pyarrow)") from None
    return pyarrow


def write_records(records: list[DatasetRecord], path: Path) -> None:
    """``.jsonl`` or ``.parquet`` by suffix."""
    rows = [r.model_dump(mode="json") for r in records]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".parquet":
        pa = _pyarrow()
        # filters is nested and optional: a JSON text column reads the same in every parquet reader.
        flat = [{**row, "filters": json.dumps(row["filters"])} for row in rows]
        pa.parquet.write_table(pa.Table.from_pylist(flat), path)
    else:
        raise DatasetFileError(f"{path}: unknown dataset format (use .jsonl or .parquet)")


def read_records(path: Path) -> list[DatasetRecord]:
    """Every record of a ``.jsonl`` or ``.parquet`` file, validated; DatasetFileError names the first bad one."""
    if path.suffix == ".jsonl":
        rows: list[tuple[str, Any]] = []
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((f"line {number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise DatasetFileError(f"{path}: line {number}: not JSON: {exc.msg}") from None
    elif path.suffix == ".parquet":
        pa = _pyarrow()
        table = pa.parquet.read_table(path).to_pylist()
        rows = [
            (f"row {i}", {**row, "filters": json.loads(row.get("filters") or "null")}) for i, row in enumerate(table)
        ]
    else:
        raise DatasetFileError(f"{path}: unknown dataset format (use .jsonl or .parquet)")
    records = []
    for where, row in rows:
        try:
            records.append(DatasetRecord.model_validate(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = "".join(f"{p}: " for p in first["loc"][:1])
            message = first["msg"].removeprefix("Value error, ")
            raise DatasetFileError(f"{path}: {where}: {field}{message}") from None
    return records
