// moe_permute: group token rows by expert. Entry i in [0, tokens * k) is token i / k, slot i % k,
// routed to expert topk_ids[i] (int32 in [0, experts), passed as const void*). Sort the entries by
// (expert, i) (stable by expert) and, with p the position of entry i in that order, write
//   order[p]   = i                      (int32, tokens * k)
//   rows[p][:] = x[i / k][:]            (bf16 copies, tokens * k rows of hidden)
//   offsets[e] = entries with expert < e, for e in [0, experts] (int32, experts + 1)
//
// Write your kernel(s) and make d2k_moe_permute launch them on `stream`. Return 0 on success
// (e.g. the value of cudaGetLastError() after your launches), non-zero on failure.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" int d2k_moe_permute(const void* topk_ids, const __nv_bfloat16* x, int* order, int* offsets, __nv_bfloat16* rows, int64_t tokens, int64_t k, int64_t experts, int64_t hidden, cudaStream_t stream) {
  (void)topk_ids; (void)x; (void)order; (void)offsets; (void)rows; (void)tokens; (void)k; (void)experts; (void)hidden; (void)stream;
  return 1;  // replace: launch your kernel(s) on `stream` and return the error code
}
