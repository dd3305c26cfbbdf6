"""Benchmark of the evaluation harness on a GPU (run on the H200).

1. GPU seconds per full verdict of a typical GEMM + elementwise candidate (examples/problems/linear_relu.py with
   examples/candidates/linear_relu_cuda), baselines cached: goal <= 2 s.
2. Stability: the candidate's median over 5 repeated evaluations, as a coefficient of variation: goal <= 1%.

Usage: python scripts/bench_eval.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# As the GPU eval worker is deployed (docker-compose.yml, k8s/eval-worker.yaml): three evaluations' worth of warm
# sandboxed children.
os.environ.setdefault("CUDA_AGENT_EVAL_WARM_CHILDREN", "6")

from cuda_agent.compile import compile_candidate  # noqa: E402
from cuda_agent.contracts.common import CompileStatus, EvalStatus  # noqa: E402
from cuda_agent.contracts.compile import CandidateForm, CandidateSource, CompileRequest  # noqa: E402
from cuda_agent.contracts.eval import EvalRequest  # noqa: E402
from cuda_agent.eval import evaluate  # noqa: E402

PROBLEM = ROOT / "examples" / "problems" / "linear_relu.py"
CANDIDATE = ROOT / "examples" / "candidates" / "linear_relu_cuda"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--json", type=Path, default=None, help="Also write the figures here, with every run's samples and timeline."
    )
    args = parser.parse_args()

    files = {str(p.relative_to(CANDIDATE)): p.read_text() for p in sorted(CANDIDATE.rglob("*")) if p.is_file()}
    source = CandidateSource(form=CandidateForm.PROJECT, files=files)
    built = compile_candidate(CompileRequest(candidate=source, device="cuda"))
    if built.status is not CompileStatus.OK:
        print(f"build failed: {built.message}\n{built.log[-2000:]}")
        return 1
    request = EvalRequest(
        problem_source=PROBLEM.read_text(), candidate=source, artifact_key=built.artifact_key, device="cuda"
    )

    started = time.perf_counter()
    first = evaluate(request)  # measures and caches the eager and torch.compile baselines
    cold_s = time.perf_counter() - started
    if first.status is not EvalStatus.CORRECT:
        print(f"first evaluation not correct: {first.status} {first.message} {first.findings}")
        return 1

    walls, medians, clocks, spreads, runs = [], [], [], [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        result = evaluate(request)
        walls.append(time.perf_counter() - started)
        assert result.status is EvalStatus.CORRECT, result.message
        assert result.candidate_timing is not None and result.fingerprint is not None
        medians.append(result.candidate_timing.median_ms)
        spreads.append(round(100 * result.candidate_timing.std_ms / result.candidate_timing.mean_ms, 2))
        clocks.append((result.fingerprint.sm_clock_start_mhz, result.fingerprint.sm_clock_end_mhz))
        runs.append(
            {
                "samples_ms": result.candidate_timing.samples_ms,
                "host_samples_ms": result.candidate_timing.host_samples_ms,
                "timeline_s": result.timeline_s,
                "notes": result.notes,
            }
        )
    timing = first.candidate_timing
    figures = {
        "gpu": first.fingerprint.gpu_name if first.fingerprint else None,
        "first_verdict_with_baselines_s": round(cold_s, 3),
        "verdict_s_median": round(statistics.median(walls), 3),
        "verdict_s_all": [round(w, 3) for w in walls],
        "goal_verdict_s": 2.0,
        "candidate_median_ms_runs": [round(m, 5) for m in medians],
        "cov_of_medians_pct": round(100 * statistics.pstdev(medians) / statistics.fmean(medians), 3),
        "goal_cov_pct": 1.0,
        "within_run_cov_pct": round(100 * timing.std_ms / timing.mean_ms, 3) if timing else None,
        "within_run_cov_pct_runs": spreads,
        "speedup_vs_eager": first.speedup_vs_eager,
        "speedup_vs_compile": first.speedup_vs_compile,
        "reward": first.reward,
        "custom_kernel_time_share": first.custom_kernel_time_share,
        "custom_kernel_time_method": first.custom_kernel_time_method,
        "warm_children": int(os.environ["CUDA_AGENT_EVAL_WARM_CHILDREN"]),
        "sm_clocks_mhz_start_end": clocks,
        "timeline_s_last": result.timeline_s,
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**figures, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
