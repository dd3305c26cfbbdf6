// values[r], indices[r] = max and argmax of row r, the first index on ties and NaN winning, as torch.max(dim)
// does. One thread per row: rows are short (16 floats = 64 contiguous bytes), so a warp reads 2 KB contiguously.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void row_max_kernel(const float* __restrict__ x, float* __restrict__ values,
                               int64_t* __restrict__ indices, long long rows, int cols) {
    for (long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x; r < rows;
         r += (long long)gridDim.x * blockDim.x) {
        const float* row = x + r * cols;
        float best = row[0];
        int best_i = 0;
        for (int c = 1; c < cols && best == best; ++c) {  // best != best: a NaN, which stays the maximum
            float v = row[c];
            if (v > best || v != v) {
                best = v;
                best_i = c;
            }
        }
        values[r] = best;
        indices[r] = best_i;
    }
}

extern "C" cudaError_t row_max(const float* x, float* values, int64_t* indices, long long rows, int cols,
                               cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    if (cols <= 0) return cudaErrorInvalidValue;  // torch.max of an empty row is an error too
    const int threads = 256;
    long long blocks = (rows + threads - 1) / threads;
    unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
    row_max_kernel<<<grid, threads, 0, stream>>>(x, values, indices, rows, cols);
    return cudaGetLastError();
}
