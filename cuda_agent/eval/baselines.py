"""Cache of eager and torch.compile baseline timings, keyed by problem and environment.

A JSON file under data_dir guarded by an flock; the lead moves it to a database table later. Keys name the problem
hash, device, GPU model, driver, CUDA, torch version and harness version, so a driver or torch upgrade re-times.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from cuda_agent.contracts.eval import TimingStats


class BaselineEntry(BaseModel):
    eager: TimingStats | None = None
    compile: TimingStats | None = None
    notes: dict[str, str] = Field(default_factory=dict)


def baseline_key(
    problem_hash: str,
    device: str,
    gpu: str | None,
    driver: str | None,
    cuda: str | None,
    torch_version: str,
    harness_version: str,
) -> str:
    parts = [problem_hash, device, gpu or "-", driver or "-", cuda or "-", torch_version, harness_version]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


class BaselineCache:
    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, object]]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = json.loads(self.path.read_text()) if self.path.exists() else {}
            except (OSError, ValueError):
                data = {}  # a corrupt cache is only a cache: rebuild it
            yield data

    def get(self, key: str) -> BaselineEntry | None:
        with self._locked() as data:
            raw = data.get(key)
        return BaselineEntry.model_validate(raw) if raw else None

    def put(self, key: str, entry: BaselineEntry) -> None:
        with self._locked() as data:
            data[key] = entry.model_dump(mode="json")
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)
