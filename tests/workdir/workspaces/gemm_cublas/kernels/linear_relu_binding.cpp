#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

bool gemm_xwt(const float* x, const float* w, float* y, int m, int n, int k, cudaStream_t stream);
void bias_relu_launcher(float* y, const float* bias, int m, int n, cudaStream_t stream);

static torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "contiguous CUDA inputs");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32, "float32 inputs");
  const int m = (int)x.size(0), k = (int)x.size(1), n = (int)w.size(0);
  auto y = torch::empty({m, n}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  TORCH_CHECK(gemm_xwt(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), m, n, k, stream),
              "cublasSgemm failed");
  bias_relu_launcher(y.data_ptr<float>(), b.data_ptr<float>(), m, n, stream);
  return y;
}

static void register_linear_relu(pybind11::module& m) {
  m.def("linear_relu", &linear_relu, "relu(x @ w^T + b) through cuBLAS and a fused epilogue");
}

REGISTER_BINDING(linear_relu, register_linear_relu);
