// The author's CUDA kernels on the host, for tests on machines without a GPU: every thread of a block is a
// std::thread, __syncthreads a barrier of the block's threads, a warp shuffle an exchange through a barrier of the
// warp's 32 lanes. Blocks run one after another (a function's statics are then its block's shared memory). A row
// kernel's launch runs at most two blocks: the kernels stride over their rows by the grid, so two blocks still
// cover every row and interleave them; a launch over a dim3 grid (a block per tile) runs every block. A shuffle
// some lanes of a warp skip deadlocks here as it misbehaves on a GPU. A tensor-core product (mma_tf32) reads the
// whole warp's fragments in PTX's layout, its operands as TF32 and its sum rounded toward zero as tensor cores do,
// so code that meant float32 accuracy and multiplied in TF32, or carried a sum through many MMAs, fails here too.
// A warpgroup's product (wgmma_tf32) reads its tiles through their descriptors when the thread waits for it.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

using namespace std;  // exp, fmax, ... resolve to the float overloads, as in CUDA device code

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))

// The special-function units' float math as the GPU rounds it: __expf is ex2.approx of the product x * log2(e),
// rounded to float first (its error grows with |x|, as on the GPU); __fdividef multiplies by the reciprocal and
// gives 0 for a divisor past 2^126. Under names of their own: glibc declares an __expf of its own (exact).
inline float emu_expf(float x) { return exp2f(x * 1.44269504088896341f); }
inline float emu_fdividef(float a, float b) { return std::fabs(b) > 0x1p126f ? 0.0f : a * (1.0f / b); }
#define __expf emu_expf
#define __fdividef emu_fdividef

struct EmuDim {
    unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline thread_local EmuDim threadIdx, blockIdx;
inline EmuDim blockDim, gridDim;
typedef void* cudaStream_t;
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(8) float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <typename K>
int cudaFuncSetAttribute(K, cudaFuncAttribute, int) {
    return 0;
}

struct EmuWarp {
    std::barrier<> arrived{32};
    uint64_t lanes[32];
};
// The running block's barrier, warps and dynamic shared memory, a thread's own: a cooperative launch runs its blocks
// at once.
struct alignas(64) EmuSmem {
    unsigned char bytes[256 * 1024];
};
inline thread_local std::barrier<>* emu_block;
inline thread_local std::vector<std::unique_ptr<EmuWarp>>* emu_warps;
inline thread_local unsigned char* emu_dynamic_smem;

// A block's static shared arrays (a block reduction's partials), one set a block as on a GPU, where a cooperative
// launch's blocks, running at once, must not share them: tests/author/helpers.py declares each ``__shared__ T
// name[n];`` as ``auto& name = emu_block_static<T[n], __LINE__>();``, one array a declaration and block (the same
// declaration reached twice by a block, the same array).
struct EmuStatics {
    std::mutex lock;
    std::map<const void*, std::unique_ptr<EmuSmem>> arrays;
    void* get(const void* tag, size_t bytes) {
        assert(bytes <= sizeof(EmuSmem));
        std::lock_guard<std::mutex> held(lock);
        auto& array = arrays[tag];
        if (!array) array = std::make_unique<EmuSmem>();
        return array->bytes;
    }
};
inline thread_local EmuStatics* emu_statics;
template <typename A, int Line>
A& emu_block_static() {
    static const char tag = 0;  // one a declaration (and type)
    return *reinterpret_cast<A*>(emu_statics->get(&tag, sizeof(A)));
}

inline void __syncthreads() { emu_block->arrive_and_wait(); }

template <typename T>
T emu_exchange(T v, int source_lane) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    EmuWarp& warp = *(*emu_warps)[threadIdx.x >> 5];
    std::memcpy(&warp.lanes[threadIdx.x & 31], &v, sizeof(T));
    warp.arrived.arrive_and_wait();
    T out;
    std::memcpy(&out, &warp.lanes[source_lane], sizeof(T));
    warp.arrived.arrive_and_wait();  // every lane has read before the next exchange writes
    return out;
}
// CUDA's shuffles are overloads for int, float, double and the other promoted types: a bool goes and comes back
// as an int (decltype(+v)), so code that needs a bool back must say so, as it must for the GPU.
template <typename T>
auto __shfl_xor_sync(unsigned, T v, int mask) -> decltype(+v) {
    return emu_exchange(+v, (threadIdx.x & 31) ^ mask);
}
template <typename T>
auto __shfl_up_sync(unsigned, T v, unsigned delta) -> decltype(+v) {
    const unsigned lane = threadIdx.x & 31;
    return emu_exchange(+v, lane >= delta ? lane - delta : lane);
}
template <typename T>
auto __shfl_sync(unsigned, T v, int source_lane) -> decltype(+v) {
    return emu_exchange(+v, source_lane);
}

inline void __syncwarp(unsigned = 0xffffffffu) { (*emu_warps)[threadIdx.x >> 5]->arrived.arrive_and_wait(); }

inline unsigned __float_as_uint(float v) {
    unsigned bits;
    std::memcpy(&bits, &v, 4);
    return bits;
}
inline float __uint_as_float(unsigned bits) {
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
}
inline float tf32_near(float v) { return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u); }

// What a tensor core reads of a TF32 operand: its 10 high significand bits.
inline float emu_tf32_operand(float v) { return __uint_as_float(__float_as_uint(v) & ~0x1fffu); }

// A tensor core's sum of products and accumulator, rounded toward zero (Fasi et al., "Numerical behavior of NVIDIA
// tensor cores", 2021): an accumulator carried through thousands of MMAs drifts toward zero by up to an ulp each.
inline float emu_toward_zero(double v) {
    const float f = (float)v;  // nearest
    return std::fabs((double)f) > std::fabs(v) ? std::nextafter(f, 0.0f) : f;
}

// A warp's fragments, copied in by each lane, for the lanes' products. Two slots used in turn: a lane that writes
// the next product's operands has passed that product's barrier, which every lane reaches only after reading this
// one's, so one barrier a product suffices.
struct EmuMmaOperands {
    float a[32][4];
    float b[32][2];
};
inline std::vector<EmuMmaOperands> emu_mma(2 * 64);
inline thread_local unsigned emu_mma_calls = 0;

// mma.sync m16n8k8 with TF32 operands (the emitted CUDA_MMA_PRELUDE's): PTX's fragment layout, lane = 4 g + t holding
// A[g][t], A[g + 8][t], A[g][t + 4], A[g + 8][t + 4], B[t][g], B[t + 4][g] and D[g][2t], D[g][2t + 1], D[g + 8][2t],
// D[g + 8][2t + 1]. The product reads the whole warp's fragments.
inline void mma_tf32(float* d, const float* a, const float* b) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane / 4, t = lane % 4;
    EmuMmaOperands& ops = emu_mma[2 * warp + emu_mma_calls++ % 2];
    std::memcpy(ops.a[lane], a, sizeof ops.a[lane]);
    std::memcpy(ops.b[lane], b, sizeof ops.b[lane]);
    __syncwarp();
    for (int e = 0; e < 4; ++e) {
        const unsigned row = g + 8 * (e / 2), col = 2 * t + e % 2;
        double sum = d[e];
        for (unsigned k = 0; k < 8; ++k) {
            const float av = ops.a[4 * (row % 8) + k % 4][row / 8 + 2 * (k / 4)];
            const float bv = ops.b[4 * col + k % 4][k / 4];
            sum += (double)emu_tf32_operand(av) * emu_tf32_operand(bv);
        }
        d[e] = emu_toward_zero(sum);
    }
}

// cp.async: a thread's copies are read when issued and land in shared memory only when the thread waits for their
// group (cp.async.wait_group), so code that reads a stage before waiting for it, or before the barrier after every
// thread's wait, reads what was there before, as it may on a GPU.
struct EmuCopy {
    void* dst;
    int bytes;
    unsigned char values[16];
};
inline thread_local std::vector<EmuCopy> emu_open_group;
inline thread_local std::deque<std::vector<EmuCopy>> emu_committed;
inline void emu_copy(void* dst, const void* src, bool in, int bytes) {
    EmuCopy copy{dst, bytes, {}};
    if (in) std::memcpy(copy.values, src, bytes);
    emu_open_group.push_back(copy);
}
inline void cp_async1(float* dst, const float* src, bool in) { emu_copy(dst, src, in, 4); }
inline void cp_async4(float* dst, const float* src, bool in, bool) { emu_copy(dst, src, in, 16); }
// 16-bit values: a source that is not 16-byte aligned is stored by the thread at once, as the CUDA prelude's is.
inline void cp_async8h(uint16_t* dst, const uint16_t* src, bool in, bool aligned) {
    if (aligned) {
        emu_copy(dst, src, in, 16);
    } else {
        for (int c = 0; c < 8; ++c) dst[c] = in ? src[c] : (uint16_t)0;
    }
}
inline void cp_async_commit() {
    emu_committed.push_back(std::move(emu_open_group));
    emu_open_group.clear();
}
template <int pending>
void cp_async_wait() {
    while (emu_committed.size() > (size_t)pending) {
        for (const EmuCopy& copy : emu_committed.front()) std::memcpy(copy.dst, copy.values, copy.bytes);
        emu_committed.pop_front();
    }
}

// wgmma (the emitted CUDA_WGMMA_PRELUDE's): a descriptor names a K-major tile of this thread's table (its address,
// the bytes between core matrices along K and along M or N), and a product is only queued when issued: it reads
// the tiles and writes the thread's sums when the thread waits for its group (wgmma_wait), so code that refills a tile,
// or reads its sums, before waiting computes with what is there then, as it may on a GPU. Each thread of a
// warpgroup computes its own 64 sums (warp w, lane 4 g + t: rows 16 w + g and 16 w + g + 8, columns 8 j + 2 t and
// 8 j + 2 t + 1 at d[4 j ...]) over 8 k (wgmma_tf32: its operands read as TF32) or 16 (wgmma_f16, wgmma_bf16: as
// 16-bit values), the sum rounded toward zero as mma_tf32's. A core matrix's row is 16 bytes: 4 k of TF32, 8 of a
// 16-bit type.
enum class EmuKind { tf32, f16, bf16 };
inline float emu_f16(uint16_t bits);
inline float emu_bf16(uint16_t bits);
struct EmuTile {
    const float* at;
    uint32_t lbo, sbo;
    float operator()(unsigned row, unsigned k, EmuKind kind) const {
        const unsigned size = kind == EmuKind::tf32 ? 4 : 2, per = 16 / size;
        const char* p = reinterpret_cast<const char*>(at) + row / 8 * sbo + k / per * lbo + row % 8 * 16 + k % per * size;
        if (size == 2) {
            uint16_t bits;
            std::memcpy(&bits, p, 2);
            return kind == EmuKind::f16 ? emu_f16(bits) : emu_bf16(bits);
        }
        float v;
        std::memcpy(&v, p, 4);
        return emu_tf32_operand(v);
    }
};
struct EmuWgmma {
    float* d;
    uint64_t a, b;
    bool accumulate;
    EmuKind kind;
};
inline thread_local std::vector<EmuTile> emu_tiles;
inline thread_local std::vector<EmuWgmma> emu_wgmma_open;
inline thread_local std::vector<std::vector<EmuWgmma>> emu_wgmma_committed;  // groups, oldest first
inline uint64_t wgmma_desc(const float* p, uint32_t lbo, uint32_t sbo) {
    emu_tiles.push_back({p, lbo, sbo});
    return emu_tiles.size() - 1;
}
inline void wgmma_tf32(float* d, uint64_t a, uint64_t b, int accumulate) {
    emu_wgmma_open.push_back({d, a, b, accumulate != 0, EmuKind::tf32});
}
inline void wgmma_f16(float* d, uint64_t a, uint64_t b, int accumulate) {
    emu_wgmma_open.push_back({d, a, b, accumulate != 0, EmuKind::f16});
}
inline void wgmma_bf16(float* d, uint64_t a, uint64_t b, int accumulate) {
    emu_wgmma_open.push_back({d, a, b, accumulate != 0, EmuKind::bf16});
}
inline void wgmma_fence() {}
inline void fence_async_smem() {}
inline void wgmma_commit() {
    emu_wgmma_committed.push_back(std::move(emu_wgmma_open));
    emu_wgmma_open.clear();
}
// Runs the groups committed before the last ``pending`` (in order), as they would have finished by now.
template <int pending>
inline void wgmma_wait() {
    const unsigned warp = threadIdx.x % 128 / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const size_t done = emu_wgmma_committed.size() > pending ? emu_wgmma_committed.size() - pending : 0;
    for (size_t i = 0; i < done; ++i)
        for (const EmuWgmma& w : emu_wgmma_committed[i]) {
            const EmuTile &a = emu_tiles[w.a], &b = emu_tiles[w.b];
            for (unsigned j = 0; j < 16; ++j)
                for (unsigned e = 0; e < 4; ++e) {
                    const unsigned row = 16 * warp + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
                    double sum = w.accumulate ? w.d[4 * j + e] : 0.0;
                    for (unsigned k = 0; k < (w.kind == EmuKind::tf32 ? 8u : 16u); ++k)
                        sum += (double)a(row, k, w.kind) * b(col, k, w.kind);
                    w.d[4 * j + e] = emu_toward_zero(sum);
                }
        }
    emu_wgmma_committed.erase(emu_wgmma_committed.begin(), emu_wgmma_committed.begin() + done);
    if (emu_wgmma_committed.empty() && emu_wgmma_open.empty()) emu_tiles.clear();  // no descriptor is named now
}

// ldmatrix .x4 (the CUDA_MMA16_PRELUDE's): lane 8 q + i gives the address of row i of matrix q (8 16-bit values);
// lane 4 g + t receives, of each matrix, row g's elements 2t and 2t + 1 (low half first), or transposed row 2t's and
// 2t + 1's element g. The rows are read once every lane has given its address (two slots, as emu_mma's).
inline std::vector<std::array<const uint16_t*, 32>> emu_rows(2 * 64);
inline thread_local unsigned emu_ldmatrix_calls = 0;
inline void emu_ldmatrix(unsigned* r, const uint16_t* p, bool trans) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane / 4, t = lane % 4;
    std::array<const uint16_t*, 32>& rows = emu_rows[2 * warp + emu_ldmatrix_calls++ % 2];
    rows[lane] = p;
    __syncwarp();
    for (unsigned q = 0; q < 4; ++q) {
        const uint16_t lo = trans ? rows[8 * q + 2 * t][g] : rows[8 * q + g][2 * t];
        const uint16_t hi = trans ? rows[8 * q + 2 * t + 1][g] : rows[8 * q + g][2 * t + 1];
        r[q] = lo | (unsigned)hi << 16;
    }
}
inline void ldmatrix_x4(unsigned* r, const uint16_t* p) { emu_ldmatrix(r, p, false); }
inline void ldmatrix_x4_trans(unsigned* r, const uint16_t* p) { emu_ldmatrix(r, p, true); }

inline float emu_bf16(uint16_t bits) { return __uint_as_float((unsigned)bits << 16); }
inline float emu_f16(uint16_t bits) {
    _Float16 v;
    std::memcpy(&v, &bits, 2);
    return (float)v;
}
// The wgmma prelude's float16 conversions (nearest, ties to even, as __float2half_rn).
inline uint32_t f16_bits(float v) {
    const _Float16 h = (_Float16)v;
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
}
inline float f16_value(uint32_t bits) { return emu_f16((uint16_t)bits); }
// mma.sync m16n8k16 with 16-bit operands: lane 4 g + t holds A[g][2t..2t+1], A[g + 8][2t..], A[g][2t + 8..],
// A[g + 8][2t + 8..] (a register each, low half first), B[2t..2t+1][g], B[2t + 8..][g], and D as mma_tf32's. Products
// exact, the sum rounded toward zero as mma_tf32's.
struct EmuMma16Operands {
    unsigned a[32][4];
    unsigned b[32][2];
};
inline std::vector<EmuMma16Operands> emu_mma16(2 * 64);
inline void emu_mma_16bit(float* d, const unsigned* a, const unsigned* b, float (*value)(uint16_t)) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane / 4, t = lane % 4;
    EmuMma16Operands& ops = emu_mma16[2 * warp + emu_mma_calls++ % 2];
    std::memcpy(ops.a[lane], a, sizeof ops.a[lane]);
    std::memcpy(ops.b[lane], b, sizeof ops.b[lane]);
    __syncwarp();
    auto half = [](unsigned word, unsigned k) { return (uint16_t)(word >> (16 * (k % 2))); };
    for (int e = 0; e < 4; ++e) {
        const unsigned row = g + 8 * (e / 2), col = 2 * t + e % 2;
        double sum = d[e];
        for (unsigned k = 0; k < 16; ++k) {
            const float av = value(half(ops.a[4 * (row % 8) + (k % 8) / 2][row / 8 + 2 * (k / 8)], k));
            const float bv = value(half(ops.b[4 * col + (k % 8) / 2][k / 8], k));
            sum += (double)av * bv;
        }
        d[e] = emu_toward_zero(sum);
    }
}
inline void mma_bf16(float* d, const unsigned* a, const unsigned* b) { emu_mma_16bit(d, a, b, emu_bf16); }
inline void mma_f16(float* d, const unsigned* a, const unsigned* b) { emu_mma_16bit(d, a, b, emu_f16); }

// A block of ``size`` threads, started: each runs ``kernel`` as its thread of block ``block_index``. ``join`` waits
// for them.
struct EmuBlock {
    unsigned size;
    std::barrier<> barrier;
    std::vector<std::unique_ptr<EmuWarp>> warps;
    std::unique_ptr<EmuSmem> smem = std::make_unique<EmuSmem>();
    EmuStatics statics;
    std::vector<std::thread> threads;
    explicit EmuBlock(unsigned block) : size(block), barrier(block) {
        for (unsigned w = 0; w < (block + 31) / 32; ++w) warps.push_back(std::make_unique<EmuWarp>());
    }
    template <typename F>
    void start(EmuDim block_index, F kernel) {
        for (unsigned t = 0; t < size; ++t) {
            threads.emplace_back([=, this] {
                threadIdx = {t, 0, 0};
                blockIdx = block_index;
                emu_block = &barrier;
                emu_warps = &warps;
                emu_dynamic_smem = smem->bytes;
                emu_statics = &statics;
                kernel();
            });
        }
    }
    void join() {
        for (auto& thread : threads) thread.join();
    }
};

template <typename K, typename... A>
void emu_block_run(K kernel, EmuDim block_index, unsigned block, A... args) {
    EmuBlock running(block);
    running.start(block_index, [=] { kernel(args...); });
    running.join();
}

// A grid-stride kernel's launch: two blocks.
template <typename K, typename... A>
void emu_launch(K kernel, unsigned grid, unsigned block, size_t, A... args) {
    gridDim = {std::min(grid, 2u), 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < gridDim.x; ++b) emu_block_run(kernel, EmuDim{b, 0, 0}, block, args...);
}

// The runtime's answers a cooperative launch is sized by: two SMs of one block each (two blocks run at once).
enum cudaError_t { cudaSuccess = 0 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount };
inline cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
    *value = 2;
    return cudaSuccess;
}
template <typename K>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, K, int, size_t) {
    *blocks = 1;
    return cudaSuccess;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
    std::memset(p, value, bytes);
    return cudaSuccess;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned* address, unsigned value) { return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST); }
inline unsigned atomicMax(unsigned* address, unsigned value) {
    unsigned seen = __atomic_load_n(address, __ATOMIC_SEQ_CST);
    while (seen < value && !__atomic_compare_exchange_n(address, &seen, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return seen;
}
template <typename T>
T __ldcg(const T* address) {
    T value;
    __atomic_load(address, &value, __ATOMIC_SEQ_CST);
    return value;
}

// A cooperative launch: every block at once (a grid barrier in the kernel waits for all of them), its arguments
// given as the runtime takes them, by address.
template <typename... A, size_t... I>
void emu_cooperative(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_cvref_t<A>*>(args[I])...);
}
template <typename... A>
cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(A...), dim3 grid, dim3 block, void** args, size_t, cudaStream_t) {
    gridDim = {grid.x, grid.y, grid.z};
    blockDim = {block.x, 1, 1};
    std::deque<EmuBlock> blocks;
    for (unsigned b = 0; b < grid.x; ++b) {
        blocks.emplace_back(block.x);
        blocks.back().start(EmuDim{b, 0, 0}, [=] { emu_cooperative(kernel, args, std::index_sequence_for<A...>{}); });
    }
    for (auto& running : blocks) running.join();
    return cudaSuccess;
}

// A tiled kernel's launch (a block per tile: the GEMMs): every block.
template <typename K, typename... A>
void emu_launch(K kernel, dim3 grid, unsigned block, size_t, A... args) {
    gridDim = {grid.x, grid.y, grid.z};
    blockDim = {block, 1, 1};
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) emu_block_run(kernel, EmuDim{x, y, z}, block, args...);
}
