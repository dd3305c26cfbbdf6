// out[i] = max(x[i], 0) + bias[i % cols], fused in one pass (eager PyTorch needs two kernels).
#include <cuda_runtime.h>

__global__ void relu_add_kernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                                long long n, long long cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        out[i] = (v > 0.0f ? v : 0.0f) + __ldg(bias + i % cols);
    }
}

extern "C" void relu_add(const float* x, const float* bias, float* out, long long n, long long cols,
                         cudaStream_t stream) {
    int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    relu_add_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, bias, out, n, cols);
}
