#include <cuda_runtime.h>
#include <cudnn.h>

// NCHW float convolution (stride 1, no dilation) through cuDNN's legacy API. conv_forward with workspace null
// only reports the workspace size it needs.
struct ConvShape {
  int n, c, h, w, k, r, s, pad, out_h, out_w;
};

static bool ok(cudnnStatus_t status) { return status == CUDNN_STATUS_SUCCESS; }

bool conv_forward(const ConvShape& p, const float* x, const float* w, float* y, void* workspace,
                  size_t* workspace_bytes, cudaStream_t stream) {
  static cudnnHandle_t handle = nullptr;
  if (handle == nullptr && !ok(cudnnCreate(&handle))) return false;
  if (!ok(cudnnSetStream(handle, stream))) return false;
  cudnnTensorDescriptor_t x_desc, y_desc;
  cudnnFilterDescriptor_t w_desc;
  cudnnConvolutionDescriptor_t conv_desc;
  cudnnCreateTensorDescriptor(&x_desc);
  cudnnCreateTensorDescriptor(&y_desc);
  cudnnCreateFilterDescriptor(&w_desc);
  cudnnCreateConvolutionDescriptor(&conv_desc);
  bool good = ok(cudnnSetTensor4dDescriptor(x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p.n, p.c, p.h, p.w)) &&
              ok(cudnnSetTensor4dDescriptor(y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p.n, p.k, p.out_h, p.out_w)) &&
              ok(cudnnSetFilter4dDescriptor(w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p.k, p.c, p.r, p.s)) &&
              ok(cudnnSetConvolution2dDescriptor(conv_desc, p.pad, p.pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
  cudnnConvolutionFwdAlgoPerf_t perf;
  int found = 0;
  good = good && ok(cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc, w_desc, conv_desc, y_desc, 1, &found, &perf)) &&
         found > 0;
  size_t needed = 0;
  good = good && ok(cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc, w_desc, conv_desc, y_desc, perf.algo, &needed));
  if (good && workspace == nullptr) {
    *workspace_bytes = needed;
  } else if (good) {
    const float alpha = 1.0f, beta = 0.0f;
    good = ok(cudnnConvolutionForward(handle, &alpha, x_desc, x, w_desc, w, conv_desc, perf.algo, workspace,
                                      *workspace_bytes, &beta, y_desc, y));
  }
  cudnnDestroyConvolutionDescriptor(conv_desc);
  cudnnDestroyFilterDescriptor(w_desc);
  cudnnDestroyTensorDescriptor(y_desc);
  cudnnDestroyTensorDescriptor(x_desc);
  return good;
}
