// fft L2 expert: one pass over memory. Each block owns whole transforms (T = 2048/n of them for
// small n, one for n >= 2048; 3 * 2^a sizes use 1536) and runs every Stockham stage on chip:
// - the first stage reads its butterfly inputs straight from global memory (stride n/R, coalesced
//   across the threads), the last stage writes its outputs straight to global memory (they land at
//   j + q n/R, coalesced too): 8 bytes read and 8 written per element, the compulsory traffic;
// - between stages the transform lives in one shared-memory buffer (n * 8 bytes, 128 KiB at
//   n = 16384); each thread holds V complex values (16, or 12 for 3 * 2^a) in registers: it loads all
//   inputs of its butterflies, the block synchronises, then it writes the outputs back in place,
//   so one buffer suffices (Stockham is out of place, registers are the second buffer);
// - radix-4 butterflies in registers (a radix-3 and a radix-2 stage where n needs them); the
//   twiddle w = exp(-2 pi i k / (ns R)) comes from one fast sincos per butterfly, w^2 and w^3 by
//   complex multiplication.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr float kSqrt3Half = 0.86602540378443864676f;
constexpr float kTwoPi = 6.28318530717958647692f;

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 csub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ float2 mul_neg_i(float2 a) { return make_float2(a.y, -a.x); }  // -i * a

template <int R>
__device__ __forceinline__ void dft(float2* v) {
  if constexpr (R == 2) {
    const float2 a = v[0], b = v[1];
    v[0] = cadd(a, b);
    v[1] = csub(a, b);
  } else if constexpr (R == 3) {
    const float2 a = v[0], s = cadd(v[1], v[2]), d = mul_neg_i(csub(v[1], v[2]));
    const float2 t = make_float2(a.x - 0.5f * s.x, a.y - 0.5f * s.y);
    v[0] = cadd(a, s);
    v[1] = make_float2(t.x + kSqrt3Half * d.x, t.y + kSqrt3Half * d.y);
    v[2] = make_float2(t.x - kSqrt3Half * d.x, t.y - kSqrt3Half * d.y);
  } else {
    const float2 s02 = cadd(v[0], v[2]), d02 = csub(v[0], v[2]);
    const float2 s13 = cadd(v[1], v[3]), d13 = mul_neg_i(csub(v[1], v[3]));
    v[0] = cadd(s02, s13);
    v[1] = cadd(d02, d13);
    v[2] = csub(s02, s13);
    v[3] = csub(d02, d13);
  }
}

// The stages' radices, 2 bits each (stage s: (code >> 2s) & 3, 1 = radix 2, 2 = radix 3, 0 = radix 4),
// in a scalar so that the stage loop indexes no array (no local memory).
struct Plan {
  int count;
  uint32_t code;
  __host__ __device__ int radix(int s) const {
    const uint32_t c = (code >> (2 * s)) & 3u;
    return c == 1u ? 2 : c == 2u ? 3 : 4;
  }
  void add(int r) { code |= static_cast<uint32_t>(r == 2 ? 1 : r == 3 ? 2 : 0) << (2 * count); ++count; }
};

// One Stockham stage of radix R for the block's transforms. Thread `tid` owns butterflies
// g = tid + i * nt (i < V / R) of the block; butterfly g is butterfly j = g mod (n/R) of transform
// g / (n/R). Its inputs are v[i * R + r].
template <int V, int R>
__device__ __forceinline__ void stage(float2 (&v)[V], const float2* __restrict__ gx, float2* __restrict__ gy,
                                      float2* sm, int n, int ns, int valid, bool first, bool last) {
  const int tid = threadIdx.x, nt = blockDim.x, per = n / R;
  if (first) {
#pragma unroll
    for (int i = 0; i < V / R; ++i) {
      const int g = tid + i * nt, tr = g / per, j = g - tr * per;
#pragma unroll
      for (int r = 0; r < R; ++r)
        v[i * R + r] = tr < valid ? gx[static_cast<int64_t>(tr) * n + j + r * per] : make_float2(0.0f, 0.0f);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V / R; ++i) {
      const int g = tid + i * nt, tr = g / per, j = g - tr * per;
#pragma unroll
      for (int r = 0; r < R; ++r) v[i * R + r] = sm[tr * n + j + r * per];
    }
  }
  const float inv = 1.0f / static_cast<float>(ns * R);
#pragma unroll
  for (int i = 0; i < V / R; ++i) {
    const int g = tid + i * nt, j = g % per, k = j % ns;
    if (ns > 1) {
      float s, c;
      __sincosf(-kTwoPi * static_cast<float>(k) * inv, &s, &c);
      const float2 w1 = make_float2(c, s);
      v[i * R + 1] = cmul(v[i * R + 1], w1);
      if constexpr (R >= 3) {
        const float2 w2 = cmul(w1, w1);
        v[i * R + 2] = cmul(v[i * R + 2], w2);
        if constexpr (R == 4) v[i * R + 3] = cmul(v[i * R + 3], cmul(w2, w1));
      }
    }
    dft<R>(&v[i * R]);
  }
  if (last) {
#pragma unroll
    for (int i = 0; i < V / R; ++i) {
      const int g = tid + i * nt, tr = g / per, j = g - tr * per;  // ns * R == n: outputs at j + q * ns
      if (tr < valid) {
#pragma unroll
        for (int q = 0; q < R; ++q) gy[static_cast<int64_t>(tr) * n + j + q * ns] = v[i * R + q];
      }
    }
  } else {
    __syncthreads();  // every thread has read this stage's inputs
#pragma unroll
    for (int i = 0; i < V / R; ++i) {
      const int g = tid + i * nt, tr = g / per, j = g - tr * per, k = j % ns;
      float2* dst = sm + tr * n + (j / ns) * ns * R + k;
#pragma unroll
      for (int q = 0; q < R; ++q) dst[q * ns] = v[i * R + q];
    }
    __syncthreads();  // the outputs are visible to the next stage
  }
}

template <int V>
__global__ void __launch_bounds__(1024) fft_l2(const float2* __restrict__ x, float2* __restrict__ y, int64_t batch,
                                               int n, int per_block, Plan plan) {
  extern __shared__ float2 sm[];
  const int64_t first_tr = static_cast<int64_t>(blockIdx.x) * per_block;
  const int valid = static_cast<int>(batch - first_tr < per_block ? batch - first_tr : per_block);
  const float2* gx = x + first_tr * n;
  float2* gy = y + first_tr * n;
  float2 v[V];
  int ns = 1;
  for (int s = 0; s < plan.count; ++s) {
    const bool first = s == 0, last = s == plan.count - 1;
    switch (plan.radix(s)) {
      case 2: stage<V, 2>(v, gx, gy, sm, n, ns, valid, first, last); break;
      case 3:
        if constexpr (V % 3 == 0) stage<V, 3>(v, gx, gy, sm, n, ns, valid, first, last);
        break;
      default: stage<V, 4>(v, gx, gy, sm, n, ns, valid, first, last); break;
    }
    ns *= plan.radix(s);
  }
}

}  // namespace

extern "C" int d2k_fft(const float* x, float* y, int64_t batch, int64_t n, cudaStream_t stream) {
  if (batch <= 0 || n < 256 || n > 16384) return static_cast<int>(cudaErrorInvalidValue);
  Plan plan{};
  int m = static_cast<int>(n);
  const bool three = m % 3 == 0;
  if (three) { plan.add(3); m /= 3; }
  int log2m = 0;
  while (m % 2 == 0) { m /= 2; ++log2m; }
  if (m != 1) return static_cast<int>(cudaErrorInvalidValue);
  if (log2m % 2 == 1) plan.add(2);
  for (int i = 0; i < log2m / 2; ++i) plan.add(4);

  const int nn = static_cast<int>(n);
  const int per_block = three ? (nn < 1536 ? 1536 / nn : 1) : (nn < 2048 ? 2048 / nn : 1);
  const int elems = per_block * nn;
  const int threads = elems / (three ? 12 : 16);
  const size_t smem = static_cast<size_t>(elems) * sizeof(float2);
  const int64_t blocks = (batch + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const float2* in = reinterpret_cast<const float2*>(x);
  float2* out = reinterpret_cast<float2*>(y);
  cudaError_t err;
  if (three) {
    err = cudaFuncSetAttribute(fft_l2<12>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return static_cast<int>(err);
    fft_l2<12><<<static_cast<unsigned>(blocks), threads, smem, stream>>>(in, out, batch, nn, per_block, plan);
  } else {
    err = cudaFuncSetAttribute(fft_l2<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return static_cast<int>(err);
    fft_l2<16><<<static_cast<unsigned>(blocks), threads, smem, stream>>>(in, out, batch, nn, per_block, plan);
  }
  return static_cast<int>(cudaGetLastError());
}
