// fft L3 expert: the L2 design (one pass; whole transforms per block in shared memory; Stockham
// stages with butterflies in registers) specialised per size, with large radices and Hopper's copy
// engine:
// - one kernel per size n (2^a or 3 * 2^a in [256, 16384]): the plan (radices, ns, threads) is a
//   compile-time constant, the stages are unrolled, and every index division or modulo is by a
//   constant;
// - radices 16, 24, 32 and 48 done in registers (each a 4 x 4, 3 x 8, 4 x 8 or 3 x 16 split with
//   constant twiddles from a 96-entry table in constant memory): two stages up to n = 1024, three
//   above (n = 16384 = 32 x 32 x 16), so each element crosses shared memory two or four times
//   instead of ten (L2's radix 4 needs 7 stages at n = 16384): shared-memory bandwidth, not DRAM,
//   was what limited radix 8;
// - intermediate stages write shared memory through an XOR swizzle of the 16-element (128-byte) rows,
//   so a warp's stride-R writes of a stage's outputs do not collide in the same banks;
// - the block's transforms (contiguous, T * n * 8 bytes) come into shared memory by bulk async
//   copies (cp.async.bulk, UBLKCP in SASS) issued by one thread and tracked by an mbarrier, while
//   the other threads build the twiddle tables;
// - stage twiddles w^(r e) come from two small tables of n-th roots of unity (w^e = hi[e / 64] *
//   lo[e % 64], built per block in double precision with sincospi): w^e from the tables, then its
//   powers by complex multiplications, re-anchored from the tables every 8 powers (no MUFU.SIN/COS);
// - the last stage stores straight from registers to y, coalesced across the warp, as 16-byte
//   streaming stores (STG.E.EF.128) where a thread owns an even number of the last stage's
//   butterflies (adjacent pairs j, j + 1, whose outputs are adjacent in y).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr float kSqrt3Half = 0.86602540378443864676f;
constexpr float kSqrtHalf = 0.70710678118654752440f;
constexpr int kLo = 64;  // entries of the low twiddle table

// exp(-2 pi i k / 96), correctly rounded: the constant twiddles of the in-register DFTs of 16, 24, 32
// and 48 points (all divide 96).
__constant__ float2 kW96[96] = {
{1.000000000e+00f, -0.000000000e+00f}, {9.978589232e-01f, -6.540312923e-02f}, {9.914448614e-01f, -1.305261922e-01f}, {9.807852804e-01f, -1.950903220e-01f},
{9.659258263e-01f, -2.588190451e-01f}, {9.469301295e-01f, -3.214394653e-01f}, {9.238795325e-01f, -3.826834324e-01f}, {8.968727415e-01f, -4.422886902e-01f},
{8.660254038e-01f, -5.000000000e-01f}, {8.314696123e-01f, -5.555702330e-01f}, {7.933533403e-01f, -6.087614290e-01f}, {7.518398075e-01f, -6.593458151e-01f},
{7.071067812e-01f, -7.071067812e-01f}, {6.593458151e-01f, -7.518398075e-01f}, {6.087614290e-01f, -7.933533403e-01f}, {5.555702330e-01f, -8.314696123e-01f},
{5.000000000e-01f, -8.660254038e-01f}, {4.422886902e-01f, -8.968727415e-01f}, {3.826834324e-01f, -9.238795325e-01f}, {3.214394653e-01f, -9.469301295e-01f},
{2.588190451e-01f, -9.659258263e-01f}, {1.950903220e-01f, -9.807852804e-01f}, {1.305261922e-01f, -9.914448614e-01f}, {6.540312923e-02f, -9.978589232e-01f},
{6.123233996e-17f, -1.000000000e+00f}, {-6.540312923e-02f, -9.978589232e-01f}, {-1.305261922e-01f, -9.914448614e-01f}, {-1.950903220e-01f, -9.807852804e-01f},
{-2.588190451e-01f, -9.659258263e-01f}, {-3.214394653e-01f, -9.469301295e-01f}, {-3.826834324e-01f, -9.238795325e-01f}, {-4.422886902e-01f, -8.968727415e-01f},
{-5.000000000e-01f, -8.660254038e-01f}, {-5.555702330e-01f, -8.314696123e-01f}, {-6.087614290e-01f, -7.933533403e-01f}, {-6.593458151e-01f, -7.518398075e-01f},
{-7.071067812e-01f, -7.071067812e-01f}, {-7.518398075e-01f, -6.593458151e-01f}, {-7.933533403e-01f, -6.087614290e-01f}, {-8.314696123e-01f, -5.555702330e-01f},
{-8.660254038e-01f, -5.000000000e-01f}, {-8.968727415e-01f, -4.422886902e-01f}, {-9.238795325e-01f, -3.826834324e-01f}, {-9.469301295e-01f, -3.214394653e-01f},
{-9.659258263e-01f, -2.588190451e-01f}, {-9.807852804e-01f, -1.950903220e-01f}, {-9.914448614e-01f, -1.305261922e-01f}, {-9.978589232e-01f, -6.540312923e-02f},
{-1.000000000e+00f, -1.224646799e-16f}, {-9.978589232e-01f, 6.540312923e-02f}, {-9.914448614e-01f, 1.305261922e-01f}, {-9.807852804e-01f, 1.950903220e-01f},
{-9.659258263e-01f, 2.588190451e-01f}, {-9.469301295e-01f, 3.214394653e-01f}, {-9.238795325e-01f, 3.826834324e-01f}, {-8.968727415e-01f, 4.422886902e-01f},
{-8.660254038e-01f, 5.000000000e-01f}, {-8.314696123e-01f, 5.555702330e-01f}, {-7.933533403e-01f, 6.087614290e-01f}, {-7.518398075e-01f, 6.593458151e-01f},
{-7.071067812e-01f, 7.071067812e-01f}, {-6.593458151e-01f, 7.518398075e-01f}, {-6.087614290e-01f, 7.933533403e-01f}, {-5.555702330e-01f, 8.314696123e-01f},
{-5.000000000e-01f, 8.660254038e-01f}, {-4.422886902e-01f, 8.968727415e-01f}, {-3.826834324e-01f, 9.238795325e-01f}, {-3.214394653e-01f, 9.469301295e-01f},
{-2.588190451e-01f, 9.659258263e-01f}, {-1.950903220e-01f, 9.807852804e-01f}, {-1.305261922e-01f, 9.914448614e-01f}, {-6.540312923e-02f, 9.978589232e-01f},
{-1.836970199e-16f, 1.000000000e+00f}, {6.540312923e-02f, 9.978589232e-01f}, {1.305261922e-01f, 9.914448614e-01f}, {1.950903220e-01f, 9.807852804e-01f},
{2.588190451e-01f, 9.659258263e-01f}, {3.214394653e-01f, 9.469301295e-01f}, {3.826834324e-01f, 9.238795325e-01f}, {4.422886902e-01f, 8.968727415e-01f},
{5.000000000e-01f, 8.660254038e-01f}, {5.555702330e-01f, 8.314696123e-01f}, {6.087614290e-01f, 7.933533403e-01f}, {6.593458151e-01f, 7.518398075e-01f},
{7.071067812e-01f, 7.071067812e-01f}, {7.518398075e-01f, 6.593458151e-01f}, {7.933533403e-01f, 6.087614290e-01f}, {8.314696123e-01f, 5.555702330e-01f},
{8.660254038e-01f, 5.000000000e-01f}, {8.968727415e-01f, 4.422886902e-01f}, {9.238795325e-01f, 3.826834324e-01f}, {9.469301295e-01f, 3.214394653e-01f},
{9.659258263e-01f, 2.588190451e-01f}, {9.807852804e-01f, 1.950903220e-01f}, {9.914448614e-01f, 1.305261922e-01f}, {9.978589232e-01f, 6.540312923e-02f}
};

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 csub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ float2 mul_neg_i(float2 a) { return make_float2(a.y, -a.x); }  // -i * a

// In-place R-point forward DFT of v[0..R), natural order in and out.
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
  } else if constexpr (R == 8) {  // one radix-2 layer (decimation in frequency), W8^k, two 4-point DFTs
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
  } else {  // R = P Q: P-point DFTs over m1 (m = m1 Q + m2), twiddles W_R^(k1 m2), Q-point DFTs; X[k2 P + k1]
    constexpr int P = R % 3 == 0 ? 3 : 4, Q = R / P;
    static_assert(96 % R == 0, "constant twiddles cover divisors of 96");
    float2 t[R];
#pragma unroll
    for (int m2 = 0; m2 < Q; ++m2) {
      float2 a[P];
#pragma unroll
      for (int m1 = 0; m1 < P; ++m1) a[m1] = v[m1 * Q + m2];
      dft<P>(a);
#pragma unroll
      for (int k1 = 0; k1 < P; ++k1) t[k1 * Q + m2] = k1 * m2 == 0 ? a[k1] : cmul(a[k1], kW96[k1 * m2 * (96 / R)]);
    }
#pragma unroll
    for (int k1 = 0; k1 < P; ++k1) {
      float2 b[Q];
#pragma unroll
      for (int m2 = 0; m2 < Q; ++m2) b[m2] = t[k1 * Q + m2];
      dft<Q>(b);
#pragma unroll
      for (int k2 = 0; k2 < Q; ++k2) v[k2 * P + k1] = b[k2];
    }
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The plan of size n, fixed at compile time: its radices in stage order (Stockham allows any order)
// and V, the values a thread holds (a multiple of every radix: V / R butterflies per thread and stage).
// Two stages up to n = 1024 (32 x 32), three above. Where V / R of the last stage is even, a thread
// owns adjacent pairs of last-stage butterflies and stores 16 bytes at a time.
__host__ __device__ constexpr int plan_radix(int n, int s) {
  switch (n) {
    case 256: return s == 0 ? 16 : s == 1 ? 16 : 0;
    case 384: return s == 0 ? 16 : s == 1 ? 24 : 0;
    case 512: return s == 0 ? 32 : s == 1 ? 16 : 0;
    case 768: return s == 0 ? 48 : s == 1 ? 16 : 0;
    case 1024: return s == 0 ? 32 : s == 1 ? 32 : 0;
    case 1536: return s == 0 ? 16 : s == 1 ? 4 : s == 2 ? 24 : 0;
    case 2048: return s == 0 ? 16 : s == 1 ? 16 : s == 2 ? 8 : 0;
    case 3072: return s == 0 ? 16 : s == 1 ? 8 : s == 2 ? 24 : 0;
    case 4096: return s == 0 ? 16 : s == 1 ? 16 : s == 2 ? 16 : 0;
    case 6144: return s == 0 ? 16 : s == 1 ? 16 : s == 2 ? 24 : 0;
    case 8192: return s == 0 ? 32 : s == 1 ? 16 : s == 2 ? 16 : 0;
    case 12288: return s == 0 ? 48 : s == 1 ? 16 : s == 2 ? 16 : 0;
    case 16384: return s == 0 ? 32 : s == 1 ? 32 : s == 2 ? 16 : 0;
    default: return 0;
  }
}
__host__ __device__ constexpr int values_per_thread(int n) { return n % 3 == 0 ? 48 : n == 2048 ? 16 : 32; }
__host__ __device__ constexpr int stage_count(int n) { return n <= 1024 ? 2 : 3; }
__host__ __device__ constexpr int stage_ns(int n, int s) {  // product of the radices before stage s
  int p = 1;
  for (int i = 0; i < s; ++i) p *= plan_radix(n, i);
  return p;
}
constexpr int kBlockThreads = 128;  // threads per block where one transform has fewer (several transforms)
__host__ __device__ constexpr int transforms_per_block(int n) {
  return kBlockThreads * values_per_thread(n) / n > 1 ? kBlockThreads * values_per_thread(n) / n : 1;
}
__host__ __device__ constexpr int threads_for(int n) { return transforms_per_block(n) * n / values_per_thread(n); }
__host__ __device__ constexpr bool plan_ok(int n) {
  int p = 1;
  for (int s = 0; s < stage_count(n); ++s) {
    if (plan_radix(n, s) == 0 || values_per_thread(n) % plan_radix(n, s) != 0) return false;
    p *= plan_radix(n, s);
  }
  return p == n;
}

// exp(-2 pi i e / N) for 0 <= e < N, from the two tables.
__device__ __forceinline__ float2 twiddle(const float2* hi, const float2* lo, int e) {
  return cmul(hi[e >> 6], lo[e & (kLo - 1)]);
}

// Shared-memory position of element i of the block's intermediate data: the 16-element (128-byte)
// row i / 16 keeps its elements, permuted by an XOR with a hash of the row, so that the stride-R
// writes of a stage (consecutive lanes R elements apart) fall into different banks.
__device__ __forceinline__ int swz(int i) {
  const int row = i >> 4;
  return i ^ ((row ^ (row >> 4)) & 15);
}

// Butterfly gg (over the block's T transforms) of thread tid's i-th in stage S: consecutive lanes
// take consecutive butterflies; in a paired last stage, adjacent pairs.
template <bool kPair, int NT>
__device__ __forceinline__ int butterfly(int tid, int i) {
  return kPair ? 2 * tid + (i & 1) + (i >> 1) * 2 * NT : tid + i * NT;
}

// Stage S of the size-N plan, every index a compile-time divisor. Stage 0 reads the block's input
// as the bulk copy left it; later stages read the swizzled intermediate; the last stage writes y.
template <int N, int S>
__device__ __forceinline__ void stage(float2 (&v)[values_per_thread(N)], float2* sm, const float2* hi, const float2* lo,
                                      float2* __restrict__ gy, int valid) {
  constexpr int V = values_per_thread(N), R = plan_radix(N, S), NS = stage_ns(N, S), PER = N / R;
  constexpr int NT = threads_for(N), STEP = N / (NS * R), BF = V / R;
  constexpr bool kLast = S == stage_count(N) - 1;
  constexpr bool kPair = kLast && BF % 2 == 0;
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < BF; ++i) {
    const int gg = butterfly<kPair, NT>(tid, i), tr = gg / PER, g = gg - tr * PER;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int at = tr * N + g + r * PER;
      v[i * R + r] = sm[S == 0 ? at : swz(at)];
    }
  }
#pragma unroll
  for (int i = 0; i < BF; ++i) {
    if constexpr (NS > 1) {
      const int gg = butterfly<kPair, NT>(tid, i), g = gg % PER;
      const int e = (g % NS) * STEP;  // input r is multiplied by w^(r e), r e < N
      const float2 w = twiddle(hi, lo, e);
      float2 wr = w;
#pragma unroll
      for (int r = 1; r < R; ++r) {
        if (r % 8 == 0) wr = twiddle(hi, lo, r * e);  // re-anchor: the powers' rounding errors do not pile up
        v[i * R + r] = cmul(v[i * R + r], wr);
        if (r + 1 < R) wr = cmul(wr, w);
      }
    }
    dft<R>(&v[i * R]);
  }
  if constexpr (kLast) {  // NS R = N: outputs at g + q NS
    if constexpr (kPair) {
#pragma unroll
      for (int i = 0; i < BF; i += 2) {
        const int gg = butterfly<true, NT>(tid, i), tr = gg / PER, g = gg - tr * PER;
        if (tr < valid) {
#pragma unroll
          for (int q = 0; q < R; ++q) {
            const float2 a = v[i * R + q], b = v[(i + 1) * R + q];
            __stcs(reinterpret_cast<float4*>(gy + tr * N + g + q * NS), make_float4(a.x, a.y, b.x, b.y));
          }
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < BF; ++i) {
        const int gg = butterfly<false, NT>(tid, i), tr = gg / PER, g = gg - tr * PER;
        if (tr < valid) {
#pragma unroll
          for (int q = 0; q < R; ++q) __stcs(gy + tr * N + g + q * NS, v[i * R + q]);
        }
      }
    }
  } else {
    __syncthreads();  // every thread has read this stage's inputs
#pragma unroll
    for (int i = 0; i < BF; ++i) {
      const int gg = butterfly<false, NT>(tid, i), tr = gg / PER, g = gg - tr * PER, k = g % NS;
      const int base = tr * N + (g / NS) * NS * R + k;
#pragma unroll
      for (int q = 0; q < R; ++q) sm[swz(base + q * NS)] = v[i * R + q];
    }
    __syncthreads();  // the outputs are visible to the next stage
    stage<N, S + 1>(v, sm, hi, lo, gy, valid);
  }
}

template <int N>
__global__ void __launch_bounds__(threads_for(N)) fft_l3(const float2* __restrict__ x, float2* __restrict__ y,
                                                          int64_t batch) {
  static_assert(plan_ok(N), "the plan's radices multiply to N and divide V");
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
