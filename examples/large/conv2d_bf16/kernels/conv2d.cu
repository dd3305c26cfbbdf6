// Direct 2D convolution, stride 1, zero padding, NCHW, bfloat16 in and out with float32 accumulation and bias.
// A block computes a 16 x 16 pixel tile for 16 output channels of one image; each of its 256 threads owns one
// pixel and 16 accumulators. Input channels go 8 at a time through shared memory: the input tile with its halo
// and the matching weights, both widened to float32 once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int TILE = 16, OC_PER_BLOCK = 16, IC_CHUNK = 8, MAX_K = 7;
constexpr int MAX_SPAN = TILE + MAX_K - 1;

__global__ __launch_bounds__(TILE * TILE) void conv2d_direct(const __nv_bfloat16* __restrict__ x,
                                                            const __nv_bfloat16* __restrict__ w,
                                                            const __nv_bfloat16* __restrict__ bias,
                                                            __nv_bfloat16* __restrict__ y, int batch, int cin,
                                                            int h, int wd, int cout, int kh, int kw, int pad_h,
                                                            int pad_w, int out_h, int out_w) {
    __shared__ float in_s[IC_CHUNK][MAX_SPAN][MAX_SPAN];
    __shared__ float w_s[OC_PER_BLOCK][IC_CHUNK][MAX_K * MAX_K];
    const int tiles_x = (out_w + TILE - 1) / TILE;
    const int tile_y = blockIdx.x / tiles_x, tile_x = blockIdx.x % tiles_x;
    const int oc0 = blockIdx.y * OC_PER_BLOCK;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    const int oy = tile_y * TILE + threadIdx.y, ox = tile_x * TILE + threadIdx.x;
    const int span_h = TILE + kh - 1, span_w = TILE + kw - 1;
    for (int n = blockIdx.z; n < batch; n += gridDim.z) {
        float acc[OC_PER_BLOCK] = {};
        for (int ic0 = 0; ic0 < cin; ic0 += IC_CHUNK) {
            for (int i = tid; i < IC_CHUNK * span_h * span_w; i += TILE * TILE) {
                const int c = i / (span_h * span_w), rest = i % (span_h * span_w);
                const int sy = rest / span_w, sx = rest % span_w;
                const int iy = tile_y * TILE + sy - pad_h, ix = tile_x * TILE + sx - pad_w;
                float v = 0.0f;
                if (ic0 + c < cin && iy >= 0 && iy < h && ix >= 0 && ix < wd) {
                    v = __bfloat162float(x[(((long long)n * cin + ic0 + c) * h + iy) * wd + ix]);
                }
                in_s[c][sy][sx] = v;
            }
            for (int i = tid; i < OC_PER_BLOCK * IC_CHUNK * kh * kw; i += TILE * TILE) {
                const int o = i / (IC_CHUNK * kh * kw), rest = i % (IC_CHUNK * kh * kw);
                const int c = rest / (kh * kw), k = rest % (kh * kw);
                float v = 0.0f;
                if (oc0 + o < cout && ic0 + c < cin) {
                    v = __bfloat162float(w[(((long long)(oc0 + o) * cin) + ic0 + c) * kh * kw + k]);
                }
                w_s[o][c][k] = v;
            }
            __syncthreads();
            for (int c = 0; c < IC_CHUNK; ++c) {
                for (int ky = 0; ky < kh; ++ky) {
                    for (int kx = 0; kx < kw; ++kx) {
                        const float v = in_s[c][threadIdx.y + ky][threadIdx.x + kx];
                        const int k = ky * kw + kx;
#pragma unroll
                        for (int o = 0; o < OC_PER_BLOCK; ++o) acc[o] += v * w_s[o][c][k];
                    }
                }
            }
            __syncthreads();
        }
        if (oy < out_h && ox < out_w) {
#pragma unroll
            for (int o = 0; o < OC_PER_BLOCK; ++o) {
                if (oc0 + o < cout) {
                    const float b = bias ? __bfloat162float(bias[oc0 + o]) : 0.0f;
                    y[(((long long)n * cout + oc0 + o) * out_h + oy) * out_w + ox] = __float2bfloat16_rn(acc[o] + b);
                }
            }
        }
    }
}

extern "C" cudaError_t conv2d(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                              __nv_bfloat16* y, int batch, int cin, int h, int wd, int cout, int kh, int kw, int pad_h,
                              int pad_w, cudaStream_t stream) {
    if (kh < 1 || kw < 1 || kh > MAX_K || kw > MAX_K) return cudaErrorInvalidValue;
    const int out_h = h + 2 * pad_h - kh + 1, out_w = wd + 2 * pad_w - kw + 1;
    if (batch <= 0 || cout <= 0 || out_h <= 0 || out_w <= 0) return cudaSuccess;
    dim3 block(TILE, TILE);
    dim3 grid(((out_h + TILE - 1) / TILE) * ((out_w + TILE - 1) / TILE), (cout + OC_PER_BLOCK - 1) / OC_PER_BLOCK,
              batch < 65535 ? batch : 65535);
    conv2d_direct<<<grid, block, 0, stream>>>(x, w, bias, y, batch, cin, h, wd, cout, kh, kw, pad_h, pad_w, out_h,
                                              out_w);
    return cudaGetLastError();
}
