"""Trajectory export: one JSON document per line (always), Parquet when pyarrow is installed."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from cuda_agent.contracts.agent import Trajectory


def write_jsonl(trajectories: Iterable[Trajectory], path: Path) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for traj in trajectories:
            f.write(traj.model_dump_json() + "\n")
            count += 1
    return count


def read_jsonl(path: Path) -> Iterator[Trajectory]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield Trajectory.model_validate_json(line)
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: not a trajectory: {exc}") from None


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def write_parquet(trajectories: Iterable[Trajectory], path: Path) -> int:
    """One row per trajectory: scalar columns for filtering, the full document as JSON, and the token sequence."""
    if not parquet_available():
        raise RuntimeError("Parquet export needs pyarrow; install it or use write_jsonl")
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for t in trajectories:
        seq = t.token_sequence()
        rows.append(
            {
                "id": t.id,
                "problem_id": t.problem_id,
                "policy": t.policy,
                "model": t.model,
                "termination": t.termination.value if t.termination else None,
                "turns": len(t.turns),
                "best_reward": t.best_reward,
                "prompt_ids": seq.prompt_ids if seq else None,
                "response_ids": seq.response_ids if seq else None,
                "response_mask": seq.response_mask if seq else None,
                "response_logprobs": seq.response_logprobs if seq else None,
                "document": json.dumps(t.model_dump(mode="json")),
            }
        )
    pq.write_table(pa.Table.from_pylist(rows), path)
    return len(rows)
