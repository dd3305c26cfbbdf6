#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

struct ConvShape {
  int n, c, h, w, k, r, s, pad, out_h, out_w;
};
bool conv_forward(const ConvShape& p, const float* x, const float* w, float* y, void* workspace,
                  size_t* workspace_bytes, cudaStream_t stream);
void channel_bias_relu_launcher(float* y, const float* bias, long total, int channels, int plane,
                                cudaStream_t stream);

static torch::Tensor conv_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t pad) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4 && x.is_contiguous() && w.is_contiguous(), "contiguous NCHW CUDA input");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input");
  ConvShape p{(int)x.size(0), (int)x.size(1), (int)x.size(2), (int)x.size(3), (int)w.size(0),
              (int)w.size(2), (int)w.size(3), (int)pad, 0, 0};
  p.out_h = p.h + 2 * p.pad - p.r + 1;
  p.out_w = p.w + 2 * p.pad - p.s + 1;
  auto y = torch::empty({p.n, p.k, p.out_h, p.out_w}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  size_t bytes = 0;
  TORCH_CHECK(conv_forward(p, nullptr, nullptr, nullptr, nullptr, &bytes, stream), "cuDNN set-up failed");
  auto workspace = torch::empty({(int64_t)bytes + 1}, x.options().dtype(torch::kUInt8));
  TORCH_CHECK(conv_forward(p, x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(),
                           workspace.data_ptr(), &bytes, stream),
              "cudnnConvolutionForward failed");
  channel_bias_relu_launcher(y.data_ptr<float>(), b.data_ptr<float>(), y.numel(), p.k, p.out_h * p.out_w, stream);
  return y;
}

static void register_conv_relu(pybind11::module& m) {
  m.def("conv_relu", &conv_relu, "relu(conv2d(x, w) + b) through cuDNN and a fused epilogue");
}

REGISTER_BINDING(conv_relu, register_conv_relu);
