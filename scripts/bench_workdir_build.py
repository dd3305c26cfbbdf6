"""Build times of a workdir-form workspace: the platform's cached build next to torch.utils.cpp_extension.load.

    python3 scripts/bench_workdir_build.py tests/workdir/workspaces/gemm_cublas [--no-load] [--json out.json]

Runs on a machine without a GPU (nvcc and g++ only). Uses CUDA_AGENT_DATA_DIR's build cache: point it at an empty
folder to include the one-off precompiled header in the figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuda_agent.workdir.bench import run_workdir_build_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workspace", type=Path, help="folder with model_new.py and kernels/")
    parser.add_argument("--no-load", action="store_true", help="skip the cpp_extension.load figures (minutes)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = run_workdir_build_benchmark(args.workspace, include_load=not args.no_load)
    for name, value in figures.items():
        print(f"{name:22} {value:.2f}" if isinstance(value, float) else f"{name:22} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
