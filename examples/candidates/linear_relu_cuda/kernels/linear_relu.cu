// out[m, n] = relu(sum_k x[m, k] * w[n, k] + b[n]); 32x32 output tiles, 32-wide K steps through shared memory.
#include <cuda_runtime.h>

constexpr int TILE = 32;

__global__ void linear_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ out, int M, int K, int N) {
    __shared__ float xs[TILE][TILE + 1];
    __shared__ float ws[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y;  // m
    int col = blockIdx.x * TILE + threadIdx.x;  // n
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        int kx = k0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (row < M && kx < K) ? x[(long long)row * K + kx] : 0.0f;
        int wn = blockIdx.x * TILE + threadIdx.y;
        ws[threadIdx.y][threadIdx.x] = (wn < N && kx < K) ? w[(long long)wn * K + kx] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[threadIdx.x][k];
        __syncthreads();
    }
    if (row < M && col < N) {
        float v = acc + b[col];
        out[(long long)row * N + col] = v > 0.0f ? v : 0.0f;
    }
}

extern "C" void linear_relu(const float* x, const float* w, const float* b, float* out, int M, int K, int N,
                            cudaStream_t stream) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_relu_kernel<<<grid, block, 0, stream>>>(x, w, b, out, M, K, N);
}
