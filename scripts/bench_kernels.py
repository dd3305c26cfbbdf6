"""One variant of the author's kernels on the GPU against the eager module, kernel by kernel (issue 14): for each
problem, the variant asked for (the first whose label has every knob of ``--variant``, default our 3xTF32 products;
``best``: the one bench-results/dev.json's row kept) is emitted with each staging setting asked for, built with
nvcc, run on the problem's seeded inputs, checked against the eager reference (worst error as a share of
KernelBench's 1e-4/1e-4 tolerance, by the verifier's rule: over 1 fails) and timed with CUDA events against the
eager module, in all and each kernel alone, with the bytes its buffers hold (what it must move at least) over its
time. Faster than the whole optimize run (no search, no sandbox), so kernels can be compared and located in one
device call; `--ncu` instead runs the first problem's kernels once a setting (run it under `ncu`: our kernels are
named k<n>_...).

    python3 scripts/bench_kernels.py --problems gemm_square gemm_transposed_b --stages 3 4
    python3 scripts/bench_kernels.py --problems norm_layernorm norm_groupnorm --variant best
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import itertools
import json
import re
import subprocess
import tempfile
import types
from collections.abc import Callable
from pathlib import Path

import torch

from cuda_agent.author import emit
from cuda_agent.author.capture import capture_problem
from cuda_agent.author.plan import plan_graph
from cuda_agent.author.search import variants
from cuda_agent.compile.toolchain import resolve_arch
from cuda_agent.eval.compare import chunks

ROOT = Path(__file__).resolve().parent.parent


def _real(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _worst(outs: list[torch.Tensor], refs: list[torch.Tensor], exacts: list[torch.Tensor] | None = None) -> float:
    """The largest error of ``outs`` as a share of the 1e-4/1e-4 tolerance, against ``refs``, or where ``exacts``
    (float64 runs) are given, the smaller of that and the error against them with the reference's own added."""
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        e_chunks = chunks(exacts[i]) if exacts is not None else [None] * len(chunks(r))
        for oc, rc, ec in zip(chunks(o), chunks(r), e_chunks, strict=True):
            oc, rc = oc.double(), rc.double()
            share = (oc - rc).abs_().div_(rc.abs().mul_(1e-4).add_(1e-4))
            if ec is not None:
                own = ec.abs().mul_(1e-4).add_(1e-4).add_((rc - ec).abs_())
                share = torch.minimum(share, (oc - ec).abs_().div_(own))
            top = share.max().item()
            worst = max(worst, top if top == top else float("inf"))  # a NaN fails
    return worst


def _events_ms(fn, iters: int) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def _knobs(problem: str, variant: str) -> set[str]:
    """The knobs (``name=value``) a variant's label must have: ``variant``'s, or the label dev.json's row kept."""
    if variant != "best":  # knobs apart by spaces or commas (commas survive a shell's word splitting)
        return set(re.split(r"[\s,]+", variant.strip()))
    rows = json.loads((ROOT / "bench-results" / "dev.json").read_text())["rows"]
    detail = next((r["detail"] for r in rows if r["problem"] == problem), "")
    kept = re.search(r"best variant (?P<label>.+?) \(", detail)
    return set(kept["label"].split()) if kept else {"no-best-variant-recorded"}


def bench(problem: Path, variant: str, stages: int, iters: int, work: Path, profile: bool) -> str:
    source = problem.read_text()
    plan = plan_graph(capture_problem(source))
    knobs = _knobs(problem.stem, variant)
    chosen = [v for v in variants(plan, "cuda") if knobs <= set(v.label().split())]
    if not chosen:
        return f"{problem.stem}: no variant with {' '.join(sorted(knobs))}"
    emit.STAGES = stages
    cu = work / f"{problem.stem}-{stages}.cu"
    plan = emit.variant_plan(plan, "cuda", chosen[0])
    cu.write_text(emit.emit_source(plan, "cuda", chosen[0]))
    lib_path = cu.with_suffix(".so")
    arch = resolve_arch(None).removeprefix("sm_")  # as the builder builds (sm_90a on Hopper: wgmma)
    build = [
        "nvcc",
        "-O3",
        f"-gencode=arch=compute_{arch},code=sm_{arch}",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-Xptxas",
        "-v",
        "-o",
        str(lib_path),
    ]
    libraries = [f"-l{name}" for name in ("cublas", "cudnn") if f'#pragma comment(lib, "{name}")' in cu.read_text()]
    built = subprocess.run([*build, str(cu), *libraries], capture_output=True, text=True)
    if built.returncode:
        return f"{problem.stem}: build failed\n{built.stderr[-2000:]}"
    registers = sorted(set(re.findall(r"Used (\d+) registers", built.stderr)))
    spills = any(int(v) for v in re.findall(r"(\d+) bytes spill stores", built.stderr))
    lib = ctypes.CDLL(str(lib_path))
    module = types.ModuleType("bench_problem")
    exec(compile(source, str(problem), "exec"), module.__dict__)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda()
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
    with torch.no_grad():
        ref = model(*inputs)
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    buffers = plan.bind(model, inputs, "cuda")
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    calls = [
        (getattr(lib, k.name), [ctypes.c_void_p(buffers[b].data_ptr()) for b in [*k.reads, *k.writes]])
        for k in plan.kernels
    ]

    def ours() -> None:
        for fn, args in calls:
            fn(*args, stream)

    def alone(fn: Callable[..., object], args: list[ctypes.c_void_p]) -> Callable[[], None]:
        return lambda: fn(*args, stream)

    if profile:
        ours()
        torch.cuda.synchronize()
        return f"{problem.stem} stages={stages}: profiled"
    ours()
    torch.cuda.synchronize()
    # The verifier's rule (eval/compare.py): within the tolerance of the reference, or as close to a float64 run
    # of it as the reference is, plus the tolerance (the reference's own rounding at K = 8192 outgrows 1e-4). The
    # float64 run only where the reference alone fails some element, and both compared in the verifier's chunks:
    # whole outputs in float64, with their differences, did not fit an 80 GB GPU beside an 8 GB output.
    outs = [buffers[o] for o in plan.outputs]
    worst = _worst(outs, refs)
    if worst > 1:
        with torch.no_grad():
            exact = copy.deepcopy(model).double()(*[t.double() if _real(t) else t for t in inputs])
        worst = _worst(outs, refs, [exact] if isinstance(exact, torch.Tensor) else list(exact))
        del exact
    ours_ms = _events_ms(ours, iters)
    with torch.no_grad():
        eager_ms = _events_ms(lambda: model(*inputs), iters)
    lines = [
        f"{problem.stem:28s} {chosen[0].label()}",
        f"{'':28s} stages={stages} regs={'/'.join(registers)}{' SPILLS' if spills else ''}  ours {ours_ms:8.3f} ms  "
        f"eager {eager_ms:8.3f} ms  eager/ours {eager_ms / ours_ms:5.2f}  worst error {worst:5.2f} of tolerance"
        f"{' FAIL' if worst > 1 else ''}",
    ]
    for k, (fn, args) in zip(plan.kernels, calls, strict=True):
        ms = _events_ms(alone(fn, args), iters)
        held = sum(buffers[b].numel() * buffers[b].element_size() for b in {*k.reads, *k.writes})
        lines.append(f"{'':28s}   {k.name:24s} {ms:8.3f} ms  {held / 1e9:7.3f} GB held  {held / ms / 1e6:7.0f} GB/s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", required=True, help="examples/dev stems or paths")
    parser.add_argument(
        "--variant", default="gemm=tf32x3", help="knobs its label has ('gemm=tf32x3 conv=implicit'), or 'best'"
    )
    parser.add_argument("--stages", nargs="+", type=int, default=[emit.STAGES])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--ncu", action="store_true", help="the first problem once a setting, untimed (under ncu)")
    args = parser.parse_args()
    problems = args.problems[:1] if args.ncu else args.problems
    with tempfile.TemporaryDirectory() as tmp:
        for name, stages in itertools.product(problems, args.stages):
            path = Path(name) if name.endswith(".py") else ROOT / "examples" / "dev" / f"{name}.py"
            print(bench(path, args.variant, stages, args.iters, Path(tmp), args.ncu), flush=True)


if __name__ == "__main__":
    main()
