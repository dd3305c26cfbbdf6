#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

void row_sum_launcher(const float* x, float* out, int rows, int cols, cudaStream_t stream);

static torch::Tensor row_sum(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x: 2-d contiguous float32 CUDA");
  auto out = torch::empty({x.size(0)}, x.options());
  row_sum_launcher(x.data_ptr<float>(), out.data_ptr<float>(), (int)x.size(0), (int)x.size(1),
                   c10::cuda::getCurrentCUDAStream());
  return out;
}

static void register_row_sum(pybind11::module& m) { m.def("row_sum", &row_sum, "sum over the last dimension"); }

REGISTER_BINDING(row_sum, register_row_sum);
