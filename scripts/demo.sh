#!/usr/bin/env bash
# The main job on the embedded default (SQLite, in-process): check the machine, then let the built-in kernel
# author (the `heuristic` policy, no LLM needed) optimize a bundled problem end to end — write a kernel,
# compile it in the sandbox, verify and time it — and write model_new.py, report.json and the trajectory.
set -euo pipefail
cd "$(dirname "$0")/.."
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cuda-agent doctor || true   # a missing GPU is reported, not fatal: the demo then runs on the cpu device
device=$(python3 -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
cuda-agent optimize examples/problems/swish_residual.py --policy heuristic --device "$device" --max-turns 12 \
  --out out/demo "$@"
