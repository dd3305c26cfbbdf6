// out = relu(x @ w^T + b): the GEMM is cuBLAS's, the bias + ReLU epilogue is our own kernel.
#pragma comment(lib, "cublas")
#include <cublas_v2.h>
#include <cuda_runtime.h>

__global__ void bias_relu_kernel(float* __restrict__ out, const float* __restrict__ b, long long total, int N) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += stride) {
        float v = out[i] + b[i % N];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

// Created once per process: cublasCreate costs milliseconds, far more than one GEMM of the problem's size.
static cublasHandle_t handle() {
    static cublasHandle_t h = nullptr;
    if (h == nullptr && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) h = nullptr;
    return h;
}

// Returns 0, or the cublasStatus_t / cudaError_t that failed (the model raises on anything else).
extern "C" int linear_relu(const float* x, const float* w, const float* b, float* out, int M, int K, int N,
                           cudaStream_t stream) {
    cublasHandle_t h = handle();
    if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t status = cublasSetStream(h, stream);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    // cuBLAS is column-major: the row-major out (M x N) is out^T (N x M) column-major, and
    // out^T = w x^T, where the row-major w (N x K) and x (M x K) read as w^T (K x N) and x^T (K x M).
    const float one = 1.0f, zero = 0.0f;
    status = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, K, x, K, &zero, out, N);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    long long total = (long long)M * N;
    int blocks = (int)((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
    bias_relu_kernel<<<blocks, 256, 0, stream>>>(out, b, total, N);
    return (int)cudaGetLastError();
}
