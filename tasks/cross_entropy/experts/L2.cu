// cross_entropy expert, layer 2 (dataflow): one pass over the row. Each thread keeps a running
// maximum m and the sum s of exp(x - m) over its logits, rescaling s when m grows (online
// log-sum-exp), so the row crosses DRAM once. A thread loads 8 logits (columns c + 256 i, all
// coalesced) before using any, takes their maximum, rescales s once and adds their 8
// exponentials: 8 loads in flight and 9 exponentials per 8 logits instead of 16. The (m, s) pairs
// are merged with warp shuffles (butterfly), then across the 8 warps through shared memory with
// one barrier. The logit at the label is loaded at the start, so its latency hides behind the pass.
#include <cfloat>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kInFlight = 8;  // logits loaded per thread before any is used
constexpr float kNoMax = -1e30f;  // "no value yet": finite, so exp(kNoMax - m) is 0, never NaN

// (m, s) and (m2, s2) -> the pair of the union.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

__global__ void __launch_bounds__(kThreads)
cross_entropy_online(const __nv_bfloat16* __restrict__ x, const int* __restrict__ labels,
                     float* __restrict__ loss, int64_t vocab) {
  __shared__ float m_slots[kWarps], s_slots[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * vocab;
  const float target = tid == 0 ? __bfloat162float(xr[labels[row]]) : 0.0f;

  float m = kNoMax, s = 0.0f;
  for (int64_t c = tid; c < vocab; c += kThreads * kInFlight) {
    float v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int64_t ci = c + i * kThreads;
      v[i] = ci < vocab ? __bfloat162float(xr[ci]) : -INFINITY;  // -inf: adds exp(-inf) = 0
    }
    float mn = m;
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) mn = fmaxf(mn, v[i]);  // finite: v[0] is inside the row
    float acc = s * expf(m - mn);
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) acc += expf(v[i] - mn);
    s = acc;
    m = mn;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    merge(m, s, m2, s2);
  }
  if ((tid & 31) == 0) {
    m_slots[tid >> 5] = m;
    s_slots[tid >> 5] = s;
  }
  __syncthreads();
  if (tid == 0) {
    m = m_slots[0];
    s = s_slots[0];
    for (int w = 1; w < kWarps; ++w) merge(m, s, m_slots[w], s_slots[w]);
    loss[row] = logf(s) + m - target;
  }
}

}  // namespace

extern "C" int d2k_cross_entropy(const __nv_bfloat16* x, const int* labels, float* loss, int64_t rows,
                                 int64_t vocab, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  cross_entropy_online<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, labels, loss, vocab);
  return static_cast<int>(cudaGetLastError());
}
