"""Benchmark of the evaluation harness: `cuda-agent bench eval` (cuda_agent/bench/), runnable from a checkout.

Without --problems or --problem it runs the large problems of examples/large on the GPU (issue 12). The stability
figure of a typical small candidate (CV of its median over repeated verdicts) comes from the same command:

    python scripts/bench_eval.py --json out.json                     # examples/large, every case
    python scripts/bench_eval.py --only softmax --only gemm          # some of them
    python scripts/bench_eval.py --problem examples/problems/linear_relu.py \\
        --candidate examples/candidates/linear_relu_cuda --repeats 10
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cuda_agent.cli import app  # noqa: E402


def main() -> None:
    args = sys.argv[1:]
    if not any(a.split("=")[0] in ("--problems", "--problem", "--help") for a in args):
        args = ["--problems", str(ROOT / "examples" / "large"), *args]
    app(["bench", "eval", *args], prog_name="bench_eval.py")


if __name__ == "__main__":
    main()
