// fft reference (trusted; agents never see it): the forward DFT
//   y[b][k] = sum_j x[b][j] * exp(-2 pi i j k / n)
// computed in double by the Stockham formulation of the mixed-radix Cooley-Tukey factorisation:
// one launch per radix-2 or radix-3 stage over the whole batch, double-precision scratch, every
// twiddle from sincospi in double. The result is within about 1e-13 |y| of the exact DFT, far below
// the fp32 tolerance. Works for every n whose only prime factors are 2 and 3 (the task uses 2^a and
// 3 * 2^a). tasks/fft/bench checks it on the CPU against a direct O(n^2) DFT.
#include <cstdint>
#include <cuda_runtime.h>

struct cd { double re, im; };

// Stage with radix R (2 or 3): the product of the radices before it is ns. Butterfly j of a
// transform reads its R inputs with stride n/R, multiplies input r by exp(-2 pi i r (j mod ns) / (ns R)),
// takes the R-point DFT and writes output q at (j / ns) * ns * R + (j mod ns) + q * ns.
__global__ void fft_reference_stage(const cd* in, cd* out, int64_t batch, int64_t n, int64_t ns, int radix) {
  const int64_t per = n / radix;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= batch * per) return;
  const int64_t b = g / per, j = g % per;
  const cd* src = in + b * n;
  cd* dst = out + b * n;
  const int64_t k = j % ns;
  cd v[3];
  for (int r = 0; r < radix; ++r) {
    const cd a = src[j + r * per];
    double s, c;
    sincospi(-2.0 * static_cast<double>(k * r) / static_cast<double>(ns * radix), &s, &c);
    v[r] = {a.re * c - a.im * s, a.re * s + a.im * c};
  }
  const int64_t base = (j / ns) * ns * radix + k;
  for (int q = 0; q < radix; ++q) {
    double re = 0.0, im = 0.0;
    for (int r = 0; r < radix; ++r) {
      double s, c;
      sincospi(-2.0 * static_cast<double>((q * r) % radix) / radix, &s, &c);
      re += v[r].re * c - v[r].im * s;
      im += v[r].re * s + v[r].im * c;
    }
    dst[base + q * ns] = {re, im};
  }
}

__global__ void fft_reference_widen(const float* x, cd* out, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = {static_cast<double>(x[2 * i]), static_cast<double>(x[2 * i + 1])};
}

__global__ void fft_reference_narrow(const cd* in, float* y, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) {
    y[2 * i] = static_cast<float>(in[i].re);
    y[2 * i + 1] = static_cast<float>(in[i].im);
  }
}

extern "C" int d2k_fft(const float* x, float* y, int64_t batch, int64_t n, cudaStream_t stream) {
  if (batch <= 0 || n <= 0) return static_cast<int>(cudaErrorInvalidValue);
  int radices[64];
  int stages = 0;
  for (int64_t m = n; m > 1;) {
    if (m % 3 == 0) { radices[stages++] = 3; m /= 3; }
    else if (m % 2 == 0) { radices[stages++] = 2; m /= 2; }
    else return static_cast<int>(cudaErrorInvalidValue);  // a prime factor other than 2 and 3
  }
  const int64_t count = batch * n;
  cd* buf[2] = {nullptr, nullptr};
  cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&buf[0]), count * sizeof(cd), stream);
  if (err == cudaSuccess) err = cudaMallocAsync(reinterpret_cast<void**>(&buf[1]), count * sizeof(cd), stream);
  if (err != cudaSuccess) {
    if (buf[0]) cudaFreeAsync(buf[0], stream);
    return static_cast<int>(err);
  }
  const int threads = 256;
  fft_reference_widen<<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0, stream>>>(x, buf[0], count);
  int cur = 0;
  int64_t ns = 1;
  for (int s = 0; s < stages; ++s) {
    const int64_t work = batch * (n / radices[s]);
    fft_reference_stage<<<static_cast<unsigned>((work + threads - 1) / threads), threads, 0, stream>>>(
        buf[cur], buf[1 - cur], batch, n, ns, radices[s]);
    cur = 1 - cur;
    ns *= radices[s];
  }
  fft_reference_narrow<<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0, stream>>>(buf[cur], y, count);
  err = cudaGetLastError();
  cudaFreeAsync(buf[0], stream);
  cudaFreeAsync(buf[1], stream);
  return static_cast<int>(err);
}
