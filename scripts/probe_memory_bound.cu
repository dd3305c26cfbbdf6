// Design probes for the author's memory-bound kernels (issue 14), hand-written alternatives timed with CUDA events on
// 8 GB inputs: A column maxima (a thread a column; 4 columns a thread in 16-byte loads; a tile of 32 columns whose
// warps split the rows, rolled or unrolled), B argmax down a middle dim (packed 64-bit keys or value/index pairs),
// C a layer norm's rows in registers (the next row copied into shared memory meanwhile, or not), D a 3x3 stride-2
// max pool (4-byte taps, or a quad of outputs' window rows in 16-byte loads). Each alternative's output is compared
// with the first's. On the device:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 -o /tmp/probe scripts/probe_memory_bound.cu && /tmp/probe
// H100, 2026-12-07: A 2.93 / 3.22 / 2.79 / tile rolled 3.70, unrolled 8 2.95 ms; B packed a thread a column 3.35,
// 4 columns a thread 2.83 (pairs or packed alike); C 2.84 / 2.98 (no gain: the H100 is at its bandwidth either way);
// D 1.009 / 0.900 ms.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
__device__ __forceinline__ int32_t float_bits(float v) { return (int32_t)__float_as_uint(v); }
template <typename T, typename U> __device__ __forceinline__ auto max_nan(T a, U b) -> decltype(a + b) { return (a > b || a != a) ? a : b; }

// ---------- A: column max, R x C -> C
__device__ __forceinline__ void max4(float4& a, float4 v) {
  a.x = max_nan(a.x, v.x); a.y = max_nan(a.y, v.y); a.z = max_nan(a.z, v.z); a.w = max_nan(a.w, v.w);
}
const int64_t AR = 16384, AC = 131072;
__global__ void __launch_bounds__(256) a1(const float* __restrict__ in0, float* __restrict__ out0) {
  for (int64_t o = (int64_t)blockIdx.x * 256 + threadIdx.x; o < AC; o += (int64_t)gridDim.x * 256) {
    float acc = -INFINITY;
    for (int64_t r = 0; r < AR; r += 1) acc = max_nan(acc, in0[r * AC + o]);
    out0[o] = acc;
  }
}
// a thread per 4 columns, float4, rows unrolled
__global__ void __launch_bounds__(256) a2(const float* __restrict__ in0, float* __restrict__ out0) {
  const int64_t q = (int64_t)blockIdx.x * 256 + threadIdx.x;
  if (q >= AC / 4) return;
  float4 acc = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  #pragma unroll 4
  for (int64_t r = 0; r < AR; r += 1) {
    float4 v = reinterpret_cast<const float4*>(in0 + r * AC)[q];
    max4(acc, v);
  }
  reinterpret_cast<float4*>(out0)[q] = acc;
}
// 32 lanes x 4 columns a block, WARPS warps split the rows, combined in shared memory in warp order
template <int WARPS, int UNROLL>
__global__ void __launch_bounds__(WARPS * 32) a3(const float* __restrict__ in0, float* __restrict__ out0) {
  __shared__ float4 part[WARPS][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t q = (int64_t)blockIdx.x * 32 + lane;
  float4 acc = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  const int64_t per = AR / WARPS;
  #pragma unroll UNROLL
  for (int64_t r = warp * per; r < (warp + 1) * per; r += 1) {
    float4 v = reinterpret_cast<const float4*>(in0 + r * AC)[q];
    max4(acc, v);
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0) {
    for (int w = 1; w < WARPS; ++w) { float4 v = part[w][lane];
      max4(acc, v); }
    reinterpret_cast<float4*>(out0)[q] = acc;
  }
}
// scalar tile (32 columns a block), warps split rows (the current "tile" layout's shape), unrolled
template <int WARPS, int UNROLL>
__global__ void __launch_bounds__(WARPS * 32) a4(const float* __restrict__ in0, float* __restrict__ out0) {
  __shared__ float part[WARPS][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c = (int64_t)blockIdx.x * 32 + lane;
  float acc = -INFINITY;
  const int64_t per = AR / WARPS;
  #pragma unroll UNROLL
  for (int64_t r = warp * per; r < (warp + 1) * per; r += 1) acc = max_nan(acc, in0[r * AC + c]);
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0) { for (int w = 1; w < WARPS; ++w) acc = max_nan(acc, part[w][lane]); out0[c] = acc; }
}

// ---------- B: argmax over dim 1 of (B, R, I)
const int64_t BB = 2048, BR = 8192, BI = 128;
__device__ __forceinline__ int64_t key_of(float t1, int64_t i1) {
  const float t3 = t1 == 0.0f ? 0.0f : t1;
  const int32_t b = float_bits(t3);
  int32_t ord = b >= 0 ? b : (b ^ 2147483647);
  if (isnan(t3)) ord = 2147483647;
  return (int64_t)ord * 4294967296LL + (4294967295LL - i1);
}
__global__ void __launch_bounds__(256) b1(const float* __restrict__ in0, int64_t* __restrict__ out0) {
  for (int64_t o = (int64_t)blockIdx.x * 256 + threadIdx.x; o < BB * BI; o += (int64_t)gridDim.x * 256) {
    const int64_t i0 = ((int)(o) / 128) % 2048, i2 = (int)(o) % 128;
    int64_t acc = INT64_MIN;
    for (int64_t r = 0; r < BR; r += 1) acc = max_nan(acc, key_of(in0[i0 * BR * BI + r * BI + i2], r));
    out0[i0 * 128 + i2] = 4294967295LL - (acc & 4294967295LL);
  }
}
// pairs: value and first index; NaN wins, ties keep the first
struct VI { float v; int i; };
__device__ __forceinline__ void take(VI& a, float v, int i) { if (v > a.v || (v != v && a.v == a.v)) { a.v = v; a.i = i; } }
__device__ __forceinline__ void merge(VI& a, VI b) {  // b's indices come after a's
  if (b.v > a.v || (b.v != b.v && a.v == a.v)) a = b;
}
template <int WARPS, int UNROLL, bool PACKED>
__global__ void __launch_bounds__(WARPS * 32) b2(const float* __restrict__ in0, int64_t* __restrict__ out0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t cols = BI / 4;  // quads per row
  const int64_t tile = blockIdx.x;  // 32 quads of columns
  const int64_t q0 = tile * 32 + lane;  // quad index over B*I/4
  const int64_t b = q0 / cols, qc = q0 % cols;
  const float4* base = reinterpret_cast<const float4*>(in0 + b * BR * BI) + qc;
  const int per = BR / WARPS;
  if (PACKED) {
    __shared__ int64_t part[WARPS][32][4];
    int64_t acc[4] = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN};
    #pragma unroll UNROLL
    for (int r = warp * per; r < (warp + 1) * per; ++r) {
      float4 v = base[(int64_t)r * cols];
      acc[0] = max_nan(acc[0], key_of(v.x, r)); acc[1] = max_nan(acc[1], key_of(v.y, r));
      acc[2] = max_nan(acc[2], key_of(v.z, r)); acc[3] = max_nan(acc[3], key_of(v.w, r));
    }
    for (int j = 0; j < 4; ++j) part[warp][lane][j] = acc[j];
    __syncthreads();
    if (warp == 0) {
      for (int w = 1; w < WARPS; ++w) for (int j = 0; j < 4; ++j) acc[j] = max_nan(acc[j], part[w][lane][j]);
      for (int j = 0; j < 4; ++j) out0[q0 * 4 + j] = 4294967295LL - (acc[j] & 4294967295LL);
    }
  } else {
    __shared__ VI part[WARPS][32][4];
    VI acc[4] = {{-INFINITY, 0}, {-INFINITY, 0}, {-INFINITY, 0}, {-INFINITY, 0}};
    for (int j = 0; j < 4; ++j) acc[j].i = warp * per;
    #pragma unroll UNROLL
    for (int r = warp * per; r < (warp + 1) * per; ++r) {
      float4 v = base[(int64_t)r * cols];
      take(acc[0], v.x, r); take(acc[1], v.y, r); take(acc[2], v.z, r); take(acc[3], v.w, r);
    }
    for (int j = 0; j < 4; ++j) part[warp][lane][j] = acc[j];
    __syncthreads();
    if (warp == 0) {
      for (int w = 1; w < WARPS; ++w) for (int j = 0; j < 4; ++j) merge(acc[j], part[w][lane][j]);
      for (int j = 0; j < 4; ++j) out0[q0 * 4 + j] = acc[j].i;
    }
  }
}

// ---------- C: layer norm, rows of 32768 (one block of 1024 a row, 32 elements a thread)
const int64_t CR = 32768, CN = 32768;
template <typename T> __device__ void block_reduce2(T* a, T* b) {
  __shared__ T pa[32], pb[32];
  T v = *a, w = *b;
  for (int off = 16; off > 0; off >>= 1) { v += __shfl_xor_sync(~0u, v, off); w += __shfl_xor_sync(~0u, w, off); }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) { pa[warp] = v; pb[warp] = w; }
  __syncthreads();
  v = lane < warps ? pa[lane] : 0; w = lane < warps ? pb[lane] : 0;
  for (int off = 16; off > 0; off >>= 1) { v += __shfl_xor_sync(~0u, v, off); w += __shfl_xor_sync(~0u, w, off); }
  *a = v; *b = w;
}
__device__ __forceinline__ void ln_row(const float* c, const float* __restrict__ p0, const float* __restrict__ p1, float* __restrict__ out) {
  double s = 0, ss = 0;
  #pragma unroll
  for (int k = 0; k < 32; ++k) { double d = c[k]; s += d; ss += d * d; }
  block_reduce2(&s, &ss);
  const double mean = s * (1.0 / CN);
  const float meanf = (float)mean;
  double var = ss - s * mean; var = var > 0 ? var : 0; var *= (1.0 / CN);
  const float rs = 1 / sqrtf((float)var + 1e-5f);
  #pragma unroll
  for (int g = 0; g < 8; ++g) {
    const int64_t r0 = ((int64_t)g * 1024 + threadIdx.x) * 4;
    float4 w = *reinterpret_cast<const float4*>(p0 + r0), bb = *reinterpret_cast<const float4*>(p1 + r0);
    float4 o;
    o.x = (c[4*g+0] - meanf) * rs * w.x + bb.x; o.y = (c[4*g+1] - meanf) * rs * w.y + bb.y;
    o.z = (c[4*g+2] - meanf) * rs * w.z + bb.z; o.w = (c[4*g+3] - meanf) * rs * w.w + bb.w;
    *reinterpret_cast<float4*>(out + r0) = o;
  }
}
__global__ void __launch_bounds__(1024) c1(const float* __restrict__ in0, const float* __restrict__ p0, const float* __restrict__ p1, float* __restrict__ out0) {
  for (int64_t o = blockIdx.x; o < CR; o += gridDim.x) {
    float c[32];
    #pragma unroll
    for (int g = 0; g < 8; ++g) {
      float4 v = *reinterpret_cast<const float4*>(in0 + o * CN + ((int64_t)g * 1024 + threadIdx.x) * 4);
      c[4*g] = v.x; c[4*g+1] = v.y; c[4*g+2] = v.z; c[4*g+3] = v.w;
    }
    ln_row(c, p0, p1, out0 + o * CN);
  }
}
// the next row copied into shared memory (cp.async) while this one is reduced and written from registers
__device__ __forceinline__ void cp16(void* s, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(s)), "l"(g));
}
__global__ void __launch_bounds__(1024) c2(const float* __restrict__ in0, const float* __restrict__ p0, const float* __restrict__ p1, float* __restrict__ out0) {
  extern __shared__ float4 next[];  // 8 quads a thread, thread-major within each group: conflict-free
  int64_t o = blockIdx.x;
  auto fetch = [&](int64_t row) {
    #pragma unroll
    for (int g = 0; g < 8; ++g) cp16(&next[g * 1024 + threadIdx.x], in0 + row * CN + ((int64_t)g * 1024 + threadIdx.x) * 4);
    asm volatile("cp.async.commit_group;\n");
  };
  if (o < CR) fetch(o);
  for (; o < CR; o += gridDim.x) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    float c[32];
    #pragma unroll
    for (int g = 0; g < 8; ++g) { float4 v = next[g * 1024 + threadIdx.x]; c[4*g] = v.x; c[4*g+1] = v.y; c[4*g+2] = v.z; c[4*g+3] = v.w; }
    // each thread reads back only its own quads: no barrier needed before refilling them
    if (o + gridDim.x < CR) fetch(o + gridDim.x);
    ln_row(c, p0, p1, out0 + o * CN);
  }
}

// ---------- D: max pool 3x3 stride 2 pad 1, (64,128,256,256) -> (64,128,128,128)
const int64_t DN = 64 * 128, DH = 256, DW = 256, DOH = 128, DOW = 128;
__global__ void __launch_bounds__(256) d1(const float* __restrict__ in0, float* __restrict__ out0) {
  for (int64_t q = (int64_t)blockIdx.x * 256 + threadIdx.x; q < DN * DOH * DOW / 4; q += (int64_t)gridDim.x * 256) {
    const int64_t p = q / 32 / DOH, i2 = (q / 32) % DOH;
    float4 res; float* rv = &res.x;
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i3 = (q % 32) * 4 + lane;
      float w1 = -INFINITY;
      for (int a0 = 0; a0 < 3; ++a0) { const int64_t h0 = i2 * 2 - 1 + a0;
        for (int a1 = 0; a1 < 3; ++a1) { const int64_t h1 = i3 * 2 - 1 + a1;
          if (h0 >= 0 && h0 < DH && h1 >= 0 && h1 < DW) w1 = max_nan(w1, in0[p * DH * DW + h0 * DW + h1]); } }
      rv[lane] = w1;
    }
    reinterpret_cast<float4*>(out0)[q] = res;
  }
}
// 4 outputs a thread: input columns 8q'-1 .. 8q'+7 of each window row as two float4 and one element
__global__ void __launch_bounds__(256) d2(const float* __restrict__ in0, float* __restrict__ out0) {
  for (int64_t q = (int64_t)blockIdx.x * 256 + threadIdx.x; q < DN * DOH * DOW / 4; q += (int64_t)gridDim.x * 256) {
    const int64_t p = q / 32 / DOH, i2 = (q / 32) % DOH, c0 = (q % 32) * 8;
    float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    #pragma unroll
    for (int a0 = 0; a0 < 3; ++a0) {
      const int64_t h0 = i2 * 2 - 1 + a0;
      if (h0 < 0 || h0 >= DH) continue;
      const float* row = in0 + p * DH * DW + h0 * DW;
      float x[9];
      x[0] = c0 > 0 ? row[c0 - 1] : -INFINITY;
      float4 u = *reinterpret_cast<const float4*>(row + c0), v = *reinterpret_cast<const float4*>(row + c0 + 4);
      x[1] = u.x; x[2] = u.y; x[3] = u.z; x[4] = u.w; x[5] = v.x; x[6] = v.y; x[7] = v.z; x[8] = v.w;
      #pragma unroll
      for (int j = 0; j < 4; ++j) m[j] = max_nan(max_nan(max_nan(m[j], x[2*j]), x[2*j+1]), x[2*j+2]);
    }
    reinterpret_cast<float4*>(out0)[q] = make_float4(m[0], m[1], m[2], m[3]);
  }
}

template <typename F> float timeit(F f) {
  f(); CK(cudaDeviceSynchronize());
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaEventRecord(a); for (int i = 0; i < 10; ++i) f(); cudaEventRecord(b); CK(cudaEventSynchronize(b));
  float ms; cudaEventElapsedTime(&ms, a, b); return ms / 10;
}
__global__ void fill(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995; h ^= h >> 15;
    p[i] = (float)(h & 0xFFFFFF) / 16777216.0f * 8.0f - 4.0f;
  }
}
template <typename T> double maxdiff(const T* a, const T* b, int64_t n) {
  T* h1 = new T[n]; T* h2 = new T[n];
  cudaMemcpy(h1, a, n * sizeof(T), cudaMemcpyDeviceToHost); cudaMemcpy(h2, b, n * sizeof(T), cudaMemcpyDeviceToHost);
  double m = 0; for (int64_t i = 0; i < n; ++i) { double d = (double)h1[i] - (double)h2[i]; d = d < 0 ? -d : d; if (d > m || d != d) m = d; }
  delete[] h1; delete[] h2; return m;
}
#define REPORT(name, ms, bytes) printf("%-34s %8.3f ms %7.0f GB/s\n", name, ms, (bytes) / (ms) / 1e6)
int main() {
  float *x, *y, *z; int64_t *k1, *k2;
  const int64_t big = 2147483648LL;  // 8 GB of floats
  CK(cudaMalloc(&x, big * 4)); CK(cudaMalloc(&y, 1LL << 32)); CK(cudaMalloc(&z, 1LL << 32));
  CK(cudaMalloc(&k1, BB * BI * 8)); CK(cudaMalloc(&k2, BB * BI * 8));
  fill<<<4096, 256>>>(x, big, 1); CK(cudaDeviceSynchronize());
  // A
  const double abytes = AR * AC * 4.0;
  REPORT("A1 colmax thread scalar", timeit([&] { a1<<<AC / 256, 256>>>(x, y); }), abytes);
  REPORT("A2 colmax thread float4 unroll4", timeit([&] { a2<<<AC / 4 / 256, 256>>>(x, z); }), abytes);
  printf("   diff %g\n", maxdiff(y, z, AC));
  REPORT("A3 float4 8 warps unroll4", timeit([&] { a3<8, 4><<<AC / 128, 256>>>(x, z); }), abytes);
  printf("   diff %g\n", maxdiff(y, z, AC));
  REPORT("A3 float4 4 warps unroll4", timeit([&] { a3<4, 4><<<AC / 128, 128>>>(x, z); }), abytes);
  REPORT("A3 float4 8 warps unroll8", timeit([&] { a3<8, 8><<<AC / 128, 256>>>(x, z); }), abytes);
  REPORT("A3 float4 16 warps unroll2", timeit([&] { a3<16, 2><<<AC / 128, 512>>>(x, z); }), abytes);
  REPORT("A4 scalar tile 8 warps unroll1", timeit([&] { a4<8, 1><<<AC / 32, 256>>>(x, z); }), abytes);
  REPORT("A4 scalar tile 8 warps unroll8", timeit([&] { a4<8, 8><<<AC / 32, 256>>>(x, z); }), abytes);
  printf("   diff %g\n", maxdiff(y, z, AC));
  // B
  const double bbytes = BB * BR * BI * 4.0;
  REPORT("B1 argmax thread packed", timeit([&] { b1<<<BB * BI / 256, 256>>>(x, k1); }), bbytes);
  REPORT("B2 argmax f4 8w u4 pairs", timeit([&] { b2<8, 4, false><<<BB * BI / 128, 256>>>(x, k2); }), bbytes);
  printf("   diff %g\n", maxdiff(k1, k2, BB * BI));
  REPORT("B2 argmax f4 8w u4 packed", timeit([&] { b2<8, 4, true><<<BB * BI / 128, 256>>>(x, k2); }), bbytes);
  printf("   diff %g\n", maxdiff(k1, k2, BB * BI));
  REPORT("B2 argmax f4 4w u4 pairs", timeit([&] { b2<4, 4, false><<<BB * BI / 128, 128>>>(x, k2); }), bbytes);
  REPORT("B2 argmax f4 16w u2 pairs", timeit([&] { b2<16, 2, false><<<BB * BI / 128, 512>>>(x, k2); }), bbytes);
  // C
  float *p0 = y, *p1 = y + CN, *out = z;
  fill<<<64, 256>>>(y, 2 * CN, 7);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const double cbytes = CR * CN * 8.0;
  float *out2; CK(cudaMalloc(&out2, CR * CN * 4));
  REPORT("C1 layernorm regs", timeit([&] { c1<<<CR, 1024>>>(x, p0, p1, out); }), cbytes);
  REPORT("C1 layernorm regs grid=sms", timeit([&] { c1<<<sms, 1024>>>(x, p0, p1, out); }), cbytes);
  CK(cudaFuncSetAttribute(c2, cudaFuncAttributeMaxDynamicSharedMemorySize, 128 * 1024));
  REPORT("C2 layernorm regs+next in smem", timeit([&] { c2<<<sms, 1024, 128 * 1024>>>(x, p0, p1, out2); }), cbytes);
  CK(cudaGetLastError());
  printf("   diff %g\n", maxdiff(out, out2, CR * CN / 64));
  // D
  const double dbytes = DN * DH * DW * 4.0 + DN * DOH * DOW * 4.0;
  REPORT("D1 maxpool vec4 scalar loads", timeit([&] { d1<<<65535, 256>>>(x, y); }), dbytes);
  REPORT("D2 maxpool float4 loads", timeit([&] { d2<<<65535, 256>>>(x, z); }), dbytes);
  printf("   diff %g\n", maxdiff(y, z, DN * DOH * DOW));
  return 0;
}
