// The author's CUDA kernels on the host, for tests on machines without a GPU: every thread of a block is a
// std::thread, __syncthreads a barrier of the block's threads, a warp shuffle an exchange through a barrier of the
// warp's 32 lanes. Blocks run one after another (a function's statics are then its block's shared memory). A row
// kernel's launch runs at most two blocks: the kernels stride over their rows by the grid, so two blocks still
// cover every row and interleave them; a launch over a dim3 grid (a block per tile) runs every block. A shuffle
// some lanes of a warp skip deadlocks here as it misbehaves on a GPU.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

using namespace std;  // exp, fmax, ... resolve to the float overloads, as in CUDA device code

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

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
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <typename K>
int cudaFuncSetAttribute(K, cudaFuncAttribute, int) {
    return 0;
}

struct EmuWarp {
    std::barrier<> arrived{32};
    uint64_t lanes[32];
};
inline std::barrier<>* emu_block;
inline std::vector<std::unique_ptr<EmuWarp>> emu_warps;
alignas(16) inline unsigned char emu_dynamic_smem[256 * 1024];

inline void __syncthreads() { emu_block->arrive_and_wait(); }

template <typename T>
T emu_exchange(T v, int source_lane) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    EmuWarp& warp = *emu_warps[threadIdx.x >> 5];
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

template <typename K, typename... A>
void emu_block_run(K kernel, EmuDim block_index, unsigned block, A... args) {
    std::barrier<> block_barrier(block);
    emu_block = &block_barrier;
    emu_warps.clear();
    for (unsigned w = 0; w < (block + 31) / 32; ++w) emu_warps.push_back(std::make_unique<EmuWarp>());
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
        threads.emplace_back([=] {
            threadIdx = {t, 0, 0};
            blockIdx = block_index;
            kernel(args...);
        });
    }
    for (auto& thread : threads) thread.join();
}

// A grid-stride kernel's launch: two blocks.
template <typename K, typename... A>
void emu_launch(K kernel, unsigned grid, unsigned block, size_t, A... args) {
    gridDim = {std::min(grid, 2u), 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < gridDim.x; ++b) emu_block_run(kernel, EmuDim{b, 0, 0}, block, args...);
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
