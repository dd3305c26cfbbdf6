"""KernelBench-form candidate for examples/problems/swish_residual.py: one fused CUDA kernel, built with
torch.utils.cpp_extension.load_inline, reads x and r once and writes y once (eager makes three passes)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void swish_residual_kernel(const float4* __restrict__ x, const float4* __restrict__ r,
                                      float4* __restrict__ y, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        float4 a = x[i], b = r[i], o;
        o.x = a.x / (1.0f + expf(-a.x)) + b.x;
        o.y = a.y / (1.0f + expf(-a.y)) + b.y;
        o.z = a.z / (1.0f + expf(-a.z)) + b.z;
        o.w = a.w / (1.0f + expf(-a.w)) + b.w;
        y[i] = o;
    }
}

__global__ void swish_residual_scalar(const float* __restrict__ x, const float* __restrict__ r,
                                      float* __restrict__ y, long long start, long long n) {
    for (long long i = start + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i] / (1.0f + expf(-x[i])) + r[i];
}

static int blocks_for(long long items) { return (int)std::max(1LL, std::min((items + 255) / 256, 132LL * 16)); }

torch::Tensor swish_residual(torch::Tensor x, torch::Tensor r) {
    TORCH_CHECK(x.is_cuda() && r.is_cuda(), "swish_residual: CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && r.scalar_type() == torch::kFloat, "swish_residual: float32");
    TORCH_CHECK(x.sizes() == r.sizes(), "swish_residual: x and r differ in shape");
    auto xc = x.contiguous(), rc = r.contiguous();
    auto y = torch::empty_like(xc);
    const float *xp = xc.data_ptr<float>(), *rp = rc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    long long n = xc.numel();
    // float4 loads need 16-byte alignment: views with an offset take the scalar path.
    bool aligned = ((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(rp) |
                     reinterpret_cast<uintptr_t>(yp)) & 15) == 0;
    long long n4 = aligned ? n / 4 : 0;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (n4 > 0) {
        swish_residual_kernel<<<blocks_for(n4), 256, 0, stream>>>(reinterpret_cast<const float4*>(xp),
            reinterpret_cast<const float4*>(rp), reinterpret_cast<float4*>(yp), n4);
    }
    if (n > n4 * 4) swish_residual_scalar<<<blocks_for(n - n4 * 4), 256, 0, stream>>>(xp, rp, yp, n4 * 4, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP_SOURCE = "torch::Tensor swish_residual(torch::Tensor x, torch::Tensor r);"

swish = load_inline(
    name="swish_residual_ext",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["swish_residual"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return swish.swish_residual(x, r)
