// Inclusive prefix sum along each row. One block of 256 threads per row walks it in chunks of 1024: each thread
// scans 4 consecutive elements, a warp scan (shuffles) and a scan of the 8 warp totals give each thread its
// offset, and the chunk total carries into the next chunk.
#include <cuda_runtime.h>

constexpr int THREADS = 256, PER_THREAD = 4, CHUNK = THREADS * PER_THREAD, WARPS = THREADS / 32;

__global__ __launch_bounds__(THREADS) void cumsum_rows(const float* __restrict__ x, float* __restrict__ y,
                                                       long long rows, long long cols) {
    __shared__ float warp_totals[WARPS];
    __shared__ float chunk_total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float carry = 0.0f;
        for (long long c0 = 0; c0 < cols; c0 += CHUNK) {
            const long long base = c0 + threadIdx.x * PER_THREAD;
            float v[PER_THREAD];
#pragma unroll
            for (int i = 0; i < PER_THREAD; ++i) v[i] = base + i < cols ? xr[base + i] : 0.0f;
#pragma unroll
            for (int i = 1; i < PER_THREAD; ++i) v[i] += v[i - 1];
            float t = v[PER_THREAD - 1];  // inclusive scan of thread totals within the warp
#pragma unroll
            for (int offset = 1; offset < 32; offset <<= 1) {
                const float other = __shfl_up_sync(0xffffffffu, t, offset);
                if (lane >= offset) t += other;
            }
            if (lane == 31) warp_totals[warp] = t;
            __syncthreads();
            if (threadIdx.x == 0) {
                float run = 0.0f;
                for (int w = 0; w < WARPS; ++w) {
                    const float total = warp_totals[w];
                    warp_totals[w] = run;  // becomes the exclusive offset of warp w
                    run += total;
                }
                chunk_total = run;
            }
            __syncthreads();
            const float offset = carry + warp_totals[warp] + t - v[PER_THREAD - 1];
#pragma unroll
            for (int i = 0; i < PER_THREAD; ++i) {
                if (base + i < cols) yr[base + i] = offset + v[i];
            }
            carry += chunk_total;
            __syncthreads();  // warp_totals and chunk_total are rewritten by the next chunk
        }
    }
}

extern "C" cudaError_t cumsum(const float* x, float* y, long long rows, long long cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    unsigned grid = (unsigned)(rows < (1 << 20) ? rows : (1 << 20));
    cumsum_rows<<<grid, THREADS, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
