// flash_attention_fwd baseline: the textbook formula, one step at a time. For a chunk of heads at a
// time: kernel 1 writes every score S = Q K^T * scale (masked ones as -inf) to an fp32 scratch matrix in
// global memory (one thread per score, dot product straight from global memory), kernel 2 turns each
// row into probabilities (a warp per row: max, sum of exp, normalize), kernel 3 computes O = P V (one
// thread per output element). The S x S matrix is written and read several times: memory-heavy and slow.
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr size_t kScratchBudget = size_t{512} << 20;  // bytes of fp32 scores per chunk of heads

float* g_scratch = nullptr;
size_t g_scratch_bytes = 0;
int g_scratch_device = -1;

// scores[hh][i][j] = dot(q_i, k_j) * scale, or -inf above the diagonal when causal.
__global__ void scores_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, float* scores,
                              int64_t h0, int64_t S, int D, int causal, float scale) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t hh = blockIdx.z;
  if (i >= S || j >= S) return;
  const __nv_bfloat16* qi = q + ((h0 + hh) * S + i) * D;
  const __nv_bfloat16* kj = k + ((h0 + hh) * S + j) * D;
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc += __bfloat162float(qi[d]) * __bfloat162float(kj[d]);
  scores[(hh * S + i) * S + j] = (causal && j > i) ? -INFINITY : acc * scale;
}

// In place: row <- softmax(row). One warp per row of S scores.
__global__ void softmax_kernel(float* scores, int64_t rows, int64_t S) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float* p = scores + row * S;
  float mx = -INFINITY;
  for (int64_t j = lane; j < S; j += 32) mx = fmaxf(mx, p[j]);
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float sum = 0.0f;
  for (int64_t j = lane; j < S; j += 32) sum += expf(p[j] - mx);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float inv = 1.0f / sum;
  for (int64_t j = lane; j < S; j += 32) p[j] = expf(p[j] - mx) * inv;
}

// o[i][d] = sum_j P[i][j] * v[j][d]. One thread per output element.
__global__ void pv_kernel(const float* probs, const __nv_bfloat16* v, __nv_bfloat16* o, int64_t h0,
                          int64_t nh, int64_t S, int D) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= nh * S * D) return;
  const int d = static_cast<int>(e % D);
  const int64_t row = e / D;  // hh * S + i
  const int64_t hh = row / S;
  const float* p = probs + row * S;
  const __nv_bfloat16* vh = v + (h0 + hh) * S * D;
  float acc = 0.0f;
  for (int64_t j = 0; j < S; ++j) acc += p[j] * __bfloat162float(vh[j * D + d]);
  o[(h0 * S + row) * D + d] = __float2bfloat16_rn(acc);
}

}  // namespace

extern "C" int d2k_flash_attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                       const __nv_bfloat16* v, __nv_bfloat16* o, int64_t batch,
                                       int64_t heads, int64_t seq, int64_t head_dim, int causal,
                                       cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return static_cast<int>(cudaErrorInvalidValue);
  if (batch <= 0 || heads <= 0 || seq <= 0) return 0;
  const int64_t bh = batch * heads;
  const int64_t S = seq;
  const int D = static_cast<int>(head_dim);
  if ((S + 15) / 16 > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const size_t head_bytes = static_cast<size_t>(S) * static_cast<size_t>(S) * sizeof(float);
  int64_t chunk = static_cast<int64_t>(kScratchBudget / head_bytes);
  if (chunk < 1) chunk = 1;
  if (chunk > bh) chunk = bh;
  if (chunk > 65535) chunk = 65535;  // grid.z limit
  const size_t need = head_bytes * static_cast<size_t>(chunk);
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (g_scratch == nullptr || g_scratch_bytes < need || g_scratch_device != device) {
    // Allocated once (the first call), reused by every later call of the same size or smaller.
    if (g_scratch != nullptr && g_scratch_device == device) cudaFree(g_scratch);
    g_scratch = nullptr;
    g_scratch_bytes = 0;
    const size_t bytes = need > kScratchBudget ? need : kScratchBudget;
    err = cudaMalloc(&g_scratch, bytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    g_scratch_bytes = bytes;
    g_scratch_device = device;
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  for (int64_t h0 = 0; h0 < bh; h0 += chunk) {
    const int64_t nh = (bh - h0 < chunk) ? bh - h0 : chunk;
    const dim3 sblock(16, 16);
    const dim3 sgrid(static_cast<unsigned>((S + 15) / 16), static_cast<unsigned>((S + 15) / 16),
                     static_cast<unsigned>(nh));
    scores_kernel<<<sgrid, sblock, 0, stream>>>(q, k, g_scratch, h0, S, D, causal, scale);
    const int64_t rows = nh * S;
    softmax_kernel<<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, stream>>>(g_scratch,
                                                                                       rows, S);
    const int64_t outs = nh * S * D;
    pv_kernel<<<static_cast<unsigned>((outs + 255) / 256), 256, 0, stream>>>(g_scratch, v, o, h0,
                                                                            nh, S, D);
  }
  return static_cast<int>(cudaGetLastError());
}
