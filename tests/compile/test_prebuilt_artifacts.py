"""Artifacts built on the CPU-only compile host load and run on the GPU host.

scripts/prebuild_artifacts.py packs them here; scripts/device_gpu_tests.sh carries them and points
CUDA_AGENT_PREBUILT_ARTIFACTS at them. The GPU side never compiles: it unpacks, materializes and evaluates.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cuda_agent.compile import has_artifact, unpack_artifact
from cuda_agent.contracts.candidate import read_candidate
from cuda_agent.contracts.common import Device, EvalStatus
from cuda_agent.contracts.eval import EvalRequest
from cuda_agent.eval import evaluate

ROOT = Path(__file__).resolve().parents[2]
PREBUILT = os.environ.get("CUDA_AGENT_PREBUILT_ARTIFACTS")


@pytest.mark.gpu
@pytest.mark.skipif(not PREBUILT, reason="set CUDA_AGENT_PREBUILT_ARTIFACTS (scripts/prebuild_artifacts.py)")
def test_artifacts_built_elsewhere_verify_on_this_gpu() -> None:
    folder = Path(str(PREBUILT))
    index = json.loads((folder / "index.json").read_text())
    assert index
    for entry in index:
        key = entry["artifact_key"]
        assert not has_artifact(key)  # nothing was built here
        unpack_artifact(key, (folder / f"{key}.tar.gz").read_bytes())
        result = evaluate(
            EvalRequest(
                problem_source=(ROOT / "examples" / "problems" / entry["problem"]).read_text(),
                candidate=read_candidate(ROOT / "examples" / "candidates" / entry["candidate"]),
                artifact_key=key,
                device=Device.CUDA,
                timing_trials=20,
                measure_baselines=False,
            )
        )
        assert result.status is EvalStatus.CORRECT, (entry["candidate"], result.message, result.findings)
