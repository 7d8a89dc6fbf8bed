// fft L3 expert: the L2 design (one pass; whole transforms per block in shared memory; radix-4
// Stockham stages in registers) specialised per size and fed by Hopper's copy engine:
// - one kernel per size n (2^a or 3 * 2^a in [256, 16384]): the plan (radices, ns, threads) is a
//   compile-time constant, the stages are unrolled, and every index division or modulo is by a
//   constant (shifts and multiplies instead of the ~20-instruction integer divisions that L2's
//   runtime sizes cost, which make L2 instruction-bound rather than memory-bound); powers of two
//   use radix-8 stages (5 at n = 16384 instead of 7);
// - the block's transforms (contiguous, T * n * 8 bytes) come into shared memory by bulk async
//   copies (cp.async.bulk, UBLKCP in SASS) issued by one thread and tracked by an mbarrier, while
//   the other threads build the twiddle tables;
// - twiddles are exact table entries: w^e = hi[e / 64] * lo[e % 64], two small tables of n-th roots
//   of unity (n/64 + 64 entries, 2.5 KiB at n = 16384) built per block in double precision
//   (sincospi): no MUFU.SIN/COS, and more accurate than fast sincos;
// - the last stage (radix 3 for 3 * 2^a, so that every earlier stage has a power-of-two ns) gives
//   each thread adjacent pairs of butterflies, whose outputs are adjacent in y: it stores straight
//   from registers with 128-bit streaming stores (STG.E.EF.128), no shared-memory round trip.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr float kSqrt3Half = 0.86602540378443864676f;
constexpr float kSqrtHalf = 0.70710678118654752440f;
constexpr int kLo = 64;  // entries of the low twiddle table

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
  } else if constexpr (R == 4) {
    const float2 s02 = cadd(v[0], v[2]), d02 = csub(v[0], v[2]);
    const float2 s13 = cadd(v[1], v[3]), d13 = mul_neg_i(csub(v[1], v[3]));
    v[0] = cadd(s02, s13);
    v[1] = cadd(d02, d13);
    v[2] = csub(s02, s13);
    v[3] = csub(d02, d13);
  } else {  // R == 8: one radix-2 layer (decimation in frequency), W8^k, two 4-point DFTs
    float2 s[4], d[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s[k] = cadd(v[k], v[k + 4]);
      d[k] = csub(v[k], v[k + 4]);
    }
    d[1] = make_float2(kSqrtHalf * (d[1].x + d[1].y), kSqrtHalf * (d[1].y - d[1].x));   // * (1 - i)/sqrt 2
    d[2] = mul_neg_i(d[2]);                                                             // * -i
    d[3] = make_float2(kSqrtHalf * (d[3].y - d[3].x), -kSqrtHalf * (d[3].x + d[3].y));  // * (-1 - i)/sqrt 2
    dft<4>(s);
    dft<4>(d);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      v[2 * q] = s[q];
      v[2 * q + 1] = d[q];
    }
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The stages' radices, 2 bits each (stage s: (code >> 2s) & 3, 1 = radix 2, 2 = radix 3, 0 = radix 4),
// in a scalar so that the stage loop indexes no array (no local memory).
// The plan of size n, fixed at compile time. Powers of two: radix-8 stages (one radix-2 or radix-4
// stage first when log2(n) is not a multiple of 3): 5 stages at n = 16384 instead of radix 4's 7,
// so fewer shared-memory round trips and index computations per element. 3 * 2^a (12 values per
// thread, which 8 does not divide): a radix-2 stage when a is odd, radix-4 stages, then the radix-3
// stage last, so that every stage before it has a power-of-two ns. Every last stage has an even
// number of butterflies per thread (16/8, 16/4 or 12/3). Stockham allows any order of the radices.
__host__ __device__ constexpr bool has3(int n) { return n % 3 == 0; }
__host__ __device__ constexpr int log2_of(int m) { int l = 0; while (m > 1) { m /= 2; ++l; } return l; }
__host__ __device__ constexpr int stage_count(int n) {
  if (has3(n)) {
    const int l = log2_of(n / 3);
    return (l % 2) + l / 2 + 1;
  }
  const int l = log2_of(n);
  return (l % 3 != 0 ? 1 : 0) + l / 3;
}
__host__ __device__ constexpr int stage_radix(int n, int s) {
  if (has3(n)) {
    const int l = log2_of(n / 3);
    if (l % 2 == 1 && s == 0) return 2;
    if (s == stage_count(n) - 1) return 3;
    return 4;
  }
  const int l = log2_of(n);
  if (s == 0 && l % 3 == 1) return 2;
  if (s == 0 && l % 3 == 2) return 4;
  return 8;
}
__host__ __device__ constexpr int stage_ns(int n, int s) {  // product of the radices before stage s
  int p = 1;
  for (int i = 0; i < s; ++i) p *= stage_radix(n, i);
  return p;
}
__host__ __device__ constexpr int values_per_thread(int n) { return has3(n) ? 12 : 16; }
__host__ __device__ constexpr int transforms_per_block(int n) { return has3(n) ? (n < 1536 ? 1536 / n : 1) : (n < 2048 ? 2048 / n : 1); }
__host__ __device__ constexpr int threads_for(int n) { return transforms_per_block(n) * n / values_per_thread(n); }

// exp(-2 pi i e / N) for 0 <= e < N, from the two tables.
__device__ __forceinline__ float2 twiddle(const float2* hi, const float2* lo, int e) {
  return cmul(hi[e >> 6], lo[e & (kLo - 1)]);
}

// Stage S of the size-N plan, every index a compile-time divisor. Thread tid owns V / R butterflies;
// in the last stage they come in adjacent pairs (g = 2 tid + (i & 1) + (i / 2) * 2 NT), whose outputs
// are adjacent in y: one 16-byte store per pair and output.
template <int N, int S>
__device__ __forceinline__ void stage(float2 (&v)[values_per_thread(N)], float2* sm, const float2* hi, const float2* lo,
                                      float2* __restrict__ gy, int valid) {
  constexpr int V = values_per_thread(N), R = stage_radix(N, S), NS = stage_ns(N, S), PER = N / R;
  constexpr int NT = threads_for(N), STEP = N / (NS * R);
  constexpr bool kLast = S == stage_count(N) - 1;
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < V / R; ++i) {
    const int g = kLast ? 2 * tid + (i & 1) + (i >> 1) * 2 * NT : tid + i * NT;
    const int tr = g / PER, j = g - tr * PER;
#pragma unroll
    for (int r = 0; r < R; ++r) v[i * R + r] = sm[tr * N + j + r * PER];
  }
#pragma unroll
  for (int i = 0; i < V / R; ++i) {
    const int g = kLast ? 2 * tid + (i & 1) + (i >> 1) * 2 * NT : tid + i * NT;
    const int e = (g % PER % NS) * STEP;  // twiddle r is w^(r e)
    if constexpr (NS > 1) {
#pragma unroll
      for (int r = 1; r < R; ++r) v[i * R + r] = cmul(v[i * R + r], twiddle(hi, lo, r * e));
    }
    dft<R>(&v[i * R]);
  }
  if constexpr (kLast) {  // NS * R == N: outputs at j + q NS, pairs (j, j + 1) adjacent
#pragma unroll
    for (int i = 0; i < V / R; i += 2) {
      const int g = 2 * tid + (i >> 1) * 2 * NT, tr = g / PER, j = g - tr * PER;
      if (tr < valid) {
#pragma unroll
        for (int q = 0; q < R; ++q) {
          const float2 a = v[i * R + q], b = v[(i + 1) * R + q];
          __stcs(reinterpret_cast<float4*>(gy + tr * N + j + q * NS), make_float4(a.x, a.y, b.x, b.y));
        }
      }
    }
  } else {
    __syncthreads();  // every thread has read this stage's inputs
#pragma unroll
    for (int i = 0; i < V / R; ++i) {
      const int g = tid + i * NT, tr = g / PER, j = g - tr * PER, k = j % NS;
      float2* dst = sm + tr * N + (j / NS) * NS * R + k;
#pragma unroll
      for (int q = 0; q < R; ++q) dst[q * NS] = v[i * R + q];
    }
    __syncthreads();  // the outputs are visible to the next stage
    stage<N, S + 1>(v, sm, hi, lo, gy, valid);
  }
}

template <int N>
__global__ void __launch_bounds__(threads_for(N)) fft_l3(const float2* __restrict__ x, float2* __restrict__ y,
                                                          int64_t batch) {
  constexpr int T = transforms_per_block(N), ELEMS = T * N, NT = threads_for(N);
  extern __shared__ __align__(128) float2 sm[];  // T * N data, then N/64 + 64 twiddles
  __shared__ __align__(8) uint64_t bar;
  const int tid = threadIdx.x;
  const int64_t first_tr = static_cast<int64_t>(blockIdx.x) * T;
  const int valid = static_cast<int>(batch - first_tr < T ? batch - first_tr : T);
  float2* hi = sm + ELEMS;
  float2* lo = hi + N / kLo;
  const uint32_t bar_addr = smem_addr(&bar);
  const uint32_t bytes = static_cast<uint32_t>(valid) * static_cast<uint32_t>(N) * 8u;
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr), "r"(bytes) : "memory");
    const char* src = reinterpret_cast<const char*>(x + first_tr * N);
    const uint32_t dst = smem_addr(sm);
    for (uint32_t off = 0; off < bytes; off += 32768u) {
      const uint32_t chunk = bytes - off < 32768u ? bytes - off : 32768u;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst + off),
          "l"(src + off), "r"(chunk), "r"(bar_addr)
          : "memory");
    }
  }
  // Twiddle tables (double precision, rounded once) while the copies are in flight.
  for (int i = tid; i < N / kLo + kLo; i += NT) {
    const int e = i < N / kLo ? i * kLo : i - N / kLo;
    double s, c;
    sincospi(-2.0 * static_cast<double>(e) / static_cast<double>(N), &s, &c);
    hi[i] = make_float2(static_cast<float>(c), static_cast<float>(s));  // hi and lo are contiguous
  }
  // A partial last block: the transforms past the batch are zeros (computed, never stored).
  for (int i = valid * N + tid; i < ELEMS; i += NT) sm[i] = make_float2(0.0f, 0.0f);
  __syncthreads();  // tables, zeros and the barrier's initialisation are visible
  {
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n"
          ".reg .pred p;\n"
          "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
          "selp.u32 %0, 1, 0, p;\n"
          "}\n"
          : "=r"(done)
          : "r"(bar_addr)
          : "memory");
    }
  }
  float2 v[values_per_thread(N)];
  stage<N, 0>(v, sm, hi, lo, y + first_tr * N, valid);
}

template <int N>
cudaError_t launch(const float2* x, float2* y, int64_t batch, cudaStream_t stream) {
  constexpr int T = transforms_per_block(N);
  constexpr size_t kSmem = static_cast<size_t>(T * N + N / kLo + kLo) * sizeof(float2);
  const cudaError_t err = cudaFuncSetAttribute(fft_l3<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
  if (err != cudaSuccess) return err;
  const int64_t blocks = (batch + T - 1) / T;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  fft_l3<N><<<static_cast<unsigned>(blocks), threads_for(N), kSmem, stream>>>(x, y, batch);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_fft(const float* x, float* y, int64_t batch, int64_t n, cudaStream_t stream) {
  if (batch <= 0) return static_cast<int>(cudaErrorInvalidValue);
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return static_cast<int>(cudaErrorInvalidValue);  // cudaMalloc gives 256-byte alignment
  const float2* in = reinterpret_cast<const float2*>(x);
  float2* out = reinterpret_cast<float2*>(y);
  cudaError_t err;
  switch (n) {  // one kernel per size: every index computation is by compile-time constants
    case 256: err = launch<256>(in, out, batch, stream); break;
    case 384: err = launch<384>(in, out, batch, stream); break;
    case 512: err = launch<512>(in, out, batch, stream); break;
    case 768: err = launch<768>(in, out, batch, stream); break;
    case 1024: err = launch<1024>(in, out, batch, stream); break;
    case 1536: err = launch<1536>(in, out, batch, stream); break;
    case 2048: err = launch<2048>(in, out, batch, stream); break;
    case 3072: err = launch<3072>(in, out, batch, stream); break;
    case 4096: err = launch<4096>(in, out, batch, stream); break;
    case 6144: err = launch<6144>(in, out, batch, stream); break;
    case 8192: err = launch<8192>(in, out, batch, stream); break;
    case 12288: err = launch<12288>(in, out, batch, stream); break;
    case 16384: err = launch<16384>(in, out, batch, stream); break;
    default: err = cudaErrorInvalidValue; break;  // the task's sizes: 2^a or 3 * 2^a in [256, 16384]
  }
  return static_cast<int>(err);
}
