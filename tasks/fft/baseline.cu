// fft baseline: the textbook iterative Cooley-Tukey FFT, written directly from the definition.
// One kernel reorders the input by digit reversal (bit reversal, with a leading radix-3 digit when
// 3 divides n), then one kernel per radix-2 (or radix-3) stage does the in-place butterflies over
// the whole batch in global memory, each twiddle from sincospif. log2(n) + 1 passes over the data
// (about 15 at n = 16384), each reading and writing every element: correct, but memory traffic is
// about 15x the compulsory one, and the reordering pass gathers with a large stride.
#include <cstdint>
#include <cuda_runtime.h>

struct Radices {
  int count;
  int r[16];
};

// Digit reversal for the radix sequence r[0..count): the first radix's digit is the least
// significant digit of the input index and becomes the most significant digit of the position.
__global__ void fft_baseline_permute(const float2* x, float2* y, int64_t batch, int n, Radices rad) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= batch * n) return;
  const int64_t b = g / n;
  int i = static_cast<int>(g % n);
  int rev = 0;
  for (int s = 0; s < rad.count; ++s) {
    rev = rev * rad.r[s] + i % rad.r[s];
    i /= rad.r[s];
  }
  y[g] = x[b * n + rev];
}

// One decimation-in-time stage: sub-transforms of length lp are combined into length lp * radix.
__global__ void fft_baseline_stage(float2* y, int64_t batch, int n, int lp, int radix) {
  const int per = n / radix;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= batch * per) return;
  const int64_t b = g / per;
  const int t = static_cast<int>(g % per);
  const int len = lp * radix;
  const int k = t % lp;
  float2* p = y + b * n + static_cast<int64_t>(t / lp) * len + k;
  float2 v[3];
  for (int r = 0; r < radix; ++r) {
    const float2 a = p[r * lp];
    float s, c;
    sincospif(-2.0f * static_cast<float>(r * k) / static_cast<float>(len), &s, &c);
    v[r] = make_float2(a.x * c - a.y * s, a.x * s + a.y * c);
  }
  for (int q = 0; q < radix; ++q) {
    float re = 0.0f, im = 0.0f;
    for (int r = 0; r < radix; ++r) {
      float s, c;
      sincospif(-2.0f * static_cast<float>((r * q) % radix) / static_cast<float>(radix), &s, &c);
      re += v[r].x * c - v[r].y * s;
      im += v[r].x * s + v[r].y * c;
    }
    p[q * lp] = make_float2(re, im);
  }
}

extern "C" int d2k_fft(const float* x, float* y, int64_t batch, int64_t n, cudaStream_t stream) {
  if (batch <= 0 || n < 2 || n > (1 << 20)) return static_cast<int>(cudaErrorInvalidValue);
  Radices rad{};
  int m = static_cast<int>(n);
  if (m % 3 == 0) { rad.r[rad.count++] = 3; m /= 3; }
  while (m % 2 == 0 && rad.count < 16) { rad.r[rad.count++] = 2; m /= 2; }
  if (m != 1) return static_cast<int>(cudaErrorInvalidValue);
  const float2* in = reinterpret_cast<const float2*>(x);
  float2* out = reinterpret_cast<float2*>(y);
  const int threads = 256;
  const int64_t total = batch * n;
  fft_baseline_permute<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream>>>(
      in, out, batch, static_cast<int>(n), rad);
  int lp = 1;
  for (int s = 0; s < rad.count; ++s) {
    const int64_t work = batch * (n / rad.r[s]);
    fft_baseline_stage<<<static_cast<unsigned>((work + threads - 1) / threads), threads, 0, stream>>>(
        out, batch, static_cast<int>(n), lp, rad.r[s]);
    lp *= rad.r[s];
  }
  return static_cast<int>(cudaGetLastError());
}
