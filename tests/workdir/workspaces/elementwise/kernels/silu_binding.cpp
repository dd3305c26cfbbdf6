#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

void silu_launcher(const float* x, float* y, long n, cudaStream_t stream);

static torch::Tensor silu_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
  auto y = torch::empty_like(x);
  silu_launcher(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream());
  return y;
}

static void register_silu(pybind11::module& m) { m.def("silu_forward", &silu_forward, "x * sigmoid(x)"); }

REGISTER_BINDING(silu, register_silu);
