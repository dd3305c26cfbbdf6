"""Search: author a problem (in a sandboxed child: the problem's code is the tenant's), then hand out its variants
in order and keep score of what each one measured.

Variants differ in launch shape (threads per block; a block, a warp, a thread or a tile per row), access width
(float4 or scalar) and GEMM tile; the first is the default guess, the rest are tried while the time budget lasts. The
environment keeps the best verified candidate, so the search only decides what to try next.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cuda_agent.author.capture import capture_problem
from cuda_agent.author.emit import (
    Variant,
    candidate_files,
    conv_wgmma_fits,
    online_softmax,
    recurrence_in_registers,
    row_cache,
    row_layout,
    split_rows,
    warp_rows,
    wgmma_fits,
    wgmma_form,
)
from cuda_agent.author.ir import FAST_FLOAT, HALF_TYPES, Unsupported
from cuda_agent.author.plan import ConvKernel, GemmKernel, Plan, RecurrenceKernel, RowKernel, plan_graph

DEFAULT_BUDGET_S = 180.0
AUTHOR_TIMEOUT_S = 120.0
_MEDIAN = re.compile(r"candidate median: (?P<ms>[0-9.]+) ms")
_TRIALS = re.compile(r"^correct: \w+ \((?P<passed>\d+)/\d+ trials\)", re.M)


def variants(plan: Plan, device: str, tf32: bool = False) -> list[Variant]:
    """Distinct variants worth timing for this plan (knobs the plan has no use for are not varied); ``tf32``: the
    tolerance admits TF32 tensor-core rounding (the variant says so in its label)."""
    if device == "cpu":
        return [Variant(), Variant(omp="always")]
    # A library call is not custom work (the build refuses a candidate whose only kernels are cuBLAS or cuDNN
    # calls): a plan of contractions and convolutions alone runs on our own GEMM and convolution kernels.
    rows = [k for k in plan.kernels if isinstance(k, RowKernel)]
    gemms = [k for k in plan.kernels if isinstance(k, GemmKernel)]
    convs = [k for k in plan.kernels if isinstance(k, ConvKernel)]
    recurrences = [k for k in plan.kernels if isinstance(k, RecurrenceKernel)]
    own_only, has_conv = not rows and not recurrences, bool(convs)
    # Ours: on tensor cores for 16-bit products; then 128x128 tiles of 8x8 outputs per thread (register-blocked),
    # pipelined first, then as plain steps; then the 32 and 16 tiles of an output per thread. Float32 products
    # also run as three TF32 tensor-core products (float32's accuracy: emit._tf32x3_steps), second (below).
    # 16-bit products staged and on mma.sync (emit._cuda_gemm_mma16), then on Hopper's warpgroup MMA where they fit
    # it (emit._cuda_gemm_wgmma; not first: elsewhere the build refuses it, and a first variant found wrong ends the
    # search), then on WMMA (any strides)
    half = [Variant(gemm="mma", tile=128, micro=8), Variant(gemm="wmma", tile=128, micro=8)]
    half[1:1] = [Variant(gemm="wgmma", tile=128, micro=8)] * any(
        _on_wgmma(k, "wgmma") for k in gemms if k.node.dtype in HALF_TYPES
    )
    ours = half if any(k.node.dtype in HALF_TYPES for k in gemms) else []
    # (a convolution too shallow for the product's tiles, as a depthwise one, gains nothing on tensor cores)
    fp32_gemms = [k for k in gemms if k.node.dtype == "float32"]
    fp32 = bool(fp32_gemms) or any(k.node.dtype == "float32" and not _shallow(k) for k in convs)
    ours += [Variant(gemm="pipelined", tile=128, micro=8)]
    ours += [Variant(gemm="tiled", tile=t, micro=r) for t, r in ((128, 8), (32, 1), (16, 1))]
    # Our convolutions: as a product on the pipelined tile kernel (implicit GEMM), or a thread per output position
    # and tile of channels (direct), first where a group's output channels or its depth are too few for the
    # product's 128x128 tiles (depthwise convolutions).
    shallow = any(_shallow(k) for k in convs)
    own_conv = ["direct", "implicit"] if shallow else ["implicit", "direct"]
    base = replace(ours[0], conv=own_conv[0]) if own_only else Variant()
    has_rows = any(k.reduced for k in rows)
    # Block sizes shape the row kernels and our direct convolution; the vector width, elementwise row kernels.
    # Our GEMM kernel's launch is its tile's: a plan of products alone varies the tile only.
    out = [base]
    if has_conv and not own_only:  # cuDNN's exact kernels again, the fastest of them as timed on the first call
        out.append(replace(base, conv="fastest"))
    if has_conv:
        out.append(replace(base, conv=own_conv[1] if own_only else own_conv[0]))
    if rows or has_conv:
        # (our direct convolution's block too, where it runs: alone, or shallow with the library's call first)
        sized = replace(base, conv="direct") if has_conv and (own_only or shallow) else base
        out += [replace(sized, block=b) for b in (512, 128, 1024)]
    if rows:
        out.append(replace(base, vec=1))
    if any(online_softmax(k) for k in rows):  # short rows' second pass may be read from L1 or L2
        out.append(replace(base, softmax="passes"))
    # Early: a norm's rows read once is its likeliest win. Longer rows fit a thread's register share only with
    # more threads, so the first two block sizes where some row kernel's share fits.
    in_regs = [b for b in (256, 512, 1024) if any(row_cache(k, b) for k in rows)]
    # Rows too long for registers at any block size go to shared memory, which holds a block or two per SM: many
    # threads per block keep enough loads in flight.
    in_smem = [] if in_regs else [b for b in (1024, 512) if any(row_cache(k, b, "smem") for k in rows)]
    out[1:1] = [replace(base, block=b, cache="regs") for b in in_regs[:2]]
    out[1:1] = [replace(base, block=b, cache="smem") for b in in_smem]
    # Short contiguous rows: a warp each (several rows a block, no barriers), first with the row in registers.
    warp = [k for k in rows if k.reduced and warp_rows(k)]
    warp_cached = any(row_cache(k, base.block, threads=32) for k in warp)
    out[1:1] = [replace(base, rows="warp", cache="regs")] * warp_cached + [replace(base, rows="warp")] * bool(warp)
    if has_rows:
        out.append(replace(base, rows="block"))
    # A thread per row reads coalesced only where neighbouring rows are neighbouring columns (the reduced dims are
    # not the last); contiguous rows shorter than a warp run a thread each anyway (``row_layout``).
    if any(k.reduced and not k.along_last for k in rows):
        out.append(replace(base, rows="thread"))
    if gemms:
        out += [replace(base, gemm=v.gemm, tile=v.tile, micro=v.micro) for v in ours]
    # A recurrence's W_hh held in registers across its steps (a lane's share of a unit's rows, where it fits).
    if any(recurrence_in_registers(k) for k in recurrences):
        out.insert(1, replace(base, cache="regs"))
    if fp32:  # second: large products run faster on tensor cores than on the FMA units (cuBLAS's float32 GEMMs,
        # cuDNN restricted to FMA kernels, ours); not first, as a first variant found wrong ends the search
        out.insert(1, replace(base, gemm="tf32x3", tile=128, micro=8, conv="implicit" if has_conv else base.conv))
    conv_wgmma = any(conv_wgmma_fits(k) for k in convs)
    if any(_on_wgmma(k, "wgmma") for k in fp32_gemms) or conv_wgmma:  # before them: the
        # same on Hopper's warpgroup MMA, twice as fast where it builds (sm_90a: elsewhere the build refuses it, the
        # search goes on)
        out.insert(1, replace(base, gemm="wgmma", tile=128, micro=8, conv="implicit" if has_conv else base.conv))
    # before that: the same in float16 parts, at twice TF32's rate (1.3-1.8x on products, 1.06-1.16x on
    # convolutions, whose gather bounds them: an H100)
    if any(_on_wgmma(k, "f16x3") for k in fp32_gemms) or conv_wgmma:
        out.insert(1, replace(base, gemm="f16x3", tile=128, micro=8, conv="implicit" if has_conv else base.conv))
    # The first variants again with their float exp, sigmoid, silu and quotients on the special-function units: a
    # row kernel of a few items a thread (a softmax's block per row) issues more instructions than its bytes take
    # to move, and these are most of them. After them: the verifier judges each, and a wrong one is only skipped.
    if any(n.op in FAST_FLOAT and n.ctype == "float" for n in plan.graph.nodes):
        out[3:3] = [replace(v, math="fast") for v in out[:3]]
    # Rows split across blocks (emit.split_rows) after the same kernels unsplit (a block per row, or per tile of 32
    # rows), the simpler kernels: a first variant found wrong ends the search.
    split = [k for k in rows if split_rows(k, base) > 1]
    if split:
        out.insert(0, replace(base, rows=row_layout(split[0], base)))
    # Rows a block's shared memory cannot hold, split over blocks that keep their segments (read from memory once,
    # where the split rows above read theirs once a pass): second, after the simpler kernels.
    segments = replace(base, cache="segment")
    if any(split_rows(k, segments) > 1 for k in rows):
        out.insert(1, segments)
    if tf32 and not own_only:  # the library calls on tensor cores, where the tolerance admits their rounding
        # TF32 is a way to multiply float32 operands: 16-bit products are on tensor cores already.
        fp32_gemm = any(k.node.dtype == "float32" for k in gemms)
        out.append(
            replace(base, gemm="cublas_tf32" if fp32_gemm else base.gemm, conv="tf32" if has_conv else base.conv)
        )
    return list(dict.fromkeys(out))


def _on_wgmma(k: GemmKernel, gemm: str) -> bool:
    """Whether the variant ``gemm`` runs ``k`` on wgmma."""
    form = wgmma_form(Variant(gemm=gemm), k.node.dtype)
    return form is not None and wgmma_fits(k, form)


def _shallow(k: ConvKernel) -> bool:
    """Whether a group's output channels or its depth (input channels by taps) are too few for a product's tile."""
    groups = k.node.attrs["groups"]
    depth = k.x_shape[1] // groups * math.prod(k.w_shape[2:])
    return k.node.shape[1] // groups < 16 or depth < 16


@dataclass
class Authored:
    """What the author made of one problem: its plan and each variant's files, or why it cannot."""

    unsupported: str = ""
    plan: str = ""
    variants: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (label, candidate files)


def author_problem(source: str, device: str, tf32: bool = False, form: str = "project") -> Authored:
    """Capture, plan and emit in this process (the problem's code runs here: see ``author_sandboxed``); the
    variants are candidates of ``form`` ("project" or "workdir")."""
    try:
        plan = plan_graph(capture_problem(source))
        emitted: dict[str, tuple[str, dict[str, str]]] = {}
        for v in variants(plan, device, tf32):
            files = candidate_files(plan, source, device, v, form)
            # Knobs a plan's kernels do not read leave the same sources: one verification of them is enough.
            emitted.setdefault(json.dumps(files, sort_keys=True), (v.label(), files))
    except Unsupported as exc:
        return Authored(unsupported=str(exc))
    return Authored(plan=plan.describe(), variants=list(emitted.values()))


def author_sandboxed(source: str, device: str, tf32: bool = False, form: str = "project") -> Authored:
    """``author_problem`` in a sandboxed child (no network, no GPU, bounded memory and time), as the environment
    describes problems: tracing runs the tenant's Model and get_inputs code."""
    from cuda_agent.sandbox.child import ChildFailed, run_python_child

    stdin = json.dumps({"source": source, "device": device, "tf32": tf32, "form": form}).encode()
    try:
        answer = run_python_child("cuda_agent.author", stdin, timeout_s=AUTHOR_TIMEOUT_S)
    except ChildFailed as exc:
        raise RuntimeError(f"the author's child failed: {exc}") from None
    data: dict[str, Any] = json.loads(answer)
    return Authored(data["unsupported"], data["plan"], [(label, files) for label, files in data["variants"]])


def _verdict(verify_text: str) -> str:
    lines = verify_text.splitlines()
    first = lines[0].removeprefix("verify: ") if lines else "no answer"
    trials = next((line.removeprefix("correct: ") for line in lines if line.startswith("correct: ")), "")
    # No semicolons: the policy's summary separates the variants by them.
    return (first + (f", {trials}" if trials else "")).replace(";", ",")[:300]


def main() -> None:
    """The child: problem source and device as JSON on stdin, ``Authored`` as JSON to argv[1]."""
    request = json.loads(sys.stdin.read())
    authored = author_problem(request["source"], request["device"], bool(request["tf32"]), request["form"])
    Path(sys.argv[1]).write_text(json.dumps(authored.__dict__))


@dataclass
class Trial:
    label: str
    correct: bool
    median_ms: float | None
    # What the verifier said of a variant it did not pass (its verdict's first line, the trials passed): a
    # benchmark's table keeps it, so a variant that fails at some sizes only shows by how much.
    why: str = ""
    close: bool = False  # not correct, but right on some of the verifier's trials


@dataclass
class Search:
    """One problem's search over the authored variants, within a time budget."""

    authored: Authored
    budget_s: float = DEFAULT_BUDGET_S
    trials: list[Trial] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _next: int = 0

    def next_files(self) -> tuple[str, dict[str, str]] | None:
        """The next variant (label, files), or None when the variants or the budget are spent. After a first
        variant that is wrong on every trial, the others would be wrong the same way (same plan): the search stops.
        One right on some trials missed the tolerance there (its rounding: a plain float sum over a long K), which
        the others' arithmetic may not: the search goes on."""
        if self._next >= len(self.authored.variants) or time.monotonic() - self.started > self.budget_s:
            return None
        if self.trials and not any(t.correct or t.close for t in self.trials):
            return None
        self._next += 1
        return self.authored.variants[self._next - 1]

    def record(self, label: str, verify_text: str) -> Trial:
        """What the verify tool said about variant ``label``."""
        match = _MEDIAN.search(verify_text)
        correct = verify_text.startswith("verify: correct")
        why = "" if correct else _verdict(verify_text)
        passed = _TRIALS.search(verify_text)
        close = not correct and passed is not None and int(passed["passed"]) > 0
        trial = Trial(label, correct, float(match["ms"]) if match else None, why, close)
        self.trials.append(trial)
        return trial

    def best(self) -> Trial | None:
        timed = [t for t in self.trials if t.correct]
        return min(timed, key=lambda t: t.median_ms if t.median_ms is not None else float("inf"), default=None)
