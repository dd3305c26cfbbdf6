"""Emit: one plan, two back ends. CUDA C++ for device cuda, C++/OpenMP for device cpu, and the model_new.py that
allocates buffers and calls the launchers.

CUDA row kernels run one block per row (threads stride over the reduced dims, warp-shuffle + shared-memory block
reductions whose result every thread sees; scans chunk by chunk), a warp per row (short contiguous rows: several
rows a block, shuffles only), a tile of 32 rows per block when the reduced dims are not the last (a warp reads 32
neighbouring columns, the warps split the rows' length), or one thread per row (short rows); reductions that do not
read one another share a pass over the row. Elementwise kernels are grid-stride
loops that move 16 bytes per access (float4) for operands read at the kernel's own index, when the launcher finds
every such pointer 16-byte aligned. Products go to cuBLAS (GemmEx) or to our own kernels: register-blocked tiles,
WMMA tensor-core tiles for 16-bit operands, and for float32 ones three TF32 tensor-core products at float32's
accuracy (3xTF32); our convolutions are the same tile kernel over gathered operands (implicit GEMM) or direct.
bfloat16 and float16 are stored as such and computed in float (as ATen's kernels and inductor's do), converted on
load and store. Every launcher is ``extern "C"`` with tensor pointers only (the candidate contract); shapes are
compile-time constants of the captured problem, checked by model_new.py before any launch.
"""

from __future__ import annotations

import itertools
import math
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from cuda_agent.author.ir import GATES, HALF_TYPES, Node, OpKind, Unsupported, loaded, reduction, stored
from cuda_agent.author.plan import (
    ConvKernel,
    FusedReduction,
    GemmKernel,
    Kernel,
    Plan,
    RecurrenceKernel,
    RowKernel,
    Scope,
    Window,
    c_literal,
    contiguous_strides,
    fuse_epilogues,
    linear_index,
    plan_graph,
    window_tap,
)
from cuda_agent.contracts.candidate import KERNELS_DIR, MODEL_NEW_FILE, CandidateForm, CandidateSource

KERNEL_STEM = "author"
# The dev suite's sources are at most ~150 KB; a DenseNet-201 of our row kernels and cuDNN's convolutions, 2.6 MB,
# builds in ~1 min (nvcc -O3, two cores), 20-30 s a MB as a ResNet-101's 0.8 MB: 4 MB stay well within a build's
# time limit.
MAX_SOURCE_BYTES = 4 << 20
OMP_MIN_WORK = 1 << 18


@dataclass(frozen=True)
class Variant:
    """The knobs the search turns; every variant computes the same thing."""

    block: int = 256  # threads per block (cuda)
    # "block": a block per row, "warp": a warp per row (contiguous rows of up to WARP_ROW_MAX elements, others
    # "auto"), "thread": a thread per row, "tile": 32 neighbouring rows per block (rows whose reduced dims are not
    # the last), "auto": by the rows' layout and length (emit.row_layout)
    rows: str = "auto"
    vec: int = 4  # elements per thread and access in elementwise kernels (1 or 4)
    tile: int = 32  # GEMM tile edge of our own GEMM kernel (cuda)
    micro: int = 1  # outputs per thread along each edge of that tile (held in registers)
    # "cublas": the vendor library where the operands' strides allow it ("cublas_tf32": on TF32 tensor cores), else
    # "tiled" (ours), "pipelined" (ours, 128x128 tiles with wide shared reads and the next K step loaded ahead),
    # "tf32x3" (the pipelined kernel on TF32 tensor cores at float32 accuracy, its float32 operands' K steps copied
    # ahead asynchronously, 16 bytes a copy where they have 16-byte groups, else an element; our implicit
    # convolutions too, their input gathered a copy an element), "wgmma" (the same on Hopper's warpgroup MMA, sm_90a:
    # our float32 GEMMs and implicit convolutions where they fit it, others as "tf32x3"), "f16x3" (as "wgmma", the
    # operands split into float16 parts of their scaled values instead: ``WgmmaForm``),
    # "wmma" (ours on tensor cores, for 16-bit products; others take "tiled" with this tile), "mma" (ours on tensor
    # cores through mma.sync, staged by asynchronous copies, for 16-bit products whose operands have 16-byte groups;
    # others as "wmma")
    gemm: str = "cublas"
    # cuda convolutions: "exact" runs cuDNN restricted to FMA (fp32) kernels, which the fp32 tolerance needs, the
    # first its heuristics pick; "fastest" the same kernels, the fastest of them timed on the first call (FFT and
    # Winograd ones multiply less); "tf32" lets cuDNN use tensor cores as PyTorch does by default (faster, within
    # loose tolerances only); "direct" is ours (a thread per output position and tile of channels), "implicit" ours
    # as a product (_cuda_conv_implicit)
    conv: str = "exact"
    omp: str = "auto"  # cpu: "auto" runs OpenMP threads only for big kernels (waking a team costs more than a
    # small kernel), "always" for every kernel
    # cuda block-per-row kernels that pass over their row more than once (statistics, then outputs): "regs" keeps
    # each thread's share of the operands read in several passes in registers, "smem" the row in shared memory, so
    # the row is read from memory once (later passes otherwise re-read it, from L2 at best); "none" re-reads;
    # "segment" splits a row too long for a block's shared memory over several blocks (``split_rows``), each keeping
    # its segment there, in one cooperative launch: a row's blocks wait for each other's partial results of a pass
    # instead of the launch's end, so the row is read from memory once (a GroupNorm's rows of a megabyte)
    cache: str = "none"
    # cuda: "fast" computes float exp, sigmoid, silu and quotients on the special-function units (ir.FAST_FLOAT),
    # within a few ulp; "exact" with the accurate library forms
    math: str = "exact"
    # a row's max and sum of exponentials read from memory (``online_softmax``): "online" in one pass, "passes" in
    # two (the second pass's reads may come from L1 or L2 where a row is short, without the running rescale)
    softmax: str = "online"

    def label(self) -> str:
        return (
            f"block={self.block} rows={self.rows} vec={self.vec} gemm={self.gemm} tile={self.tile} micro={self.micro} "
            f"conv={self.conv} omp={self.omp} cache={self.cache} math={self.math} softmax={self.softmax}"
        )

    def omp_pragma(self, work: int, clause: str = "") -> str:
        """The OpenMP work-sharing pragma of a loop doing about ``work`` element operations, or none."""
        if self.omp == "always" or work >= OMP_MIN_WORK:
            return f"#pragma omp parallel for {clause}schedule(static)"
        return "// serial: too little work to wake a thread team"


def _log_add_exp(qualifier: str) -> str:
    """log_add_exp for a prelude (``qualifier``: "__device__ " on the GPU, "" on the host): one text for both."""
    return f"""\
// log(exp(a) + exp(b)) without overflow (logcumsumexp's scan): the larger plus log1p of the other's exp relative to
// it; equal values (two infinities of one sign among them, whose difference is NaN) give the value plus log 2.
template <typename T> {qualifier}T log_add_exp(T a, T b) {{
    if (a == b) return a + (T)0.6931471805599453;
    return (a > b ? a : b) + log1p(exp(-fabs(a - b)));
}}
"""


def f16_scale_source(qualifier: str) -> str:
    """f16_scale for a prelude (``qualifier`` as ``_log_add_exp``'s; the emulator's too)."""
    return f"""\
// The power of two an operand is scaled by before it is split into float16 parts (the wgmma kernel's f16 form): its
// largest finite magnitude to [2^14, 2^15), under float16's largest (65504) however it rounds, its smaller values
// as far above float16's smallest normal (2^-14) as they can be. 1 for an operand of zeros. (Exact: a power of two,
// as is its reciprocal, which scales the products back.)
{qualifier}float f16_scale(float largest) {{
    if (!(largest > 0.0f)) return 1.0f;
    int e;
    frexpf(largest, &e);  // largest = f 2^e, f in [0.5, 1)
    return ldexpf(1.0f, min(15 - e, 126));
}}
"""


def _extrema(qualifier: str) -> str:
    """max_nan and min_nan for a prelude (``qualifier`` as ``_log_add_exp``'s)."""
    return f"""\
// The larger (smaller) of two values, NaN where either is NaN, as torch's maximum, amax, clamp and max pooling give
// it: fmax and fmin give the other operand. (a != a holds for a NaN alone; integers never.)
template <typename T, typename U> {qualifier}auto max_nan(T a, U b) -> decltype(a + b) {{
    return (a > b || a != a) ? a : b;
}}
template <typename T, typename U> {qualifier}auto min_nan(T a, U b) -> decltype(a + b) {{
    return (a < b || a != a) ? a : b;
}}
"""


CUDA_PRELUDE = (
    """#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cuda_runtime.h>

// A float's bits as an integer (a bitcast view: x.view(torch.int32)).
__device__ __forceinline__ int32_t float_bits(float v) { return (int32_t)__float_as_uint(v); }
// Four neighbouring elements of any type, moved by one access (16 bytes of floats; two of int64s).
template <typename T> struct alignas(4 * sizeof(T)) Quad { T v[4]; };
struct SumOp { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct ProdOp { template <typename T> __device__ T operator()(T a, T b) const { return a * b; } };
"""
    + _extrema("__device__ __forceinline__ ")
    + """\
struct MaxOp { template <typename T> __device__ T operator()(T a, T b) const { return max_nan(a, b); } };
struct MinOp { template <typename T> __device__ T operator()(T a, T b) const { return min_nan(a, b); } };
"""
    + _log_add_exp("__device__ ")
    + """\
struct LogAddExpOp { template <typename T> __device__ T operator()(T a, T b) const { return log_add_exp(a, b); } };
// A row's running max and sum of exp(x - max) (an online softmax, emit._online): two threads' pairs combined, each
// sum rescaled to the larger max (a max of -inf has a sum of 0 or NaN, kept as it is).
template <typename T> struct MaxSum { T m, s; };
struct MaxSumOp {
    template <typename T> __device__ MaxSum<T> operator()(MaxSum<T> a, MaxSum<T> b) const {
        const T m = max_nan(a.m, b.m);
        if (m == -INFINITY) return MaxSum<T>{m, a.s + b.s};
        return MaxSum<T>{m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
    }
};
__device__ __forceinline__ MaxSum<float> __shfl_xor_sync(unsigned mask, MaxSum<float> v, int lane) {
    return MaxSum<float>{__shfl_xor_sync(mask, v.m, lane), __shfl_xor_sync(mask, v.s, lane)};
}
__device__ __forceinline__ MaxSum<double> __shfl_xor_sync(unsigned mask, MaxSum<double> v, int lane) {
    return MaxSum<double>{__shfl_xor_sync(mask, v.m, lane), __shfl_xor_sync(mask, v.s, lane)};
}

// Four consecutive floats as one 16-byte access where the address allows it (``aligned``: the same for every thread
// of a launch, so the branch does not diverge), else as four.
__device__ __forceinline__ void load4(float* v, const float* p, bool aligned) {
    if (aligned) {
        const float4 q = *reinterpret_cast<const float4*>(p);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else {
        v[0] = p[0]; v[1] = p[1]; v[2] = p[2]; v[3] = p[3];
    }
}
__device__ __forceinline__ void store4(float* p, const float* v, bool aligned) {
    if (aligned) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        p[0] = v[0]; p[1] = v[1]; p[2] = v[2]; p[3] = v[3];
    }
}

// Every thread of the block gets the result. The leading barrier keeps one row's reduction from overwriting the
// partials the previous one is still reading.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
    __shared__ T partial[32];
    for (int off = 16; off > 0; off >>= 1) v = op(v, (T)__shfl_xor_sync(0xffffffffu, v, off));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : identity;
    for (int off = 16; off > 0; off >>= 1) v = op(v, (T)__shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Two of a row's reductions of one pass (a norm's sum and sum of squares) at once: one round of barriers, not two.
template <typename T, typename Op, typename U, typename Op2>
__device__ void block_reduce2(T* a, Op op, T a_identity, U* b, Op2 op2, U b_identity) {
    __shared__ T a_partial[32];
    __shared__ U b_partial[32];
    T v = *a;
    U w = *b;
    for (int off = 16; off > 0; off >>= 1) {
        v = op(v, (T)__shfl_xor_sync(0xffffffffu, v, off));
        w = op2(w, (U)__shfl_xor_sync(0xffffffffu, w, off));
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) {
        a_partial[warp] = v;
        b_partial[warp] = w;
    }
    __syncthreads();
    v = lane < warps ? a_partial[lane] : a_identity;
    w = lane < warps ? b_partial[lane] : b_identity;
    for (int off = 16; off > 0; off >>= 1) {
        v = op(v, (T)__shfl_xor_sync(0xffffffffu, v, off));
        w = op2(w, (U)__shfl_xor_sync(0xffffffffu, w, off));
    }
    *a = v;
    *b = w;
}

// A warp per row: every lane gets the result, no barrier (the warps of a block run rows of their own). The identity
// is unused: the signature is block_reduce's, so that the call site is the same.
template <typename T, typename Op>
__device__ T warp_reduce(T v, Op op, T) {
    for (int off = 16; off > 0; off >>= 1) v = op(v, (T)__shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Inclusive scan over a warp's lanes in order; *total gets the combination of all 32. No barrier: as warp_reduce.
template <typename T, typename Op>
__device__ T warp_scan(T v, Op op, T, T* total) {
    const int lane = threadIdx.x & 31;
    for (int off = 1; off < 32; off <<= 1) {
        const T up = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v = op(up, v);
    }
    *total = __shfl_sync(0xffffffffu, v, 31);
    return v;
}

// Exclusive forms: each thread gets the combination of the threads before it (the first, the identity). A block's
// first lane of a warp reads the previous warp's last inclusive value; the next call's leading barrier (block_scan's)
// keeps it from being overwritten while read.
template <typename T, typename Op>
__device__ T warp_exclusive_scan(T v, Op op, T identity, T* total) {
    const T up = __shfl_up_sync(0xffffffffu, warp_scan(v, op, identity, total), 1);
    return (threadIdx.x & 31) == 0 ? identity : up;
}

template <typename T, typename Op>
__device__ T block_exclusive_scan(T v, Op op, T identity, T* total) {
    __shared__ T last[32];
    const T inclusive = block_scan(v, op, identity, total);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const T up = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 31) last[warp] = inclusive;
    __syncthreads();
    return lane > 0 ? up : warp > 0 ? last[warp - 1] : identity;
}

// A tile of 32 rows per block, lane l of every warp on row l: each thread gets its row's result, combined over the
// warps in a fixed order. Leading barrier: as block_reduce's.
template <typename T, typename Op>
__device__ T tile_reduce(T v, Op op, T identity) {
    __shared__ T partial[32][33];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    partial[warp][lane] = v;
    __syncthreads();
    v = identity;
    for (int w = 0; w < warps; ++w) v = op(v, partial[w][lane]);
    return v;
}

// A split row's result (emit.split_rows): the partial results of its n blocks (``p``: the thread's row's), combined
// by the threads sharing the row (a block's, or the warps of a tile of 32 rows), in the same order in every block and
// every launch, so all of them see the same value. Read from L2: in a cooperative launch, other SMs stored them.
template <typename T, typename Op>
__device__ T combine_partials(const T* p, int n, Op op, T identity, bool tile) {
    const int first = tile ? threadIdx.x >> 5 : threadIdx.x, step = tile ? blockDim.x >> 5 : blockDim.x;
    T v = identity;
    for (int s = first; s < n; s += step) v = op(v, __ldcg(p + s));
    return tile ? tile_reduce(v, op, identity) : block_reduce(v, op, identity);
}

// Inclusive scan over the block's threads in order; *total gets the combination of all of them. Leading barrier:
// as block_reduce's.
template <typename T, typename Op>
__device__ T block_scan(T v, Op op, T identity, T* total) {
    __shared__ T partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int off = 1; off < 32; off <<= 1) {
        const T up = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v = op(up, v);
    }
    __syncthreads();
    if (lane == 31) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T w = lane < warps ? partial[lane] : identity;
        for (int off = 1; off < 32; off <<= 1) {
            const T up = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w = op(up, w);
        }
        partial[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v = op(partial[warp - 1], v);
    *total = partial[warps - 1];
    return v;
}
"""
)
# Our 3xTF32 products' tensor-core step (``_tf32x3_steps``). A tensor core reads a TF32 operand's 10 high
# significand bits and ignores the rest, so operands go in as float bits.
CUDA_MMA_PRELUDE = """
// D += A B for a warp: mma.sync m16n8k8, TF32 operands, float32 sums. PTX's fragment layout, lane = 4 g + t:
// a = A[g][t], A[g + 8][t], A[g][t + 4], A[g + 8][t + 4]; b = B[t][g], B[t + 4][g];
// d = D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1].
__device__ __forceinline__ void mma_tf32(float* d, const float* a, const float* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                   "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}
// The TF32 value nearest a float (ties away from zero; sm_90 has no instruction for it): the rest is the float minus
// this, exactly.
__device__ __forceinline__ float tf32_near(float v) {
    return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}
// 4 floats from global to shared memory without passing through registers (cp.async, sm_80 and later), zeros where
// !in (nothing read: src only has to be a valid address); a source that is not 16-byte aligned goes 4 bytes a copy.
// A thread's copies land by cp_async_wait; other threads see them after a barrier that follows it.
__device__ __forceinline__ void cp_async1(float* dst, const float* src, bool in) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(in ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool in, bool aligned) {
    if (aligned) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                     "l"(src), "r"(in ? 16 : 0) : "memory");
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) cp_async1(dst + c, src + c, in);
    }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most ``pending`` of this thread's latest committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory"); }
"""


# Our float32 products on Hopper's warpgroup MMA (``_cuda_gemm_wgmma``): a warpgroup's m64n128 product of two
# shared-memory tiles named by descriptors, asynchronous to the issuing threads, of TF32 operands (8 k) or float16
# ones (16 k: the same 16 bytes a row of a core matrix, so the same tiles and descriptors).
def _wgmma_product(name: str, instruction: str, immediates: str, what: str) -> str:
    """A prelude function issuing ``instruction`` (``immediates``: its operands after the accumulate predicate)."""
    lines = [", ".join(f"%{i}" for i in range(r, r + 16)) for r in range(0, 64, 16)]
    sums = "\n".join(f'        "{line}{end} "' for line, end in zip(lines, [",", ",", ",", "},"], strict=True))
    outputs = ",\n          ".join(", ".join(f'"+f"(d[{i}])' for i in range(r, r + 8)) for r in range(0, 64, 8))
    return f"""// D (64 x 128, float32) = A B (+ D where ``accumulate``) for a warpgroup, A and B K-major {what}. Lane
// 4 g + t of warp w holds D's rows 16 w + g and 16 w + g + 8, columns 8 j + 2 t and 8 j + 2 t + 1 at d[4 j ...].
__device__ __forceinline__ void {name}(float* d, uint64_t a, uint64_t b, int accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %66, 0;\\n"
        "{instruction} {{"
{sums}
        "%64, %65, p, {immediates};\\n}}\\n"
        : {outputs}
        : "l"(a), "l"(b), "r"(accumulate));
}}
"""


CUDA_WGMMA_PRELUDE = (
    """#include <cuda_fp16.h>
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma needs sm_90a: a Hopper GPU, built for its arch-specific instructions"
#endif
// A shared-memory operand as wgmma reads it: 8-row by 16-byte core matrices, ``lbo`` bytes apart along K and
// ``sbo`` apart along M (or N), no swizzle (PTX's matrix descriptor: address, offsets in 16-byte units).
__device__ __forceinline__ uint64_t wgmma_desc(const float* p, uint32_t lbo, uint32_t sbo) {
    const uint64_t at = (static_cast<uint32_t>(__cvta_generic_to_shared(p)) & 0x3FFFF) >> 4;
    return at | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 | (uint64_t)((sbo >> 4) & 0x3FFF) << 32;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most ``pending`` of the product groups this thread's warpgroup committed last are still running:
// the others' sums are in its registers, their tiles free.
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(pending) : "memory");
}
// Shared memory written by this thread's generic stores or copies, made visible to wgmma's (async proxy) reads.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
"""
    + _wgmma_product("wgmma_tf32", "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", "1, 1", "TF32 tiles of 8 k")
    # (16-bit types: the operands' scale factors 1, neither transposed: both K-major)
    + "".join(
        _wgmma_product(
            f"wgmma_{kind}", f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{kind}.{kind}", "1, 1, 0, 0", what
        )
        for kind, what in (("f16", "float16 tiles of 16 k"), ("bf16", "bfloat16 tiles of 16 k"))
    )
    + """// A float as float16 bits (nearest, ties to even), and back: the f16 form's parts of a scaled operand.
__device__ __forceinline__ uint32_t f16_bits(float v) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ float f16_value(uint32_t bits) { return __half2float(__ushort_as_half((uint16_t)bits)); }
"""
    + f16_scale_source("__device__ __forceinline__ ")
)
# Our 16-bit products' tensor-core step (``_cuda_gemm_mma16``): operands as their bits (bfloat16 and float16 move
# alike), fragments read by ldmatrix, products by mma.sync m16n8k16 into float32 sums.
CUDA_MMA16_PRELUDE = """
// 8 16-bit values from global to shared memory (cp.async of 16 bytes), zeros where !in; a source that is not
// 16-byte aligned is copied by this thread's loads and stores (landed at once, seen by others after a barrier).
__device__ __forceinline__ void cp_async8h(uint16_t* dst, const uint16_t* src, bool in, bool aligned) {
    if (aligned) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                     "l"(src), "r"(in ? 16 : 0) : "memory");
    } else {
#pragma unroll
        for (int c = 0; c < 8; ++c) dst[c] = in ? src[c] : (uint16_t)0;
    }
}
// Four 8x8 matrices of 16-bit values from shared memory, lane 8 q + i giving the address of matrix q's row i (16
// bytes): lane 4 g + t receives row g's elements 2t and 2t + 1 of each (``trans``: row 2t's and 2t + 1's element g).
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const uint16_t* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const uint16_t* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p)));
}
// D += A B for a warp: mma.sync m16n8k16, float32 sums. Lane 4 g + t holds A's rows g and g + 8 at k 2t, 2t + 1
// and k 2t + 8, 2t + 9 (a[0], a[1], a[2], a[3]: row g, g + 8, g, g + 8), B's column g at the same k (b[0], b[1]),
// D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1].
__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
"""
CPU_PRELUDE = (
    """#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace std;  // exp, fabs, ... resolve to the float overloads as in CUDA device code

static inline int32_t float_bits(float v) {
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return i;
}
"""
    + _log_add_exp("")
    + _extrema("")
)
# What the emitted code calls a 16-bit float, and its conversions (ir.HALF_TYPES), when a plan has one. CUDA's own
# types, converted by intrinsics: torch's build flags (workdir form) switch the types' conversion operators off.
CUDA_HALF_PRELUDE = """#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

__device__ __forceinline__ float bf16_to_float(nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ nv_bfloat16 float_to_bf16(float v) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ float half_to_float(half v) { return __half2float(v); }
__device__ __forceinline__ half float_to_half(float v) { return __float2half_rn(v); }
"""
# On the host: bfloat16 as its bits, the upper half of a float (rounded to nearest even, a NaN kept a NaN); float16
# as the compiler's _Float16 (GCC and Clang, x86-64 and AArch64).
CPU_HALF_PRELUDE = """struct nv_bfloat16 { uint16_t bits; };
static inline float bf16_to_float(nv_bfloat16 v) {
    const uint32_t u = (uint32_t)v.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline nv_bfloat16 float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40u)};
    return {(uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
typedef _Float16 half;
static inline float half_to_float(half v) { return (float)v; }
static inline half float_to_half(float v) { return (half)v; }
"""
_OPS = {"sum": "SumOp", "prod": "ProdOp", "amax": "MaxOp", "amin": "MinOp", "logaddexp": "LogAddExpOp"}


def _coords(dims: list[int], shape: tuple[int, ...], index: str) -> list[str]:
    """Statements giving i<j> for ``dims`` (row-major among themselves) from the flat ``index``. Where the index
    stays under 2^31 (every kernel of under 2^31 elements a pass), it is divided in 32 bits: a 64-bit division by a
    constant takes several instructions, and an elementwise kernel's few a element leave it the most of them."""
    narrow = math.prod(shape[j] for j in dims) < 2**31
    at, suffix = (f"(int)({index})", "") if narrow else (index, "LL")
    lines, stride = [], 1
    for j in reversed(dims):
        size = shape[j]
        if size == 1:
            lines.append(f"const int64_t i{j} = 0;")
        else:
            q = at if stride == 1 else f"({at} / {stride}{suffix})"
            lines.append(f"const int64_t i{j} = {q} % {size}{suffix};")
        stride *= size
    return lines[::-1]


def _params(kernel: RowKernel, device: str) -> tuple[str, str]:
    """(C parameter list, argument names) of a kernel's buffers: reads const, then writes."""
    decl = [f"const {n.storage}* __restrict__ {b}" for b, n in kernel.reads.items()]
    decl += [f"{n.storage}* __restrict__ {b}" for b, n in kernel.writes.items()]
    names = [*kernel.reads, *kernel.writes]
    return ", ".join(decl), ", ".join(names)


def _launcher_params(kernel: Kernel, device: str) -> str:
    decl = [f"const {n.storage}* {b}" for b, n in kernel.reads.items()]
    decl += [f"{n.storage}* {b}" for b, n in kernel.writes.items()]
    if device == "cuda":
        decl.append("cudaStream_t stream")
    return ", ".join(decl)


def _scope_body(kernel: RowKernel, scope: Scope, index: str, cached: dict[str, str] | None = None) -> list[str]:
    """The scope's statements after its loads: from ``b[index]``, or from the row cache (``cached``: buffer ->
    where its element is kept)."""
    cached = cached or {}
    loads = [
        f"const {n.ctype} ld_{b} = {cached.get(b) or loaded(n, f'{b}[{index}]')};"
        for b, n in scope.identity_loads.items()
    ]
    return loads + scope.stmts


# Registers a thread may spend on its share of a cached row: beyond, spills to local memory would cost what the
# cache saves. Shared memory a block may spend on its row: within the 227 KB a Hopper block may opt into; a GPU
# with less refuses the launch, and the search drops the variant.
ROW_CACHE_VALUES = 32
ROW_CACHE_SMEM_BYTES = 200 * 1024
# A warp per row suits rows short enough that each lane holds its share in registers (32 values, as warp-per-row
# softmax kernels do): no barrier between passes, and a block's warps keep several rows' loads in flight. Longer
# rows keep a block each.
WARP_ROW_MAX = 32 * ROW_CACHE_VALUES
_SIZEOF = {"double": 8, "int64_t": 8, "float": 4, "int32_t": 4, "bool": 1}


# A scan along a block or a warp gives each thread SCAN_GROUP consecutive elements of a chunk: the thread scans them
# itself, so one scan across the threads covers SCAN_GROUP times as many elements, and the warp still reads
# consecutive memory (32 groups side by side). A group is a float4's width: contiguous rows move it as one access
# (``_quads``: load4 and store4 take 4 floats).
SCAN_GROUP = 4


def _items(kernel: RowKernel, threads: int) -> int:
    """Elements of a row each of its ``threads`` threads visits (the last ones possibly past the row's end)."""
    if not _grouped(kernel):
        return -(-kernel.inner // threads)
    return -(-kernel.inner // (threads * SCAN_GROUP)) * SCAN_GROUP


def _item(kernel: RowKernel, first: str, threads: int) -> str:
    """The element ``r`` a thread (its index among the row's threads: ``first``) visits as its item ``k``: strided
    by the thread count, or in groups (``SCAN_GROUP``: ``_grouped``)."""
    if not _grouped(kernel):
        return f"{first} + (int64_t)k * {threads}"
    g = SCAN_GROUP
    return f"((int64_t)(k / {g}) * {threads} + {first}) * {g} + (k % {g})"


def _grouped(kernel: RowKernel) -> bool:
    """Whether a block's or a warp's threads visit a row in groups of SCAN_GROUP consecutive elements: a scan's
    (each thread scans its group), and rows whose operands and outputs move 16 bytes at a time (``_quads``)."""
    return kernel.scan is not None or bool(_quads(kernel))


def row_cache(kernel: RowKernel, block: int, where: str = "regs", threads: int | None = None) -> frozenset[str]:
    """The buffers a kernel of ``block`` threads a block, ``threads`` of them sharing a row (the block's by default;
    a warp's 32), keeps ``where`` ("regs": each thread's share in registers, "smem": the row in shared memory, a
    block per row only): those read at the row's own index in more than one pass over the row (statistics, then
    outputs); none when they would not fit."""
    buffers = _reread(kernel)
    if where == "regs":
        items = _items(kernel, threads or block)
        # The block's threads share the SM's 64K registers: the cache takes at most half a thread's share (32
        # values at 1024 threads a block), so the rest of the kernel does not spill (a LayerNorm's rows of 32K
        # floats: 58 registers, one block an SM, each row read once).
        fits = items * len(buffers) <= min(ROW_CACHE_VALUES, 65536 // block // 2)
    else:
        fits = _smem_layout(kernel, buffers)[1] <= ROW_CACHE_SMEM_BYTES
    # Rows along the last dim run a block or a warp per row (``row_layout``); the others have no row to cache.
    return buffers if kernel.along_last and fits else frozenset()


def _reread(kernel: RowKernel) -> frozenset[str]:
    """The buffers a kernel reads at the row's own index in more than one pass over the row."""
    passes = [set().union(*(r.scope.identity_loads for r in group)) for group in _passes(kernel.reductions)]
    if kernel.full_outputs:
        passes.append(set(kernel.out_scope.identity_loads))
    counts: dict[str, int] = {}
    for loads in passes:
        for b in loads:
            counts[b] = counts.get(b, 0) + 1
    return frozenset(b for b, n in counts.items() if n > 1)


def _smem_layout(kernel: RowKernel, buffers: frozenset[str], length: int | None = None) -> tuple[dict[str, int], int]:
    """Byte offsets of the cached rows (or segments of ``length``) in shared memory (widest types first, so every
    row is aligned), and the total."""
    offsets, total = {}, 0
    for b in sorted(buffers, key=lambda b: (-_SIZEOF[kernel.reads[b].ctype], b)):
        offsets[b] = total
        total += (length or kernel.inner) * _SIZEOF[kernel.reads[b].ctype]
    return offsets, total


_CONST = re.compile(r"^const [\w:]+ (?P<name>\w+) = (?P<expr>.*);$")
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")  # names (a number is none)


def _declare_once(lines: list[str], more: list[str]) -> None:
    """``more`` appended to ``lines`` but for constants declared there already: a loop hoists the values that do not
    vary along it (a row's own element where the reduced dims have size 1), which the row's scope declares too."""
    lines += [stmt for stmt in more if not (_CONST.match(stmt) and stmt in lines)]


_QUOTIENT = re.compile(
    r"^const (?P<t>float|double) (?P<name>\w+) = "
    r"(?:\(\((?P<num>\w+)\) / \((?P<den>[A-Za-z_]\w*)\)\)|__fdividef\((?P<fnum>\w+), (?P<fden>[A-Za-z_]\w*)\));$"
)
_LOOP_VAR = re.compile(r"\b(?:int|int64_t) (\w+) =")


def _loop(loop: str, body: list[str]) -> list[str]:
    """``loop`` over ``body``, with the statements that do not vary along the loop (per-row values such as
    rsqrt(var + eps)) hoisted before it: host compilers keep libm calls in the loop (errno). A quotient by such a
    value (a softmax's sum, a norm's std) becomes a product with its reciprocal, hoisted too: a multiply per element
    instead of an IEEE division (a dozen instructions with a range check and a slow path), within 1.5 ulp of the
    quotient, as ATen divides by a scalar."""
    # Names a non-const statement touches (accumulators, pooling windows) vary, wherever they stand in the body.
    # Type names (a declaration's, a cast's) are not values.
    variant = {"r", "k", *_LOOP_VAR.findall(loop)}.union(*(_WORD.findall(b) for b in body if not _CONST.match(b)))
    variant -= {"float", "double", "int", "int64_t", "int32_t", "bool", "const"}
    hoisted: list[str] = []
    kept: list[str] = []
    for stmt in body:
        match = _CONST.match(stmt)
        if match and not variant.intersection(_WORD.findall(match["expr"])):
            hoisted.append(stmt)
            continue
        quotient = _QUOTIENT.match(stmt)
        den = quotient and (quotient["den"] or quotient["fden"])
        if quotient and den not in variant:
            t = quotient["t"]
            _declare_once(hoisted, [f"const {t} inv_{den} = ({t})1 / {den};"])
            stmt = f"const {t} {quotient['name']} = (({quotient['num'] or quotient['fnum']}) * inv_{den});"
        kept.append(stmt)
        if match:
            variant.add(match["name"])
    return [*hoisted, loop + " {", *("    " + b for b in kept), "}"]


# A thread's running sum of at most this many terms goes uncompensated: its rounding, at most n * 2^-24 of the
# terms' magnitudes (4e-6 at 64), stays far below the tightest float tolerance (1e-4), and the threads' partial
# sums are combined pairwise. Four additions a term instead of one are what a warp's row of 32 items would pay.
SHORT_SUM = 64


def _compensated(op: str, ctype: str, terms: int | None = None) -> bool:
    """Whether a running sum of ``terms`` values (None: as many as the row's length, unknown here) is compensated
    (``_kahan``): a double's rounding, n * 1e-16 even when serial, stays far below any tolerance (a float row's
    statistics accumulated in double, a float64 problem's sums); so does a short float sum's (``SHORT_SUM``)."""
    return op == "sum" and ctype != "double" and (terms is None or terms > SHORT_SUM)


def _kahan(acc: str, comp: str, value: str, ctype: str) -> list[str]:
    """Compensated summation: a row summed serially (one thread, one CPU core, or a long scan) keeps the error of
    a pairwise sum instead of growing with the row's length."""
    return [
        f"const {ctype} y_{acc} = ({value}) - {comp};",
        f"const {ctype} s_{acc} = {acc} + y_{acc};",
        f"{comp} = (s_{acc} - {acc}) - y_{acc};",
        f"{acc} = s_{acc};",
    ]


# How a CUDA row kernel's threads share out its rows (the reduced elements ``r`` of row ``o``): (first r of a thread,
# step, the call combining the threads' partial results) by layout; "thread" is also the CPU's.
_LANES = {
    "thread": ("0", "1", ""),
    "block": ("threadIdx.x", "{block}", "block_reduce"),
    "warp": ("(threadIdx.x & 31)", "32", "warp_reduce"),
    "tile": ("(threadIdx.x >> 5)", "{warps}", "tile_reduce"),
}
# Guards of stores: (a row's result, an element at the kernel's index) by layout. A block's result is written by
# one thread; a tile's threads past the last row compute the last one again (clamped) and store nothing.
_GUARDS = {
    "thread": ("", ""),
    "block": ("if (threadIdx.x == 0) ", ""),
    "warp": ("if ((threadIdx.x & 31) == 0) ", ""),
    "tile": ("if (threadIdx.x < 32 && live) ", "if (live) "),
}


def _row_body(
    kernel: RowKernel,
    device: str,
    layout: str,
    block: int,
    cache: str = "none",
    launch: int | None = None,
    online: bool = True,
    coop: bool = False,
) -> list[str]:
    """Statements for one row ``o`` of a row kernel (coordinates, reductions, outputs) in ``layout`` (_LANES);
    ``cache``: where a block or a warp per row keeps the operands several passes read ("regs", "smem": a block's
    only; ``row_cache``), or "none". ``launch``: of a split row (``split_rows``), the statements of that launch for
    the block's segment of the row: pass ``launch`` over it (the earlier passes' results combined from their
    partials), or the outputs after the last pass. ``online``: a max and a sum of exponentials in one pass where
    the row is read from memory each pass (``online_softmax``). ``coop``: of a split row in one cooperative launch
    (``_cuda_coop_row``: its blocks keep their segment ``seg`` in shared memory), every pass over the segment, each
    ending in the row's blocks' meeting (``_meet``), then the outputs."""
    shape, reduced = kernel.shape, list(kernel.reduced)
    outer = [j for j in range(len(shape)) if j not in reduced]
    full_index = linear_index(shape, tuple(f"i{j}" for j in range(len(shape))))
    if not reduced:
        # Elementwise: the row is one element whose flat index is o itself.
        lines = _coords(outer, shape, "o")
        lines += _scope_body(kernel, kernel.out_scope, "o")
        lines += [stored(kernel.writes[b], f"{b}[o]", v) for b, v in kernel.full_outputs]
        return lines
    # Reduced dims of size 1 have coordinate 0 for the whole row: declared once here, since the loops below would
    # each hoist the constant and declare it again.
    lines = _coords(outer, shape, "o") + [f"const int64_t i{j} = 0;" for j in reduced if shape[j] == 1]
    walked = _coords([j for j in reduced if shape[j] != 1], shape, "r")
    start, step, combine_threads = _LANES[layout]
    step = step.format(block=block, warps=block // 32)
    row_guard, element_guard = _GUARDS[layout]
    # The elements the row's threads visit: the row, or the block's segment of a split row.
    first_group, bound = f"(int64_t)({start}) * 4", f"{kernel.inner}LL"
    split = launch is not None or coop
    if split:
        segment = split_segment(kernel)
        # Every other launch takes the segments from the last: its first blocks read what the previous one read
        # last, which L2 may still hold. (A cooperative launch's blocks are given theirs.)
        if launch is not None:
            lines.append(f"const int64_t seg = {'gridDim.x - 1 - blockIdx.x' if launch % 2 else 'blockIdx.x'};")
        lines += [
            f"const int64_t seg0 = seg * {segment};",
            f"const int64_t seg_end = seg0 + {segment} < {bound} ? seg0 + {segment} : {bound};",
        ]
        start, first_group, bound = f"seg0 + {start}", "seg0 + (int64_t)threadIdx.x * 4", "seg_end"
        row_guard = row_guard.replace("if (", "if (seg == 0 && ")
    loop = f"for (int64_t r = {start}; r < {bound}; r += {step})"
    if layout == "tile":
        # A tile's warp loads one line (32 neighbouring rows' elements) an element: unrolled, a thread's next
        # elements' loads are in flight together (a column max over 8 GB on an H100: 3.70 ms rolled, 2.95
        # unrolled 8; scripts/probe_memory_bound.cu).
        loop = f"#pragma unroll {TILE_UNROLL}\n{loop}"
    cached: dict[str, str] = {}
    threads = 32 if layout == "warp" else block
    caching = (layout == "block" and cache != "none") or (layout == "warp" and cache == "regs")
    buffers = _reread(kernel) if coop else row_cache(kernel, block, cache, threads) if caching else frozenset()
    items = _items(kernel, threads)
    # Item k of every loop is the same element r in a thread, so element k of a thread's cache is the one it loaded
    # and a scan's groups are the elements its passes read; unrolled over a compile-time count, the cache arrays
    # live in registers.
    grouped = _grouped(kernel) and layout in ("block", "warp")
    in_registers = bool(buffers) and cache == "regs"
    # The elements one thread's partial results cover (its running sums' terms).
    share = -(
        -(split_segment(kernel) if split else kernel.inner)
        // {"thread": 1, "block": block, "warp": 32, "tile": block // 32}[layout]
    )
    # Every item of every thread in the row (rows a multiple of the threads' items long): no bounds test.
    exact = items * threads == kernel.inner
    element = walked
    if (grouped or in_registers) and not split:
        unroll = "#pragma unroll\n" if in_registers else ""
        loop = f"{unroll}for (int k = 0; k < {items}; ++k)"
        share = items
        if exact:
            element = [f"const int64_t r = {_item(kernel, start, threads)};", *walked]
        else:
            loop += f" if (const int64_t r = {_item(kernel, start, threads)}; r < {kernel.inner}LL)"
    if in_registers:
        cached = {b: f"c_{b}[k]" for b in sorted(buffers)}
        # Zeroed: a block scan's last chunk reads the items past the row's end too (and discards them).
        lines += [f"{kernel.reads[b].ctype} c_{b}[{items}] = {{}};" for b in sorted(buffers)]
    elif buffers:
        # Every pass visits the same elements r in each thread: a thread reads back only what it stored, so the
        # row needs no barrier between the preload and the passes, nor before the next row's preload.
        offsets, _ = _smem_layout(kernel, buffers, split_segment(kernel) if coop else None)
        cached = {b: f"s_{b}[r - seg0]" if coop else f"s_{b}[r]" for b in sorted(buffers)}
        lines.append("extern __shared__ __align__(16) unsigned char row_smem[];")
        for b in sorted(buffers):
            t = kernel.reads[b].ctype
            lines.append(f"{t}* const s_{b} = reinterpret_cast<{t}*>(row_smem + {offsets[b]});")
    # A thread's groups of 4 consecutive elements move as one 16-byte access each (``_quads``), and so do the
    # operands read at the element's place in its row alone (a norm's weight and bias: ``row_loads``).
    quads = _quads(kernel) if grouped and device == "cuda" else []
    along = linear_index(tuple(shape[j] for j in reduced), tuple(f"i{j}" for j in reduced))
    # Offsets of the row's own dims plus, for an operand broadcast along some of the others (a mask per batch, not
    # per head), a part fixed for the row: terms of those dims' coordinates by multiples of 4 (a group stays 16-byte
    # aligned).
    row_load = re.compile(
        rf"^const float (?P<name>\w+) = (?P<buffer>\w+)\[(?P<base>(?:i\d+ \* \d+LL \+ )*){re.escape(along)}\];$"
    )

    def row_operand(stmt: str) -> re.Match[str] | None:
        m = row_load.match(stmt)
        terms = [t.split(" * ") for t in m["base"].split(" + ") if t] if m else []
        fixed = all(int(i[1:]) not in reduced and int(c.removesuffix("LL")) % 4 == 0 for i, c in terms)
        return m if m and fixed else None

    scopes = [kernel.out_scope, *(red.scope for red in kernel.reductions)]
    row_buffers = sorted({m["buffer"] for scope in scopes for stmt in scope.stmts if (m := row_operand(stmt))})
    if quads:
        flags = " | ".join(f"(uintptr_t){b}" for b in [*quads, *row_buffers])
        lines.append(f"const bool aligned = ({flags}) % 16 == 0;")
    if buffers and in_registers and set(buffers) <= set(quads):
        # Every chunk's group; a thread past the row's end reads the row's first group instead (and discards it).
        begin = "r0" if exact else f"(r0 < {kernel.inner}LL ? r0 : 0)"
        fill = [f"const int64_t r0 = ((int64_t)q * {threads} + {start}) * 4;"]
        fill += [f"load4(&c_{b}[4 * q], {b} + {_row_offset(kernel, begin)}, aligned);" for b in sorted(buffers)]
        lines += _unrolled(f"for (int q = 0; q < {items // 4}; ++q)", fill)
    elif buffers:
        # A cooperative block's segment, 16 bytes a load where the operands have groups of 4: its threads then read
        # what others stored (its passes' loops are not this one), between barriers (the first: the block's
        # previous segment read to its end).
        lines += ["__syncthreads();"] * coop
        if coop and set(buffers) <= set(quads):
            fill = [f"load4(s_{b} + (r0 - seg0), {b} + {_row_offset(kernel, 'r0')}, aligned);" for b in sorted(buffers)]
            lines += _loop(f"for (int64_t r0 = {first_group}; r0 < {bound}; r0 += {threads * 4})", fill)
        else:
            fill = [f"{cached[b]} = {loaded(kernel.reads[b], f'{b}[{full_index}]')};" for b in sorted(buffers)]
            lines += _loop(loop, element + fill)
        lines += ["__syncthreads();"] * coop

    def over_groups(body: list[str], loads: list[str], outputs: list[tuple[str, str]]) -> list[str]:
        """A pass over the thread's groups of 4 elements r0 + j: ``body`` for each element, ``loads`` (operands)
        read and ``outputs`` (buffer, value) written a group at a time."""
        # The row operands read, a group at a time too.
        rows = [m for stmt in body if (m := row_operand(stmt))]
        body = [f"const float {m['name']} = v_{m['name']}[j];" if (m := row_operand(stmt)) else stmt for stmt in body]
        each = [*(["const int k = g * 4 + j;"] if in_registers else []), "const int64_t r = r0 + j;", *walked, *body]
        each += [f"w_{b}[j] = {v};" for b, v in outputs]
        at = _row_offset(kernel, "r0")
        pre = _group_loads("q", loads, at)
        pre += [
            line
            for m in rows
            for line in (f"float v_{m['name']}[4];", f"load4(v_{m['name']}, {m['buffer']} + {m['base']}r0, aligned);")
        ]
        pre += [f"float w_{b}[4];" for b, _ in outputs]
        post = [f"store4({b} + {at}, w_{b}, aligned);" for b, _ in outputs]
        group = [*pre, *_unrolled("for (int j = 0; j < 4; ++j)", each), *post]
        if not in_registers:  # a loop at run time over the thread's groups
            return _loop(f"for (int64_t r0 = {first_group}; r0 < {bound}; r0 += {threads * 4})", group)
        first = f"((int64_t)g * {threads} + {start}) * 4"
        head = f"#pragma unroll\nfor (int g = 0; g < {items // 4}; ++g)"
        if exact:
            return _loop(head, [f"const int64_t r0 = {first};", *group])
        return _loop(f"{head} if (const int64_t r0 = {first}; r0 < {kernel.inner}LL)", group)

    looped = 0  # passes with a loop over the row so far
    passes = _passes(kernel.reductions)
    # A max and the next pass's sum of exponentials in one pass, where the row is read from memory each pass.
    merged = _online_passes(passes) if online and not (split or buffers) else set()
    for i, group in enumerate(passes):
        if i - 1 in merged:
            continue
        if i in merged:
            (peak,), (total,) = group, passes[i + 1]
            loads = _pass_quads(quads, cached, [peak.scope, total.scope])
            body, pair = _online_pass(kernel, peak, total, full_index, cached | {b: f"q_{b}[j]" for b in loads}, share)
            lines += pair
            _declare_once(lines, over_groups(body, loads, []) if quads else _loop(loop, element + body))
            t = peak.node.ctype
            if combine_threads:
                running = f"MaxSum<{t}>{{acc_{peak.var}, acc_{total.var}}}"
                identity = f"MaxSum<{t}>{{-INFINITY, 0}}"
                lines.append(f"const MaxSum<{t}> {peak.var}_{total.var} = ")
                lines[-1] += f"{combine_threads}<MaxSum<{t}>>({running}, MaxSumOp(), {identity});"
                lines += [f"const {t} {r.var} = {peak.var}_{total.var}.{f};" for r, f in ((peak, "m"), (total, "s"))]
            else:
                lines += [f"const {t} {r.var} = acc_{r.var};" for r in (peak, total)]
            looped += 2
            continue
        if group[0].invariant:
            red = group[0]
            t = red.node.ctype
            lines += red.scope.stmts
            folded = {"sum": f"{red.value} * ({t}){kernel.inner}", "prod": f"pow({red.value}, ({t}){kernel.inner})"}
            lines.append(f"const {t} {red.var} = {folded.get(red.node.op, red.value)};")
            continue
        if launch is not None and looped < launch:  # an earlier launch's pass: its blocks' partial results combined
            lines += _combined_partials(kernel, group, layout)
            looped += 1
            continue
        body = []
        loads = _pass_quads(quads, cached, [red.scope for red in group])
        held = {b: f"q_{b}[j]" for b in loads}
        for red in group:
            identity, combine = reduction(red.node.op, red.node.ctype)
            t = red.node.ctype
            lines.append(f"{t} acc_{red.var} = ({t})({identity});")
            # The group's scopes load the same operands at the same coordinates: each such constant declared once
            # (other statements, such as a pooling window's loop, are the scope's own).
            scope = _scope_body(kernel, red.scope, full_index, cached | held)
            _declare_once(body, scope)
            if _compensated(red.node.op, t, share):
                lines.append(f"{t} comp_{red.var} = ({t})0;")
                body += _kahan(f"acc_{red.var}", f"comp_{red.var}", red.value, t)
            else:
                body.append(f"acc_{red.var} = {combine.format(a=f'acc_{red.var}', v=red.value)};")
        if quads:
            _declare_once(lines, over_groups(body, loads, []))
        else:
            _declare_once(lines, _loop(loop, element + body))
        paired = combine_threads == "block_reduce" and len(group) == 2
        if paired:  # the accumulators hold the block's results after it
            pair = [
                f"&acc_{r.var}, {_OPS[r.node.op]}(), ({r.node.ctype})({reduction(r.node.op, r.node.ctype)[0]})"
                for r in group
            ]
            lines.append(f"block_reduce2({', '.join(pair)});")
        for red in group:
            identity, t = reduction(red.node.op, red.node.ctype)[0], red.node.ctype
            name = f"part_{red.var}" if coop else red.var  # the block's part of the row's result
            if combine_threads and not paired:
                combined = f"{combine_threads}<{t}>(acc_{red.var}, {_OPS[red.node.op]}(), ({t})({identity}))"
                lines.append(f"const {t} {name} = {combined};")
            else:
                lines.append(f"const {t} {name} = acc_{red.var};")
        if coop:
            lines += _meet(kernel, group, looped)
        if split and looped == launch:  # this launch's pass: the block's partial results, and no more
            lines.append(_GUARDS[layout][0] + f"{{ {_partial_stores(kernel, group, '')} }}")
            return lines
        looped += 1
    if kernel.scan is not None and layout in ("block", "warp"):
        lines += _chunked_scan(
            kernel, walked, full_index, layout, threads, cached if in_registers else {}, exact, quads
        )
    elif kernel.scan is not None and layout == "tile":
        lines += _segment_scan(kernel, walked, full_index, block)
    elif kernel.scan is not None:
        identity = reduction(kernel.scan.op, kernel.scan.ctype)[0]
        ahead = _ahead(kernel, layout, device, cached)
        start = f"({kernel.scan.ctype})({identity})"
        lines += _serial_scan(kernel, walked, full_index, loop, "running", start, "", ahead)
    elif kernel.full_outputs and quads:
        loads = _pass_quads(quads, cached, [kernel.out_scope])
        body = _scope_body(kernel, kernel.out_scope, full_index, cached | {b: f"q_{b}[j]" for b in loads})
        outputs = [(b, v) for b, v in kernel.full_outputs if b in quads]
        body += [stored(kernel.writes[b], f"{b}[{full_index}]", v) for b, v in kernel.full_outputs if b not in quads]
        _declare_once(lines, over_groups(body, loads, outputs))
    elif kernel.full_outputs:
        body = element + _scope_body(kernel, kernel.out_scope, full_index, cached)
        body += [element_guard + stored(kernel.writes[b], f"{b}[{full_index}]", v) for b, v in kernel.full_outputs]
        _declare_once(lines, _loop(loop, body))
    _declare_once(lines, _scope_body(kernel, kernel.row_scope, full_index))
    if kernel.reduced_outputs:
        stores = " ".join(stored(kernel.writes[b], f"{b}[{off}]", var) for b, var, off in kernel.reduced_outputs)
        lines.append(row_guard + "{ " + stores + " }")
    return lines


def _meet(kernel: RowKernel, group: list[FusedReduction], looped: int) -> list[str]:
    """A cooperative split row's meeting after pass ``looped`` (``_row_body``'s coop): the block's part of each
    result stored, then its arrival counted, then, once every block of the row has arrived, the parts combined
    (in the same order in every block, so all of them see the same value). The stores are visible before the
    count (a fence between); the parts are read from L2 (``combine_partials``), where the other SMs stored them."""
    arrived = f"reinterpret_cast<unsigned*>({kernel.arrivals}) + o"
    lines = [
        "if (threadIdx.x == 0) {",
        f"    {_partial_stores(kernel, group, 'part_')}",
        "    __threadfence();",
        f"    atomicAdd({arrived}, 1u);",
        f"    while (*reinterpret_cast<volatile unsigned*>({arrived}) < {(looped + 1) * kernel.split}u) {{",
        "    }",
        "    __threadfence();",
        "}",
        "__syncthreads();",
    ]
    return lines + _combined_partials(kernel, group, "block")


def _partial_stores(kernel: RowKernel, group: list[FusedReduction], prefix: str) -> str:
    """A split row's block storing its part of each of the pass's results (named ``{prefix}{var}``)."""
    return " ".join(f"{kernel.partials[r.var]}[o * {kernel.split} + seg] = {prefix}{r.var};" for r in group)


def _combined_partials(kernel: RowKernel, group: list[FusedReduction], layout: str) -> list[str]:
    """The pass's results of a split row, from its blocks' parts (``combine_partials``)."""
    lines = []
    for red in group:
        identity, t = reduction(red.node.op, red.node.ctype)[0], red.node.ctype
        partials = f"{kernel.partials[red.var]} + o * {kernel.split}, {kernel.split}"
        tile = "true" if layout == "tile" else "false"
        combined = f"combine_partials<{t}>({partials}, {_OPS[red.node.op]}(), ({t})({identity}), {tile})"
        lines.append(f"const {t} {red.var} = {combined};")
    return lines


# Elements a thread's scan along its row loads ahead of using them (``_scan_ahead``): AHEAD, more (up to AHEAD_MAX)
# where its rows are too few for ~IN_FLIGHT elements in flight at AHEAD a thread. Memory's bandwidth is reached
# only with megabytes in flight (3.35 TB/s times ~1 us of latency): a column scan of 32768 columns is 32768 threads,
# 1 MB in flight at 8 elements a thread. (A reduction's thread loading its next 8 elements the same way measured
# slower on an H100: an argmax over 8 GB took 3.46 ms, 3.08 loading an element at a time.)
AHEAD = 8
AHEAD_MAX = 32
IN_FLIGHT = 1 << 20


def _ahead_count(kernel: RowKernel) -> int:
    """How many elements a thread's scan along a row of ``kernel`` loads ahead: a power of two dividing its rows'
    length, or 0 where no such count of at least AHEAD does."""
    count = AHEAD
    while count < AHEAD_MAX and kernel.outer * count < IN_FLIGHT and kernel.inner % (2 * count) == 0:
        count *= 2
    return count if kernel.inner % count == 0 else 0


def _ahead(kernel: RowKernel, layout: str, device: str, cached: dict[str, str]) -> list[str]:
    """The operands a thread's scan along its row loads ahead, where its length allows (``_ahead_count``): those
    the scanned value reads at its own element (cuda; but for the ones a thread keeps, ``cached``)."""
    if layout != "thread" or device != "cuda" or not _ahead_count(kernel):
        return []
    return sorted(b for b in kernel.out_scope.identity_loads if b not in cached)


def _scan_ahead(kernel: RowKernel, ahead: list[str], element: list[str], body: list[str], index: str) -> list[str]:
    """A thread's scan along its row, ``_ahead_count`` elements a chunk: the ``ahead`` operands' elements of the
    next chunk loaded (into ``nx_{b}``) before ``body`` runs for each of this chunk's (``pf_{b}``), so that a chunk's
    loads are in flight while the one before is scanned and stored. The loads are L2's (``__ldcg``), not the
    read-only path's: an ordinary load stays before the stores that follow it, which could be to the same address
    for all ptxas knows; read-only loads it put just before their use, two or three in flight. A cumsum down 32768
    columns of 16384 (4.3 GB moved) took 3.56 ms on an H100 a load at a time, 1.54 ms this way."""
    count = _ahead_count(kernel)
    each = f"for (int u = 0; u < {count}; ++u)"

    def fetch(into: str, first: str) -> list[str]:
        loads = [f"{into}_{b}[u] = {_load_ahead(kernel.reads[b], f'{b}[{index}]')};" for b in ahead]
        return _unrolled(each, [f"const int64_t r = {first} + u;", *element, *loads])

    lines = [f"{kernel.reads[b].storage} pf_{b}[{count}];" for b in ahead] + fetch("pf", "(int64_t)0")
    chunk = [f"{kernel.reads[b].storage} nx_{b}[{count}];" for b in ahead]
    chunk += _loop(f"if (r0 + {count} < {kernel.inner}LL)", fetch("nx", f"(r0 + {count})"))
    chunk += _unrolled(each, ["const int64_t r = r0 + u;", *element, *body])
    chunk += _unrolled(each, [f"pf_{b}[u] = nx_{b}[u];" for b in ahead])
    return lines + _loop(f"for (int64_t r0 = 0; r0 < {kernel.inner}LL; r0 += {count})", chunk)


def _load_ahead(node: Node, element: str) -> str:
    """A load of ``element`` through L2 (``_scan_ahead``): CUDA has ``__ldcg`` for all but bool."""
    return element if node.storage == "bool" else f"__ldcg(&{element})"


def online_softmax(kernel: RowKernel) -> bool:
    """Whether some pass of ``kernel`` over its rows can take the next one's reduction with it (``_online``)."""
    return bool(_online_passes(_passes(kernel.reductions)))


def _online_passes(passes: list[list[FusedReduction]]) -> set[int]:
    return {i for i in range(len(passes) - 1) if _online(passes[i], passes[i + 1])}


def _online(first: list[FusedReduction], second: list[FusedReduction]) -> bool:
    """Whether pass ``first``, a row's max m, and pass ``second``, its sum of exp(a - m) (a softmax's), can be one
    pass (an online softmax: the running sum rescaled whenever the running max grows, ``_online_pass``). Only where
    a does not read m and m is read as it is: then exp(a - m) is exp(a - m') exp(m' - m) for any m', exactly."""
    if len(first) != 1 or len(second) != 1 or first[0].invariant or second[0].invariant:
        return False
    peak, total = first[0].node, second[0].node
    if peak.op != "amax" or total.op != "sum" or peak.ctype not in ("float", "double") or total.ctype != peak.ctype:
        return False
    term = total.args[0]
    if not isinstance(term, Node) or term.op != "exp" or not isinstance(term.args[0], Node) or term.args[0].op != "sub":
        return False
    a, m = term.args[0].args
    while isinstance(m, Node) and m.kind is OpKind.VIEW:
        m = m.args[0]
    return m is peak and isinstance(a, Node) and not _reads(a, peak)


def _reads(node: Node, target: Node) -> bool:
    """Whether ``node`` is ``target`` or computed from it."""
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n is target:
            return True
        if id(n) not in seen:
            seen.add(id(n))
            todo += n.inputs()
    return False


def _online_pass(
    kernel: RowKernel, peak: FusedReduction, total: FusedReduction, index: str, cached: dict[str, str], share: int
) -> tuple[list[str], list[str]]:
    """(statements per element, declarations before the loop) of ``_online``'s one pass: the sum's terms computed
    with the running max standing for the row's, the running sum (and its compensation) rescaled by
    exp(old - new) when the max grows; the threads' (max, sum) pairs combined by ``MaxSumOp`` afterwards. A row
    of -inf alone sums to 0 (two passes: NaN), whose softmax is NaN all the same."""
    t = peak.node.ctype
    m, acc = f"acc_{peak.var}", f"acc_{total.var}"
    compensated = _compensated("sum", t, share)
    declarations = [f"{t} {m} = ({t})(-INFINITY);", f"{t} {acc} = ({t})0;"]
    declarations += [f"{t} comp_{total.var} = ({t})0;"] * compensated
    body = _scope_body(kernel, peak.scope, index, cached)
    rescaled = [acc, *([f"comp_{total.var}"] * compensated)]
    scale = " ".join(f"{v} *= grown;" for v in rescaled)
    body.append(f"if ({peak.value} > {m}) {{ const {t} grown = exp({m} - {peak.value}); {scale} {m} = {peak.value}; }}")
    terms = [f"const {t} {peak.var} = {m};"]
    # (the constants both scopes load once; a statement that is not one, such as a branch's brace, is the scope's own)
    terms += [s for s in _scope_body(kernel, total.scope, index, cached) if not (_CONST.match(s) and s in body)]
    if compensated:
        terms += _kahan(acc, f"comp_{total.var}", total.value, t)
    else:
        terms.append(f"{acc} = {acc} + {total.value};")
    # Nothing added while the running max is -inf: the terms of -inf values (a mask's) are 0 once a finite value
    # sets the max, not exp(-inf - -inf).
    return [*body, f"if ({m} != ({t})(-INFINITY)) {{", *terms, "}"], declarations


def _passes(reductions: list[FusedReduction]) -> list[list[FusedReduction]]:
    """The row's reductions in passes over the row, in order: consecutive reductions that do not read one another's
    results share a pass (a sum and a sum of squares, a dot product and both norms); one that reads an earlier
    result starts a new pass (softmax's sum after its max). An invariant reduction (no loop) is a pass of its own."""
    passes: list[list[FusedReduction]] = []
    for red in reductions:
        words = set(_WORD.findall(" ".join([*red.scope.stmts, red.value])))
        current = passes[-1] if passes else []
        if red.invariant or not current or current[0].invariant or words & {r.var for r in current}:
            passes.append([red])
        else:
            current.append(red)
    return passes


def _serial_scan(
    kernel: RowKernel,
    walked: list[str],
    full_index: str,
    loop: str,
    var: str,
    start: str,
    store_guard: str | None,
    ahead: list[str] | None = None,
) -> list[str]:
    """``var``: ``start`` combined, in order, with the scanned value of every element ``loop`` visits (a sum
    compensated); with ``store_guard``, each running value is stored at its element on the way. ``ahead``: the
    operands loaded ahead (``_scan_ahead``: a thread's whole row)."""
    scan = kernel.scan
    assert scan is not None
    combine, t = reduction(scan.op, scan.ctype)[1], scan.ctype
    out, value = kernel.full_outputs[0]
    lines = [f"{t} {var} = {start};"]
    held = {b: loaded(kernel.reads[b], f"pf_{b}[u]") for b in ahead or []}
    body = ([] if ahead else walked) + _scope_body(kernel, kernel.out_scope, full_index, held)
    if _compensated(scan.op, t):
        lines.append(f"{t} comp_{var} = ({t})0;")
        body += _kahan(var, f"comp_{var}", value, t)
    else:
        body.append(f"{var} = {combine.format(a=var, v=value)};")
    if store_guard is not None:
        body.append(store_guard + stored(kernel.writes[out], f"{out}[{kernel.store_at or full_index}]", var))
    return lines + (_scan_ahead(kernel, ahead, walked, body, full_index) if ahead else _loop(loop, body))


def _segment_scan(kernel: RowKernel, walked: list[str], full_index: str, block: int) -> list[str]:
    """A scan along 32 neighbouring rows a block (layout "tile": lane l on row l, coalesced), each warp a contiguous
    segment of the rows' length: the warps total their segments, each starts from the totals of the segments before
    its own and scans its segment again, storing. The operands are read twice, with every warp busy where a thread
    per row would leave the GPU idle."""
    scan = kernel.scan
    assert scan is not None
    identity, combine = reduction(scan.op, scan.ctype)
    t, warps = scan.ctype, block // 32
    seg = -(-kernel.inner // warps)
    loop = "for (int64_t r = seg_begin; r < seg_end; ++r)"
    lane, warp = "(threadIdx.x & 31)", "(threadIdx.x >> 5)"
    total = _serial_scan(kernel, walked, full_index, loop, "total", f"({t})({identity})", None)
    scanned = _serial_scan(kernel, walked, full_index, loop, "running", "before", "if (live) ")
    # Each pass in a scope of its own: both compute, and hoist, the same named values.
    return [
        f"const int64_t seg_begin = (int64_t){warp} * {seg}LL;",
        f"const int64_t seg_end = seg_begin + {seg}LL < {kernel.inner}LL ? seg_begin + {seg}LL : {kernel.inner}LL;",
        f"{t} segment;",
        "{",
        *("    " + line for line in [*total, "segment = total;"]),
        "}",
        f"__shared__ {t} segment_totals[{warps}][33];",
        "__syncthreads();  // the previous tile's readers are done",
        f"segment_totals[{warp}][{lane}] = segment;",
        "__syncthreads();",
        f"{t} before = ({t})({identity});",
        f"for (int w = 0; w < {warp}; ++w) before = {combine.format(a='before', v=f'segment_totals[w][{lane}]')};",
        "{",
        *("    " + line for line in scanned),
        "}",
    ]


def _group_loads(prefix: str, buffers: list[str], at: str) -> list[str]:
    """Each buffer's 4 floats from element ``at`` on, read as one access into ``{prefix}_{buffer}[4]``."""
    return [line for b in buffers for line in (f"float {prefix}_{b}[4];", f"load4({prefix}_{b}, {b} + {at}, aligned);")]


def _pass_quads(quads: list[str], cached: dict[str, str], scopes: list[Scope]) -> list[str]:
    """The operands a pass over a row reads a group at a time: those of ``quads`` its ``scopes`` read at their own
    element, but for the ones a thread keeps (``cached``)."""
    return [b for b in quads if b not in cached and any(b in scope.identity_loads for scope in scopes)]


def _trailing(kernel: RowKernel) -> list[int]:
    """The reduced dims that end the shape: each run of the row's elements along them is consecutive in memory."""
    dims = []
    for j in reversed(range(len(kernel.shape))):
        if j not in kernel.reduced:
            break
        dims.append(j)
    return dims[::-1]


def _row_offset(kernel: RowKernel, r: str) -> str:
    """The flat offset of element ``r`` of row ``o`` (whose coordinates i<j> are declared): ``o * inner + r`` where
    the row is all the trailing dims, else its run of consecutive elements plus the offset of the run, through the
    coordinates of ``r`` in the other reduced dims."""
    trailing = _trailing(kernel)
    if len(trailing) == len(kernel.reduced):
        return f"o * {kernel.inner}LL + {r}"
    # (in 32 bits where the row's elements are fewer than 2^31, as ``_coords`` divides)
    at, suffix = (f"(int)({r})", "") if kernel.inner < 2**31 else (f"(int64_t)({r})", "LL")
    run = math.prod(kernel.shape[j] for j in trailing)
    coords, stride = dict.fromkeys(trailing, "0"), run
    for j in reversed([j for j in kernel.reduced if j not in trailing]):
        coords[j] = f"(int64_t)({at} / {stride}{suffix} % {kernel.shape[j]}{suffix})"
        stride *= kernel.shape[j]
    runs = linear_index(kernel.shape, tuple(coords.get(j, f"i{j}") for j in range(len(kernel.shape))))
    return f"{runs} + {at} % {run}{suffix}"


def _quads(kernel: RowKernel) -> list[str]:
    """The buffers a block's or a warp's threads move 16 bytes at a time, a thread's group of SCAN_GROUP = 4
    consecutive elements as one access: the operands read at their own element and the outputs written there, where
    they are float and the row's runs of consecutive elements (its reduced dims that end the shape: all of them, or
    a batch norm's spatial dims) are a multiple of 4 long (a group then never straddles two runs, and starts a
    multiple of 16 bytes past the tensor's start: ``_row_offset``); none otherwise."""
    if not kernel.along_last or math.prod(kernel.shape[j] for j in _trailing(kernel)) % SCAN_GROUP:
        return []
    reads = [kernel.out_scope.identity_loads, *(r.scope.identity_loads for r in kernel.reductions)]
    loads = sorted({b for scope in reads for b, node in scope.items() if node.storage == "float"})
    stores = [b for b, _ in kernel.full_outputs if kernel.writes[b].storage == "float" and kernel.store_at is None]
    return loads + stores


def _chunked_scan(
    kernel: RowKernel,
    walked: list[str],
    full_index: str,
    layout: str,
    threads: int,
    cached: dict[str, str],
    exact: bool,
    quads: list[str],
) -> list[str]:
    """A scan along a row a block or a warp (``layout``, its ``threads``) runs, chunk by chunk: a chunk is
    ``SCAN_GROUP`` consecutive elements per thread, the threads' groups side by side (coalesced). Each thread scans
    its group, the group totals are scanned across the threads (exclusive), and the chunks before offset it all.
    Threads past the row's end scan the identity; their coordinates wrap around (``_coords`` takes every one modulo
    its size), so their loads stay in bounds. ``cached``: operands held in registers (item k of a thread's cache is
    element j of chunk c's group, k = c * SCAN_GROUP + j: ``_item``); ``exact``: the chunks end with the row (no
    thread past it); ``quads``: buffers a group reads or writes as one 16-byte access (``_quads``: their element r
    of row o is at o * inner + r)."""
    scan = kernel.scan
    assert scan is not None
    identity, combine = reduction(scan.op, scan.ctype)
    t, g = scan.ctype, SCAN_GROUP
    first = _LANES[layout][0]
    element = [f"const int k = c * {g} + j;", f"const int64_t r = {_item(kernel, first, threads)};", *walked]
    out, value = kernel.full_outputs[0]
    loads = [b for b in quads if b != out and b not in cached and b in kernel.out_scope.identity_loads]
    # The group's first element; a thread past the row's end reads the row's first group instead (and discards it).
    group = [f"const int64_t r0 = ((int64_t)c * {threads} + {first}) * {g};"]
    start = "r0" if exact else f"(r0 < {kernel.inner}LL ? r0 : 0)"
    group += _group_loads("q", loads, _row_offset(kernel, start))
    compute = element + _scope_body(kernel, kernel.out_scope, full_index, cached | {b: f"q_{b}[j]" for b in loads})
    compute.append(
        f"x_scan[j] = ({t})({value});"
        if exact
        else f"x_scan[j] = r < {kernel.inner}LL ? ({t})({value}) : ({t})({identity});"
    )
    # A sum's carry is compensated (Kahan), as the serial scan's running sum is: it is the term that grows along the
    # row, and its rounding errors outlive the magnitude that made them (a suffix sum back near zero keeps them).
    kahan = _compensated(scan.op, t)
    prefix = combine.format(a="before", v="x_scan[j]")
    total = combine.format(a="carry", v=f"({prefix} - carry_comp)" if kahan else prefix)
    if out in quads:  # the group's outputs gathered, then stored as one access
        store = [f"w_scan[j] = {total};"]
        stored_group = [
            f"float w_scan[{g}];",
            *_unrolled(f"for (int j = 0; j < {g}; ++j)", store),
            ("" if exact else f"if (r0 < {kernel.inner}LL) ")
            + f"store4({out} + {_row_offset(kernel, 'r0')}, w_scan, aligned);",
        ]
    else:
        store = [
            *element,
            ("" if exact else f"if (r < {kernel.inner}LL) ")
            + stored(kernel.writes[out], f"{out}[{kernel.store_at or full_index}]", total),
        ]
        stored_group = _unrolled(f"for (int j = 0; j < {g}; ++j)", store)
    body = [
        *(group if quads else []),
        f"{t} x_scan[{g}];",
        *_unrolled(f"for (int j = 0; j < {g}; ++j)", compute),
        *_unrolled(
            f"for (int j = 1; j < {g}; ++j)", [f"x_scan[j] = {combine.format(a='x_scan[j - 1]', v='x_scan[j]')};"]
        ),
        f"{t} chunk_total;",
        f"const {t} before = {layout}_exclusive_scan<{t}>(x_scan[{g - 1}], {_OPS[scan.op]}(), ({t})({identity}), "
        "&chunk_total);",
        *stored_group,
    ]
    body += (
        _kahan("carry", "carry_comp", "chunk_total", t)
        if kahan
        else [f"carry = {combine.format(a='carry', v='chunk_total')};"]
    )
    # Every thread runs every chunk (the scan's shuffles and barriers). Unrolled over a compile-time count: cache
    # arrays stay in registers, and a warp's row (at most 8 chunks) has its later chunks' loads issued before the
    # carry reaches them.
    loop = f"for (int c = 0; c < {_items(kernel, threads) // g}; ++c)"
    if cached or layout == "warp":
        loop = "#pragma unroll\n" + loop
    carried = [f"{t} carry = ({t})({identity});"] + ([f"{t} carry_comp = ({t})0;"] if kahan else [])
    return [*carried, *_loop(loop, body)]


def _unrolled(loop: str, body: list[str]) -> list[str]:
    return _loop("#pragma unroll\n" + loop, body)


def _indent(lines: list[str], n: int) -> str:
    return "\n".join(" " * n + line for line in lines)


def _vectorizable(kernel: RowKernel, variant: Variant) -> bool:
    return variant.vec == 4 and not kernel.reduced and kernel.outer % 4 == 0


def warp_rows(kernel: RowKernel) -> bool:
    """Whether a warp per row suits the kernel: contiguous rows (the last dim reduced or scanned) of 32 to
    WARP_ROW_MAX elements."""
    return kernel.along_last and 32 <= kernel.inner <= WARP_ROW_MAX


def row_layout(kernel: RowKernel, variant: Variant) -> str:
    """How the threads share out a row kernel's rows (``_LANES``). By default: a block per row when its threads
    read the row contiguously (the last dim is reduced); a tile of 32 rows per block otherwise, so a warp reads
    32 neighbouring columns (coalesced) while the block's warps split the reduced dims between them; a thread per
    row for short rows. A warp per row where asked and ``warp_rows``."""
    if not kernel.reduced or (variant.rows == "auto" and kernel.inner < 32):
        return "thread"
    choice = variant.rows
    if choice == "auto" or (choice == "warp" and not warp_rows(kernel)):
        choice = "block" if kernel.along_last else "tile"
    return choice


# Rows too few to give every SM several blocks a row each (a norm over all dims but the first, a batch norm's
# channels, a whole tensor's norm) are split: about SPLIT_BLOCKS blocks in all, each a segment of the row of at least
# SPLIT_MIN_SEGMENT elements, so that its reads outweigh the launches and the combining of partial results.
SPLIT_BLOCKS = 1024
SPLIT_MIN_SEGMENT = 8192
# Shared memory a block keeps its segment of a split row in (Variant.cache "segment"): a few blocks an SM, so one
# block's loads are in flight while another waits for its row's other blocks.
SEGMENT_BYTES = 48 * 1024
# Blocks a row so split may take at most: every one of them must run at once (a block or more an SM of a GPU with
# at least this many SMs; an H100 has 132). Rows longer than SEGMENTS_MAX segments are longer than the GPU's memory
# on chip, or near it (a BatchNorm's channel over a whole batch).
SEGMENTS_MAX = 128


# Elements of its rows a tile's thread loads together (``_row_body``).
TILE_UNROLL = 8


def split_rows(kernel: RowKernel, variant: Variant) -> int:
    """Blocks each row of ``kernel`` is split into under ``variant`` (1: none): rows a block each or 32 a block (a
    tile: columns), of reductions whose partial results combine (a scan's do not), where the layout is left to the
    author and no block keeps its row (``Variant.cache``). Where blocks keep their segment ("segment"): rows a
    block each that some pass re-reads, in segments of at most ``SEGMENT_BYTES``."""
    layout = row_layout(kernel, variant)
    segments = variant.cache == "segment"
    if (
        variant.rows != "auto"
        or variant.cache not in ("none", "segment")
        or layout not in ("block", "tile")
        or kernel.scan is not None
        or any(r.node.op not in _OPS for r in kernel.reductions if not r.invariant)
    ):
        return 1
    if segments:
        held = _smem_layout(kernel, _reread(kernel))[1]
        split = -(-held // SEGMENT_BYTES)
        fits = layout == "block" and kernel.along_last and 1 < split <= SEGMENTS_MAX
        return split if fits else 1
    rows = 1 if layout == "block" else 32  # a block's
    return max(1, min(-(-SPLIT_BLOCKS * rows // kernel.outer), kernel.inner * rows // SPLIT_MIN_SEGMENT))


def split_segment(kernel: RowKernel) -> int:
    """Elements of a split row each block covers: a multiple of 4, so a thread's groups of 4 (``_quads``) never
    straddle two segments; the last blocks' segments may be short or empty."""
    return -(-kernel.inner // (kernel.split * 4)) * 4


def _split_launches(kernel: RowKernel) -> int:
    """A split row's launches: one per pass over the row, then one for its outputs."""
    return sum(not group[0].invariant for group in _passes(kernel.reductions)) + 1


def _cuda_split_row(kernel: RowKernel, variant: Variant) -> str:
    """A split row kernel (``split_rows``): a launch per pass, each a block per segment of each row or tile of 32
    rows (blockIdx.x the segment, blockIdx.y the row or tile), then one for the outputs; a row's reduced outputs are
    its first segment's block's to store. Where blocks keep their segment (``_cuda_coop_row``), those launches are
    what runs if the cooperative launch is refused."""
    params, names = _params(kernel, "cuda")
    layout = row_layout(kernel, variant)
    block, text, launches = variant.block, "", []
    if layout == "tile":  # lane l of every warp on row l of the tile; past the last row, on the last (storing nothing)
        rows = [
            "const int64_t o0 = (int64_t)blockIdx.y * 32;",
            f"const bool live = o0 + (threadIdx.x & 31) < {kernel.outer}LL;",
            f"const int64_t o = live ? o0 + (threadIdx.x & 31) : {kernel.outer - 1}LL;",
        ]
        tiles = -(-kernel.outer // 32)
    else:
        rows, tiles = ["const int64_t o = blockIdx.y;"], kernel.outer
    for launch in range(_split_launches(kernel)):
        last = launch == _split_launches(kernel) - 1
        name = f"{kernel.name}_{'kernel' if last else f'pass{launch}'}"
        body = _row_body(kernel, "cuda", layout, block, launch=launch)
        text += f"""
__global__ void __launch_bounds__({block}) {name}({params}) {{
{_indent(rows + body, 4)}
}}
"""
        segments = kernel.split if kernel.full_outputs or not last else 1
        launches.append(f"{name}<<<dim3({segments}, {tiles}), {block}, 0, stream>>>({names});")
    if kernel.arrivals is not None:
        text += _cuda_coop_row(kernel, block, params, names)
        launches[:0] = [f"if ({kernel.name}_coop({names}, stream)) return;"]
    return (
        text
        + f"""
extern "C" void {kernel.name}({_launcher_params(kernel, "cuda")}) {{
{_indent(launches, 4)}
}}
"""
    )


def _cuda_coop_row(kernel: RowKernel, block: int, params: str, names: str) -> str:
    """A split row's blocks keeping their segment in shared memory (``Variant.cache`` "segment"): one cooperative
    launch of as many blocks as run at once, in whole rows' worth (each row's ``split`` segments taken by as many
    consecutive blocks, in step), each block taking its rows' segments in turn and meeting the row's other blocks
    after each pass (``_meet``). No block waits for one that cannot run: a block waits only for segments of its
    own row, which come before or with its own in every other block's turn, and every block runs. Its launcher
    answers whether the launch ran (a GPU with too few SMs or too little shared memory a block refuses it)."""
    rows, split = kernel.outer, kernel.split
    body = _row_body(kernel, "cuda", "block", block, coop=True)
    smem = _smem_layout(kernel, _reread(kernel), split_segment(kernel))[1]
    arguments = ", ".join(f"(void*)&{n}" for n in names.split(", "))
    return f"""
__global__ void __launch_bounds__({block}) {kernel.name}_segments({params}) {{
    for (int64_t item = blockIdx.x; item < {rows * split}LL; item += gridDim.x) {{
        const int64_t o = item / {split}, seg = item % {split};
{_indent(body, 8)}
    }}
}}

static bool {kernel.name}_coop({params.replace("__restrict__ ", "")}, cudaStream_t stream) {{
    int device = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaFuncSetAttribute({kernel.name}_segments, cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {kernel.name}_segments, {block}, {smem});
    const long long rows_at_once = (long long)sms * per_sm / {split};
    if (rows_at_once < 1) return false;
    const unsigned grid = (unsigned)((rows_at_once < {rows}LL ? rows_at_once : {rows}LL) * {split});
    cudaMemsetAsync({kernel.arrivals}, 0, {rows} * sizeof(unsigned), stream);
    void* arguments[] = {{{arguments}}};
    if (cudaLaunchCooperativeKernel({kernel.name}_segments, dim3(grid), dim3({block}), arguments, {smem}, stream)
        == cudaSuccess)
        return true;
    cudaGetLastError();
    return false;
}}
"""


def _cuda_row(kernel: RowKernel, variant: Variant) -> str:
    if kernel.split > 1:
        return _cuda_split_row(kernel, variant)
    params, names = _params(kernel, "cuda")
    layout = row_layout(kernel, variant)
    block = variant.block
    if layout == "block":
        loop = f"for (int64_t o = blockIdx.x; o < {kernel.outer}LL; o += gridDim.x)"
        blocks = f"{kernel.outer}LL"
    elif layout == "tile":
        loop = f"for (int64_t o0 = (int64_t)blockIdx.x * 32; o0 < {kernel.outer}LL; o0 += (int64_t)gridDim.x * 32)"
        blocks = f"({kernel.outer}LL + 31) / 32"
    elif layout == "warp":  # the warps of a block share no barrier: each strides over rows on its own
        warps = block // 32
        start, stride = f"(int64_t)blockIdx.x * {warps} + (threadIdx.x >> 5)", f"(int64_t)gridDim.x * {warps}"
        loop = f"for (int64_t o = {start}; o < {kernel.outer}LL; o += {stride})"
        blocks = f"({kernel.outer}LL + {warps - 1}) / {warps}"
    else:
        start, stride = f"(int64_t)blockIdx.x * {block} + threadIdx.x", f"(int64_t)gridDim.x * {block}"
        loop = f"for (int64_t o = {start}; o < {kernel.outer}LL; o += {stride})"
        blocks = f"({kernel.outer}LL + {block - 1}) / {block}"
    body = _row_body(kernel, "cuda", layout, block, variant.cache, online=variant.softmax == "online")
    if layout == "tile":
        # Threads past the last row compute it again: every thread takes part in the block's reductions.
        body[:0] = [
            f"const bool live = o0 + (threadIdx.x & 31) < {kernel.outer}LL;",
            f"const int64_t o = live ? o0 + (threadIdx.x & 31) : {kernel.outer - 1}LL;",
        ]
    text = f"""
__global__ void __launch_bounds__({block}) {kernel.name}_kernel({params}) {{
    {loop} {{
{_indent(body, 8)}
    }}
}}
"""
    cache_smem = layout == "block" and variant.cache == "smem"
    smem = _smem_layout(kernel, row_cache(kernel, block, "smem"))[1] if cache_smem else 0
    launch = f"{kernel.name}_kernel<<<(unsigned)grid, {block}, {smem}, stream>>>({names});"
    if smem > 48 * 1024:  # past the default per-block limit, a kernel must opt in
        launch = (
            f"cudaFuncSetAttribute({kernel.name}_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});\n"
            f"    {launch}"
        )
    vec_launch = ""
    if _vectorizable(kernel, variant):
        windows = _quad_windows(kernel)
        text += _cuda_vec4(kernel, params, block, windows)
        quads_read = {w.buffer: w.src for w in windows.values()}
        aligned = " && ".join(
            f"((uintptr_t){b} % sizeof(Quad<{n.storage}>) == 0)"
            for b, n in {**kernel.out_scope.identity_loads, **quads_read, **kernel.writes}.items()
        )
        quads = kernel.outer // 4
        vec_launch = (
            f"    if ({aligned}) {{\n"
            f"        long long g = ({quads}LL + {block - 1}) / {block};\n"
            f"        if (g > 65535LL * 8) g = 65535LL * 8;\n"
            f"        {kernel.name}_vec4<<<(unsigned)g, {block}, 0, stream>>>({names});\n"
            f"        return;\n    }}\n"
        )
    text += f"""
extern "C" void {kernel.name}({_launcher_params(kernel, "cuda")}) {{
{vec_launch}    long long grid = {blocks};
    if (grid > 65535LL * 8) grid = 65535LL * 8;  // the loop strides over the rest
    if (grid < 1) grid = 1;
    {launch}
}}
"""
    return text


def _cuda_vec4(kernel: RowKernel, params: str, block: int, windows: dict[str, Window]) -> str:
    """Elementwise kernel over quads: operands at the kernel's own index move as ``Quad``s (a float4's 16 bytes;
    an index's 32: a gather's indices and its reads of them all in flight), the rest per element; ``windows``
    (``_quad_windows``) computed for the quad's lanes at once."""
    scope = kernel.out_scope
    outer = list(range(len(kernel.shape)))
    last = kernel.shape[-1] if kernel.shape else 1
    # Where a quad lies within a row of the last dim, its lanes share every other coordinate: computed once, the
    # same variables in each lane's statements, so what they read and compute from them alone (a batch norm's
    # channel statistics, its reciprocal square root) is common to the lanes and compiled once.
    at = "(int)(q)" if kernel.outer < 2**31 else "q"  # in 32 bits where it fits, as _coords divides
    shared = _coords(outer[:-1], kernel.shape, f"({at} / {last // 4})") if last % 4 == 0 else []
    computed = [line for var, w in windows.items() for line in _quad_window(w, var, f"({at} % {last // 4})")]
    lane_lines = []
    for lane in range(4):
        body = [f"const int64_t o = q * 4 + {lane};"]
        if last % 4 == 0:
            body.append(f"const int64_t i{len(outer) - 1} = ({at} % {last // 4}) * 4 + {lane};")
        else:
            body += _coords(outer, kernel.shape, "o")
        body += [f"const {n.ctype} ld_{b} = {loaded(n, f'v_{b}.v[{lane}]')};" for b, n in scope.identity_loads.items()]
        # A window computed for the quad gives the lane its value (and count) in place of its statements.
        end = 0
        for var, w in windows.items():
            body += [*scope.stmts[end : w.begin], f"const {w.ctype} {var} = {var}_l[{lane}];"]
            body += [f"const int64_t n_{var} = n_{var}_l[{lane}];"] if w.counted else []
            end = w.end
        body += scope.stmts[end:]
        body += [stored(kernel.writes[b], f"w_{b}.v[{lane}]", v) for b, v in kernel.full_outputs]
        lane_lines.append("{\n" + _indent(body, 4) + "\n}")
    quad = {b: f"Quad<{n.storage}>" for b, n in [*scope.identity_loads.items(), *kernel.writes.items()]}
    loads = [f"const {quad[b]} v_{b} = reinterpret_cast<const {quad[b]}*>({b})[q];" for b in scope.identity_loads]
    decl = [f"{quad[b]} w_{b};" for b in kernel.writes]
    stores = [f"reinterpret_cast<{quad[b]}*>({b})[q] = w_{b};" for b in kernel.writes]
    body = shared + loads + decl + computed + lane_lines + stores
    quads = kernel.outer // 4
    return f"""
__global__ void __launch_bounds__({block}) {kernel.name}_vec4({params}) {{
    for (int64_t q = (int64_t)blockIdx.x * {block} + threadIdx.x; q < {quads}LL; q += (int64_t)gridDim.x * {block}) {{
{_indent(body, 8)}
    }}
}}
"""


def _quad_windows(kernel: RowKernel) -> dict[str, Window]:
    """The pooling windows ``_cuda_vec4`` computes for a quad's 4 lanes at once: along the input's last dim at the
    kernel's own last coordinate (the lanes' windows a stride apart), their other coordinates the lanes' shared
    ones, over rows of whole float quads (each quad of the input wholly inside or outside its row)."""
    rank = len(kernel.shape)
    if not kernel.shape or kernel.shape[-1] % 4:
        return {}
    shared = {f"i{d}" for d in range(rank - 1)}
    return {
        var: w
        for var, w in kernel.out_scope.windows.items()
        if w.coords[-1] == f"i{rank - 1}"
        and set(_WORD.findall(" ".join(w.coords[:-1]))) <= shared
        and w.src.storage == "float"
        and w.src.shape[-1] % 4 == 0
    }


def _quad_window(w: Window, var: str, m: str) -> list[str]:
    """Window ``var`` for the 4 lanes of quad ``m`` of the output's row (lane j's column 4m + j) at once, into
    per-lane values ``<var>_l`` (and counts ``n_<var>_l``): each lane's loads of its taps along the last dim 4
    bytes at a time were as many instructions as taps, while the lanes' windows, a stride apart, overlap in
    16-byte quads of the row that each lane's taps take from registers. Lane 0's first tap, at column
    4m * stride - pad, lies (-pad mod 4) past the start of a quad: which element of which quad every tap is, is
    known here. A quad lies wholly inside the row or outside it, so its test stands for its taps' tests."""
    t, n = w.ctype, w.src.shape[-1]
    first = len(w.src.shape) - len(w.kernel)
    k, stride, pad, dilation = w.kernel[-1], w.stride[-1], w.pad[-1], w.dilation[-1]
    off = -pad % 4
    taps: dict[int, list[tuple[int, int]]] = {}  # quad -> (lane, element) of its taps, each lane's in order
    for lane in range(4):
        for a in range(k):
            e = off + lane * stride + a * dilation
            taps.setdefault(e // 4, []).append((lane, e % 4))
    outer = range(len(w.kernel) - 1)
    row = linear_index(w.src.shape, (*w.coords[:first], *(f"h{j}_{var}" for j in outer), "0"))
    staged = [
        f"const Quad<float>* r_{var} = reinterpret_cast<const Quad<float>*>({w.buffer} + {row});",
        f"const int64_t q_{var} = {m} * {stride}LL - {(pad + off) // 4}LL;",  # the quad holding lane 0's first tap
    ]
    for quad, at in sorted(taps.items()):
        index = f"q_{var} + {quad}LL" if quad else f"q_{var}"
        staged += [f"if ({index} >= 0 && {index} < {n // 4}LL) {{", f"const Quad<float> s_{var} = r_{var}[{index}];"]
        for lane, e in at:
            acc = f"{var}_l[{lane}]"
            staged.append(f"{acc} = {w.combine.format(a=acc, v=f's_{var}.v[{e}]')};")
            staged += [f"++n_{var}_l[{lane}];"] if w.counted else []
        staged.append("}")
    lines = [f"{t} {var}_l[4] = {{{', '.join([f'({t})({w.identity})'] * 4)}}};"]
    lines += [f"int64_t n_{var}_l[4] = {{0, 0, 0, 0}};"] if w.counted else []
    inside = []
    for j in outer:
        d = first + j
        loop, test = window_tap(var, j, w.coords[d], w.src.shape[d], w.kernel[j], w.stride[j], w.pad[j], w.dilation[j])
        lines += loop
        inside.append(test)
    lines += [f"if ({' && '.join(inside)}) {{", *staged, "}"] if inside else staged
    return lines + ["}"] * len(outer)


def _cpu_row(kernel: RowKernel, variant: Variant) -> str:
    body = _row_body(kernel, "cpu", "thread", 1)
    return f"""
extern "C" void {kernel.name}({_launcher_params(kernel, "cpu")}) {{
    {variant.omp_pragma(kernel.outer * max(kernel.inner, 1))}
    for (int64_t o = 0; o < {kernel.outer}LL; ++o) {{
{_indent(body, 8)}
    }}
}}
"""


def _strides(g: GemmKernel) -> dict[str, int]:
    a, b = g.a.strides, g.b.strides
    bmm = g.node.op == "bmm"
    return {
        "sab": a[0] if bmm else 0, "sam": a[-2], "sak": a[-1],
        "sbb": b[0] if bmm else 0, "sbk": b[-2], "sbn": b[-1],
    }  # fmt: skip


def _tile_elements(g: GemmKernel) -> tuple[str, str]:
    """Our GEMM kernels' reads of A at (row, k) and of B at (k, col), through the batch's ``pa`` and ``pb``. Where
    every offset into a batch's operand fits 31 bits, in 32-bit arithmetic (64-bit products and sums take 2-3
    instructions each: a tile's loads would issue more of them than multiply-adds)."""
    s = _strides(g)
    if (g.m - 1) * s["sam"] + (g.k - 1) * s["sak"] < 2**31 and (g.k - 1) * s["sbk"] + (g.n - 1) * s["sbn"] < 2**31:
        return f"pa[(int)row * {s['sam']} + (int)k * {s['sak']}]", f"pb[(int)k * {s['sbk']} + (int)col * {s['sbn']}]"
    return f"pa[row * {s['sam']}LL + k * {s['sak']}LL]", f"pb[k * {s['sbk']}LL + col * {s['sbn']}LL]"


def _scaled(g: GemmKernel, value: str) -> str:
    """``value`` times the product's factor (``GemmKernel.alpha``), where it has one."""
    return value if g.alpha == 1.0 else f"({value}) * {c_literal(g.alpha, 'float')}"


def _gemm_buffers(g: GemmKernel) -> list[str]:
    """Our GEMM kernels' parameters: A, B (once where both are one buffer, as in x @ x.T), what an epilogue reads
    besides, and C or the epilogue's outputs."""
    return _kernel_buffers(g, [g.a.buffer, g.b.buffer])


def _kernel_buffers(k: GemmKernel | ConvKernel, operands: list[str]) -> list[str]:
    return [*dict.fromkeys([*operands, *k.reads]), *k.writes]


def _kernel_params(k: GemmKernel | ConvKernel, buffers: list[str]) -> str:
    """C parameters of ``buffers`` (read ones const) in their storage types."""
    return ", ".join(
        f"const {k.reads[b].storage}* __restrict__ {b}" if b in k.reads else f"{k.writes[b].storage}* __restrict__ {b}"
        for b in buffers
    )


def _gemm_params(g: GemmKernel) -> str:
    return _kernel_params(g, _gemm_buffers(g))


def _put(k: GemmKernel | ConvKernel, flat: str, coords: tuple[str, ...], value: str) -> str:
    """The statement storing the output element at ``flat`` (its coordinates ``coords``), ``value`` in the compute
    type: into the output, or through the kernel's epilogue (``plan.fuse_epilogues``) into the epilogue's outputs.
    The epilogue's statements are the elementwise kernel's own for that element; what they need of the enclosing
    kernel is copied first, since their names (``o``, ``i0``...) may shadow its names."""
    r = k.epilogue
    if r is None:
        return stored(k.node, f"{k.out}[{flat}]", value)
    half = HALF_TYPES.get(k.node.dtype)
    if half:  # rounded to the output's type first, as the elementwise kernel would have loaded it
        value = f"{half[1]}({half[2]}({value}))"
    lines = [f"const {k.node.ctype} ep_v = {value};", f"const int64_t ep_o = {flat};"]
    lines += [f"const int64_t ep_{j} = {c};" for j, c in enumerate(coords)]
    lines += ["const int64_t o = ep_o;", *(f"const int64_t i{j} = ep_{j};" for j in range(len(coords)))]
    lines += _scope_body(r, r.out_scope, "o", {k.out: "ep_v"})
    lines += [stored(r.writes[b], f"{b}[o]", v) for b, v in r.full_outputs]
    return "{\n" + _indent(lines, 4) + "\n}"


def _gemm_put(g: GemmKernel, value: str, transposed: bool = False) -> str:
    """``_put`` of our GEMM kernels' element at ``row``, ``col`` of the product ``batch`` (``transposed``: at
    ``col``, ``row``, a kernel computing the transpose)."""
    row, col = ("col", "row") if transposed else ("row", "col")
    flat = f"batch * {g.m * g.n}LL + {row} * {g.n}LL + {col}"
    return _put(g, flat, ("batch", row, col)[3 - len(g.node.shape) :], _scaled(g, value))


def _held_sums(size: int, when: str) -> tuple[str, str]:
    """Our FMA products' sums in two levels (from ``SPLIT_SUMS_K`` on): the declaration of a thread's held sums
    beside its ``acc[size][size]``, and the statement after a K step that adds the sums so far to them and starts
    again from zero where ``when`` holds. The epilogue stores acc + held."""
    fold = f"""
        if ({when}) {{  // the sums so far join the held ones
#pragma unroll
            for (int i = 0; i < {size}; ++i)
#pragma unroll
                for (int j = 0; j < {size}; ++j) {{
                    held[i][j] += acc[i][j];
                    acc[i][j] = 0.0f;
                }}
        }}"""
    return f" float held[{size}][{size}] = {{}};", fold


def _cuda_gemm(g: GemmKernel, variant: Variant) -> str:
    """Our GEMM kernel: a block computes a T x T tile of C, each thread R x R of it held in registers, over K steps
    of T / R staged in shared memory (R = 1: one output per thread). A thread's outputs are strided by the block's
    width, so neighbouring threads read neighbouring shared-memory words and write neighbouring columns of C."""
    t, r = variant.tile, variant.micro
    w = t // r  # threads along each edge of the tile, and the K step
    s = _strides(g)
    a, b, e = g.a.buffer, g.b.buffer, g.node.storage
    a_load, b_load = (loaded(g.node, element) for element in _tile_elements(g))
    # From SPLIT_SUMS_K on, sums in two levels (as ``_pipelined``'s): the held sums take a chunk's every 128 k
    split = g.k >= SPLIT_SUMS_K
    out = _gemm_put(g, "acc[i][j] + held[i][j]" if split else "acc[i][j]")
    chunk = max(1, 128 // w)  # K steps a chunk
    held, fold = _held_sums(r, f"k0 / {w} % {chunk} == {chunk - 1}") if split else ("", "")
    return f"""
// {g.node.op}: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]; {t}x{t} tiles of C, {r}x{r} per thread, K steps of {w}.
__global__ void __launch_bounds__({w * w}) {g.name}_kernel({_gemm_params(g)}) {{
    // A's tile transposed (k-major) like B's: the inner loop reads a row of each. One word of padding keeps the
    // transposing stores off a single bank.
    __shared__ float as[{w}][{t + 1}];
    __shared__ float bs[{w}][{t + 1}];
    const int64_t batch = blockIdx.z, row0 = (int64_t)blockIdx.y * {t}, col0 = (int64_t)blockIdx.x * {t};
    const int tx = threadIdx.x % {w}, ty = threadIdx.x / {w};
    const {e}* pa = {a} + batch * {s["sab"]}LL;
    const {e}* pb = {b} + batch * {s["sbb"]}LL;
    float acc[{r}][{r}] = {{}};{held}
    for (int64_t k0 = 0; k0 < {g.k}LL; k0 += {w}) {{
        for (int idx = threadIdx.x; idx < {t * w}; idx += {w * w}) {{
            {{
                const int64_t row = row0 + idx / {w}, k = k0 + idx % {w};
                as[idx % {w}][idx / {w}] = (row < {g.m}LL && k < {g.k}LL) ? {a_load} : 0.0f;
            }}
            {{
                const int64_t k = k0 + idx / {t}, col = col0 + idx % {t};
                bs[idx / {t}][idx % {t}] = (k < {g.k}LL && col < {g.n}LL) ? {b_load} : 0.0f;
            }}
        }}
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < {w}; ++kk) {{
            float av[{r}], bv[{r}];
#pragma unroll
            for (int i = 0; i < {r}; ++i) av[i] = as[kk][ty + i * {w}];
#pragma unroll
            for (int j = 0; j < {r}; ++j) bv[j] = bs[kk][tx + j * {w}];
#pragma unroll
            for (int i = 0; i < {r}; ++i)
#pragma unroll
                for (int j = 0; j < {r}; ++j) acc[i][j] += av[i] * bv[j];
        }}
        __syncthreads();{fold}
    }}
#pragma unroll
    for (int i = 0; i < {r}; ++i)
#pragma unroll
        for (int j = 0; j < {r}; ++j) {{
            const int64_t row = row0 + ty + i * {w}, col = col0 + tx + j * {w};
            if (row < {g.m}LL && col < {g.n}LL) {out}
        }}
}}

extern "C" void {g.name}({_launcher_params(g, "cuda")}) {{
    dim3 grid(({g.n} + {t - 1}) / {t}, ({g.m} + {t - 1}) / {t}, {g.batch});
    {g.name}_kernel<<<grid, {w * w}, 0, stream>>>({", ".join(_gemm_buffers(g))});
}}
"""


def _cuda_gemm_pipelined(g: GemmKernel, tensor_cores: bool = False) -> str:
    """Our GEMM on the pipelined tile kernel (``_pipelined``): A and B through their strides. On tensor cores, whose
    tiles are 128 columns wide (and 64 or 128 rows), a product of at most 64 columns and more rows (an attention's
    probabilities times its values) runs as its transpose, B^T A^T: its columns the tiles' rows."""
    if tensor_cores and g.n <= 64 < g.m:

        def flip(strides: list[int]) -> list[int]:
            return [*strides[:-2], strides[-1], strides[-2]]

        a, b = replace(g.b, strides=flip(g.b.strides)), replace(g.a, strides=flip(g.a.strides))
        return _gemm_tiles(replace(g, a=a, b=b, m=g.n, n=g.m), True, lambda value: _gemm_put(g, value, True))
    return _gemm_tiles(g, tensor_cores, lambda value: _gemm_put(g, value))


def _gemm_tiles(g: GemmKernel, tensor_cores: bool, store: Callable[[str], str]) -> str:
    """``_cuda_gemm_pipelined``'s kernel of ``g``, its values stored by ``store``."""
    s = _strides(g)
    a_element, b_element = _tile_elements(g)
    a_along_k, b_along_k = s["sak"] == 1 or s["sam"] != 1, s["sbn"] != 1 and s["sbk"] == 1

    def wide(along: int, others: tuple[int, ...]) -> bool:
        """4 neighbouring elements are 16 bytes in a row: float32, 1 apart along the dim loaded, and every other
        stride (the batch's too) and the size along it multiples of 4."""
        return g.node.dtype == "float32" and along == 1 and all(v % 4 == 0 for v in others)

    def copy(element: str) -> tuple[list[str], str, str] | None:
        return ([], "", element) if g.node.dtype == "float32" else None

    a_vector = wide(s["sak"], (s["sam"], s["sab"], g.k)) if a_along_k else wide(s["sam"], (s["sak"], s["sab"], g.m))
    b_vector = wide(s["sbk"], (s["sbn"], s["sbb"], g.k)) if b_along_k else wide(s["sbn"], (s["sbk"], s["sbb"], g.n))
    setup = [
        f"const {g.node.storage}* pa = {g.a.buffer} + batch * {s['sab']}LL;",
        f"const {g.node.storage}* pb = {g.b.buffer} + batch * {s['sbb']}LL;",
    ]
    return _pipelined(
        g.name,
        f"{g.node.op}: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]",
        (_gemm_params(g), ", ".join(_gemm_buffers(g)), _launcher_params(g, "cuda")),
        (g.m, g.n, g.k, g.batch),
        setup,
        TileOperand(
            [f"va = {loaded(g.node, a_element)};"], a_along_k, a_element if a_vector else None, "pa", copy(a_element)
        ),
        TileOperand(
            [f"vb = {loaded(g.node, b_element)};"], b_along_k, b_element if b_vector else None, "pb", copy(b_element)
        ),
        store,
        tensor_cores,
    )


class TileOperand(NamedTuple):
    """One operand of ``_pipelined``: statements setting ``va`` (A at ``row``, ``k``) or ``vb`` (B at ``k``,
    ``col``), both in range; whether neighbouring k are neighbouring addresses (else neighbouring rows of A, or
    columns of B, are: consecutive threads load along them); and, where 4 neighbouring elements along that dim are
    16 bytes in a row (float32, the other strides multiples of 4, the size along it too), the element expression
    whose address starts them (16-byte aligned wherever ``origin``, the batch's first element, is). ``copy``, of a
    float32 operand: (statements locating the element, the condition it exists under or "", its expression), for
    copying it as it is, 4 bytes, where it has no 16-byte groups (``origin`` then any valid address: the copy of
    an element that is not there reads nothing). ``step``: statements the staged product runs once a K step before
    a thread's copies of it (they may read ``k_next``): what all those copies share, found once (an implicit
    convolution's tap, ``_implicit_product``)."""

    statements: list[str]
    along_k: bool
    vector: str | None = None
    origin: str = ""
    copy: tuple[list[str], str, str] | None = None
    step: tuple[str, ...] = ()


def _alignment_flags(a: TileOperand, b: TileOperand) -> list[str]:
    """The declarations of ``a_aligned`` and ``b_aligned`` (an operand with 16-byte groups whose origin is 16-byte
    aligned: the same for every thread of a block, so the branches on it do not diverge)."""
    return [
        f"const bool {x}_aligned = reinterpret_cast<uintptr_t>({operand.origin}) % 16 == 0;"
        for x, operand in (("a", a), ("b", b))
        if operand.vector is not None
    ]


def _pipelined(
    name: str,
    what: str,
    signature: tuple[str, str, str],
    sizes: tuple[int, int, int, int],
    setup: list[str],
    a: TileOperand,
    b: TileOperand,
    store: Callable[[str], str],
    tensor_cores: bool = False,
) -> str:
    """A product C[batch] = A[batch] B[batch] of M x K by K x N: a block of 256 threads computes a 128x128 tile of
    C over K steps of 16; on the FMA units each thread computes 8x8 of it (two 4x4 groups 64 apart each way). The
    operands of a step are read from shared memory 16 bytes at a time (4 wide reads feed 64 FMAs; a quarter warp
    reads 128 contiguous bytes, free of bank conflicts), and the next step's are loaded from global memory into
    registers while this one is computed, into the other of two shared buffers after it (one barrier a step).

    ``a``, ``b``: the operands (``TileOperand``); where B's neighbouring columns are neighbouring addresses and it
    has no vector form, every load of a thread is in column ``col0 + threadIdx.x % 128``. ``store``: the statement
    writing a value (the C expression given) at (row, col). ``signature``: the kernel's parameters, its launch's
    arguments and the launcher's parameters. ``tensor_cores``: the products on TF32 tensor cores at float32
    accuracy (``_tf32x3_steps``), else on the FMA units; staged by asynchronous copies (``_staged_tf32x3``) where
    both operands can be copied as they are (float32), else through registers as here."""
    if tensor_cores and all(x.vector is not None or x.copy is not None for x in (a, b)):
        return _staged_tf32x3(name, what, signature, sizes, setup, a, b, store)
    m, n, k, batch = sizes
    params, args, launcher = signature
    # Bounds tests only along the sizes that are not whole tiles (a product of 128-multiples and a K of 16-multiples
    # loads without any): sizes are constants, so the tests that remain cost a compare each.
    a_in = " && ".join([f"row < {m}LL"] * (m % 128 != 0) + [f"k < {k}LL"] * (k % 16 != 0)) or "true"
    b_in = " && ".join([f"k < {k}LL"] * (k % 16 != 0) + [f"col < {n}LL"] * (n % 128 != 0)) or "true"
    a_fetch, a_keep = _tile_fetch("a", "row", a, a_in)
    b_fetch, b_keep = _tile_fetch("b", "col", b, b_in)
    fetch, keep = f"{a_fetch}\n        {b_fetch}", f"{a_keep}\n        {b_keep}"
    setup_lines = "\n".join("    " + line for line in [*setup, *_alignment_flags(a, b)])
    # Rows of 132 floats: a quarter warp's 16-byte reads of a row are free of bank conflicts at any pitch, and the
    # transposing stores conflict at most 2 ways. Tensor-core fragments read 4 k by 8 m (or n) a load: at 136 (8
    # banks a row) they land in 32 distinct banks (2-way conflicts at 132).
    pitch = 136 if tensor_cores else 132
    if tensor_cores:
        accumulators, steps, epilogue = _tf32x3_steps(
            m,
            n,
            store,
            lambda h, r: f"make_float2(as[cur][{h} * 8 + t][{r}], as[cur][{h} * 8 + t + 4][{r}])",
            lambda h, c: f"make_float2(bs[cur][{h} * 8 + t][{c}], bs[cur][{h} * 8 + t + 4][{c}])",
        )
    else:
        # From SPLIT_SUMS_K on, sums in two levels as the staged product's: one float sum over a K of 4096 drifted
        # past the 1e-4 tolerance on small outputs (4.7e-4 on an H100, where cuBLAS's sums stayed within it)
        split = k >= SPLIT_SUMS_K
        held, fold = _held_sums(8, f"k0 / 16 % {HELD_STEPS} == {HELD_STEPS - 1}") if split else ("", "")
        accumulators = "float acc[8][8] = {};" + held
        steps = (
            """#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&as[cur][kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&as[cur][kk][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&bs[cur][kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&bs[cur][kk][64 + tx * 4]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
        }"""
            + fold
        )
        epilogue = f"""#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) {{
            const int64_t row = row0 + (i / 4) * 64 + ty * 4 + i % 4, col = col0 + (j / 4) * 64 + tx * 4 + j % 4;
            if (row < {m}LL && col < {n}LL) {{ {store("acc[i][j] + held[i][j]" if split else "acc[i][j]")} }}
        }}"""
    return f"""// {what}; 128x128 tiles of C, K steps of 16, the next step loaded while this one is computed.
__global__ void __launch_bounds__(256) {name}_kernel({params}) {{
    // K-major (A transposed), rows padded: 16-byte aligned for the wide reads, and the transposing stores of a
    // warp spread over the banks.
    __shared__ __align__(16) float as[2][16][{pitch}];
    __shared__ __align__(16) float bs[2][16][{pitch}];
    const int64_t batch = blockIdx.z, row0 = (int64_t)blockIdx.y * 128, col0 = (int64_t)blockIdx.x * 128;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
{setup_lines}
    float ra[8], rb[8];
    {accumulators}
    int next = 0;
    int64_t k_next = 0;
    {fetch}
    {keep}
    __syncthreads();
    for (int64_t k0 = 0; k0 < {k}LL; k0 += 16) {{
        const int cur = next;
        next ^= 1;
        k_next = k0 + 16;
        const bool more = k_next < {k}LL;
        if (more) {{
        {fetch}
        }}
{steps}
        if (more) {{
        {keep}
        }}
        __syncthreads();  // this step's buffer is read by all before the step after next overwrites it
    }}
{epilogue}
}}

extern "C" void {name}({launcher}) {{
    dim3 grid(({n} + 127) / 128, ({m} + 127) / 128, {batch});
    {name}_kernel<<<grid, 256, 0, stream>>>({args});
}}
"""


STAGES = 3  # K steps of the staged product in flight (36-40 KB of shared memory each; one block an SM by its
# ~250 registers a thread)
STAGE_K = 32
# From this K on, the staged product's sums run in two levels: the registers' sums take HELD_STEPS steps' parts,
# then join sums held in shared memory (64 KB a block: no registers are left) and start again from zero. Each
# step's part joins a sum rounded at that sum's size (its ulp): over K / 32 steps this is the product's largest
# error, growing with K and with the outputs' magnitudes. At K = 8192 (randn operands, outputs ~90) the worst of
# 16-67M outputs crossed the 1e-4 tolerance. In a numpy model of the kernel's arithmetic (MMA sums rounded toward
# zero, 65536 sums of K = 8192), two levels take the error (rms) from 2.9e-5 to 1.7e-5 and the worst from 0.51 of
# the tolerance to 0.33; a Kahan sum of every step (1.3e-5, 0.23) costs 4 additions a sum and step, 38% more
# instructions in the loop, where two levels cost 1/8 of an addition.
SPLIT_SUMS_K = 4096
HELD_STEPS = 8


def _staged_tf32x3(
    name: str,
    what: str,
    signature: tuple[str, str, str],
    sizes: tuple[int, int, int, int],
    setup: list[str],
    a: TileOperand,
    b: TileOperand,
    store: Callable[[str], str],
) -> str:
    """``_pipelined``'s 3xTF32 product where both operands have 16-byte groups (``TileOperand.vector``) or can be
    copied an element at a time (``TileOperand.copy``: gathered, or strided): K steps of 32 copied from global to
    shared memory by ``cp_async4`` or ``cp_async1`` (no registers hold them on the way, so a thread keeps only its
    sums and one step's fragments), ``STAGES`` steps in flight, one barrier a step. Each operand's tile is kept
    in its own layout (16-byte copies need it): rows of 32 k padded to 40 where k is the contiguous dim, else 32
    rows of k of the tile's edge (128, or 64 rows) padded by 4. A slice's k slots t and t + 4 stand for k 2t and
    2t + 1, so that where k is contiguous a fragment's pair is one 8-byte read; the padding puts a warp's reads in
    distinct banks either way (lane 4 g + t at word 8 g + 2 t, or 8 t + g, of 32).
    Sizes that are not whole tiles load zeros by the copies' source size (a group of 4 is all in or all out: the
    size along it is a multiple of 4). ``a``, ``b``, ``store``, ``signature``: as ``_pipelined``'s."""
    m, n, k, batch = sizes
    params, args, launcher = signature
    kt = -(-k // STAGE_K)
    split = k >= SPLIT_SUMS_K

    # Products of at most 64 rows (a Linear or convolution of 64 output channels) take tiles of 64 rows: a
    # 128-row tile would multiply as many rows of zeros
    rows = 64 if m <= 64 else 128

    def tile(
        x: str, edge: str, operand: TileOperand, edge_size: int, edge_tile: int
    ) -> tuple[int, Callable[[str, str], str], str]:
        """(floats a stage, the fragment pair accessor (``_tf32x3_steps``) on stage ``{x}s_cur``, the copy
        statements of a stage) of a tile ``edge_tile`` long along ``edge``."""
        within = [f"{edge} < {edge_size}LL"] * (edge_size % edge_tile != 0) + [f"k < {k}LL"] * (k % STAGE_K != 0)
        pitch = edge_tile + 4
        if operand.along_k:  # [edge][40]: k contiguous, a pair one 8-byte read
            size = edge_tile * 40

            def pair(h: str, e: str) -> str:
                return f"*reinterpret_cast<const float2*>(&{x}s_cur[({e}) * 40 + {h} * 8 + 2 * t])"
        else:  # [32 k][edge + 4]
            size = STAGE_K * pitch

            def pair(h: str, e: str) -> str:
                return (
                    f"make_float2({x}s_cur[({h} * 8 + 2 * t) * {pitch} + {e}], "
                    f"{x}s_cur[({h} * 8 + 2 * t + 1) * {pitch} + {e}])"
                )

        if operand.vector is not None:  # 16-byte groups: 4 neighbouring k, or rows (A), or columns (B)
            groups = edge_tile // 4
            place, coords = (
                ("(q / 8) * 40 + q % 8 * 4", ("q / 8", "q % 8 * 4"))
                if operand.along_k
                else (f"(q / {groups}) * {pitch} + q % {groups} * 4", (f"q % {groups} * 4", f"q / {groups}"))
            )
            located: list[str] = []
            copies, exists, unroll = edge_tile * STAGE_K // 4 // 256, "", ""
            copied = f"cp_async4(&{x}s[stage * {size} + {place}], in ? &{operand.vector} : {operand.origin}, in, "
            copied += f"{x}_aligned);"
        else:  # an element a copy: a warp's are 32 neighbours along k, or along the edge
            assert operand.copy is not None
            place, coords = (
                ("(q / 32) * 40 + q % 32", ("q / 32", "q % 32"))
                if operand.along_k
                else (f"(q / {edge_tile}) * {pitch} + q % {edge_tile}", (f"q % {edge_tile}", f"q / {edge_tile}"))
            )
            located, exists, element = operand.copy
            # 4 at a time: unrolled whole, a gather's 16 address computations spill (a transposed convolution's);
            # whole where the step's shared statements leave each copy an address
            copies, unroll = edge_tile * STAGE_K // 256, "" if operand.step else " 4"
            copied = f"cp_async1(&{x}s[stage * {size} + {place}], in ? &{element} : {operand.origin}, in);"
        body = "".join(f"\n            {line}" for line in located)
        shared = "".join(f"\n        {line}" for line in operand.step)
        copy = f"""{{{shared}
#pragma unroll{unroll}
        for (int l = 0; l < {copies}; ++l) {{
            const int q = threadIdx.x + l * 256;
            const int64_t {edge} = {edge}0 + {coords[0]}, k = k_next + {coords[1]};{body}
            const bool in = {" && ".join([*within, *([exists] if exists else [])]) or "true"};
            {copied}
        }}
        }}"""
        return size, pair, copy

    a_size, a_pair, a_copy = tile("a", "row", a, m, rows)
    b_size, b_pair, b_copy = tile("b", "col", b, n, 128)
    frags = rows // 32  # a warp's 16-row fragments: its 4 x 2 warps take rows // 2 rows each
    accumulators, steps, epilogue = _tf32x3_steps(m, n, store, a_pair, b_pair, STAGE_K // 8, frags)
    setup_lines = "\n".join("    " + line for line in [*setup, *_alignment_flags(a, b)])
    fetch = f"""if (k_next < {k}LL) {{
        {a_copy}
        {b_copy}
        }}
        cp_async_commit();  // a group every step, empty past K: the wait below counts groups"""
    tiles = STAGES * (a_size + b_size)
    smem = (tiles + 256 * 16 * frags * split) * 4
    held = hold = fold = ""
    if split:  # SPLIT_SUMS_K; a thread's float4 of held sums, 256 apart: a warp's accesses are 512 bytes in a row
        held = f"""
    float4* const held = reinterpret_cast<float4*>(tile_smem + {tiles}) + threadIdx.x;
    for (int q = 0; q < {4 * frags}; ++q) held[q * 256] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);"""
        hold = f"""
        if (step % {HELD_STEPS} == {HELD_STEPS - 1}) {{  // the sums so far join the held ones
#pragma unroll
            for (int i = 0; i < {frags}; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {{
                    const float4 h = held[(i * 4 + j) * 256];
                    held[(i * 4 + j) * 256] = make_float4(h.x + acc[i][j][0], h.y + acc[i][j][1],
                                                          h.z + acc[i][j][2], h.w + acc[i][j][3]);
                    acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
                }}
        }}"""
        fold = f"""#pragma unroll
    for (int i = 0; i < {frags}; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {{
            const float4 h = held[(i * 4 + j) * 256];
            acc[i][j][0] += h.x; acc[i][j][1] += h.y; acc[i][j][2] += h.z; acc[i][j][3] += h.w;
        }}
"""
    return f"""// {what}; {rows}x128 tiles of C on TF32 tensor cores, K steps of {STAGE_K}, {STAGES} in flight.
__global__ void __launch_bounds__(256) {name}_kernel({params}) {{
    extern __shared__ __align__(16) float tile_smem[];
    float* const as = tile_smem;  // [stage][A's tile]
    float* const bs = tile_smem + {STAGES * a_size};  // [stage][B's tile]{held}
    const int64_t batch = blockIdx.z, row0 = (int64_t)blockIdx.y * {rows}, col0 = (int64_t)blockIdx.x * 128;
{setup_lines}
    {accumulators}
#pragma unroll
    for (int stage = 0; stage < {STAGES - 1}; ++stage) {{
        const int64_t k_next = stage * {STAGE_K}LL;
        {fetch}
    }}
    for (int step = 0; step < {kt}; ++step) {{
        cp_async_wait<{STAGES - 2}>();  // this thread's copies of this step have landed
        __syncthreads();  // everyone's have, and everyone is done with the step before, whose buffer is refilled now
        {{
            const int stage = (step + {STAGES - 1}) % {STAGES};
            const int64_t k_next = (step + {STAGES - 1}) * {STAGE_K}LL;
            {fetch}
        }}
        const float* const as_cur = as + (step % {STAGES}) * {a_size};
        const float* const bs_cur = bs + (step % {STAGES}) * {b_size};
{steps}{hold}
    }}
{fold}{epilogue}
}}

extern "C" void {name}({launcher}) {{
    cudaFuncSetAttribute({name}_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});
    dim3 grid(({n} + 127) / 128, ({m} + {rows - 1}) / {rows}, {batch});
    {name}_kernel<<<grid, 256, {smem}, stream>>>({args});
}}
"""


def _tile_fetch(x: str, edge: str, operand: TileOperand, within: str) -> tuple[str, str]:
    """A step's loads of one operand tile (``x``: "a", 128 rows by 16 k, or "b", 16 k by 128 columns, ``edge``
    naming its 128-long index) into the registers ``r{x}[8]``, and their stores into the shared buffer ``{x}s``
    (k-major). Four elements a load where the operand's layout allows it (``TileOperand.vector``) and its batch's
    origin is 16-byte aligned at run time (one uniform branch), as two 16-byte loads a thread: along k, a warp's
    lanes take 32 neighbouring rows (their 4 stores each land in distinct banks), the other half of each 32-byte
    sector being the next load's; along the edge, a warp takes 128 neighbouring elements of one k. Else a thread
    loads 8 single elements. ``within``: the bounds test of an element (of a group of 4's first)."""
    statements, along_k, vector = operand.statements, operand.along_k, operand.vector
    value, buffer = f"v{x}", f"{x}s"
    edge_at, k_at = ("idx / 16", "idx % 16") if along_k else ("idx % 128", "idx / 128")
    body = "\n".join("                " + line for line in statements)
    scalar_fetch = f"""#pragma unroll
        for (int l = 0; l < 8; ++l) {{
            const int idx = threadIdx.x + l * 256;
            const int64_t {edge} = {edge}0 + {edge_at}, k = k_next + {k_at};
            float {value} = 0.0f;
            if ({within}) {{
{body}
            }}
            r{x}[l] = {value};
        }}"""
    scalar_keep = f"""#pragma unroll
        for (int l = 0; l < 8; ++l) {{
            const int idx = threadIdx.x + l * 256;
            {buffer}[next][{k_at}][{edge_at}] = r{x}[l];
        }}"""
    if vector is None:
        return scalar_fetch, scalar_keep
    edge_at, k_at = ("q % 128", "q / 128 * 4") if along_k else ("q % 32 * 4", "q / 32")
    kept = (
        "\n".join(f"            {buffer}[next][{k_at} + {c}][{edge_at}] = r{x}[4 * l + {c}];" for c in range(4))
        if along_k
        else f"            *reinterpret_cast<float4*>(&{buffer}[next][{k_at}][{edge_at}]) = "
        f"make_float4(r{x}[4 * l], r{x}[4 * l + 1], r{x}[4 * l + 2], r{x}[4 * l + 3]);"
    )

    def uniform(wide: str, narrow: str) -> str:
        """``wide`` for each of a thread's two groups of 4 where the origin is aligned, else ``narrow``."""
        return f"""if ({x}_aligned) {{
#pragma unroll
        for (int l = 0; l < 2; ++l) {{
            const int q = threadIdx.x + l * 256;
{wide}
        }}
        }} else {{
        {narrow}
        }}"""

    fetch = uniform(
        f"""            const int64_t {edge} = {edge}0 + {edge_at}, k = k_next + {k_at};
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if ({within}) v = *reinterpret_cast<const float4*>(&{vector});
            r{x}[4 * l] = v.x; r{x}[4 * l + 1] = v.y; r{x}[4 * l + 2] = v.z; r{x}[4 * l + 3] = v.w;""",
        scalar_fetch,
    )
    keep = uniform(kept, scalar_keep)
    return fetch, keep


def _tf32x3_steps(
    m: int,
    n: int,
    store: Callable[[str], str],
    a_pair: Callable[[str, str], str],
    b_pair: Callable[[str, str], str],
    slices: int = 2,
    frags: int = 4,
) -> tuple[str, str, str]:
    """``_pipelined``'s accumulators, K step and epilogue on TF32 tensor cores (``mma_tf32``, sm_80 and later) at
    float32 accuracy: each operand is split into its nearest TF32 value and the rest (at most 2^-11 of it, either
    sign), of which a tensor core reads 11 significant bits (the operand to 2^-22), and a product is big*big +
    big*small + small*big, the term dropped at most 2^-22 of it and of either sign (NVIDIA's 3xTF32, as CUTLASS's
    fast accurate fp32 GEMMs; truncated splits leave rests of one sign, twice as large, and fail tolerances that
    rounded ones pass). Three tensor-core products still outrun one FMA product, and a single TF32 product (about
    5e-4 relative) would fail float32 tolerances. The split is an integer add, a mask and a subtraction (sm_90 has
    no TF32 rounding instruction; nvcc emulates one in 4).
    Each of the 8 warps computes 64x32 of the tile (32x32 of a 64-row one) as 4x4 (2x4) products of 16x8; a K
    step's products are summed on tensor cores from zero (all small terms first: in a numpy model of 65536 sums of
    K = 8192 products, the worst error against float64 falls from 0.79 of the 1e-4 tolerance to 0.56) and added to
    the float32 sums on the FMA units. Fragments are read from shared memory as PTX lays them out (lane = 4 g + t:
    A's rows g and g + 8 at k slots t and t + 4, B's column g at k slots t and t + 4), and each thread stores its
    sums at their (row, col) directly: C's rows g and g + 8, columns 2t and 2t + 1 of each 16x8.
    ``a_pair(h, row)``, ``b_pair(h, col)``: a float2 of the operand's elements at k slots t and t + 4 of slice
    ``h`` of the step (A at ``row``, B at ``col``, within the tile). Which k a slot stands for is the layout's
    choice, the same for both operands (a product sums over every k alike); ``slices``: the step's K in slices of
    8 (B's fragments of all are held); ``frags``: a warp's fragments of 16 rows (4: 128-row tiles; 2: 64)."""
    accumulators = f"""const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 4, wn = warp % 4;
    const int g = lane / 4, t = lane % 4;
    float acc[{frags}][4][4] = {{}};  // [16 rows][8 columns][the thread's 4 of them]"""
    b_frag = b_pair("h", "wn * 32 + j * 8 + g")
    a_frag = a_pair("h", f"wm * {16 * frags} + i * 16 + g + 8 * r")
    steps = f"""        {{
            // B's fragments of the step (every slice of K) are split once and held; A's a row of products at a
            // time (fewer registers live).
            float b_big[{slices}][4][2], b_small[{slices}][4][2];
#pragma unroll
            for (int h = 0; h < {slices}; ++h)
#pragma unroll
                for (int j = 0; j < 4; ++j) {{
                    const float2 v = {b_frag};
                    b_big[h][j][0] = tf32_near(v.x);
                    b_big[h][j][1] = tf32_near(v.y);
                    b_small[h][j][0] = v.x - b_big[h][j][0];
                    b_small[h][j][1] = v.y - b_big[h][j][1];
                }}
#pragma unroll
            for (int i = 0; i < {frags}; ++i) {{
                float part[4][4] = {{}}, a_big[{slices}][4];
#pragma unroll
                for (int h = 0; h < {slices}; ++h) {{
                    float a_small[4];
#pragma unroll
                    for (int r = 0; r < 2; ++r) {{
                        const float2 v = {a_frag};
                        a_big[h][r] = tf32_near(v.x);
                        a_big[h][r + 2] = tf32_near(v.y);
                        a_small[r] = v.x - a_big[h][r];
                        a_small[r + 2] = v.y - a_big[h][r + 2];
                    }}
#pragma unroll
                    for (int j = 0; j < 4; ++j) {{
                        mma_tf32(part[j], a_small, b_big[h][j]);
                        mma_tf32(part[j], a_big[h], b_small[h][j]);
                    }}
                }}
                // The big products last: each MMA's sum is rounded toward zero at the size of the sum so far, and
                // the small terms' sums are 2^-11 of the big ones' (the step's error a third of interleaving's).
#pragma unroll
                for (int h = 0; h < {slices}; ++h)
#pragma unroll
                    for (int j = 0; j < 4; ++j) mma_tf32(part[j], a_big[h], b_big[h][j]);
                // The step's {8 * slices} products join the sum here, rounded to nearest: a tensor core rounds its sums
                // toward zero, which over thousands of MMAs into one accumulator drifts past float32 tolerances.
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] += part[j][e];
            }}
        }}"""
    epilogue = f"""#pragma unroll
    for (int i = 0; i < {frags}; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {{
                const int64_t row = row0 + wm * {16 * frags} + i * 16 + g + 8 * (e / 2);
                const int64_t col = col0 + wn * 32 + j * 8 + 2 * t + e % 2;
                if (row < {m}LL && col < {n}LL) {{ {store("acc[i][j][e]")} }}
            }}"""
    return accumulators, steps, epilogue


WGMMA_ROWS = 128  # a tile's rows (of A) or columns (of B): two warpgroups of 64 rows each, by 128 columns


@dataclass(frozen=True)
class WgmmaForm:
    """How the wgmma kernel multiplies: ``kind``, the type its tensor cores read ("tf32", "f16" or "bf16"); ``split``:
    each float32 operand split into a big and a small part of it, three products of them (big*big + big*small +
    small*big) giving float32's accuracy, else 16-bit operands as they are, one product; ``step_k``: the k of a K
    step. A part's tile of a step is laid out in core matrices of 8 rows by 16 bytes (4 k of TF32, 8 of a 16-bit
    type), so every form has the same descriptors: 64 k of a 16-bit type take the bytes of 32 of TF32. Float32
    operands split into float16 parts are first scaled by a power of two (``f16_scale``: float16's exponents span
    2^-14..2^15, TF32's those of float32); float16's significand is TF32's (11 bits), its products run at twice
    TF32's rate."""

    kind: str
    split: bool
    step_k: int

    @property
    def scaled(self) -> bool:
        return self.split and self.kind == "f16"

    @property
    def per(self) -> int:
        """k of a core matrix's row (16 bytes)."""
        return 4 if self.kind == "tf32" else 8

    @property
    def part(self) -> int:
        """Floats (4-byte words) of a part's tile of a K step: 128 rows of 16 bytes a core matrix's row of k."""
        return WGMMA_ROWS * self.step_k // self.per * 4

    @property
    def tile(self) -> int:
        """Floats of an operand's tiles of a K step (its parts')."""
        return (2 if self.split else 1) * self.part

    @property
    def products(self) -> int:
        """Products a part's tile of a step takes (8 k each in TF32, 16 in a 16-bit type)."""
        return self.step_k // (2 * self.per)

    @property
    def dtype(self) -> str:
        """The operands' type."""
        return "float32" if self.split else {"f16": "float16", "bf16": "bfloat16"}[self.kind]


TF32X3 = WgmmaForm("tf32", split=True, step_k=STAGE_K)
F16X3 = WgmmaForm("f16", split=True, step_k=2 * STAGE_K)
# Convolutions' float16 parts in steps of 32 k, as TF32's: the gathering threads' 16 k a step each (their registers
# are spent) and K's tap-major order (``tap_major``) stay as they are.
F16X3_GATHERED = WgmmaForm("f16", split=True, step_k=STAGE_K)


def wgmma_form(variant: Variant, dtype: str) -> WgmmaForm | None:
    """The wgmma kernel's form ``variant`` runs a product of ``dtype`` operands in, or None: float32 as 3xTF32
    ("wgmma") or three products of float16 parts ("f16x3"), a 16-bit type as itself ("wgmma")."""
    if dtype == "float32":
        return {"wgmma": TF32X3, "f16x3": F16X3}.get(variant.gemm)
    kind = {"float16": "f16", "bfloat16": "bf16"}.get(dtype)
    return WgmmaForm(kind, split=False, step_k=2 * STAGE_K) if kind and variant.gemm == "wgmma" else None


def wgmma_splits(g: GemmKernel) -> tuple[str, str]:
    """The buffers ``_cuda_gemm_wgmma`` splits A and B into (``variant_plan`` adds them)."""
    return f"b{g.name}_split_a", f"b{g.name}_split_b"


def wgmma_largest(g: GemmKernel) -> str:
    """The buffer of A's and B's largest finite magnitudes, whose ``f16_scale`` the f16 form scales them by
    (``variant_plan`` adds it)."""
    return f"b{g.name}_largest"


def wgmma_split_floats(g: GemmKernel, form: WgmmaForm) -> tuple[int, int]:
    """Floats of each split operand: per batch it has its own (a stride of 0 along the batch shares one), per tile
    of 128 rows (columns) and per K step, the tile's parts."""
    s = _strides(g)
    tile, steps = form.tile, -(-g.k // form.step_k)
    a_batches, b_batches = (g.batch if s[x] else 1 for x in ("sab", "sbb"))
    return (
        a_batches * -(-g.m // WGMMA_ROWS) * steps * tile,
        b_batches * -(-g.n // WGMMA_ROWS) * steps * tile,
    )


# Where a product has fewer tiles of C than twice the SMs of an H100 or H200 (132), its K is cut into parts, a block
# each, so that the GPU is filled (a 256x256 product of a K of 2^19 has 4 tiles: 4 blocks, each 16384 K steps in
# turn); a part is at least WGMMA_PART_STEPS steps, so that its sums' extra traffic stays small beside its products.
WGMMA_SMS = 132
WGMMA_PART_STEPS = 16
WGMMA_SPLIT_MAX_BYTES = 8 << 30


def wgmma_k_parts(g: GemmKernel, form: WgmmaForm) -> int:
    """Parts of K ``_cuda_gemm_wgmma`` cuts ``g``'s into (1: none)."""
    tiles = -(-g.m // WGMMA_ROWS) * -(-g.n // WGMMA_ROWS) * g.batch
    steps = -(-g.k // form.step_k)
    parts = max(1, min(-(-2 * WGMMA_SMS // tiles), steps // WGMMA_PART_STEPS, 65535 // g.batch))
    return -(-steps // -(-steps // parts))  # none empty: as many as parts of that many steps take


def wgmma_parts_buffer(g: GemmKernel) -> str:
    """The buffer of each part of K's sums (``variant_plan`` adds it where there are parts)."""
    return f"b{g.name}_parts"


def wgmma_fits(g: GemmKernel, form: WgmmaForm) -> bool:
    """Whether ``_cuda_gemm_wgmma`` runs ``g`` in ``form``: operands of its type, a grid's rows and batches within
    launch limits, and its split operands and parts' sums within ``WGMMA_SPLIT_MAX_BYTES`` (twice the operands'
    size in TF32 parts, their size in float16 ones or 16-bit copies, more where a tile of 128 pads a few rows: a
    matrix-vector product's vector would take 256 times its size)."""
    parts = wgmma_k_parts(g, form)
    sums = g.batch * g.m * g.n * parts if parts > 1 else 0
    return (
        g.node.dtype == form.dtype
        and -(-g.m // WGMMA_ROWS) <= 65535
        and g.batch <= 65535
        and 4 * (sum(wgmma_split_floats(g, form)) + sums) <= WGMMA_SPLIT_MAX_BYTES
    )


def _wgmma_parts(form: WgmmaForm, v: str, indent: str) -> str:
    """Statements making the float4 ``big`` (and ``small``) of ``form``'s parts of a core matrix's row: the 4 or 8
    values ``v[...]`` (floats, or a 16-bit operand's bits; the scaled form's ``scale`` in scope)."""

    def words(w: str) -> str:  # a float4 of 4 words' bits
        return f"make_float4({', '.join(f'__uint_as_float({w}[{i}])' for i in range(4))})"

    if form.kind == "tf32":
        lines = [
            f"const float4 big = make_float4({', '.join(f'tf32_near({v}[{i}])' for i in range(4))});",
            f"const float4 small = make_float4({', '.join(f'{v}[{i}] - big.{c}' for i, c in enumerate('xyzw'))});",
        ]
    elif form.split:
        # (the scaled value is exact, a power of two's multiple; so is its difference from its float16 part)
        lines = [
            "uint32_t hi[4], lo[4];",
            "#pragma unroll",
            "for (int e = 0; e < 4; ++e) {",
            f"    const float v0 = {v}[2 * e] * scale, v1 = {v}[2 * e + 1] * scale;",
            "    const uint32_t h0 = f16_bits(v0), h1 = f16_bits(v1);",
            "    hi[e] = h0 | h1 << 16;",
            "    lo[e] = f16_bits(v0 - f16_value(h0)) | f16_bits(v1 - f16_value(h1)) << 16;",
            "}",
            f"const float4 big = {words('hi')};",
            f"const float4 small = {words('lo')};",
        ]
    else:  # a 16-bit operand's bits, two a word (the lower k in the low half)
        lines = [
            "uint32_t w[4];",
            "#pragma unroll",
            f"for (int e = 0; e < 4; ++e) w[e] = {v}[2 * e] | {v}[2 * e + 1] << 16;",
            f"const float4 big = {words('w')};",
        ]
    return "".join(indent + line for line in lines)


def _wgmma_splitter(
    name: str, x: str, edge: tuple[str, int, int], depth: int, element: str, located: str = "", form: WgmmaForm = TF32X3
) -> str:
    """The kernel laying operand ``x`` (a or b) of ``name``'s wgmma product out as ``_wgmma_kernel`` reads it, in
    ``form``'s parts (a float32 operand's big and small ones, a 16-bit operand's bits), zeros past its edges: a
    thread a row's 16 bytes of each part (4 k of TF32, 8 of a 16-bit type). ``edge``: the variable naming a row of
    A (column of B), their count, and a batch's stride in ``src`` (``p{x}``: the batch's origin); ``element`` reads
    the operand at that row (column) and ``k``, after the ``located`` statements. A float32 operand split into
    float16 parts is scaled by ``f16_scale`` of its ``largest`` magnitude first."""
    var, size, batch_stride = edge
    step_k, per = form.step_k, form.per
    rows, tile, steps, tiles = WGMMA_ROWS, form.tile, -(-depth // step_k), -(-size // WGMMA_ROWS)
    value = "float" if form.split else "uint32_t"
    scale = "\n    const float scale = f16_scale(*largest);" if form.scaled else ""
    parts = _wgmma_parts(form, "v", "\n        ")
    largest = ", const float* __restrict__ largest" if form.scaled else ""
    src = "float" if form.split else "uint16_t"
    what = f"big and small {form.kind.upper()} parts" if form.split else "16-bit values"
    small = f"\n        at[{form.part // 4}] = small;" if form.split else ""
    return f"""// {x.upper()}'s {what} as {name}_kernel reads them, zeros past its edges
__global__ void __launch_bounds__(256) {name}_split_{x}(const {src}* __restrict__ src, float* __restrict__ out,
                                                        int64_t chunks{largest}) {{{scale}
    for (int64_t q = blockIdx.x * 256LL + threadIdx.x; q < chunks; q += (int64_t)gridDim.x * 256) {{
        const int r = q % {rows}, kc = q / {rows} % {step_k // per};
        const int64_t ks = q / {rows * step_k // per} % {steps}, t = q / ({rows * step_k // per}LL * {steps});
        const int64_t batch = t / {tiles}, {var} = t % {tiles} * {rows} + r;
        const {src}* p{x} = src + batch * {batch_stride}LL;
        {value} v[{per}];
#pragma unroll
        for (int e = 0; e < {per}; ++e) {{
            const int64_t k = ks * {step_k} + kc * {per} + e;
            v[e] = 0;
            if ({var} < {size}LL && k < {depth}LL) {{{located}
                v[e] = {element};
            }}
        }}{parts}
        float4* const at = reinterpret_cast<float4*>(out + (t * {steps} + ks) * {tile}LL) + kc * {rows} + r;
        at[0] = big;{small}
    }}
}}
"""


def _wgmma_split_launch(
    name: str, x: str, operand: str, scratch: str, floats: int, form: WgmmaForm = TF32X3, largest: str = ""
) -> str:
    """The launch of ``_wgmma_splitter``'s kernel (``largest``: the scaled form's pointer to the operand's largest
    magnitude)."""
    chunks = floats // (8 if form.split else 4)  # a thread's 16 bytes of the big tile (and of its small twin)
    return (
        f"{name}_split_{x}<<<(unsigned)std::min<int64_t>(({chunks}LL + 255) / 256, 1LL << 20), 256, 0, stream>>>"
        f"({operand}, {scratch}, {chunks}LL{', ' + largest if largest else ''});"
    )


def _strided_magnitude(x: str, edge: tuple[str, int, int], depth: int, element: str, along_k: bool) -> str:
    """``_largest_kernel``'s statements reading element ``i`` of a GEMM's operand ``x`` through its strides
    (``edge`` and ``element`` as ``_wgmma_splitter``'s); ``along_k``: neighbouring threads read neighbouring k (the
    operand's contiguous dim), else neighbouring rows (columns)."""
    var, size, batch_stride = edge
    fast, slow = ("k", var) if along_k else (var, "k")
    fast_n, slow_n = (depth, size) if along_k else (size, depth)
    return f"""const int64_t {fast} = i % {fast_n}LL, {slow} = i / {fast_n}LL % {slow_n}LL;
        const int64_t batch = i / {fast_n * slow_n}LL;
        const float* p{x} = src + batch * {batch_stride}LL;
        const float v = fabsf({element});"""


def _whole(batch: int, outer: int, inner: int, rows: int, cols: int) -> bool:
    """Whether an operand of ``rows`` x ``cols`` (a batch each, or one shared: stride 0) by these element strides
    is its buffer's elements in order (a row-major matrix, batches one after another)."""
    return inner == 1 and outer == cols and batch in (0, rows * cols)


def _largest_kernel(name: str, x: str, magnitude: str = "const float v = fabsf(src[i]);") -> str:
    """The kernel finding operand ``x``'s largest finite magnitude (a scaled form's scale: ``f16_scale``) into
    ``largest`` (zeroed before): a block's largest joins it by an atomic max of its bits (non-negative floats order
    as their bits do). ``magnitude``: statements giving the magnitude ``v`` of its element ``i`` (by default the
    buffer's: an operand that is its elements in order)."""
    return f"""// the largest finite magnitude of {x.upper()} (infinities and NaNs are split as they are)
__global__ void __launch_bounds__(256) {name}_largest_{x}(const float* __restrict__ src, float* __restrict__ largest,
                                                          int64_t count) {{
    float m = 0.0f;
    for (int64_t i = blockIdx.x * 256LL + threadIdx.x; i < count; i += (int64_t)gridDim.x * 256) {{
        {magnitude}
        if (v <= 3.402823466e38f) m = fmaxf(m, v);
    }}
    m = block_reduce(m, MaxOp(), 0.0f);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(largest), __float_as_uint(m));
}}
"""


def _largest_launches(name: str, largest: str, operands: tuple[tuple[str, int], tuple[str, int]]) -> str:
    """The launcher's statements finding A's and B's largest magnitudes (``operands``: each buffer and its count of
    elements) into ``largest``, by ``_largest_kernel``'s kernels."""
    return f"cudaMemsetAsync({largest}, 0, 2 * sizeof(float), stream);" + "".join(
        f"\n    {name}_largest_{x}<<<(unsigned)std::min<int64_t>(({count}LL + 255) / 256, 1024), 256, 0, "
        f"stream>>>({operand}, {largest} + {i}, {count}LL);"
        for i, (x, (operand, count)) in enumerate(zip("ab", operands, strict=True))
    )


class WgmmaGather(NamedTuple):
    """B of ``_wgmma_kernel`` gathered by the product's own threads (an implicit convolution's input) instead of
    split beforehand: ``setup``, statements once a thread (its column: ``my_col``, ``col0 + threadIdx.x % 128``);
    ``step``, once a K step (they may read ``k_next``, the step's first k); then for each of the thread's 16 k of
    the step: statements locating the element, the condition it exists under, and its expression."""

    setup: list[str]
    step: tuple[str, ...]
    located: list[str]
    exists: str
    element: str


def _wgmma_kernel(
    name: str,
    params: str,
    dims: tuple[int, int, int],
    parts: int,
    a_tiles: str,
    b: str | WgmmaGather,
    put: Callable[[str], str],
    form: WgmmaForm = TF32X3,
    largest: str = "",
) -> str:
    """The product kernel of ``_cuda_gemm_wgmma`` and ``_conv_wgmma``: C (``dims``: m x n, and K) in 128x128
    tiles, a block each (and each part of K: ``wgmma_k_parts``), its operands' parts in ``form``. ``a_tiles`` (and
    ``b`` where it is one too) is the block's first split tile, as ``_wgmma_splitter`` lays them out; ``put`` gives
    the statement storing a value at ``row``, ``col`` of ``batch``. A gathered B (``WgmmaGather``, float32) is
    loaded into registers a step ahead, while the step's products run, then split and stored as the splitter would
    have laid it out (generic stores, fenced for wgmma's reads). A scaled form's sums are scaled back by the
    reciprocals of A's and B's scales (of ``largest``'s two magnitudes), one at a time (their product could be
    under float32's range where each is not)."""
    m, n, depth = dims
    rows, tile = WGMMA_ROWS, form.tile
    steps = -(-depth // form.step_k)
    held_sums = depth >= SPLIT_SUMS_K
    gather = b if isinstance(b, WgmmaGather) else None
    assert gather is None or form.split, "a gathered B is a float32 operand's"
    if parts > 1:  # this block's part of K
        per_part = -(-steps // parts)
        where = f"""const int64_t batch = blockIdx.z / {parts}, k_part = blockIdx.z % {parts};
    const int first = k_part * {per_part}, last = min(first + {per_part}, {steps});"""
    else:
        where = f"const int64_t batch = blockIdx.z;\n    const int first = 0, last = {steps};"
    b_fetch, b_setup, b_steps = "", f"const float* const b_tiles = {b};", ""
    first_b = "\n    gather(first);\n    put_b(first);" if gather else ""
    if gather is None:
        b_fetch = """
                cp_async4(to_b + q, from_b + q, true, true);"""
        copies = f"""
            const float* const from_b = b_tiles + (int64_t)step * {tile};
            float* const to_b = bs + step % {STAGES} * {tile};"""
    else:
        copies = ""
        located = "".join(f"\n                {line}" for line in gather.located)
        step_lines = "".join(f"\n            {line}" for line in gather.step)
        b_setup = "\n    ".join(
            [
                *gather.setup,
                f"const bool col_in = my_col < {n}LL;",
                "const int kh = threadIdx.x / 128 * 16;  // this thread's 16 k of a step, in its column my_col",
                "float gb[16];",
                *[f"const float scale = f16_scale({largest}[1]);  // the input's"] * form.scaled,
            ]
        )
        # (a step's tile: [big, small][k / per][128][per]; this thread's 16 k are 16 / per rows of core matrices)
        b_steps = f"""
    auto gather = [&](int step) {{
        if (step < last) {{
            const int64_t k_next = (int64_t)step * {form.step_k};{step_lines}
#pragma unroll
            for (int i = 0; i < 16; ++i) {{
                const int64_t k = k_next + kh + i;
                gb[i] = 0.0f;
                if (col_in && k < {depth}LL) {{{located}
                    if ({gather.exists}) gb[i] = {gather.element};
                }}
            }}
        }}
    }};
    auto put_b = [&](int step) {{
        if (step < last) {{
            float4* const to = reinterpret_cast<float4*>(bs + step % {STAGES} * {tile}) + kh / {form.per} * {rows} +
                               threadIdx.x % {rows};
#pragma unroll
            for (int q = 0; q < {16 // form.per}; ++q) {{
                const float* const v = gb + {form.per} * q;{_wgmma_parts(form, "v", chr(10) + " " * 16)}
                to[q * {rows}] = big;
                to[q * {rows} + {form.part // 4}] = small;
            }}
        }}
        fence_async_smem();  // for the products' reads, after the barrier that follows
    }};"""
    sums = "acc[j * 4 + e] + held[j * 4 + e]" if held_sums else "acc[j * 4 + e]"
    unscale = ""
    if form.scaled:
        sums = f"({sums}) * unscale_a * unscale_b"
        unscale = f"""
    const float unscale_a = 1.0f / f16_scale({largest}[0]), unscale_b = 1.0f / f16_scale({largest}[1]);"""
    # a descriptor's core matrices: the next 4 k a tile's 128 rows on (2048 bytes), the next 8 rows 128 bytes on
    descs = "const uint64_t {0} = wgmma_desc({1} + h * {2}, {3}, 128);".format

    def products(s: str, part: str) -> str:
        """Step ``s``'s products (12 of split operands, 4 of 16-bit ones) into ``part``, issued and committed as a
        group."""
        smalls = f"""
#pragma unroll
            for (int h = 0; h < {form.products}; ++h) {{
                {descs("a_big", "ta", 2 * rows * 4, rows * 16)}
                {descs("a_small", f"ta + {form.part}", 2 * rows * 4, rows * 16)}
                {descs("b_big", "tb", 2 * rows * 4, rows * 16)}
                {descs("b_small", f"tb + {form.part}", 2 * rows * 4, rows * 16)}
                wgmma_{form.kind}({part}, a_small, b_big, h > 0);
                wgmma_{form.kind}({part}, a_big, b_small, 1);
            }}
            // The big products last: the small terms' sums are 2^-11 of theirs (``_tf32x3_steps``)"""
        return f"""
        {{
            const float* const ta = as + {s} % {STAGES} * {tile} + group * 64 * 4;
            const float* const tb = bs + {s} % {STAGES} * {tile};
            wgmma_fence();{smalls if form.split else ""}
#pragma unroll
            for (int h = 0; h < {form.products}; ++h) {{
                {descs("a_big", "ta", 2 * rows * 4, rows * 16)}
                {descs("b_big", "tb", 2 * rows * 4, rows * 16)}
                wgmma_{form.kind}({part}, a_big, b_big, {"1" if form.split else "h > 0"});
            }}
            wgmma_commit();
        }}"""

    def gathered(s: str) -> tuple[str, str]:
        """A gathered B's loads of the step after ``s`` (in flight while its products run), and their stores."""
        if gather is None:
            return "", ""
        return (
            f"\n        gather({s} + 1);",
            f"\n        put_b({s} + 1);  // its buffer's products (two steps back) are done: a barrier passed since",
        )

    add = "\n#pragma unroll\n        for (int i = 0; i < 64; ++i) acc[i] += {0}[i];".format
    if held_sums:  # one step's products at a time: ``held`` leaves no registers for a second step's sums
        ahead, after = gathered("step")
        loop = f"""
#pragma unroll
    for (int step = first; step < first + {STAGES - 1}; ++step) fetch(step);{first_b}
    for (int step = first; step < last; ++step) {{
        cp_async_wait<{STAGES - 2}>();  // this thread's copies of this step have landed
        // everyone's have, and every product of the step before (whose buffer is refilled next) is done
        __syncthreads();
        fence_async_smem();
        fetch(step + {STAGES - 1});{products("step", "part")}{ahead}
        wgmma_wait<0>();{add("part")}
        if ((step - first) % {HELD_STEPS} == {HELD_STEPS - 1}) {{  // the sums so far join the held ones
#pragma unroll
            for (int i = 0; i < 64; ++i) {{ held[i] += acc[i]; acc[i] = 0.0f; }}
        }}{after}
    }}"""
    else:
        # Two steps an iteration: the second's products are issued before the first's sums are read, so they run
        # while the thread adds those; both are done before the next iteration (ptxas serializes every wgmma of a
        # loop where a product group is still running at its end). ``part``, ``prior``: each step's own sums.
        def half(s: str, part: str) -> str:
            ahead, after = gathered(s)
            return f"""
        cp_async_wait<0>();  // this thread's copies of the step have landed
        // everyone's have (and staged its B), and the products of the steps before, whose buffers are refilled
        // next, are done
        __syncthreads();
        fence_async_smem();
        fetch({s} + 1);{products(s, part)}{ahead}{after}"""

        loop = f"""
    fetch(first);{first_b}
    for (int step = first; step < last; step += 2) {{
        const bool two = step + 1 < last;{half("step", "part")}
        if (two) {{
            const int next = step + 1;{textwrap.indent(half("next", "prior"), "    ")}
            wgmma_wait<1>();  // the first step's products are done, the second's run on
        }} else {{
            wgmma_wait<0>();
        }}{add("part")}
        if (two) {{
            wgmma_wait<0>();{add("prior")}
        }}
    }}"""
    return f"""
__global__ void __launch_bounds__(256) {name}_kernel({params}) {{
    extern __shared__ __align__(128) float tile_smem[];
    float* const as = tile_smem;  // [stage][big, small][k / 4][128][4]
    float* const bs = tile_smem + {STAGES * tile};
    {where}
    const int64_t row0 = (int64_t)blockIdx.y * {rows}, col0 = (int64_t)blockIdx.x * {rows};
    const float* const a_tiles = {a_tiles};
    {b_setup}{unscale}
    const int group = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    float acc[64], part[64], {"held" if held_sums else "prior"}[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = {"held[i] = " if held_sums else ""}0.0f;
    auto fetch = [&](int step) {{
        if (step < last) {{
            const float* const from_a = a_tiles + (int64_t)step * {tile};
            float* const to_a = as + step % {STAGES} * {tile};{copies}
#pragma unroll
            for (int l = 0; l < {tile // 4 // 256}; ++l) {{
                const int q = (threadIdx.x + l * 256) * 4;
                cp_async4(to_a + q, from_a + q, true, true);{b_fetch}
            }}
        }}
        cp_async_commit();  // a group every step, empty past K: the wait below counts groups
    }};{b_steps}{loop}
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {{
            const int64_t row = row0 + group * 64 + warp * 16 + g + 8 * (e / 2), col = col0 + j * 8 + 2 * t + e % 2;
            if (row < {m}LL && col < {n}LL) {{ {put(sums)} }}
        }}
}}
"""


def _wgmma_launch(name: str, args: str, grid: tuple[int, int, int], form: WgmmaForm = TF32X3) -> str:
    smem = 2 * STAGES * form.tile * 4
    return f"""cudaFuncSetAttribute({name}_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});
    {name}_kernel<<<dim3({grid[0]}, {grid[1]}, {grid[2]}), 256, {smem}, stream>>>({args});"""


def _cuda_gemm_wgmma(g: GemmKernel, form: WgmmaForm) -> str:
    """Our float32 GEMM as 3xTF32 (``_tf32x3_steps``'s big*big + big*small + small*big, float32's accuracy) on
    Hopper's warpgroup MMA (sm_90a), which multiplies twice as fast as mma.sync and reads its operands from shared
    memory itself. wgmma reads TF32 operands K-major only and cannot split them, so each operand is first split
    once into its big and small TF32 parts (a kernel each, read through its strides, zeros past its edges), laid
    out as the product reads them: per 128 rows (A) or columns (B) and K step of 32, the big tile then the small,
    each [k / 4][128][4] (core matrices of 8 rows by 4 k, 16 bytes a row). A step's four tiles are then one
    contiguous copy each into shared memory, by 16-byte asynchronous copies ahead of the step (``_wgmma_kernel``).
    A block's two warpgroups compute 64 rows each of a 128x128 tile of C. Each K step's 12 products are summed on
    tensor cores from zero (small terms first, as ``_tf32x3_steps``) and added to the float32 sums on the FMA units,
    in two levels from ``SPLIT_SUMS_K`` on (sums held in registers, 8 steps at a time).
    Where K is cut into parts (``wgmma_k_parts``), each block sums its part's steps into its own slice of the parts'
    buffer, and a last kernel adds the parts in order (the same sums whatever ran first) and stores them.
    Other forms (``WgmmaForm``) lay each operand out in the same tiles as 16-bit values [k / 8][128][8], K steps of
    64: a float32 operand scaled by ``f16_scale`` of its largest finite magnitude (found by a kernel each first) and
    split into float16 parts, or a 16-bit operand's own values (a product a k instead of three)."""
    s = _strides(g)
    a_element, b_element = _tile_elements(g)
    rows, tile = WGMMA_ROWS, form.tile
    steps, m_tiles, n_tiles = -(-g.k // form.step_k), -(-g.m // rows), -(-g.n // rows)
    split_a, split_b = wgmma_splits(g)
    parts, outputs = wgmma_k_parts(g, form), g.batch * g.m * g.n
    at = f"(k_part * {outputs}LL + batch * {g.m * g.n}LL) + row * {g.n}LL + col"

    def put(value: str) -> str:  # where K has parts, each part's sums stored for the last kernel
        return f"{wgmma_parts_buffer(g)}[{at}] = {value};" if parts > 1 else _gemm_put(g, value)

    adder = (
        f"""
// the parts' sums of each output, added in order, then stored
__global__ void __launch_bounds__(256) {g.name}_parts({_gemm_params(g)}) {{
    for (int64_t o = blockIdx.x * 256LL + threadIdx.x; o < {outputs}LL; o += (int64_t)gridDim.x * 256) {{
        float sum = 0.0f;
        for (int p = 0; p < {parts}; ++p) sum += {wgmma_parts_buffer(g)}[p * {outputs}LL + o];
        const int64_t batch = o / {g.m * g.n}LL, row = o / {g.n}LL % {g.m}LL, col = o % {g.n}LL;
        {_gemm_put(g, "sum")}
    }}
}}
"""
        if parts > 1
        else ""
    )
    add = (
        f"\n    {g.name}_parts<<<(unsigned)std::min<int64_t>(({outputs}LL + 255) / 256, 1LL << 20), 256, 0, stream>>>"
        f"({', '.join(_gemm_buffers(g))});"
        if parts > 1
        else ""
    )
    a_floats, b_floats = wgmma_split_floats(g, form)
    a_batch = "batch" if s["sab"] else "0"
    b_batch = "batch" if s["sbb"] else "0"
    a_tiles = f"{split_a} + (({a_batch} * {m_tiles}LL + blockIdx.y) * {steps}) * {tile}LL"
    b_tiles = f"{split_b} + (({b_batch} * {n_tiles}LL + blockIdx.x) * {steps}) * {tile}LL"
    largest = wgmma_largest(g) if form.scaled else ""
    kernel = _wgmma_kernel(g.name, _gemm_params(g), (g.m, g.n, g.k), parts, a_tiles, b_tiles, put, form, largest)
    a_edge, b_edge = ("row", g.m, s["sab"]), ("col", g.n, s["sbb"])
    scaling, finding = "", ""
    if form.scaled:  # each operand's largest magnitude, for its scale (read along its contiguous dim)
        scaling = "".join(
            _largest_kernel(g.name, x, *[] if whole else [_strided_magnitude(x, edge, g.k, element, along_k)])
            for x, edge, element, along_k, whole in (
                ("a", a_edge, a_element, s["sak"] == 1, _whole(s["sab"], s["sam"], s["sak"], g.m, g.k)),
                ("b", b_edge, b_element, s["sbn"] != 1, _whole(s["sbb"], s["sbk"], s["sbn"], g.k, g.n)),
            )
        )
        counts = ((g.batch if s["sab"] else 1) * g.m * g.k, (g.batch if s["sbb"] else 1) * g.n * g.k)
        operands = ((g.a.buffer, counts[0]), (g.b.buffer, counts[1]))
        finding = _largest_launches(g.name, largest, operands) + "\n    "
    read = "{}" if form.split else "reinterpret_cast<const uint16_t*>({})"  # a 16-bit operand as its bits
    splits = [
        _wgmma_split_launch(g.name, x, read.format(operand), split, floats, form, f"{largest} + {i}" if largest else "")
        for i, (x, operand, split, floats) in enumerate(
            (("a", g.a.buffer, split_a, a_floats), ("b", g.b.buffer, split_b, b_floats))
        )
    ]
    products = f"3x{form.kind.upper()}" if form.split else form.kind.upper()
    return f"""{scaling}{_wgmma_splitter(g.name, "a", a_edge, g.k, a_element, form=form)}
{_wgmma_splitter(g.name, "b", b_edge, g.k, b_element, form=form)}{adder}
// {g.node.op}: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]; 128x128 tiles of C on wgmma ({products}), K steps of
// {form.step_k}.{kernel}
extern "C" void {g.name}({_launcher_params(g, "cuda")}) {{
    {finding}{splits[0]}
    {splits[1]}
    {_wgmma_launch(g.name, ", ".join(_gemm_buffers(g)), (n_tiles, m_tiles, g.batch * parts), form)}{add}
}}
"""


def _cuda_gemm_wmma(g: GemmKernel) -> str:
    """Our GEMM kernel for 16-bit operands, on tensor cores through WMMA (sm_80 and later): 64x64 tiles of C per
    block of four warps, 32x32 per warp as 2x2 fragments of 16x16, K steps of 32 staged in shared memory, float
    accumulators written out through shared memory (WMMA's fragment layout is opaque), rounded once."""
    s = _strides(g)
    a, b, e = g.a.buffer, g.b.buffer, g.node.storage
    to_storage = HALF_TYPES[g.node.dtype][2]
    a_elem, b_elem = _tile_elements(g)
    out = _gemm_put(g, "cs[idx / 64][idx % 64]")
    return f"""
// {g.node.op} on tensor cores: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]; 64x64 tiles, 32x32 per warp, K steps of 32.
__global__ void __launch_bounds__(128) {g.name}_kernel({_gemm_params(g)}) {{
    using namespace nvcuda;
    // Rows padded by 16 bytes (a multiple of 8 elements, as WMMA's leading dimensions must be) against bank
    // conflicts; every fragment's origin stays 32-byte aligned.
    __shared__ __align__(32) {e} as[64][40];
    __shared__ __align__(32) {e} bs[32][72];
    __shared__ __align__(32) float cs[64][68];
    const int64_t batch = blockIdx.z, row0 = (int64_t)blockIdx.y * 64, col0 = (int64_t)blockIdx.x * 64;
    const int warp = threadIdx.x / 32, wy = warp / 2, wx = warp % 2;
    const {e}* pa = {a} + batch * {s["sab"]}LL;
    const {e}* pb = {b} + batch * {s["sbb"]}LL;
    const {e} zero = {to_storage}(0.0f);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int64_t k0 = 0; k0 < {g.k}LL; k0 += 32) {{
        for (int idx = threadIdx.x; idx < 2048; idx += 128) {{
            {{
                const int64_t row = row0 + idx / 32, k = k0 + idx % 32;
                as[idx / 32][idx % 32] = (row < {g.m}LL && k < {g.k}LL) ? {a_elem} : zero;
            }}
            {{
                const int64_t k = k0 + idx / 64, col = col0 + idx % 64;
                bs[idx / 64][idx % 64] = (k < {g.k}LL && col < {g.n}LL) ? {b_elem} : zero;
            }}
        }}
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 32; kk += 16) {{
            wmma::fragment<wmma::matrix_a, 16, 16, 16, {e}, wmma::row_major> af[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, {e}, wmma::row_major> bf[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(af[i], &as[wy * 32 + i * 16][kk], 40);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], &bs[kk][wx * 32 + j * 16], 72);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
        }}
        __syncthreads();
    }}
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(&cs[wy * 32 + i * 16][wx * 32 + j * 16], acc[i][j], 68, wmma::mem_row_major);
    __syncthreads();
    for (int idx = threadIdx.x; idx < 4096; idx += 128) {{
        const int64_t row = row0 + idx / 64, col = col0 + idx % 64;
        if (row < {g.m}LL && col < {g.n}LL) {out}
    }}
}}

extern "C" void {g.name}({_launcher_params(g, "cuda")}) {{
    dim3 grid(({g.n} + 63) / 64, ({g.m} + 63) / 64, {g.batch});
    {g.name}_kernel<<<grid, 128, 0, stream>>>({", ".join(_gemm_buffers(g))});
}}
"""


# K steps of 64: half the barriers and waits of steps of 32 (8192 x 8192 by 8192 x 16384 in bfloat16 on an H100:
# 8.8 ms in steps of 32, 7.2 in steps of 64); 3 in flight, 35 KB of shared memory each, leave room for two blocks an
# SM (in 4, one: 10.1 ms)
MMA16_K = 64
MMA16_STAGES = 3
MMA16_GROUP = 8  # block rows of C a group of tiles spans (``_cuda_gemm_mma16``)


def _cuda_gemm_mma16(g: GemmKernel) -> str | None:
    """Our GEMM kernel for 16-bit operands on mma.sync m16n8k16 (sm_80 and later): 128x128 tiles of C per block of
    8 warps, 64x32 per warp as 4x4 products of 16x8, K steps of ``MMA16_K`` copied from global to shared memory 16
    bytes at a time (``cp_async8h``), ``MMA16_STAGES`` in flight, one barrier a step; fragments read by ldmatrix (8
    bytes a lane a matrix instead of 2-byte reads, transposed on the way where the tile's contiguous dim is not k).
    Tiles are taken in groups of ``MMA16_GROUP`` block rows, column by column within a group, so that the blocks
    resident at once read a few rows of A's panels and of B's and L2 serves the rest (in launch order, a row of
    tiles would read all of B each time). None where an operand has no unit stride with 8-element groups (the
    other strides and the size along it multiples of 8): ``_cuda_gemm_wmma`` then."""
    s = _strides(g)
    a_along_k = _mma16_layout(s["sak"], s["sam"], s["sab"], g.k, g.m)
    b_along_k = _mma16_layout(s["sbk"], s["sbn"], s["sbb"], g.k, g.n)
    if a_along_k is None or b_along_k is None:
        return None
    kstep, pitch = MMA16_K, MMA16_K + 8
    steps, stages = -(-g.k // kstep), MMA16_STAGES
    # A stage's tile of 128 rows (or columns) by K step k: [edge][K step + 8] where k is contiguous, else
    # [K step][136]; the padding of 16 bytes a row puts ldmatrix's 8 row reads of a matrix in distinct banks either
    # way (rows 16 bytes past a multiple of 128 apart).
    a_size, b_size = (128 * pitch if along else kstep * 136 for along in (a_along_k, b_along_k))

    def fetch(x: str, edge: str, along: bool, size: int, stride: int, edge_size: int) -> str:
        """A stage's copies of one operand: 16 K step groups of 8, K step / 16 a thread."""
        e, kk = (f"q / {kstep // 8}", f"q % {kstep // 8} * 8") if along else ("q % 16 * 8", "q / 16")
        place = f"({e}) * {pitch} + {kk}" if along else f"({kk}) * 136 + {e}"
        within = [f"{edge} < {edge_size}LL"] * (edge_size % 128 != 0) + [f"k < {g.k}LL"] * (g.k % kstep != 0)
        offset = f"{edge} * {stride}LL + k" if along else f"k * {stride}LL + {edge}"
        return f"""#pragma unroll
            for (int l = 0; l < {kstep // 16}; ++l) {{
                const int q = threadIdx.x + l * 256;
                const int64_t {edge} = {edge}0 + {e}, k = k_next + {kk};
                const bool in = {" && ".join(within) or "true"};
                cp_async8h(&{x}s[stage * {size} + {place}], in ? p{x} + {offset} : p{x}, in, {x}_aligned);
            }}"""

    def fragment(x: str, along: bool, size: int, e: str, e_off: str, k_off: str, into: str) -> str:
        """ldmatrix into ``into`` of 4 matrices of 8 (rows or columns) by 8 k from edge ``e``, k 16 h: lane 8 q + i
        gives row i of matrix q, at (``e_off``, ``k_off``) of q."""
        load = "ldmatrix_x4" if along else "ldmatrix_x4_trans"
        at = f"({e} + {e_off} + lane % 8) * {pitch} + h * 16 + {k_off}" if along else (
            f"(h * 16 + {k_off} + lane % 8) * 136 + {e} + {e_off}"
        )  # fmt: skip
        return f"{load}({into}, {x}s + (step % {stages}) * {size} + {at});"

    # A's matrices in the fragment's order (rows 0-7 and 8-15 at k 0-7, then at k 8-15); B's two fragments of 8
    # columns, each k 0-7 then 8-15
    a_frag = fragment("a", a_along_k, a_size, "wm * 64 + i * 16", "lane / 8 % 2 * 8", "lane / 16 * 8", "af[i]")
    b_frag = fragment("b", b_along_k, b_size, "wn * 32 + j * 16", "lane / 16 * 8", "lane / 8 % 2 * 8", "r")
    mma = "mma_bf16" if g.node.dtype == "bfloat16" else "mma_f16"
    a_stride, b_stride = (s["sam"] if a_along_k else s["sak"]), (s["sbn"] if b_along_k else s["sbk"])
    copies = f"""if (k_next < {g.k}LL) {{
            {fetch("a", "row", a_along_k, a_size, a_stride, g.m)}
            {fetch("b", "col", b_along_k, b_size, b_stride, g.n)}
        }}
        cp_async_commit();  // a group every step, empty past K: the wait counts groups"""
    tiles_m, tiles_n = -(-g.m // 128), -(-g.n // 128)
    smem = stages * (a_size + b_size) * 2
    out = _gemm_put(g, "acc[i][j][e]")
    return f"""
// {g.node.op} on tensor cores: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]; 128x128 tiles, K steps of {kstep},
// {stages} in flight.
__global__ void __launch_bounds__(256) {g.name}_kernel({_gemm_params(g)}) {{
    extern __shared__ __align__(16) uint16_t mma16_smem[];
    uint16_t* const as = mma16_smem;  // [stage][A's tile]
    uint16_t* const bs = mma16_smem + {stages * a_size};  // [stage][B's tile]
    const int tile = blockIdx.x, group = tile / ({MMA16_GROUP * tiles_n});
    const int rows_in = min({tiles_m} - group * {MMA16_GROUP}, {MMA16_GROUP}), within = tile % {MMA16_GROUP * tiles_n};
    const int64_t batch = blockIdx.z;
    const int64_t row0 = (int64_t)(group * {MMA16_GROUP} + within % rows_in) * 128;
    const int64_t col0 = (int64_t)(within / rows_in) * 128;
    const uint16_t* const pa = reinterpret_cast<const uint16_t*>({g.a.buffer}) + batch * {s["sab"]}LL;
    const uint16_t* const pb = reinterpret_cast<const uint16_t*>({g.b.buffer}) + batch * {s["sbb"]}LL;
    const bool a_aligned = reinterpret_cast<uintptr_t>(pa) % 16 == 0;
    const bool b_aligned = reinterpret_cast<uintptr_t>(pb) % 16 == 0;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 4, wn = warp % 4;
    const int g = lane / 4, t = lane % 4;
    float acc[4][4][4] = {{}};  // [16 rows][8 columns][the thread's 4 of them]
#pragma unroll
    for (int stage = 0; stage < {stages - 1}; ++stage) {{
        const int64_t k_next = stage * {kstep}LL;
        {copies}
    }}
    for (int step = 0; step < {steps}; ++step) {{
        cp_async_wait<{stages - 2}>();  // this thread's copies of this step have landed
        __syncthreads();  // everyone's have, and everyone is done with the step before, whose buffer is refilled now
        {{
            const int stage = (step + {stages - 1}) % {stages};
            const int64_t k_next = (step + {stages - 1}) * {kstep}LL;
            {copies}
        }}
#pragma unroll
        for (int h = 0; h < {kstep // 16}; ++h) {{
            unsigned af[4][4], bf[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) {a_frag}
#pragma unroll
            for (int j = 0; j < 2; ++j) {{
                unsigned r[4];
                {b_frag}
                bf[2 * j][0] = r[0]; bf[2 * j][1] = r[1]; bf[2 * j + 1][0] = r[2]; bf[2 * j + 1][1] = r[3];
            }}
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {mma}(acc[i][j], af[i], bf[j]);
        }}
    }}
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {{
                const int64_t row = row0 + wm * 64 + i * 16 + g + 8 * (e / 2);
                const int64_t col = col0 + wn * 32 + j * 8 + 2 * t + e % 2;
                if (row < {g.m}LL && col < {g.n}LL) {out}
            }}
}}

extern "C" void {g.name}({_launcher_params(g, "cuda")}) {{
    cudaFuncSetAttribute({g.name}_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});
    dim3 grid({tiles_m * tiles_n}, 1, {g.batch});
    {g.name}_kernel<<<grid, 256, {smem}, stream>>>({", ".join(_gemm_buffers(g))});
}}
"""


def _mma16_layout(unit_k: int, unit_edge: int, batch: int, k: int, edge: int) -> bool | None:
    """Whether ``_cuda_gemm_mma16`` copies an operand's tile along k (k contiguous) or along its edge (rows of A,
    columns of B), from its strides along k and the edge and between batches and its sizes; None where neither
    dim has 16-byte groups."""
    if unit_k == 1 and unit_edge % 8 == 0 and batch % 8 == 0 and k % 8 == 0:
        return True
    if unit_edge == 1 and unit_k % 8 == 0 and batch % 8 == 0 and edge % 8 == 0:
        return False
    return None


def _blas_operand(rows_stride: int, cols_stride: int, rows: int, cols: int) -> tuple[str, int] | None:
    """(cuBLAS op, leading dimension) of a row-major-indexed operand [rows, cols] seen column-major as its
    transpose, or None when neither of its strides is 1 (cuBLAS needs one unit stride)."""
    if cols_stride == 1 and rows_stride >= max(1, cols):
        return "CUBLAS_OP_N", rows_stride
    if rows_stride == 1 and cols_stride >= max(1, rows):
        return "CUBLAS_OP_T", cols_stride
    if rows == 1 and cols_stride == 1:
        return "CUBLAS_OP_N", max(1, cols)
    if cols == 1 and rows_stride == 1:
        return "CUBLAS_OP_T", max(1, rows)
    return None


# The cuBLAS data type of each dtype a product may have (plan.py refuses the others).
_CUDA_DATA_TYPES = {"float32": "CUDA_R_32F", "bfloat16": "CUDA_R_16BF", "float16": "CUDA_R_16F"}


def _cublas_gemm(g: GemmKernel, tf32: bool) -> str | None:
    """C = A @ B through cublasGemmStridedBatchedEx: row-major C is column-major C^T = B^T A^T, so B goes first.
    FP32 accumulation for every storage type, as PyTorch's products; FP32 math (no TF32) unless ``tf32``: only loose
    tolerance profiles admit TF32's rounding."""
    s = _strides(g)
    b_op = _blas_operand(s["sbk"], s["sbn"], g.k, g.n)
    a_op = _blas_operand(s["sam"], s["sak"], g.m, g.k)
    if a_op is None or b_op is None:
        return None
    a, b, dt = g.a.buffer, g.b.buffer, _CUDA_DATA_TYPES[g.node.dtype]
    compute = "CUBLAS_COMPUTE_32F_FAST_TF32" if tf32 and g.node.dtype == "float32" else "CUBLAS_COMPUTE_32F"
    return f"""
// {g.node.op} on cuBLAS: one handle per process (created on first use, bound to the caller's stream each call).
extern "C" int {g.name}({_launcher_params(g, "cuda")}) {{
    static cublasHandle_t handle = nullptr;
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
    cublasSetStream(handle, stream);
    const float alpha = {c_literal(g.alpha, "float")}, beta = 0.0f;
    return (int)cublasGemmStridedBatchedEx(handle, {b_op[0]}, {a_op[0]}, {g.n}, {g.m}, {g.k}, &alpha,
        {b}, {dt}, {b_op[1]}, {s["sbb"]}LL, {a}, {dt}, {a_op[1]}, {s["sab"]}LL, &beta,
        {g.out}, {dt}, {g.n}, {g.m * g.n}LL, {g.batch}, {compute}, CUBLAS_GEMM_DEFAULT);
}}
"""


CPU_SUM_BLOCK = 256


def _cpu_gemm(g: GemmKernel, variant: Variant) -> str:
    s = _strides(g)
    a, b, e = g.a.buffer, g.b.buffer, g.node.storage
    if e == "float" and g.epilogue is None:
        accumulate, store = f"float* c = {g.out} + batch * {g.m * g.n}LL + m * {g.n}LL;", ""
    else:  # a 16-bit product accumulates its row in float and rounds once, as cuBLAS does; an epilogue reads it
        accumulate = f"std::vector<float> acc({g.n}); float* c = acc.data();"
        flat, coords = f"batch * {g.m * g.n}LL + m * {g.n}LL + n", ("batch", "m", "n")[3 - len(g.node.shape) :]
        store = f"for (int64_t n = 0; n < {g.n}LL; ++n) {_put(g, flat, coords, 'c[n]')}"
    a_load = loaded(g.node, f"{a}[batch * {s['sab']}LL + m * {s['sam']}LL + k * {s['sak']}LL]")
    b_load = loaded(g.node, f"brow[n * {s['sbn']}LL]")

    def product(into: str) -> list[str]:
        return [
            f"const float av = {_scaled(g, a_load)};",
            f"const {e}* brow = {b} + batch * {s['sbb']}LL + k * {s['sbk']}LL;",
            f"for (int64_t n = 0; n < {g.n}LL; ++n) {into}[n] += av * {b_load};",
        ]

    if g.k >= SPLIT_SUMS_K:
        # A long K's sums in two levels, as the staged CUDA product's: a block's of CPU_SUM_BLOCK k into ``part``,
        # each block's joining the row's. One running float sum of K = 1M terms (a matrix-vector product) ended 150
        # times farther from the exact one than the reference's.
        sums = [
            f"std::vector<float> part({g.n});",
            f"for (int64_t k0 = 0; k0 < {g.k}LL; k0 += {CPU_SUM_BLOCK}) {{",
            f"    for (int64_t n = 0; n < {g.n}LL; ++n) part[n] = 0.0f;",
            f"    for (int64_t k = k0; k < k0 + {CPU_SUM_BLOCK} && k < {g.k}LL; ++k) {{",
            *(f"        {line}" for line in product("part")),
            "    }",
            f"    for (int64_t n = 0; n < {g.n}LL; ++n) c[n] += part[n];",
            "}",
        ]
    else:
        sums = [
            f"for (int64_t k = 0; k < {g.k}LL; ++k) {{",
            *(f"    {line}" for line in product("c")),
            "}",
        ]
    body = "".join(f"\n            {line}" for line in sums)
    return f"""
// {g.node.op}: rows of C in parallel; the k loop outside the n loop streams rows of B.
extern "C" void {g.name}({_launcher_params(g, "cpu")}) {{
    {variant.omp_pragma(g.batch * g.m * g.n * g.k, "collapse(2) ")}
    for (int64_t batch = 0; batch < {g.batch}LL; ++batch) {{
        for (int64_t m = 0; m < {g.m}LL; ++m) {{
            {accumulate}
            for (int64_t n = 0; n < {g.n}LL; ++n) c[n] = 0.0f;{body}
            {store}
        }}
    }}
}}
"""


def _conv_tile(k: ConvKernel) -> int:
    """Output channels one iteration of the direct convolution computes: each input value loaded is multiplied by
    that many weights (a tile never crosses a group, so all its channels read the same inputs)."""
    per_group = k.node.shape[1] // k.node.attrs["groups"]
    return next(t for t in (8, 4, 2, 1) if per_group % t == 0)


def _conv_body(k: ConvKernel) -> tuple[tuple[int, ...], list[str]]:
    """The direct convolution's iteration space (batch, channel tiles, *output positions) and the statements of
    one iteration ``o``: taps outside the input (padding) are skipped; a transposed convolution gathers the inputs
    whose strided footprint covers the output position. Where every tensor of it has under 2^31 elements, its
    coordinates and offsets are 32-bit (a 64-bit division by a constant or product takes several instructions,
    and a thread's few multiply-adds an output leave those the most of its work); its epilogue keeps its own."""
    a, out, xs, ws = k.node.attrs, k.node.shape, k.x_shape, k.w_shape
    spatial, tile = len(out) - 2, _conv_tile(k)
    cin_g, cout_g = xs[1] // a["groups"], out[1] // a["groups"]
    space = (out[0], out[1] // tile, *out[2:])
    narrow = max(math.prod(xs), math.prod(ws), math.prod(out)) < 2**31
    lines = [*_coords(list(range(len(space))), space, "o"), f"const int64_t co = i1 * {tile}LL;"]
    lines += [f"float acc{t} = 0.0f;" for t in range(tile)]
    depth = 0

    def put(text: str) -> None:
        lines.append("    " * depth + text)

    put(f"for (int64_t ci = 0; ci < {cin_g}LL; ++ci) {{")
    depth += 1
    put(f"const int64_t c = co / {cout_g}LL * {cin_g}LL + ci;  // an input channel of the tile's group")
    for j in range(spatial):
        stride, pad, dilation, size = a["stride"][j], a["pad"][j], a["dilation"][j], xs[2 + j]
        put(f"for (int64_t t{j} = 0; t{j} < {ws[2 + j]}LL; ++t{j}) {{")
        depth += 1
        if not a["transposed"]:
            put(f"const int64_t x{j} = i{j + 2} * {stride}LL - {pad}LL + t{j} * {dilation}LL;")
        elif stride == 1:
            put(f"const int64_t x{j} = i{j + 2} + {pad}LL - t{j} * {dilation}LL;")
        else:
            put(f"const int64_t u{j} = i{j + 2} + {pad}LL - t{j} * {dilation}LL;")
            put(f"if (u{j} < 0 || u{j} % {stride}LL != 0) continue;")
            put(f"const int64_t x{j} = u{j} / {stride}LL;")
        put(f"if (x{j} < 0 || x{j} >= {size}LL) continue;")
    taps = tuple(f"t{j}" for j in range(spatial))
    x_at = linear_index(xs, ("i0", "c", *(f"x{j}" for j in range(spatial))))
    put(f"const float v = {loaded(k.reads[k.x], f'{k.x}[{x_at}]')};")
    for t in range(tile):
        channel = f"(co + {t})" if t else "co"
        w_at = ("c", f"({channel} % {cout_g}LL)", *taps) if a["transposed"] else (channel, "ci", *taps)
        put(f"acc{t} += v * {loaded(k.reads[k.w], f'{k.w}[{linear_index(ws, w_at)}]')};")
    while depth:
        depth -= 1
        put("}")
    if narrow:
        lines = [re.sub(r"\b(\d+)LL\b", r"\1", line.replace("int64_t", "int")) for line in lines]
    positions = tuple(f"i{j + 2}" for j in range(spatial))
    for t in range(tile):
        coords = ("i0", f"(co + {t})" if t else "co", *positions)
        put(_put(k, linear_index(out, coords), coords, f"acc{t}"))
    return space, lines


def _cpu_conv(k: ConvKernel, variant: Variant) -> str:
    space, body = _conv_body(k)
    work = k.node.numel * k.w_shape[1] * math.prod(k.w_shape[2:])
    return f"""
// {k.describe()}
extern "C" void {k.name}({_launcher_params(k, "cpu")}) {{
    {variant.omp_pragma(work)}
    for (int64_t o = 0; o < {math.prod(space)}LL; ++o) {{
{_indent(body, 8)}
    }}
}}
"""


def _conv_params(k: ConvKernel) -> str:
    """Our convolution kernels' parameters: the input and the weights (and what an epilogue reads besides), then the
    output or the epilogue's outputs, in their storage types."""
    return _kernel_params(k, _kernel_buffers(k, []))


def _cuda_conv(k: ConvKernel, variant: Variant) -> str:
    """Our own direct convolution: a thread per (batch, channel tile, output position), positions fastest, so a
    warp reads neighbouring inputs and every thread of it the same weights."""
    space, body = _conv_body(k)
    block, total = variant.block, math.prod(space)
    return f"""
// {k.describe()}
__global__ void __launch_bounds__({block}) {k.name}_kernel({_conv_params(k)}) {{
    for (int64_t o = (int64_t)blockIdx.x * {block} + threadIdx.x; o < {total}LL; o += (int64_t)gridDim.x * {block}) {{
{_indent(body, 8)}
    }}
}}

extern "C" void {k.name}({_launcher_params(k, "cuda")}) {{
    long long grid = ({total}LL + {block - 1}) / {block};
    if (grid > 65535LL * 8) grid = 65535LL * 8;  // the loop strides over the rest
    {k.name}_kernel<<<(unsigned)grid, {block}, 0, stream>>>({", ".join(_kernel_buffers(k, []))});
}}
"""


def _digits(names: list[str], sizes: tuple[int, ...], index: str, ctype: str = "int64_t") -> list[str]:
    """Statements giving each of ``names`` its coordinate (row-major over ``sizes``) in the flat ``index``."""
    lines, stride = [], 1
    for name, size in reversed(list(zip(names, sizes, strict=True))):
        q = index if stride == 1 else f"({index} / {stride})"
        lines.append(f"const {ctype} {name} = {q} % {size};")
        stride *= size
    return lines[::-1]


def _cuda_conv_implicit(k: ConvKernel, tensor_cores: bool = False, form: WgmmaForm | None = None) -> str:
    """Our convolution as a product on the pipelined tile kernel (implicit GEMM): per group, the weights (output
    channels x input channels and taps) times the input gathered at each output position's taps (its columns: the
    positions of every image, so a warp stores neighbouring positions), zero where a tap falls in the padding or,
    transposed, between the strided inputs. Nothing is materialized: each operand element is gathered as loaded.
    A thread's input loads all fall in one column (``_pipelined``): its image and output position are found once.
    A transposed convolution with strides runs as one product per phase (``_phases``), each over the taps that
    meet an input: the full product's others (3 in 4 at stride 2 in 2-d) would only multiply zeros. Where the
    weights are copied tap-major (``taps_buffer``), each phase's are copied before its product. ``form``: each
    product on Hopper's warpgroup MMA (``_conv_wgmma``) in that form, its weights split from
    ``conv_wgmma_split``'s offset."""
    phases = _phases(k)
    splits = itertools.accumulate(conv_wgmma_split_floats(k, form or TF32X3), initial=0)
    if phases is None:
        return _implicit_product(k, tensor_cores, k.name, None, 0, ConvWgmma(form, 0, True) if form else None)
    parts, offset = [], 0
    for i, (phase, split_at) in enumerate(zip(phases, splits, strict=False)):
        wgmma = ConvWgmma(form, split_at, i == 0) if form else None
        parts.append(_implicit_product(k, tensor_cores, f"{k.name}_p{i}", phase, offset, wgmma))
        offset += math.prod(k.w_shape[:2]) * math.prod(_phase_taps(k, phase)[1])
    args = ", ".join([*k.reads, *k.writes, "stream"])
    calls = "".join(f"\n    {k.name}_p{i}({args});" for i in range(len(phases)))
    return (
        "".join(parts)
        + f"""
extern "C" void {k.name}({_launcher_params(k, "cuda")}) {{{calls}
}}
"""
    )


def _phases(k: ConvKernel) -> list[tuple[int, ...]] | None:
    """The phases of a transposed convolution with strides (undilated): output positions o = f + s p along each
    dim, for each first position f < s; their taps are t = r + s m with r = (f + pad) % s, the only ones whose
    input is not between two strided inputs. None where it has no strides, or a phase has outputs but no taps."""
    a, out, ws = k.node.attrs, k.node.shape, k.w_shape
    if not a["transposed"] or all(s == 1 for s in a["stride"]) or any(d != 1 for d in a["dilation"]):
        return None
    phases = []
    for first in itertools.product(*(range(s) for s in a["stride"])):
        if any(f >= n for f, n in zip(first, out[2:], strict=True)):
            continue  # no output of this phase
        if any((f + pad) % s >= size for f, pad, s, size in zip(first, a["pad"], a["stride"], ws[2:], strict=True)):
            return None
        phases.append(first)
    return phases


def _phase_taps(k: ConvKernel, phase: tuple[int, ...] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the first tap r, the taps' count) along each dim of ``phase``'s taps t = r + s m (every tap: no phase)."""
    ws = k.w_shape
    if phase is None:
        return (0,) * (len(ws) - 2), ws[2:]
    a = k.node.attrs
    residues = tuple((f + pad) % s for f, pad, s in zip(phase, a["pad"], a["stride"], strict=True))
    return residues, tuple(-(-(n - r) // s) for n, r, s in zip(ws[2:], residues, a["stride"], strict=True))


# Where a convolution's input channels a group come in whole K steps of the staged 3xTF32 product, its K runs
# tap-major (k = tap x channels + channel) instead of channel-major: a step's 32 k are then one tap's channels, so
# a thread finds the tap's input position and whether it is in the padding once a step, not for each of its 16
# copies (the gather's integer work had outweighed the step's products: 2-d convolutions ran at half the rate of
# 1-d ones). The weights, channel-major as the module holds them, are copied tap-major into this buffer first
# (``variant_plan``; a few microseconds: weights are small next to the maps).
def taps_buffer(k: ConvKernel) -> str:
    return f"b{k.name}_taps"


def tap_major(k: ConvKernel) -> bool:
    """Whether ``k``'s staged 3xTF32 product runs its K tap-major (``taps_buffer``)."""
    cin_g = k.x_shape[1] // k.node.attrs["groups"]
    fp32 = all(n.dtype == "float32" for n in (k.node, k.reads[k.x], k.reads[k.w]))
    return fp32 and cin_g % STAGE_K == 0 and math.prod(k.w_shape[2:]) > 1


def conv_wgmma_split(k: ConvKernel) -> str:
    """The buffer ``_conv_wgmma`` splits the weights into (``variant_plan`` adds it), each product's from its own
    offset on."""
    return f"b{k.name}_split_a"


def conv_wgmma_largest(k: ConvKernel) -> str:
    """The buffer of the weights' and the input's largest finite magnitudes, whose ``f16_scale`` a scaled form
    scales them by (``variant_plan`` adds it)."""
    return f"b{k.name}_largest"


def conv_wgmma_split_floats(k: ConvKernel, form: WgmmaForm) -> list[int]:
    """Floats of each of ``k``'s products' split weights (one product, or one a phase: ``_phases``): per group, per
    128 output channels and K step, the tile's big and small parts."""
    groups = k.node.attrs["groups"]
    cin_g, cout_g = k.x_shape[1] // groups, k.node.shape[1] // groups
    tiles = groups * -(-cout_g // WGMMA_ROWS)
    phases = _phases(k)
    taps = [math.prod(_phase_taps(k, phase)[1]) for phase in phases] if phases else [math.prod(k.w_shape[2:])]
    return [tiles * -(-cin_g * t // form.step_k) * form.tile for t in taps]


def conv_wgmma_fits(k: ConvKernel) -> bool:
    """Whether ``_conv_wgmma`` runs ``k``: float32, a grid's rows and groups within launch limits, its split weights
    within ``WGMMA_SPLIT_MAX_BYTES``."""
    groups, out = k.node.attrs["groups"], k.node.shape
    return (
        all(n.dtype == "float32" for n in (k.node, k.reads[k.x], k.reads[k.w]))
        and -(-out[1] // groups // WGMMA_ROWS) <= 65535
        and groups <= 65535
        and -(-out[0] * math.prod(out[2:]) // WGMMA_ROWS) < 2**31
        and 4 * sum(conv_wgmma_split_floats(k, TF32X3)) <= WGMMA_SPLIT_MAX_BYTES
    )


class ConvWgmma(NamedTuple):
    """A convolution's product on wgmma: its ``form``, where its split weights start in ``conv_wgmma_split``, and
    whether it is the convolution's ``first`` (a scaled form's finds the weights' and the input's largest
    magnitudes, for its phases' products after it too)."""

    form: WgmmaForm
    split_at: int
    first: bool


def _conv_wgmma(
    k: ConvKernel,
    name: str,
    phase: tuple[int, ...] | None,
    wgmma: ConvWgmma,
    gather: WgmmaGather,
    put: Callable[[str], str],
    cols: int,
) -> str:
    """``_implicit_product``'s product on wgmma (``_wgmma_kernel``): per group, the weights (output channels x K)
    split beforehand as ``_cuda_gemm_wgmma`` splits A, into ``conv_wgmma_split`` from ``wgmma.split_at`` on, times
    the input gathered by the product's own threads (``gather``: nothing is materialized). K runs tap-major where a
    group's input channels come in whole K steps (``tap_major``: a step's tap and padding found once), the weights
    reordered so by their split; else channel-major, as the module holds them. ``cols``: the product's columns
    (every image's output positions, or a phase's); ``put`` stores a value at ``row``, ``col`` of group ``batch``.
    A scaled form (``F16X3_GATHERED``) scales the weights and the input by ``f16_scale`` of each one's largest
    finite magnitude (their buffers' elements: both are contiguous)."""
    form, split_at = wgmma.form, wgmma.split_at
    a, out, xs, ws = k.node.attrs, k.node.shape, k.x_shape, k.w_shape
    groups = a["groups"]
    cin_g, cout_g = xs[1] // groups, out[1] // groups
    residues, tap_counts = _phase_taps(k, phase)
    phase_taps = math.prod(tap_counts)
    depth = cin_g * phase_taps
    strides = a["stride"] if phase is not None else (1,) * len(tap_counts)  # a tap t = r + s m (phases: s strides)
    by_tap = tap_major(k)
    # the weight at (row = output channel in the group, k): its channel c and tap t = r + s m (m: the phase's digits)
    located = [
        f"const int c = (int)(k % {cin_g}), tap = (int)(k / {cin_g});"
        if by_tap
        else f"const int c = (int)(k / {phase_taps}), tap = (int)(k % {phase_taps});",
        *_digits([f"m{j}" for j in range(len(tap_counts))], tap_counts, "tap", "int"),
    ]
    at = linear_index(
        ws[2:], tuple(f"({r} + {s} * m{j})" for j, (r, s) in enumerate(zip(residues, strides, strict=True)))
    )
    taps = math.prod(ws[2:])
    w_at = (  # [in, out / groups, *taps] transposed, else [out, in / groups, *taps]
        f"((batch * {cin_g}LL + c) * {cout_g}LL + row) * {taps}LL + {at}"
        if a["transposed"]
        else f"((batch * {cout_g}LL + row) * {cin_g}LL + c) * {taps}LL + {at}"
    )
    rows, tile, steps = WGMMA_ROWS, form.tile, -(-depth // form.step_k)
    m_tiles, n_tiles = -(-cout_g // rows), -(-cols // rows)
    split = f"({conv_wgmma_split(k)} + {split_at}LL)"
    a_tiles = f"{split} + ((batch * {m_tiles}LL + blockIdx.y) * {steps}) * {tile}LL"
    splitter = _wgmma_splitter(
        name, "a", ("row", cout_g, 0), depth, f"pa[{w_at}]", "".join(f"\n                {x}" for x in located), form
    )
    largest = conv_wgmma_largest(k) if form.scaled else ""
    kernel = _wgmma_kernel(name, _conv_params(k), (cout_g, cols, depth), 1, a_tiles, gather, put, form, largest)
    what = k.describe() + ("" if phase is None else f"; the phase of outputs from {list(phase)}")
    order = "tap" if by_tap else "channel"
    scaling, finding = "", ""
    if form.scaled and wgmma.first:
        scaling = _largest_kernel(name, "a") + _largest_kernel(name, "b")
        operands = ((k.w, k.reads[k.w].numel), (k.x, k.reads[k.x].numel))
        finding = _largest_launches(name, largest, operands) + "\n    "
    split_launch = _wgmma_split_launch(name, "a", k.w, split, m_tiles * steps * tile * groups, form, largest)
    products = f"3x{form.kind.upper()}"
    return f"""{scaling}{splitter}
// {what}: per group, its weights times the input at each output position's taps (K {order}-major), 128x128
// tiles on wgmma ({products}), K steps of {form.step_k}.{kernel}
extern "C" void {name}({_launcher_params(k, "cuda")}) {{
    {finding}{split_launch}
    {_wgmma_launch(name, ", ".join(_kernel_buffers(k, [])), (n_tiles, m_tiles, groups), form)}
}}
"""


def _implicit_product(
    k: ConvKernel,
    tensor_cores: bool,
    name: str,
    phase: tuple[int, ...] | None,
    taps_offset: int,
    wgmma: ConvWgmma | None = None,
) -> str:
    """``_cuda_conv_implicit``'s product named ``name``: over every output position and tap, or over one phase's
    (``_phases``: the first output position along each dim); tap-major where the variant copies the weights so
    (``taps_buffer``, from ``taps_offset`` on for this phase). Where ``wgmma`` is given, on wgmma
    (``_conv_wgmma``)."""
    a, out, xs, ws = k.node.attrs, k.node.shape, k.x_shape, k.w_shape
    spatial, groups = len(out) - 2, a["groups"]
    cin_g, cout_g = xs[1] // groups, out[1] // groups
    taps, plane = math.prod(ws[2:]), math.prod(xs[2:])
    xnode, wnode = k.reads[k.x], k.reads[k.w]
    residues, tap_counts = _phase_taps(k, phase)
    if phase is None:  # every position o = p, every tap t = m
        firsts, steps, counts = (0,) * spatial, (1,) * spatial, out[2:]
    else:
        firsts, steps = phase, tuple(a["stride"])
        counts = tuple(-(-(n - f) // s) for n, f, s in zip(out[2:], phase, steps, strict=True))
    positions, phase_taps = math.prod(counts), math.prod(tap_counts)
    depth = cin_g * phase_taps
    # variant_plan adds the taps' buffer for the 3xTF32 product only; wgmma's split reorders the weights itself
    by_tap = taps_buffer(k) in k.writes or (wgmma is not None and tap_major(k))
    setup = [
        "const int64_t my_col = col0 + threadIdx.x % 128;",
        f"const int64_t pos = my_col % {positions}LL;",
        *_digits([f"o{j}" for j in range(spatial)], tuple(counts), "(int)pos", "int"),
        f"const {xnode.storage}* x_group = {k.x} + (my_col / {positions}LL) * {xs[1] * plane}LL"
        f" + batch * {cin_g * plane}LL;",
    ]

    def taps_of(order: str) -> list[str]:
        """k = input channel and tap (``order``: which is the major one): the tap's digits m (t = r + s m) within a
        group fit 32 bits."""
        split = (
            f"const int c = kq / {phase_taps}, tap = kq % {phase_taps};"
            if order == "channel"
            else f"const int c = kq % {cin_g}, tap = kq / {cin_g};"
        )
        return ["const int kq = (int)k;", split, *_digits([f"t{j}" for j in range(spatial)], tap_counts, "tap", "int")]

    # B: the input at (k, col = image and position p of the product: o = f + s p)
    tap_at, valid = [], []
    for j in range(spatial):
        stride, pad, dilation, size = a["stride"][j], a["pad"][j], a["dilation"][j], xs[2 + j]
        if phase is not None:  # o + pad - t = s (p - m) + (f + pad - r), the last a multiple of s
            tap_at.append(f"const int x{j} = o{j} - t{j} + {(firsts[j] + pad - residues[j]) // stride};")
        elif not a["transposed"]:
            tap_at.append(f"const int x{j} = o{j} * {stride} - {pad} + t{j} * {dilation};")
        else:
            tap_at.append(f"const int u{j} = o{j} + {pad} - t{j} * {dilation};")
            tap_at.append(f"const int x{j} = u{j} / {stride};")
            valid.append(f"u{j} >= 0" + (f" && u{j} % {stride} == 0" if stride != 1 else ""))
        valid.append(f"x{j} >= 0 && x{j} < {size}")
    narrow = math.prod(xs[1:]) < 2**31  # an image's offsets in 32-bit arithmetic (64-bit takes 2-3 instructions)

    def image_at(channel: str) -> str:
        at = linear_index(xs[1:], (channel, *(f"x{j}" for j in range(spatial))))
        return re.sub(r"(\d+)LL", r"\1", at) if narrow else at

    exists = " && ".join(valid)
    located = [*taps_of("tap" if by_tap else "channel"), *tap_at]
    element = f"x_group[{image_at('c')}]"
    gather = [*located, f"if ({exists}) vb = {loaded(xnode, element)};"]
    step: tuple[str, ...] = ()
    b_copy: tuple[list[str], str, str] = (located, exists, element)
    if by_tap:  # a step's k are one tap's channels: its position and validity found once a step
        offset_t = "int" if narrow else "int64_t"
        step = (
            f"const int tap = (int)(k_next / {cin_g}LL), c_first = (int)(k_next % {cin_g}LL);",
            *_digits([f"t{j}" for j in range(spatial)], tap_counts, "tap", "int"),
            *tap_at,
            f"const bool tap_in = {exists};",
            f"const {offset_t} x_step = {image_at('c_first')};",
        )
        b_copy = ([], "tap_in", f"x_group[x_step + ({offset_t})(k - k_next) * {plane}]")
    # The output's coordinates (an epilogue's too): image, channel, and each position f + s p, p the digits of the
    # column's position
    digits = [f"col % {math.prod(counts[j:])}LL / {math.prod(counts[j + 1 :])}LL" for j in range(spatial)]
    y_coords = [f"col / {positions}LL", f"batch * {cout_g}LL + row"]
    y_coords += [d if phase is None else f"{f} + {s} * ({d})" for d, f, s in zip(digits, firsts, steps, strict=True)]
    y_at = (  # without phases the column's position is the output's: no digits
        f"((col / {positions}LL) * {out[1]}LL + batch * {cout_g}LL + row) * {positions}LL + col % {positions}LL"
        if phase is None
        else linear_index(out, tuple(f"({c})" for c in y_coords))
    )
    if wgmma is not None:
        b_gather = (
            WgmmaGather(setup, step, [], "tap_in", b_copy[2])
            if by_tap
            else WgmmaGather(setup, (), located, exists, element)
        )
        return _conv_wgmma(
            k, name, phase, wgmma, b_gather, lambda value: _put(k, y_at, tuple(y_coords), value), out[0] * positions
        )
    # A: the weights at (row = output channel in the group, k), channel-major as the module holds them
    w_located: list[str] = []
    if phase is not None:  # [in, out / groups, *taps] at the phase's taps
        w_located = taps_of("channel")
        at = tuple(f"({r} + {s} * t{j})" for j, (r, s) in enumerate(zip(residues, steps, strict=True)))
        w_at = f"((batch * {cin_g}LL + c) * {cout_g}LL + row) * {taps}LL + {linear_index(ws[2:], at)}"
    elif a["transposed"]:  # [in, out / groups, *taps]
        w_at = f"((batch * {cin_g}LL + k / {taps}LL) * {cout_g}LL + row) * {taps}LL + k % {taps}LL"
    else:  # [out, in / groups, *taps]: a row of the weights is contiguous
        w_at = f"(batch * {cout_g}LL + row) * {depth}LL + k"
    fp32 = k.node.dtype == "float32"  # copied as they are by the staged 3xTF32 product (``TileOperand.copy``)
    prologue = ""
    if by_tap:  # the tap-major copy: a row contiguous, its groups of 4 copied 16 bytes at a time
        w_origin = f"({taps_buffer(k)} + {taps_offset}LL)"
        w_element = f"{taps_buffer(k)}[{taps_offset}LL + (batch * {cout_g}LL + row) * {depth}LL + k]"
        a_operand = TileOperand([f"va = {w_element};"], True, w_element, w_origin, ([], "", w_element))
        prologue = _taps_copy(k, name, (groups, cout_g, cin_g, phase_taps), w_located, w_at)
    else:
        # A row of float32 weights, a multiple of 4 long, loads 16 bytes at a time (``TileOperand``)
        w_element = f"{k.w}[{w_at}]"
        vector = w_element if not a["transposed"] and wnode.dtype == "float32" and depth % 4 == 0 else None
        a_operand = TileOperand(
            [*w_located, f"va = {loaded(wnode, w_element)};"],
            True,
            vector,
            k.w,
            (w_located, "", w_element) if fp32 else None,
        )
    product = _pipelined(
        f"{name}_product" if prologue else name,
        k.describe() + ("" if phase is None else f"; the phase of outputs from {list(phase)}"),
        (_conv_params(k), ", ".join(_kernel_buffers(k, [])), _launcher_params(k, "cuda")),
        (cout_g, out[0] * positions, depth, groups),
        setup,
        a_operand,
        TileOperand(gather, False, None, k.x, b_copy if fp32 else None, step),
        lambda value: _put(k, y_at, tuple(y_coords), value),
        tensor_cores,
    )
    if not prologue:
        return product
    args = ", ".join([*k.reads, *k.writes, "stream"])
    return f"""{prologue}{product}
extern "C" void {name}({_launcher_params(k, "cuda")}) {{
    {name}_taps({k.w}, {taps_buffer(k)} + {taps_offset}LL, stream);
    {name}_product({args});
}}
"""


def _taps_copy(k: ConvKernel, name: str, sizes: tuple[int, int, int, int], w_located: list[str], w_at: str) -> str:
    """The kernel copying a product's weights (``sizes``: groups, rows, input channels and taps of a group)
    tap-major to ``to`` (in ``taps_buffer``): element (group, row, tap x channels + channel) is the weight the
    channel-major product reads at k = channel x taps + tap (``w_located``, ``w_at``)."""
    groups, rows, channels, taps = sizes
    total = groups * rows * channels * taps
    located = "".join(f"\n        {line}" for line in w_located)
    return f"""
// {name}'s weights tap-major: a group's row of channel-major k = c x {taps} + tap at tap x {channels} + c
__global__ void __launch_bounds__(256) {name}_taps_kernel(const float* __restrict__ {k.w}, float* __restrict__ to) {{
    for (int64_t d = (int64_t)blockIdx.x * 256 + threadIdx.x; d < {total}LL; d += (int64_t)gridDim.x * 256) {{
        const int64_t batch = d / {rows * channels * taps}LL, row = d / {channels * taps}LL % {rows}LL;
        const int64_t kk = d % {channels * taps}LL, k = kk % {channels}LL * {taps}LL + kk / {channels}LL;{located}
        to[d] = {k.w}[{w_at}];
    }}
}}

static void {name}_taps(const float* {k.w}, float* to, cudaStream_t stream) {{
    long long grid = ({total}LL + 255) / 256;
    if (grid > 65535LL * 8) grid = 65535LL * 8;  // the loop strides over the rest
    {name}_taps_kernel<<<(unsigned)grid, 256, 0, stream>>>({k.w}, to);
}}
"""


CUDNN_WORKSPACE_LIMIT = 1 << 30


def _ints(values: tuple[int, ...]) -> str:
    return "{" + ", ".join(str(v) for v in values) + "}"


def _cudnn_conv(k: ConvKernel, variant: Variant) -> str:
    """The convolution on cuDNN's legacy API, a transposed one as its backward-data pass (PyTorch's transposed
    weight layout is exactly the filter of the forward convolution it inverts). cuDNN takes 4-d or 5-d tensors with
    32-bit sizes: a 1-d convolution is a 2-d one of height 1, and a batch above 2^31 elements runs in equal chunks."""
    a, out, xs, ws = k.node.attrs, k.node.shape, k.x_shape, k.w_shape
    lift = len(out) == 3

    def nd(shape: tuple[int, ...], one: int = 1) -> tuple[int, ...]:
        return (*shape[:2], one, *shape[2:]) if lift else shape

    per_x, per_y = math.prod(xs[1:]), math.prod(out[1:])
    batch = out[0]
    chunk = max(d for d in range(1, batch + 1) if batch % d == 0 and d * max(per_x, per_y) < 2**31)
    x_dims, y_dims, w_dims = nd((chunk, *xs[1:])), nd((chunk, *out[1:])), nd(ws)
    geometry = len(x_dims) - 2
    pad, stride, dilation = (nd((0, 0, *a[key]), one)[2:] for key, one in (("pad", 0), ("stride", 1), ("dilation", 1)))
    exact, timed = variant.conv in ("exact", "fastest"), variant.conv == "fastest"
    if a["transposed"]:
        perf_t, algo_t, count = "cudnnConvolutionBwdDataAlgoPerf_t", "cudnnConvolutionBwdDataAlgo_t", "BWD_DATA"
        find = "cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_desc, x_desc, conv_desc, y_desc"
        if timed:
            find = "cudnnFindConvolutionBackwardDataAlgorithmEx(h, w_desc, {w}, x_desc, {x}, conv_desc, y_desc, {y}"
        run = "cudnnConvolutionBackwardData(handle, &alpha, w_desc, {w}, x_desc, {x} + n * {px}LL, conv_desc, algo"
    else:
        perf_t, algo_t, count = "cudnnConvolutionFwdAlgoPerf_t", "cudnnConvolutionFwdAlgo_t", "FWD"
        find = "cudnnGetConvolutionForwardAlgorithm_v7(h, x_desc, w_desc, conv_desc, y_desc"
        if timed:
            find = "cudnnFindConvolutionForwardAlgorithmEx(h, x_desc, {x}, w_desc, {w}, conv_desc, y_desc, {y}"
        run = "cudnnConvolutionForward(handle, &alpha, x_desc, {x} + n * {px}LL, w_desc, {w}, conv_desc, algo"
    find, run = (text.format(x=k.x, w=k.w, y=k.out, px=per_x) for text in (find, run))
    search = f"{find}, CUDNN_CONVOLUTION_{count}_ALGO_COUNT, &found, perf)"
    chosen_by = "cuDNN times fastest" if timed else "of cuDNN's heuristics"
    if timed:  # each algorithm runs on the first batch chunk, in a workspace of up to the limit (less if refused)
        search = f"""[&] {{
            void* trial = nullptr;
            size_t trial_bytes = {CUDNN_WORKSPACE_LIMIT}ULL;
            while (trial_bytes >= (1ULL << 20) && cudaMalloc(&trial, trial_bytes) != cudaSuccess) {{
                cudaGetLastError();
                trial_bytes /= 2;
            }}
            if (trial == nullptr) trial_bytes = 0;
            cudnnSetStream(h, stream);
            const int status = (int){find}, CUDNN_CONVOLUTION_{count}_ALGO_COUNT, &found, perf, trial,
                trial_bytes);
            cudaFree(trial);
            return status;
        }}()"""
    # FMA math restricts cuDNN to exact fp32 kernels; with the default math it may pick TF32 tensor-core ones.
    # 16-bit operands multiply exactly on tensor cores (into float sums, as PyTorch's convolutions do).
    data = {"float32": "CUDNN_DATA_FLOAT", "float16": "CUDNN_DATA_HALF", "bfloat16": "CUDNN_DATA_BFLOAT16"}
    data_type = data[k.node.dtype]
    if k.node.dtype != "float32":
        exact = False
    math_type = "CUDNN_FMA_MATH" if exact else "CUDNN_DEFAULT_MATH"
    usable = "perf[i].mathType != CUDNN_TENSOR_OP_MATH && perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION"
    return f"""
// {k.describe()}
// Set up on the first call: descriptors, the first algorithm {chosen_by} that runs{" exact" if exact else ""}
// with a workspace of at most {CUDNN_WORKSPACE_LIMIT >> 20} MiB, and that workspace. Every call binds the caller's
// stream.
extern "C" int {k.name}({_launcher_params(k, "cuda")}) {{
    static cudnnHandle_t handle = nullptr;
    static cudnnTensorDescriptor_t x_desc, y_desc;
    static cudnnFilterDescriptor_t w_desc;
    static cudnnConvolutionDescriptor_t conv_desc;
    static {algo_t} algo;
    static void* workspace = nullptr;
    static size_t workspace_bytes = 0;
    if (handle == nullptr) {{
        const int x_dims[] = {_ints(x_dims)}, x_strides[] = {_ints(tuple(contiguous_strides(x_dims)))};
        const int y_dims[] = {_ints(y_dims)}, y_strides[] = {_ints(tuple(contiguous_strides(y_dims)))};
        const int w_dims[] = {_ints(w_dims)};
        const int pad[] = {_ints(pad)}, stride[] = {_ints(stride)}, dilation[] = {_ints(dilation)};
        cudnnHandle_t h = nullptr;
        if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return 1;
        if (cudnnCreateTensorDescriptor(&x_desc) || cudnnCreateTensorDescriptor(&y_desc) ||
            cudnnCreateFilterDescriptor(&w_desc) || cudnnCreateConvolutionDescriptor(&conv_desc) ||
            cudnnSetTensorNdDescriptor(x_desc, {data_type}, {len(x_dims)}, x_dims, x_strides) ||
            cudnnSetTensorNdDescriptor(y_desc, {data_type}, {len(y_dims)}, y_dims, y_strides) ||
            cudnnSetFilterNdDescriptor(w_desc, {data_type}, CUDNN_TENSOR_NCHW, {len(w_dims)}, w_dims) ||
            cudnnSetConvolutionNdDescriptor(conv_desc, {geometry}, pad, stride, dilation, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT) ||
            cudnnSetConvolutionGroupCount(conv_desc, {a["groups"]}) ||
            cudnnSetConvolutionMathType(conv_desc, {math_type}))
            return 2;
        {perf_t} perf[CUDNN_CONVOLUTION_{count}_ALGO_COUNT];
        int found = 0;
        if ({search}) return 3;
        int chosen = -1;
        for (int i = 0; i < found && chosen < 0; ++i)
            if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= {CUDNN_WORKSPACE_LIMIT}ULL &&
                ({usable if exact else "true"}))
                chosen = i;
        if (chosen < 0) return 4;
        {"" if exact else "if (cudnnSetConvolutionMathType(conv_desc, perf[chosen].mathType)) return 5;"}
        algo = perf[chosen].algo;
        workspace_bytes = perf[chosen].memory;
        if (workspace_bytes > 0 && cudaMalloc(&workspace, workspace_bytes) != cudaSuccess) return 6;
        handle = h;
    }}
    if (cudnnSetStream(handle, stream)) return 7;
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t n = 0; n < {batch}LL; n += {chunk}LL) {{
        const int status = (int){run}, workspace, workspace_bytes,
            &beta, y_desc, {k.out} + n * {per_y}LL);
        if (status) return 100 + status;
    }}
    return 0;
}}
"""


# A recurrence's steps on the GPU: one cooperative launch for all of them, blocks meeting at a grid barrier after
# each step (the next needs every unit's hidden state). The work of a step is groups of RECURRENCE_UNITS hidden units
# by up to RECURRENCE_ROWS batch rows, a warp a unit: the block stages the group's last hidden states in shared
# memory (its warps all read them), each warp's lanes split the unit's rows of W_hh along k (a warp's loads one
# contiguous run), shuffles gather the sums into every lane, and lane r applies the cell to batch row r. The blocks,
# as many as run at once (and no more than the groups), stride over the groups. Where the cooperative launch is
# refused, the same kernel runs a launch a step, a block a group.
RECURRENCE_ROWS = 8
RECURRENCE_UNITS = 8
# Staged states a block at most (the static shared-memory limit: no opt-in); longer rows are read from L2.
RECURRENCE_STAGED_BYTES = 48 * 1024
# W_hh's values a lane at most where a variant keeps them in registers across the steps (cache="regs": a block a
# group, so a block's slice of W_hh stays its own; the sums' accumulators take gates x rows more).
RECURRENCE_REGS_MAX = 64
# The grid barrier: arrivals and a generation a kernel (``{name}_sync``), the last block to arrive resets the
# arrivals and opens the next generation. A block reads the generation before it arrives, so it cannot miss it.
GRID_BARRIER = """
__device__ __forceinline__ void grid_barrier(unsigned* sync, unsigned blocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* generation = sync + 1;
        const unsigned seen = *generation;
        __threadfence();
        if (atomicAdd(sync, 1u) == blocks - 1) {
            sync[0] = 0;
            __threadfence();
            atomicAdd(sync + 1, 1u);
        } else {
            while (*generation == seen) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}
"""


def _recurrence_state(k: RecurrenceKernel, d: str) -> list[str]:
    """Statements of direction ``d``'s step ``t`` at step ``s`` (the second direction runs from the last step back)
    and the states it starts from: ``h_prev`` (an LSTM's ``c_prev`` too), whose batch rows are ``h_row`` apart (the
    initial states [directions, batch, hidden], the output's [batch, directions x hidden])."""
    steps, directions, batch, hidden = k.sizes
    st, width = k.node.storage, directions * hidden
    t = "s" if directions == 1 else f"({d} == 0 ? s : {steps - 1}LL - s)"
    last = "(t - 1)" if directions == 1 else f"({d} == 0 ? t - 1 : t + 1)"
    lines = [
        f"const int64_t t = {t};",
        f"const {st}* h_prev = s == 0 ? {k.h0} + {d} * {batch * hidden}LL : {k.out} + {last} * {batch * width}LL"
        f" + {d} * {hidden}LL;",
        f"const int64_t h_row = s == 0 ? {hidden}LL : {width}LL;",
    ]
    if k.c0 is not None:  # the cell states are carried in the output, after the steps' hidden states
        lines.append(
            f"const {st}* c_prev = s == 0 ? {k.c0} + {d} * {batch * hidden}LL : {k.out} + {steps * batch * width}LL"
            f" + {d} * {hidden}LL;"
        )
    return lines


def _recurrence_inputs(k: RecurrenceKernel) -> list[str]:
    """The statements assigning ``x0``, ``x1``, ...: gate g's projected input of direction ``d``, batch row ``b``
    and unit ``j`` at step ``t`` (what the cell adds to its sums; they do not depend on the last states)."""
    _, directions, batch, hidden = k.sizes
    gates = GATES[k.node.attrs["mode"]]
    row = f"(t * {batch}LL + b) * {directions * gates * hidden}LL + d * {gates * hidden}LL + j"
    return [f"x{g} = {loaded(k.reads[k.gates], f'{k.gates}[{row} + {g * hidden}LL]')};" for g in range(gates)]


def _recurrence_last(k: RecurrenceKernel) -> str:
    """The element of the last states the cell of batch row ``b`` and unit ``j`` reads besides its sums: an LSTM's
    cell state, a GRU's hidden state ("" for the plain RNN's cells)."""
    return {"lstm": "c_prev[b * h_row + j]", "gru": "h_prev[b * h_row + j]"}.get(k.node.attrs["mode"], "")


def _recurrence_cell(k: RecurrenceKernel, sums: Callable[[int], str], last: str) -> list[str]:
    """The statements of the cell of direction ``d``, batch row ``b`` and unit ``j`` at step ``t``: each gate g from
    the step's projected input ``x<g>`` (``_recurrence_inputs``), its sum over the last hidden state ``sums(g)``
    (W_hh's row by ``h_prev``) and b_hh; ``last``: the value of ``_recurrence_last``'s element. Stores the hidden
    state at the step, and an LSTM's cell state after the steps (where the next step reads it)."""
    mode, node = k.node.attrs["mode"], k.node
    steps, directions, batch, hidden = k.sizes
    c, gates, width = node.ctype, GATES[mode], directions * hidden
    lines = []
    for g in range(gates):
        bias = f"{k.b_hh}[d * {gates * hidden}LL + {g * hidden}LL + j]"
        lines.append(f"const {c} r{g} = {sums(g)}{f' + {loaded(k.reads[k.b_hh], bias)}' if k.b_hh else ''};")

    def sigmoid(v: str) -> str:
        return f"(({c})1 / (({c})1 + exp(-({v}))))"

    at = f"b * {width}LL + d * {hidden}LL + j"  # and of a step's row of the output
    if mode == "lstm":
        lines += [
            f"const {c} kept = {sigmoid('x1 + r1')} * {last};",
            f"const {c} cell = kept + {sigmoid('x0 + r0')} * tanh(x2 + r2);",
            f"const {c} h = {sigmoid('x3 + r3')} * tanh(cell);",
            stored(node, f"{k.out}[{steps * batch * width}LL + {at}]", "cell"),
        ]
    elif mode == "gru":
        lines += [
            f"const {c} z = {sigmoid('x1 + r1')};",
            f"const {c} h = (({c})1 - z) * tanh(x2 + {sigmoid('x0 + r0')} * r2) + z * {last};",
        ]
    else:
        lines.append(f"const {c} h = {'tanh(x0 + r0)' if mode == 'rnn_tanh' else f'max_nan(x0 + r0, ({c})0)'};")
    return [*lines, stored(node, f"{k.out}[t * {batch * width}LL + {at}]", "h")]


def _recurrence_w(k: RecurrenceKernel) -> str:
    """The C expression of W_hh at column q of gate g's row of unit j in direction d."""
    _, _, _, hidden = k.sizes
    gates = GATES[k.node.attrs["mode"]]
    return loaded(k.reads[k.w_hh], f"{k.w_hh}[((d * {gates}LL + g) * {hidden}LL + j) * {hidden}LL + q]")


def _cpu_recurrence(k: RecurrenceKernel, variant: Variant) -> str:
    steps, directions, batch, hidden = k.sizes
    gates, c = GATES[k.node.attrs["mode"]], k.node.ctype
    step = [
        f"const int64_t d = e / {batch * hidden}LL, b = e / {hidden}LL % {batch}LL, j = e % {hidden}LL;",
        *_recurrence_state(k, "d"),
        f"{c} sum[{gates}], {', '.join(f'x{g}' for g in range(gates))};",
        *_recurrence_inputs(k),
        f"for (int64_t g = 0; g < {gates}; ++g) {{",
        f"    {c} acc = 0;",
        f"    for (int64_t q = 0; q < {hidden}LL; ++q) acc += {_recurrence_w(k)} * h_prev[b * h_row + q];",
        "    sum[g] = acc;",
        "}",
        *_recurrence_cell(k, lambda g: f"sum[{g}]", _recurrence_last(k)),
    ]
    return f"""
// {k.describe()}
extern "C" void {k.name}({_launcher_params(k, "cpu")}) {{
    for (int64_t s = 0; s < {steps}LL; ++s) {{
        {variant.omp_pragma(directions * gates * batch * hidden * hidden)}
        for (int64_t e = 0; e < {directions * batch * hidden}LL; ++e) {{
{_indent(step, 12)}
        }}
    }}
}}
"""


def recurrence_in_registers(k: RecurrenceKernel) -> bool:
    """Whether a lane's share of a unit's rows of W_hh fits the registers a variant keeps it in (cache="regs")."""
    _, _, _, hidden = k.sizes
    return GATES[k.node.attrs["mode"]] * -(-hidden // 32) <= RECURRENCE_REGS_MAX


def _cuda_recurrence(k: RecurrenceKernel, variant: Variant) -> str:
    steps, directions, batch, hidden = k.sizes
    gates, c, st = GATES[k.node.attrs["mode"]], k.node.ctype, k.node.storage
    # the batch split evenly (10 rows: 5 and 5, not 8 and 2): a step waits for its slowest group
    row_blocks = -(-batch // RECURRENCE_ROWS)
    rows, unit_blocks = -(-batch // row_blocks), -(-hidden // RECURRENCE_UNITS)
    groups = directions * row_blocks * unit_blocks
    threads = 32 * RECURRENCE_UNITS
    staged_bytes = rows * hidden * (8 if c == "double" else 4)
    staged = staged_bytes <= RECURRENCE_STAGED_BYTES
    smem = staged_bytes if staged else 0
    held = variant.cache == "regs" and recurrence_in_registers(k)
    last = _recurrence_last(k)
    per_lane = -(-hidden // 32)
    buffers = [k.gates, k.h0, *([k.c0] if k.c0 else []), k.w_hh, *([k.b_hh] if k.b_hh else [])]
    # The output holds the states the next step reads, which other blocks wrote in this launch: read from L2
    # (__ldcg), never through the non-coherent L1 or read-only paths, and not __restrict__ beside the output.
    params = [f"const {st}* {b}" for b in buffers] + [f"{st}* {k.out}", "int64_t s_first", "int64_t s_end"]
    names = [*buffers, k.out]

    def h_at_l2(r: str, q: str) -> str:  # element q of the group's batch row r of the last states
        return loaded(k.node, f"__ldcg(&h_prev[(row0 + {r}) * h_row + {q}])")

    def h_at(r: str, q: str) -> str:  # the same, staged where the block stages them
        return f"staged[{r} * {hidden}LL + {q}]" if staged else h_at_l2(r, q)

    if held:  # the lane's W_hh values of the block's group, loaded when its group changes (once, a block a group)
        w_load = [
            "if (group != held_group) {",
            "    held_group = group;",
            "#pragma unroll",
            f"    for (int i = 0; i < {per_lane}; ++i) {{",
            "        const int64_t q = lane + 32 * i;",
            "#pragma unroll",
            f"        for (int g = 0; g < {gates}; ++g) w[g][i] = j < {hidden}LL && q < {hidden}LL ? "
            f"{_recurrence_w(k)} : ({c})0;",
            "    }",
            "}",
        ]
        # a lane's columns q = lane + 32 i, unrolled: the register array is indexed by constants
        over_q = f"""#pragma unroll
    for (int i = 0; i < {per_lane}; ++i) {{
        const int64_t q = lane + 32 * i;
        if (q >= {hidden}LL) break;"""
        w_at = "w[g][i]"
    else:
        w_load = []
        over_q = f"""for (int64_t q = lane; q < {hidden}LL; q += 32) {{
        {c} wq[{gates}];
#pragma unroll
        for (int g = 0; g < {gates}; ++g) wq[g] = {_recurrence_w(k)};"""
        w_at = "wq[g]"
    sums = f"""{over_q}
#pragma unroll
        for (int r = 0; r < {rows}; ++r) {{
            if (row0 + r >= {batch}LL) break;
            const {c} v = {h_at("r", "q")};
#pragma unroll
            for (int g = 0; g < {gates}; ++g) acc[g][r] += {w_at} * v;
        }}
    }}"""
    # The block's staged copy of the group's last states (every thread loads; rows past the batch are zeros).
    stage = [
        "__syncthreads();  // the block's last sums are done with the staged states",
        f"for (int64_t i = threadIdx.x; i < {rows * hidden}LL; i += {threads}) {{",
        f"    const int64_t r = i / {hidden}LL;",
        f"    staged[i] = row0 + r < {batch}LL ? {h_at_l2('r', f'i % {hidden}LL')} : ({c})0;",
        "}",
        "__syncthreads();",
    ]
    group = [
        f"const int64_t d = group / {row_blocks * unit_blocks}LL;",
        f"const int64_t j = group % {unit_blocks}LL * {RECURRENCE_UNITS} + threadIdx.x / 32;  // the warp's unit",
        f"const int64_t row0 = group / {unit_blocks}LL % {row_blocks}LL * {rows};",
        *_recurrence_state(k, "d"),
        *w_load,
        "const int64_t b = row0 + lane;  // lane r's batch row, whose cell it applies",
        f"const bool cell = j < {hidden}LL && lane < {rows} && b < {batch}LL;",
        # loaded ahead of the sums (and the cell's own last state: the thread stored it the step before), their
        # latency hidden behind the sums' rather than after them
        f"{c} {', '.join(f'x{g} = 0' for g in range(gates))}{', last = 0' if last else ''};",
        "if (cell) {",
        *(f"    {line}" for line in _recurrence_inputs(k)),
        *([f"    last = __ldcg(&{last});"] if last else []),
        "}",
        *(stage if staged else []),
    ]
    cell = _recurrence_cell(k, lambda g: f"mine[{g}]", "last")
    step = f"""for (int64_t group = blockIdx.x; group < {groups}LL; group += gridDim.x) {{
{_indent(group, 4)}
    if (j >= {hidden}LL) continue;  // the whole warp (the block's barriers are behind it)
    {c} acc[{gates}][{rows}] = {{}};
    {sums}
    {c} mine[{gates}];  // lane r's batch row's sums
#pragma unroll
    for (int g = 0; g < {gates}; ++g) {{
#pragma unroll
        for (int r = 0; r < {rows}; ++r) {{
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) acc[g][r] += __shfl_xor_sync(0xffffffffu, acc[g][r], offset);
            if (r == 0 || lane == r) mine[g] = acc[g][r];
        }}
    }}
    if (cell) {{
{_indent(cell, 8)}
    }}
}}
if (s + 1 < s_end) grid_barrier({k.name}_sync, gridDim.x);"""
    arguments = ", ".join(f"(void*)&{b}" for b in [*names, "s_first", "s_end"])
    prologue = []
    if staged:
        prologue += [
            "extern __shared__ __align__(16) unsigned char row_smem[];",
            f"{c}* staged = reinterpret_cast<{c}*>(row_smem);  // [{rows}, {hidden}]: the group's last states",
        ]
    if held:
        prologue += [
            f"{c} w[{gates}][{per_lane}];  // W_hh's rows of the warp's unit, a lane's columns",
            "int64_t held_group = -1;",
        ]
    return f"""
// {k.describe()}{" (W_hh in registers)" if held else ""}
__device__ unsigned {k.name}_sync[2];  // the grid barrier's arrivals and generation

__global__ void __launch_bounds__({threads}) {k.name}_steps({", ".join(params)}) {{
    const int lane = threadIdx.x % 32;
{_indent(prologue, 4)}
    for (int64_t s = s_first; s < s_end; ++s) {{
{_indent(step.splitlines(), 8)}
    }}
}}

extern "C" void {k.name}({_launcher_params(k, "cuda")}) {{
    int device = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {k.name}_steps, {threads}, {smem});
    const long long resident = (long long)sms * per_sm;
    int64_t s_first = 0, s_end = {steps}LL;
    void* arguments[] = {{{arguments}}};
    const unsigned grid = (unsigned)(resident < {groups}LL ? resident : {groups}LL);
    if (grid > 0 && cudaLaunchCooperativeKernel({k.name}_steps, dim3(grid), dim3({threads}), arguments, {smem}, stream)
                        == cudaSuccess)
        return;
    cudaGetLastError();  // refused (too few blocks run at once): a launch a step, a block a group
    for (int64_t s = 0; s < {steps}LL; ++s)
        {k.name}_steps<<<{groups}, {threads}, {smem}, stream>>>({", ".join([*names, "s", "s + 1"])});
}}
"""


def _tensor_cores(variant: Variant) -> bool:
    """Whether ``variant`` runs our float32 products (GEMMs, implicit convolutions) as three products on tensor
    cores: 3xTF32 on mma.sync, or on wgmma (``_cuda_gemm_wgmma``, ``_conv_wgmma``) where a product fits it, else on
    mma.sync."""
    return variant.gemm in ("tf32x3", "wgmma", "f16x3")


def conv_wgmma_form(k: ConvKernel, variant: Variant) -> WgmmaForm | None:
    """The form ``variant`` runs ``k`` in on wgmma, or None: 3xTF32 ("wgmma"), or three products of float16 parts in
    TF32's K steps ("f16x3": ``F16X3_GATHERED``)."""
    if variant.conv != "implicit" or not conv_wgmma_fits(k):
        return None
    return {"wgmma": TF32X3, "f16x3": F16X3_GATHERED}.get(variant.gemm)


def variant_plan(plan: Plan, device: str, variant: Variant) -> Plan:
    """The plan as ``variant`` runs it, which ``emit_source`` and ``emit_model_new`` take: its float math in the
    variant's forms, and the elementwise kernels after our own products and convolutions fused into them as
    epilogues (a vendor library's output is stored as it is: its epilogue stays a kernel)."""
    if variant.math == "fast" and not plan.fast_math:  # the same kernels, their float math in other forms
        plan = plan_graph(plan.graph, fast_math=True)

    def own(k: GemmKernel | ConvKernel) -> bool:
        if device != "cuda":
            return True
        if isinstance(k, ConvKernel):
            return variant.conv in ("direct", "implicit")
        return not variant.gemm.startswith("cublas") or _cublas_gemm(k, False) is None

    plan = fuse_epilogues(plan, own)
    if device != "cuda":
        return plan
    kernels: list[Kernel] = []
    buffers = dict(plan.buffers)
    for k in plan.kernels:
        split = split_rows(k, variant) if isinstance(k, RowKernel) else 1
        if isinstance(k, RowKernel) and split > 1:  # each looped reduction's partials: a value per row and segment
            partials = {r.var: f"b{k.name}_{r.var}" for r in k.reductions if not r.invariant}
            nodes = {r.var: r.node for r in k.reductions}
            for var, name in partials.items():
                buffers[name] = Node(name, "partials", OpKind.REDUCTION, (k.outer, split), nodes[var].dtype)
            scratch = list(partials.values())
            if variant.cache == "segment":  # and the rows' counters of arrived blocks
                scratch.append(f"b{k.name}_arrivals")
                buffers[scratch[-1]] = Node(scratch[-1], "arrivals", OpKind.REDUCTION, (k.outer,), "int32")
            writes = {**k.writes, **{b: buffers[b] for b in scratch}}
            arrivals = scratch[-1] if variant.cache == "segment" else None
            k = replace(k, split=split, partials=partials, writes=writes, arrivals=arrivals)

        def with_scratch(k: GemmKernel | ConvKernel, floats: dict[str, int], kind: OpKind) -> GemmKernel | ConvKernel:
            """``k`` writing these scratch buffers too (float32, of these sizes)."""
            nodes = {n: Node(n, "split", kind, (size,), "float32") for n, size in floats.items()}
            buffers.update(nodes)
            return replace(k, writes={**k.writes, **nodes})

        form = wgmma_form(variant, k.node.dtype) if isinstance(k, GemmKernel) else None
        if isinstance(k, GemmKernel) and form and wgmma_fits(k, form):  # its operands' split parts
            splits = dict(zip(wgmma_splits(k), wgmma_split_floats(k, form), strict=True))
            if wgmma_k_parts(k, form) > 1:  # and each part of K's sums
                splits[wgmma_parts_buffer(k)] = wgmma_k_parts(k, form) * k.batch * k.m * k.n
            if form.scaled:  # and the operands' largest magnitudes
                splits[wgmma_largest(k)] = 2
            k = with_scratch(k, splits, OpKind.CONTRACTION)
        conv_form = conv_wgmma_form(k, variant) if isinstance(k, ConvKernel) else None
        if isinstance(k, ConvKernel) and conv_form:  # its weights' split parts (and their and the input's largest)
            sizes = {conv_wgmma_split(k): sum(conv_wgmma_split_floats(k, conv_form))}
            if conv_form.scaled:
                sizes[conv_wgmma_largest(k)] = 2
            k = with_scratch(k, sizes, OpKind.CONVOLUTION)
        elif isinstance(k, ConvKernel) and variant.conv == "implicit" and _tensor_cores(variant) and tap_major(k):
            name = taps_buffer(k)
            buffers[name] = Node(name, "taps", OpKind.CONVOLUTION, (k.reads[k.w].numel,), "float32")
            k = replace(k, writes={**k.writes, name: buffers[name]})
        kernels.append(k)
    return replace(plan, kernels=kernels, buffers=buffers)


def emit_source(plan: Plan, device: str, variant: Variant) -> str:
    """The kernels' source of ``plan`` as ``variant_plan`` gives it for ``variant``."""
    parts = [CUDA_PRELUDE if device == "cuda" else CPU_PRELUDE]
    if any(n.dtype in HALF_TYPES for n in plan.graph.nodes):
        parts.append(CUDA_HALF_PRELUDE if device == "cuda" else CPU_HALF_PRELUDE)
    blas = dnn = mma16_used = wgmma_used = False
    tensor_cores = _tensor_cores(variant)
    for k in plan.kernels:
        if isinstance(k, ConvKernel) and device == "cuda" and variant.conv not in ("direct", "implicit"):
            dnn = True
            parts.append(_cudnn_conv(k, variant))
        elif isinstance(k, ConvKernel) and device == "cuda":
            implicit, conv_form = variant.conv == "implicit", conv_wgmma_form(k, variant)
            wgmma_used = wgmma_used or conv_form is not None
            parts.append(_cuda_conv_implicit(k, tensor_cores, conv_form) if implicit else _cuda_conv(k, variant))
        elif isinstance(k, ConvKernel):
            parts.append(_cpu_conv(k, variant))
        elif isinstance(k, GemmKernel) and device == "cuda":
            vendor = _cublas_gemm(k, variant.gemm == "cublas_tf32") if variant.gemm.startswith("cublas") else None
            blas = blas or vendor is not None
            half = k.node.dtype in HALF_TYPES
            mma16 = _cuda_gemm_mma16(k) if variant.gemm == "mma" and half else None
            mma16_used = mma16_used or mma16 is not None
            wmma = variant.gemm in ("wmma", "mma", "wgmma") and half
            pipelined = variant.gemm == "pipelined" or tensor_cores
            own = _cuda_gemm_pipelined(k, tensor_cores) if pipelined else _cuda_gemm(k, variant)
            form = wgmma_form(variant, k.node.dtype)
            wgmma = _cuda_gemm_wgmma(k, form) if form and wgmma_fits(k, form) else None
            wgmma_used = wgmma_used or wgmma is not None
            parts.append(vendor or mma16 or wgmma or (_cuda_gemm_wmma(k) if wmma else own))
        elif isinstance(k, GemmKernel):
            parts.append(_cpu_gemm(k, variant))
        elif isinstance(k, RecurrenceKernel):
            parts.append(_cuda_recurrence(k, variant) if device == "cuda" else _cpu_recurrence(k, variant))
        else:
            parts.append(_cuda_row(k, variant) if device == "cuda" else _cpu_row(k, variant))
    # The declarations the build links the vendor libraries by (compile/libraries.py).
    if blas:
        parts.insert(1, '#include <cublas_v2.h>\n#pragma comment(lib, "cublas")\n')
    if dnn:
        parts.insert(1, '#include <cudnn.h>\n#pragma comment(lib, "cudnn")\n')
    if mma16_used:
        parts.insert(1, CUDA_MMA16_PRELUDE)
    if wgmma_used:
        parts.insert(1, CUDA_WGMMA_PRELUDE)
    # (the 16-bit and wgmma kernels' stages wait on cp_async_commit / cp_async_wait, defined with the TF32 step)
    tf32_step = tensor_cores and any(isinstance(k, GemmKernel | ConvKernel) for k in plan.kernels)
    if mma16_used or wgmma_used or tf32_step:
        parts.insert(1, CUDA_MMA_PRELUDE)
    if device == "cuda" and any(isinstance(k, RecurrenceKernel) for k in plan.kernels):
        parts.insert(1, GRID_BARRIER)
    source = "".join(parts)
    if len(source) > MAX_SOURCE_BYTES:
        # A recurrence (an LSTM's steps) inlines every step's gates into the next: no build finishes in time.
        raise Unsupported(
            f"the emitted kernels come to {len(source) / 1e6:.0f} MB of source, over the "
            f"{MAX_SOURCE_BYTES >> 20} MB a build finishes in time"
        )
    return source


def _torch_dtype(node: Node) -> str:
    return f"torch.{node.dtype}"


def emit_model_new(plan: Plan, problem_source: str, device: str, workdir: bool = False) -> str:
    """``model_new.py`` of the project form: ModelNew inherits the reference, which it embeds, so its parameters
    and buffers are made by the reference's own constructor. With ``workdir``, for the released CUDA Agent
    environment's rules (no torch operator outside ``__init__``, the reference's state_dict loaded into ModelNew):
    ModelNew declares the reference's state by name, shape and dtype, and the platform loads the values."""
    g = plan.graph
    lines = [
        f"if len(args) != {g.arg_count}:",
        f"    raise TypeError(f'forward takes {g.arg_count} arguments, got {{len(args)}}')",
    ]
    for node, pos in zip(g.inputs, g.input_positions, strict=True):
        lines.append(f"{node.name} = args[{pos}].contiguous()")
        lines.append(
            f"if tuple({node.name}.shape) != {tuple(node.shape)!r} or {node.name}.dtype != {_torch_dtype(node)}:"
        )
        lines.append(
            f"    raise ValueError(f'argument {pos}: {{tuple({node.name}.shape)}} {{{node.name}.dtype}}; the kernels "
            f"were generated for {tuple(node.shape)} {_torch_dtype(node)}')"
        )
    for node in g.params:
        qualname = node.attrs["qualname"]
        if node.attrs.get("attribute"):  # a plain tensor attribute: Module.to leaves it where the constructor put it
            owner, _, leaf = qualname.rpartition(".")
            lines.append(
                f"{node.name} = getattr(self.get_submodule({owner!r}), {leaf!r}).to(self._device).contiguous()"
            )
            continue
        getter = "get_buffer" if node.attrs.get("buffer") else "get_parameter"
        lines.append(f"{node.name} = self.{getter}({qualname!r}).contiguous()")
    for name, node in plan.buffers.items():
        if name.startswith(("b", "out")):
            lines.append(
                f"{name} = torch.empty({tuple(node.shape)!r}, dtype={_torch_dtype(node)}, device=self._device)"
            )
    for k in plan.kernels:
        call = f"self._kernels.{k.name}({', '.join([*k.reads, *k.writes])})"
        if isinstance(k, RowKernel | RecurrenceKernel):
            lines.append(call)
        else:  # a vendor library's launcher returns its status (our own kernels' launchers return nothing)
            lines += [f"if {call}:", f"    raise RuntimeError('{k.name}: the vendor library returned an error status')"]
    outs = ", ".join(plan.outputs)
    lines.append(
        f"return {plan.outputs[0]}"
        if g.single_output
        else f"return ({outs},)"
        if len(plan.outputs) == 1
        else f"return ({outs})"
    )
    body = "\n".join("        " + line for line in lines)
    header = f'''"""Generated by the embedded kernel author (cuda_agent.author) from the problem below.

Plan:
{plan.describe()}
"""

import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels
'''
    if workdir:
        base, state = "nn.Module", _declared_state(plan)
    else:
        base, state = "Model", ""
        header += f"""
# The reference problem, verbatim: ModelNew inherits its constructor, so parameters and buffers are created with
# the reference's names, shapes and initialization order.
{problem_source.rstrip()}
"""
    return f"""{header}

class ModelNew({base}):
    def __init__(self, *args, **kwargs):
        super().__init__({"" if workdir else "*args, **kwargs"}){state}
        self._kernels = load_kernels()
        self._device = torch.device({device!r})

    def forward(self, *args):
{body}
"""


def _declared_state(plan: Plan) -> str:
    """``__init__``'s declarations of the reference's parameters and buffers (nested modules made on the way)."""
    entries = []
    for node in plan.graph.params:
        if node.attrs.get("attribute"):
            raise Unsupported(
                f"tensor attribute {node.attrs['qualname']} is neither a parameter nor a buffer: the workdir form's "
                "ModelNew takes its state from the reference's state_dict"
            )
        if not node.attrs.get("persistent", True):
            raise Unsupported(
                f"buffer {node.attrs['qualname']} is not in the reference's state_dict (persistent=False): the "
                "workdir form's ModelNew takes its state from there"
            )
        entries.append((node.attrs["qualname"], tuple(node.shape), node.dtype, bool(node.attrs.get("buffer"))))
    return f"""
        # The reference's state_dict, by name: the platform loads its values into these (load_reference_state).
        for name, shape, dtype, buffer in {entries!r}:
            owner = self
            *path, leaf = name.split(".")
            for part in path:
                if part not in owner._modules:
                    owner.add_module(part, nn.Module())
                owner = owner._modules[part]
            value = torch.empty(shape, dtype=getattr(torch, dtype))
            if buffer:
                owner.register_buffer(leaf, value)
            else:
                owner.register_parameter(leaf, nn.Parameter(value, requires_grad=value.is_floating_point()))"""


def candidate_files(
    plan: Plan, problem_source: str, device: str, variant: Variant, form: str = "project"
) -> dict[str, str]:
    """A variant's files in the candidate ``form``: "project", or "workdir" (the project form converted, with
    ModelNew declaring the reference's state instead of embedding the reference)."""
    suffix = ".cu" if device == "cuda" else ".cpp"
    plan = variant_plan(plan, device, variant)
    files = {
        f"{KERNELS_DIR}/{KERNEL_STEM}{suffix}": emit_source(plan, device, variant),
        MODEL_NEW_FILE: emit_model_new(plan, problem_source, device, workdir=form == "workdir"),
    }
    if form != "workdir":
        return files
    from cuda_agent.workdir.convert import project_to_workdir

    return dict(project_to_workdir(CandidateSource(form=CandidateForm.PROJECT, files=files)).files)
