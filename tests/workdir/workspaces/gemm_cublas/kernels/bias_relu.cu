#include <cuda_runtime.h>

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, long total, int n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < total) y[i] = fmaxf(y[i] + bias[i % n], 0.0f);
}

void bias_relu_launcher(float* y, const float* bias, int m, int n, cudaStream_t stream) {
  long total = (long)m * n;
  bias_relu_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(y, bias, total, n);
}
