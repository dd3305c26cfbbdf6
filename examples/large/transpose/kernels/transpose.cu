// y = x^T for a row-major (rows x cols) float32 matrix: 32 x 32 tiles through shared memory (one padding column
// against bank conflicts), so both the reads of x and the writes of y are coalesced.
#include <cuda_runtime.h>

constexpr int TILE = 32, ROWS_PER_PASS = 8;

__global__ void transpose_tiled(const float* __restrict__ x, float* __restrict__ y, long long rows, long long cols) {
    __shared__ float tile[TILE][TILE + 1];
    const long long in_col = (long long)blockIdx.x * TILE + threadIdx.x;
    const long long in_row0 = (long long)blockIdx.y * TILE;
    for (int i = threadIdx.y; i < TILE; i += ROWS_PER_PASS) {
        const long long r = in_row0 + i;
        if (r < rows && in_col < cols) tile[i][threadIdx.x] = x[r * cols + in_col];
    }
    __syncthreads();
    const long long out_col = in_row0 + threadIdx.x;  // a column of y is a row of x
    const long long out_row0 = (long long)blockIdx.x * TILE;
    for (int i = threadIdx.y; i < TILE; i += ROWS_PER_PASS) {
        const long long r = out_row0 + i;
        if (r < cols && out_col < rows) y[r * rows + out_col] = tile[threadIdx.x][i];
    }
}

extern "C" cudaError_t transpose(const float* x, float* y, long long rows, long long cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    if ((rows + TILE - 1) / TILE > 65535) return cudaErrorInvalidValue;  // grid.y limit
    dim3 block(TILE, ROWS_PER_PASS);
    dim3 grid((unsigned)((cols + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE));
    transpose_tiled<<<grid, block, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
