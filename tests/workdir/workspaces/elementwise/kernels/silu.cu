#include <cuda_runtime.h>

__global__ void silu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    y[i] = v / (1.0f + __expf(-v));
  }
}

void silu_launcher(const float* x, float* y, long n, cudaStream_t stream) {
  const int threads = 256;
  silu_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, stream>>>(x, y, n);
}
