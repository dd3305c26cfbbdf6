#include <cuda_runtime.h>

// NCHW: channel of element i is (i / plane) % channels.
__global__ void channel_bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, long total,
                                         int channels, int plane) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < total) y[i] = fmaxf(y[i] + bias[(i / plane) % channels], 0.0f);
}

void channel_bias_relu_launcher(float* y, const float* bias, long total, int channels, int plane,
                                cudaStream_t stream) {
  channel_bias_relu_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(y, bias, total, channels, plane);
}
