// y = exp(x - max) / sum(exp(x - max)) per row. One warp per row: an online pass keeps the running maximum and
// the sum rescaled to it (one read instead of two), then a pass writes; the re-read hits L1/L2.
#include <cuda_runtime.h>

__device__ __forceinline__ void online_add(float& m, float& s, float v) {
    if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
    } else {
        s += expf(v - m);
    }
}

template <bool VEC4>
__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, long long rows, int cols) {
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    for (long long r = blockIdx.x * (long long)(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY, s = 0.0f;
        if (VEC4) {
            for (int c = lane * 4; c < cols; c += 128) {
                float4 v = *(const float4*)(xr + c);
                online_add(m, s, v.x);
                online_add(m, s, v.y);
                online_add(m, s, v.z);
                online_add(m, s, v.w);
            }
        } else {
            for (int c = lane; c < cols; c += 32) online_add(m, s, xr[c]);
        }
        for (int offset = 16; offset > 0; offset >>= 1) {  // merge (m, s) pairs across the warp
            float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
            float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
            float mm = fmaxf(m, m2);
            s = (m == -INFINITY ? 0.0f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
            m = mm;
        }
        const float inv = 1.0f / s;
        if (VEC4) {
            for (int c = lane * 4; c < cols; c += 128) {
                float4 v = *(const float4*)(xr + c);
                *(float4*)(yr + c) =
                    make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
            }
        } else {
            for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
        }
    }
}

extern "C" cudaError_t softmax(const float* x, float* y, long long rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const int threads = 256, rows_per_block = threads / 32;
    long long blocks = (rows + rows_per_block - 1) / rows_per_block;
    unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
    bool vec4 = cols % 4 == 0 && ((unsigned long long)x | (unsigned long long)y) % 16 == 0;
    if (vec4) {
        softmax_rows<true><<<grid, threads, 0, stream>>>(x, y, rows, cols);
    } else {
        softmax_rows<false><<<grid, threads, 0, stream>>>(x, y, rows, cols);
    }
    return cudaGetLastError();
}
