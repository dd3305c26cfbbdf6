"""Print compile latencies: nvcc -cubin floor, PROJECT fast path (cold, relink, cache hit), load_inline cold.

Usage: CUDA_HOME=/usr/local/cuda python scripts/bench_compile.py [--no-load-inline]
Goal: fast path cold <= 10x the floor (<= 5 s), cache hit <= 0.1 s.
"""

from __future__ import annotations

import json
import sys

from cuda_agent.compile.bench import run_compile_benchmark

if __name__ == "__main__":
    figures = run_compile_benchmark(include_load_inline="--no-load-inline" not in sys.argv)
    print(json.dumps(figures, indent=2))
