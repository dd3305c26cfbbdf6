// y = silu(x + bias[c]) for NCHW x and a per-channel bias, fused in one pass (eager PyTorch needs two kernels and
// an intermediate tensor). float4 accesses when a channel plane is a multiple of 4 floats: then the 4 elements of
// a vector share one channel.
#include <cuda_runtime.h>

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

__global__ void bias_silu_vec4(const float4* __restrict__ x, const float* __restrict__ bias, float4* __restrict__ y,
                               long long n4, long long plane4, int channels) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const float b = __ldg(bias + (i / plane4) % channels);
        float4 v = x[i];
        y[i] = make_float4(silu(v.x + b), silu(v.y + b), silu(v.z + b), silu(v.w + b));
    }
}

__global__ void bias_silu_scalar(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
                                 long long n, long long plane, int channels) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        y[i] = silu(x[i] + __ldg(bias + (i / plane) % channels));
    }
}

extern "C" cudaError_t bias_silu(const float* x, const float* bias, float* y, long long n, long long plane,
                                 int channels, cudaStream_t stream) {
    if (n <= 0 || plane <= 0 || channels <= 0) return cudaSuccess;
    const int threads = 256;
    bool vec4 = plane % 4 == 0 && ((unsigned long long)x | (unsigned long long)y) % 16 == 0;
    long long work = vec4 ? n / 4 : n;
    long long blocks = (work + threads - 1) / threads;
    unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
    if (vec4) {
        bias_silu_vec4<<<grid, threads, 0, stream>>>((const float4*)x, bias, (float4*)y, n / 4, plane / 4, channels);
    } else {
        bias_silu_scalar<<<grid, threads, 0, stream>>>(x, bias, y, n, plane, channels);
    }
    return cudaGetLastError();
}
