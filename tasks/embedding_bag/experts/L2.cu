// embedding_bag expert, layer 2 (dataflow): one block of 256 threads per bag; thread t keeps the
// fp32 sums of its columns t, t + 256, ... in registers for the whole bag (the columns are the
// inner loop, the bag's rows the outer one), so every index is used for all columns at once. Each
// warp loads the bag's indices 32 at a time (one coalesced load) and broadcasts them to its lanes
// with warp shuffles; four rows are looked up per step, all their loads issued before the adds
// (4 x columns-per-thread loads in flight).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kRowsInFlight = 4;
constexpr int kMaxColsPerThread = 16;  // dim up to 4096 in registers

template <int NV>
__global__ void __launch_bounds__(kThreads)
embedding_bag_registers(const int* __restrict__ offsets, const int* __restrict__ indices,
                        const __nv_bfloat16* __restrict__ table, __nv_bfloat16* __restrict__ out, int dim) {
  const int64_t b = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int begin = offsets[b], end = offsets[b + 1];
  float acc[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) acc[k] = 0.0f;

  for (int j0 = begin; j0 < end; j0 += 32) {
    const int n = end - j0 < 32 ? end - j0 : 32;  // the same for every lane: the shuffles are uniform
    const int mine = lane < n ? indices[j0 + lane] : 0;
    for (int i = 0; i < n; i += kRowsInFlight) {
      float v[kRowsInFlight][NV];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        const int64_t row = __shfl_sync(0xffffffffu, mine, (i + u) & 31);
        const __nv_bfloat16* r = table + row * dim;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const int d = tid + k * kThreads;
          v[u][k] = (i + u < n && d < dim) ? __bfloat162float(r[d]) : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u)
#pragma unroll
        for (int k = 0; k < NV; ++k) acc[k] += v[u][k];
    }
  }
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int d = tid + k * kThreads;
    if (d < dim) out[b * dim + d] = __float2bfloat16(acc[k]);
  }
}

// Rows wider than 4096 columns: layer 1's kernel.
__global__ void __launch_bounds__(kThreads)
embedding_bag_block_per_bag(const int* __restrict__ offsets, const int* __restrict__ indices,
                            const __nv_bfloat16* __restrict__ table, __nv_bfloat16* __restrict__ out,
                            int64_t dim) {
  const int64_t b = blockIdx.x;
  const int begin = offsets[b], end = offsets[b + 1];
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    float sum = 0.0f;
    for (int j = begin; j < end; ++j) sum += __bfloat162float(table[static_cast<int64_t>(indices[j]) * dim + d]);
    out[b * dim + d] = __float2bfloat16(sum);
  }
}

template <int NV>
void launch(const int* offsets, const int* indices, const __nv_bfloat16* table, __nv_bfloat16* out,
            int64_t rows, int dim, cudaStream_t stream) {
  embedding_bag_registers<NV><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(offsets, indices, table, out, dim);
}

}  // namespace

extern "C" int d2k_embedding_bag(const int* offsets, const int* indices, const __nv_bfloat16* table,
                                 __nv_bfloat16* out, int64_t rows, int64_t cols, int64_t nnz, int64_t dim,
                                 cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0 || dim <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t nv = (dim + kThreads - 1) / kThreads;
  const int d = static_cast<int>(dim < 0x7fffffff ? dim : 0x7fffffff);
  if (nv > kMaxColsPerThread)
    embedding_bag_block_per_bag<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(offsets, indices, table, out, dim);
  else if (nv <= 1) launch<1>(offsets, indices, table, out, rows, d, stream);
  else if (nv <= 2) launch<2>(offsets, indices, table, out, rows, d, stream);
  else if (nv <= 4) launch<4>(offsets, indices, table, out, rows, d, stream);
  else if (nv <= 8) launch<8>(offsets, indices, table, out, rows, d, stream);
  else launch<16>(offsets, indices, table, out, rows, d, stream);
  return static_cast<int>(cudaGetLastError());
}
