"""Nsight Compute profiling of a candidate's kernels, reduced to a checklist an agent can act on.

``profile_candidate`` runs ``ncu --clock-control none --profile-from-start off --metrics ... --csv`` on the
evaluation child in role ``profile``: it warms ModelNew up once and brackets one call with cudaProfilerStart/Stop,
so only that call's kernels are measured. Library kernels (aten, cuBLAS, cuDNN) are left out of the report.
"""

from __future__ import annotations

import csv
import io
import shutil
from collections import defaultdict
from pathlib import Path

from cuda_agent.contracts.common import Device
from cuda_agent.contracts.eval import EvalRequest, KernelProfile, ProfileRequest, ProfileResult
from cuda_agent.eval.timing import LIBRARY_KERNEL_MARKERS
from cuda_agent.settings import Settings, get_settings

METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_efficiency_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__block_size": "block_size",
    "smsp__thread_inst_executed_per_inst_executed.ratio": "threads_per_warp_inst",
}
_TIME_UNITS_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in (
        get_settings().cuda_home / "bin" / "ncu",
        *sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")),
    ):
        if candidate.exists():
            return str(candidate)
    return None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    """Parse ncu's ``--csv`` details output (one row per kernel launch and metric) into per-kernel profiles.

    Lines before the header (``==PROF==`` messages, program output) are skipped. Launches of the same kernel are
    averaged; library kernels are dropped.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    per_launch: dict[str, dict[str, float]] = defaultdict(dict)
    names: dict[str, str] = {}
    for row in rows:
        metric = METRICS.get(row.get("Metric Name", ""))
        value = _number(row.get("Metric Value", ""))
        launch = row.get("ID", "")
        if metric is None or value is None or not launch:
            continue
        if metric == "duration":
            value *= _TIME_UNITS_US.get(row.get("Metric Unit", "").strip(), 1.0)
        names[launch] = row.get("Kernel Name", "?")
        per_launch[launch][metric] = value
    by_kernel: dict[str, list[dict[str, float]]] = defaultdict(list)
    for launch, values in per_launch.items():
        if not any(p in names[launch] for p in LIBRARY_KERNEL_MARKERS):
            by_kernel[names[launch]].append(values)
    profiles = []
    for kernel, launches in by_kernel.items():

        def mean(key: str, launches: list[dict[str, float]] = launches) -> float | None:
            values = [v[key] for v in launches if key in v]
            return sum(values) / len(values) if values else None

        registers, block = mean("registers_per_thread"), mean("block_size")
        profiles.append(
            KernelProfile(
                kernel=kernel,
                duration_us=mean("duration"),
                achieved_occupancy_pct=mean("achieved_occupancy_pct"),
                dram_throughput_pct=mean("dram_throughput_pct"),
                sm_efficiency_pct=mean("sm_efficiency_pct"),
                l2_hit_rate_pct=mean("l2_hit_rate_pct"),
                registers_per_thread=round(registers) if registers is not None else None,
                block_size=round(block) if block is not None else None,
                threads_per_warp_inst=mean("threads_per_warp_inst"),
            )
        )
    profiles.sort(key=lambda p: -(p.duration_us or 0.0))
    return profiles


def checklist(profiles: list[KernelProfile]) -> list[str]:
    """One verdict per finding, each with the fix to try."""
    items: list[str] = []
    for p in profiles:
        name = p.kernel.split("(")[0][:60]
        occ, dram, sm, l2 = p.achieved_occupancy_pct, p.dram_throughput_pct, p.sm_efficiency_pct, p.l2_hit_rate_pct
        if occ is not None and occ < 40:
            items.append(
                f"{name}: low occupancy {occ:.0f}%: use 128-512 threads per block, fewer registers "
                f"(__launch_bounds__) or less shared memory per block"
            )
        threads = p.threads_per_warp_inst
        if threads is not None and threads < 24:
            items.append(f"{name}: warp divergence ({threads:.1f}/32 threads active): make branches uniform per warp")
        if l2 is not None and l2 < 50 and (dram or 0) > 40:
            items.append(
                f"{name}: high L2 miss rate ({100 - l2:.0f}% misses): coalesce accesses (consecutive threads "
                f"read consecutive addresses), reuse tiles in shared memory, read-only cache (__ldg, "
                f"const __restrict__)"
            )
        if dram is not None and dram > 75:
            items.append(
                f"{name}: memory-bound at {dram:.0f}% of DRAM peak: fuse operations, vectorize loads "
                f"(float4), use fewer bytes (fp16/bf16)"
            )
        elif sm is not None and dram is not None and sm < 30 and dram < 30:
            items.append(
                f"{name}: latency-bound (SM {sm:.0f}%, DRAM {dram:.0f}%): more blocks or more work per "
                f"thread (ILP), fewer launches"
            )
        if p.registers_per_thread is not None and p.registers_per_thread > 128:
            items.append(
                f"{name}: {p.registers_per_thread} registers per thread limit occupancy: simplify, or __launch_bounds__"
            )
    if profiles and not items:
        items.append("no obvious bottleneck: compare against the roofline, try larger tiles or fusion")
    return items


def report_text(profiles: list[KernelProfile], items: list[str]) -> str:
    def pct(v: float | None) -> str:
        return f"{v:.0f}%" if v is not None else "-"

    lines = ["kernel | us | occupancy | dram | sm | l2 hit | regs | block"]
    for p in profiles:
        duration = f"{p.duration_us:.1f}" if p.duration_us is not None else "-"
        lines.append(
            f"{p.kernel.split('(')[0][:60]} | {duration} | {pct(p.achieved_occupancy_pct)} | "
            f"{pct(p.dram_throughput_pct)} | {pct(p.sm_efficiency_pct)} | {pct(p.l2_hit_rate_pct)} | "
            f"{p.registers_per_thread or '-'} | {p.block_size or '-'}"
        )
    return "\n".join([*lines, "checklist:", *[f"- {i}" for i in items]])


def profile_candidate(req: ProfileRequest, settings: Settings | None = None) -> ProfileResult:
    """Profile the candidate's kernels with Nsight Compute; ok=False with a message when that is impossible."""
    from cuda_agent.eval.child.protocol import ChildReport, Ran, Ready, TrialCommand
    from cuda_agent.eval.children import new_slot
    from cuda_agent.eval.evaluate import Abort, ChildStopped, Evaluation, Session

    ncu = find_ncu()
    if ncu is None:
        return ProfileResult(ok=False, message="Nsight Compute (ncu) is not installed on this worker")
    settings = settings or get_settings()
    eval_req = EvalRequest(
        problem_source=req.problem_source,
        candidate=req.candidate,
        artifact_key=req.artifact_key,
        device=Device.CUDA,
        measure_baselines=False,
    )
    evaluation = Evaluation(eval_req, settings)
    report: ChildReport | None = None
    try:
        evaluation.check_candidate_files()
        evaluation.pick_gpu()
        argv_prefix = (
            ncu,
            "--clock-control",
            "none",
            "--profile-from-start",
            "off",
            "--target-processes",
            "all",
            "--metrics",
            ",".join(METRICS),
            "--csv",
        )
        # The ncu in a CUDA toolkit's bin/ is a launcher that looks for Nsight Compute beside the toolkit or under
        # /opt/nvidia (where the H200 image keeps it), so both must be visible in the sandbox.
        tool_dirs = (str(Path(ncu).resolve().parent.parent), *(d for d in ("/opt/nvidia",) if Path(d).is_dir()))
        # Started cold, under ncu: a process of its own, after its files are in place.
        slot = new_slot(evaluation.child_key(), argv_prefix=argv_prefix, readonly=tool_dirs)
        evaluation.slots.append(slot)
        session = Session(evaluation, slot, "profile")
        env = evaluation.prepare_candidate(slot.workdir)
        session.begin(evaluation.job("profile", env=env))
        session.expect(Ready, evaluation.timeout)
        session.ask(TrialCommand(index=0, seed=42), Ran, evaluation.timeout)
        report = session.finish(evaluation.timeout)
        stdout = session.outcome.stdout if session.outcome else ""
    except Abort as stop:
        return ProfileResult(ok=False, message=stop.result.message)
    except ChildStopped as stop:
        message = stop.run.message or (stop.run.report.message if stop.run.report else "profiling child failed")
        return ProfileResult(ok=False, message=f"profiling failed: {message}")
    finally:
        evaluation.cleanup()
    if report.status != "ok":
        return ProfileResult(ok=False, message=f"profiling failed: {report.message}")
    profiles = parse_ncu_csv(stdout)
    if not profiles:
        tail = " | ".join(stdout.strip().splitlines()[-3:])[-400:]
        return ProfileResult(ok=False, message=f"ncu reported no custom kernel (profiling permitted?): {tail}")
    items = checklist(profiles)
    return ProfileResult(ok=True, kernels=profiles, checklist=items, report=report_text(profiles, items))
