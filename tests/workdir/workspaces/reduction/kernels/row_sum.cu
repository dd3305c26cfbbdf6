#include <cuda_runtime.h>

// One block per row: a strided partial sum per thread, then warp shuffles and one shared-memory pass.
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {
  const float* row = x + (long)blockIdx.x * cols;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  __shared__ float warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
  }
}

void row_sum_launcher(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
  row_sum_kernel<<<rows, 256, 0, stream>>>(x, out, cols);
}
