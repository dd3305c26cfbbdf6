// y[b, c] = sum_r x[b, r, c] for x of shape (B, R, C): one thread per (b, 4 columns), summing down r, so a
// warp reads 512 contiguous bytes per step. Scalar path when C is not a multiple of 4 or pointers unaligned.
#include <cuda_runtime.h>

__global__ void sum_mid_vec4(const float4* __restrict__ x, float4* __restrict__ y, long long batch, int reduce,
                             long long cols4) {
    long long total = batch * cols4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long b = i / cols4, c = i - b * cols4;
        const float4* p = x + b * reduce * cols4 + c;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int r = 0; r < reduce; ++r) {
            float4 v = p[r * cols4];
            acc.x += v.x;
            acc.y += v.y;
            acc.z += v.z;
            acc.w += v.w;
        }
        y[i] = acc;
    }
}

__global__ void sum_mid_scalar(const float* __restrict__ x, float* __restrict__ y, long long batch, int reduce,
                               long long cols) {
    long long total = batch * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long b = i / cols, c = i - b * cols;
        const float* p = x + b * reduce * cols + c;
        float acc = 0.0f;
        for (int r = 0; r < reduce; ++r) acc += p[r * cols];
        y[i] = acc;
    }
}

extern "C" cudaError_t sum_dim1(const float* x, float* y, long long batch, int reduce, long long cols,
                                cudaStream_t stream) {
    if (batch <= 0 || cols <= 0) return cudaSuccess;
    const int threads = 256;
    bool vec4 = cols % 4 == 0 && ((unsigned long long)x | (unsigned long long)y) % 16 == 0;
    long long work = batch * (vec4 ? cols / 4 : cols);
    long long blocks = (work + threads - 1) / threads;
    unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
    if (vec4) {
        sum_mid_vec4<<<grid, threads, 0, stream>>>((const float4*)x, (float4*)y, batch, reduce, cols / 4);
    } else {
        sum_mid_scalar<<<grid, threads, 0, stream>>>(x, y, batch, reduce, cols);
    }
    return cudaGetLastError();
}
