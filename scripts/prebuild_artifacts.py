"""Build, on this machine, the example CUDA candidates with the fast path and pack them for the GPU host.

Writes .whl/artifacts/<cache key>.tar.gz and index.json; `tests/compile/test_prebuilt_artifacts.py` (gpu) loads
them there and verifies them, which shows that artifacts built on a CPU-only compile host run on the GPU host.
Usage: CUDA_HOME=/usr/local/cuda python scripts/prebuild_artifacts.py [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cuda_agent.compile import compile_candidate, pack_artifact
from cuda_agent.contracts.candidate import read_candidate
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest

ROOT = Path(__file__).resolve().parent.parent
# (problem, project-form candidate) pairs among the bundled examples.
EXAMPLES = [("relu_add.py", "relu_add_cuda"), ("linear_relu.py", "linear_relu_cuda")]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for problem, candidate in EXAMPLES:
        source = read_candidate(ROOT / "examples" / "candidates" / candidate)
        result = compile_candidate(CompileRequest(candidate=source, device=Device.CUDA, arch="sm_90a"))
        if result.status is not CompileStatus.OK or result.artifact_key is None:
            sys.exit(f"{candidate}: {result.status.value}: {result.message}")
        (out / f"{result.artifact_key}.tar.gz").write_bytes(pack_artifact(result.artifact_key))
        index.append({"problem": problem, "candidate": candidate, "artifact_key": result.artifact_key})
        print(f"{candidate}: {result.artifact_key} ({result.duration_s:.2f} s)")
    (out / "index.json").write_text(json.dumps(index, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".whl" / "artifacts")
