#include <cublas_v2.h>
#include <cuda_runtime.h>

// Row-major y[m, n] = x[m, k] @ w[n, k]^T, computed as the column-major product y^T = w x^T.
bool gemm_xwt(const float* x, const float* w, float* y, int m, int n, int k, cudaStream_t stream) {
  static cublasHandle_t handle = nullptr;
  if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return false;
  if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS) return false;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, k, x, k, &beta, y, n) ==
         CUBLAS_STATUS_SUCCESS;
}
