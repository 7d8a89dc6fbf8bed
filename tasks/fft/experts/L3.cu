// fft L3 expert: the L2 design (one pass; whole transforms per block in shared memory; radix-4
// Stockham stages in registers) with Hopper's copy engine and no transcendental in the stages:
// - the block's transforms (contiguous, T * n * 8 bytes) come into shared memory by bulk async
//   copies (cp.async.bulk, UBLKCP in SASS) issued by one thread and tracked by an mbarrier, while
//   the other threads build the twiddle tables; the first stage then reads shared memory;
// - twiddles are exact table entries: w^e = hi[e / 64] * lo[e % 64], two small tables of n-th roots
//   of unity (n/64 + 64 entries, 2.5 KiB at n = 16384) built once per block in double precision
//   (sincospi), so the stages do two shared loads and one complex multiply per twiddle instead of a
//   sincos (no MUFU.SIN/COS in the kernel), and the twiddles are more accurate than fast sincos;
// - the last stage writes its outputs to shared memory, and the block stores the result with
//   128-bit streaming stores (two complex values per store, coalesced, STG.E.128).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr float kSqrt3Half = 0.86602540378443864676f;
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
  } else {
    const float2 s02 = cadd(v[0], v[2]), d02 = csub(v[0], v[2]);
    const float2 s13 = cadd(v[1], v[3]), d13 = mul_neg_i(csub(v[1], v[3]));
    v[0] = cadd(s02, s13);
    v[1] = cadd(d02, d13);
    v[2] = csub(s02, s13);
    v[3] = csub(d02, d13);
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
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

// exp(-2 pi i e / n) for 0 <= e < n, from the two tables.
__device__ __forceinline__ float2 twiddle(const float2* hi, const float2* lo, int e) {
  return cmul(hi[e >> 6], lo[e & (kLo - 1)]);
}

template <int V, int R>
__device__ __forceinline__ void stage(float2 (&v)[V], float2* sm, const float2* hi, const float2* lo, int n, int ns,
                                      bool last) {
  const int tid = threadIdx.x, nt = blockDim.x, per = n / R;
#pragma unroll
  for (int i = 0; i < V / R; ++i) {
    const int g = tid + i * nt, tr = g / per, j = g - tr * per;
#pragma unroll
    for (int r = 0; r < R; ++r) v[i * R + r] = sm[tr * n + j + r * per];
  }
  const int step = n / (ns * R);  // twiddle r of butterfly j is w^(r * (j mod ns) * step)
#pragma unroll
  for (int i = 0; i < V / R; ++i) {
    const int g = tid + i * nt, j = g % per, e = (j % ns) * step;
    if (ns > 1) {
#pragma unroll
      for (int r = 1; r < R; ++r) v[i * R + r] = cmul(v[i * R + r], twiddle(hi, lo, r * e));
    }
    dft<R>(&v[i * R]);
  }
  __syncthreads();  // every thread has read this stage's inputs
#pragma unroll
  for (int i = 0; i < V / R; ++i) {
    const int g = tid + i * nt, tr = g / per, j = g - tr * per, k = j % ns;
    float2* dst = sm + tr * n + (j / ns) * ns * R + k;
#pragma unroll
    for (int q = 0; q < R; ++q) dst[q * ns] = v[i * R + q];
  }
  __syncthreads();  // the outputs are visible to the next stage (or to the final store)
  (void)last;
}

template <int V>
__global__ void __launch_bounds__(1024) fft_l3(const float2* __restrict__ x, float2* __restrict__ y, int64_t batch,
                                               int n, int per_block, Plan plan) {
  extern __shared__ __align__(128) float2 sm[];  // per_block * n data, then n/64 + 64 twiddles
  __shared__ __align__(8) uint64_t bar;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t first_tr = static_cast<int64_t>(blockIdx.x) * per_block;
  const int valid = static_cast<int>(batch - first_tr < per_block ? batch - first_tr : per_block);
  const int elems = per_block * n;
  float2* hi = sm + elems;
  float2* lo = hi + n / kLo;
  const uint32_t bar_addr = smem_addr(&bar);
  const uint32_t bytes = static_cast<uint32_t>(valid) * static_cast<uint32_t>(n) * 8u;
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr), "r"(bytes) : "memory");
    const char* src = reinterpret_cast<const char*>(x + first_tr * n);
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
  for (int i = tid; i < n / kLo + kLo; i += nt) {
    const int e = i < n / kLo ? i * kLo : i - n / kLo;
    double s, c;
    sincospi(-2.0 * static_cast<double>(e) / static_cast<double>(n), &s, &c);
    hi[i] = make_float2(static_cast<float>(c), static_cast<float>(s));  // hi and lo are contiguous
  }
  // A partial last block: the transforms past the batch are zeros (computed, never stored).
  for (int i = valid * n + tid; i < elems; i += nt) sm[i] = make_float2(0.0f, 0.0f);
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
  float2 v[V];
  int ns = 1;
  for (int s = 0; s < plan.count; ++s) {
    const bool last = s == plan.count - 1;
    switch (plan.radix(s)) {
      case 2: stage<V, 2>(v, sm, hi, lo, n, ns, last); break;
      case 3:
        if constexpr (V % 3 == 0) stage<V, 3>(v, sm, hi, lo, n, ns, last);
        break;
      default: stage<V, 4>(v, sm, hi, lo, n, ns, last); break;
    }
    ns *= plan.radix(s);
  }
  // 128-bit streaming stores of the valid transforms (n is even: rows of float4).
  const float4* src4 = reinterpret_cast<const float4*>(sm);
  float4* dst4 = reinterpret_cast<float4*>(y + first_tr * n);
  const int count4 = valid * n / 2;
  for (int i = tid; i < count4; i += nt) __stcs(dst4 + i, src4[i]);
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
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return static_cast<int>(cudaErrorInvalidValue);  // cudaMalloc gives 256-byte alignment

  const int nn = static_cast<int>(n);
  const int per_block = three ? (nn < 1536 ? 1536 / nn : 1) : (nn < 2048 ? 2048 / nn : 1);
  const int elems = per_block * nn;
  const int threads = elems / (three ? 12 : 16);
  const size_t smem = static_cast<size_t>(elems + nn / kLo + kLo) * sizeof(float2);
  const int64_t blocks = (batch + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const float2* in = reinterpret_cast<const float2*>(x);
  float2* out = reinterpret_cast<float2*>(y);
  cudaError_t err;
  if (three) {
    err = cudaFuncSetAttribute(fft_l3<12>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return static_cast<int>(err);
    fft_l3<12><<<static_cast<unsigned>(blocks), threads, smem, stream>>>(in, out, batch, nn, per_block, plan);
  } else {
    err = cudaFuncSetAttribute(fft_l3<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return static_cast<int>(err);
    fft_l3<16><<<static_cast<unsigned>(blocks), threads, smem, stream>>>(in, out, batch, nn, per_block, plan);
  }
  return static_cast<int>(cudaGetLastError());
}
