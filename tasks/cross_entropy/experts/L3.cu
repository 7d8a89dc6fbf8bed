// cross_entropy expert, layer 3 (low level): L2's one-pass online log-sum-exp, with the row moved as
// 128-bit vectors (8 bf16 per load, four loads in flight per thread) and the rescaling done once
// per 32 logits instead of once per logit: the maximum of the 32 is taken on packed bf16 pairs
// (paired max instructions), the running sum is rescaled once to that maximum, and each logit then
// costs one fused multiply-add and one hardware exp2 (x log2 e - m log2 e). Rows that do not start
// on a 16-byte boundary (vocab not a multiple of 8) peel up to 7 head and 7 tail logits as scalars;
// vectors past the row's end are padded with -inf, which changes neither the maximum nor the sum.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;                   // 16-byte vectors in flight per thread
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNoMax = -1e30f;             // "no value yet": finite, so its rescale factor is 0, never NaN
constexpr uint32_t kNegInfPair = 0xff80ff80u;  // two bf16 -inf

__device__ __forceinline__ float lo_of(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ __nv_bfloat162 as_pair(uint32_t w) {
  return *reinterpret_cast<const __nv_bfloat162*>(&w);
}

__device__ __forceinline__ __nv_bfloat162 max4(__nv_bfloat162 m, const uint4& v) {
  return __hmax2(__hmax2(m, as_pair(v.x)), __hmax2(__hmax2(as_pair(v.y), as_pair(v.z)), as_pair(v.w)));
}

// exp(x - m) summed over the two logits of a word, with mb = m log2 e.
__device__ __forceinline__ float exp_pair(uint32_t w, float mb) {
  return exp2f(fmaf(lo_of(w), kLog2e, -mb)) + exp2f(fmaf(hi_of(w), kLog2e, -mb));
}

// (m, s) and (m2, s2) -> the pair of the union.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  s = s * exp2f((m - mn) * kLog2e) + s2 * exp2f((m2 - mn) * kLog2e);
  m = mn;
}

__global__ void __launch_bounds__(kThreads)
cross_entropy_vec8(const __nv_bfloat16* __restrict__ x, const int* __restrict__ labels,
                   float* __restrict__ loss, int64_t vocab) {
  __shared__ float m_slots[kWarps], s_slots[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const int64_t start = row * vocab;
  const __nv_bfloat16* xr = x + start;
  const float target = tid == 0 ? __bfloat162float(xr[labels[row]]) : 0.0f;

  // Head scalars up to the first 16-byte boundary, aligned 8-logit vectors, tail scalars.
  int64_t head = (8 - (start & 7)) & 7;
  if (head > vocab) head = vocab;
  const int64_t nvec = (vocab - head) >> 3;
  const int64_t tail = vocab - head - 8 * nvec;
  int64_t ec = -1;
  if (tid < head) ec = tid;
  else if (tid >= 8 && tid < 8 + tail) ec = head + 8 * nvec + (tid - 8);

  float m = kNoMax, s = 0.0f;
  if (ec >= 0) {
    m = __bfloat162float(xr[ec]);
    s = 1.0f;
  }

  const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
  const uint4 pad = make_uint4(kNegInfPair, kNegInfPair, kNegInfPair, kNegInfPair);
  for (int64_t base = tid; base < nvec; base += kThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t k = base + j * kThreads;
      v[j] = k < nvec ? xv[k] : pad;
    }
    __nv_bfloat162 pm = as_pair(v[0].x);  // v[0] is inside the row: base < nvec
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) pm = max4(pm, v[j]);
    const float mn = fmaxf(m, fmaxf(__low2float(pm), __high2float(pm)));
    const float mb = mn * kLog2e;
    float acc = s * exp2f((m - mn) * kLog2e);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
      acc += (exp_pair(v[j].x, mb) + exp_pair(v[j].y, mb)) + (exp_pair(v[j].z, mb) + exp_pair(v[j].w, mb));
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
#pragma unroll
    for (int w = 1; w < kWarps; ++w) merge(m, s, m_slots[w], s_slots[w]);
    loss[row] = logf(s) + m - target;
  }
}

// x not 2-byte aligned cannot happen for a bf16 pointer from cudaMalloc; x not 16-byte aligned
// (an offset pointer) takes the scalar online kernel of layer 2.
__global__ void __launch_bounds__(kThreads)
cross_entropy_online(const __nv_bfloat16* __restrict__ x, const int* __restrict__ labels,
                     float* __restrict__ loss, int64_t vocab) {
  __shared__ float m_slots[kWarps], s_slots[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * vocab;
  const float target = tid == 0 ? __bfloat162float(xr[labels[row]]) : 0.0f;
  float m = kNoMax, s = 0.0f;
  for (int64_t c = tid; c < vocab; c += kThreads) {
    const float v = __bfloat162float(xr[c]);
    const float mn = fmaxf(m, v);
    s = s * exp2f((m - mn) * kLog2e) + exp2f((v - mn) * kLog2e);
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
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0)
    cross_entropy_vec8<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, labels, loss, vocab);
  else
    cross_entropy_online<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, labels, loss, vocab);
  return static_cast<int>(cudaGetLastError());
}
