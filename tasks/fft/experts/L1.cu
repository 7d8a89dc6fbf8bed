// fft L1 expert: the Stockham auto-sort FFT with radix-4 stages (a radix-3 stage when 3 divides n,
// a radix-2 stage when log2 of the rest is odd). Each stage reads its butterfly's inputs with
// stride n/R and writes its outputs already in their place for the next stage (ping-pong between
// y and a scratch buffer), so there is no bit-reversal pass, and radix 4 halves the number of
// passes: 7 at n = 16384 instead of the textbook's 15. Still one launch per stage through global
// memory (the L2 design keeps the whole transform on chip).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr float kSqrt3Half = 0.86602540378443864676f;

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 csub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ float2 mul_neg_i(float2 a) { return make_float2(a.y, -a.x); }  // -i * a

// In-place R-point forward DFT of v[0..R).
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

template <int R>
__global__ void fft_l1_stage(const float2* __restrict__ in, float2* __restrict__ out, int64_t batch, int n, int ns) {
  const int per = n / R;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= batch * per) return;
  const int64_t b = g / per;
  const int j = static_cast<int>(g % per);
  const int k = j % ns;
  const float2* src = in + b * n + j;
  float2 v[R];
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = src[r * per];
  if (ns > 1) {
#pragma unroll
    for (int r = 1; r < R; ++r) {
      float s, c;
      sincospif(-2.0f * static_cast<float>(r * k) / static_cast<float>(ns * R), &s, &c);
      v[r] = cmul(v[r], make_float2(c, s));
    }
  }
  dft<R>(v);
  float2* dst = out + b * n + static_cast<int64_t>(j / ns) * ns * R + k;
#pragma unroll
  for (int q = 0; q < R; ++q) dst[q * ns] = v[q];
}

struct Scratch {
  float2* ptr = nullptr;
  size_t bytes = 0;
};

cudaError_t ensure_scratch(Scratch& s, size_t bytes) {
  if (s.bytes >= bytes) return cudaSuccess;
  if (s.ptr != nullptr) cudaFree(s.ptr);
  s.ptr = nullptr;
  s.bytes = 0;
  const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&s.ptr), bytes);
  if (err == cudaSuccess) s.bytes = bytes;
  return err;
}

}  // namespace

extern "C" int d2k_fft(const float* x, float* y, int64_t batch, int64_t n, cudaStream_t stream) {
  if (batch <= 0 || n < 2 || n > (1 << 20)) return static_cast<int>(cudaErrorInvalidValue);
  int radix[24];
  int count = 0;
  int m = static_cast<int>(n);
  if (m % 3 == 0) { radix[count++] = 3; m /= 3; }
  int log2m = 0;
  while (m % 2 == 0) { m /= 2; ++log2m; }
  if (m != 1) return static_cast<int>(cudaErrorInvalidValue);
  if (log2m % 2 == 1) radix[count++] = 2;
  for (int i = 0; i < log2m / 2; ++i) radix[count++] = 4;

  static Scratch scratch;
  const cudaError_t err = ensure_scratch(scratch, static_cast<size_t>(batch * n) * sizeof(float2));
  if (err != cudaSuccess) return static_cast<int>(err);
  const float2* src = reinterpret_cast<const float2*>(x);
  float2* out = reinterpret_cast<float2*>(y);
  const int threads = 256;
  int ns = 1;
  for (int s = 0; s < count; ++s) {
    // Ping-pong so that the last stage writes y.
    float2* dst = ((count - 1 - s) % 2 == 0) ? out : scratch.ptr;
    const int64_t work = batch * (n / radix[s]);
    const unsigned blocks = static_cast<unsigned>((work + threads - 1) / threads);
    switch (radix[s]) {
      case 2: fft_l1_stage<2><<<blocks, threads, 0, stream>>>(src, dst, batch, static_cast<int>(n), ns); break;
      case 3: fft_l1_stage<3><<<blocks, threads, 0, stream>>>(src, dst, batch, static_cast<int>(n), ns); break;
      default: fft_l1_stage<4><<<blocks, threads, 0, stream>>>(src, dst, batch, static_cast<int>(n), ns); break;
    }
    src = dst;
    ns *= radix[s];
  }
  return static_cast<int>(cudaGetLastError());
}
