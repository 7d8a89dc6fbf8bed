// What decode_attention's kernels use beyond ../../stencil3d/bench/cuda_cpu_shim.hpp and
// ../../gemm_skinny/bench/cuda_cpu_extra.hpp (shuffles, the allocator, mbarriers, the 2-D TMA copy
// with the 128-byte swizzle, mma.sync m16n8k16): warp votes, cp.async (run_cpu_check.sh rewrites
// the asm into d2k_cp_async16: the copy happens at once, so commit and wait are no-ops), ldmatrix
// x4 and x4.trans (run_cpu_check.sh rewrites the asm into emu_ldsm_x4), a few types.
#pragma once
#include <algorithm>
#include <cstring>
#include "gemm_skinny_extra.hpp"

struct float2 { float x, y; };
struct uint2 { unsigned x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
#define __restrict__
using std::max;
using std::min;
inline bool __any_sync(unsigned, bool p) {
  const int w = t_linear / 32;
  g_block->slots[w][t_linear % 32] = p ? 1 : 0;
  __syncwarp();
  bool any = false;
  for (int l = 0; l < 32; ++l) any = any || g_block->slots[w][l] != 0;
  __syncwarp();
  return any;
}
inline unsigned __ballot_sync(unsigned, bool p) {
  const int w = t_linear / 32;
  g_block->slots[w][t_linear % 32] = p ? 1 : 0;
  __syncwarp();
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) m |= (g_block->slots[w][l] != 0 ? 1u : 0u) << l;
  __syncwarp();
  return m;
}
inline void d2k_cp_async16(void* dst, const void* src) { std::memcpy(dst, src, 16); }

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane 8 i + r gives the address of row r of
// matrix i (8 bf16 = 16 bytes). Without .trans, register i of lane l holds row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1 of matrix i; with .trans, rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4
// (the lower-indexed element in the low 16 bits).
inline void emu_ldsm_x4(uint32_t addr, uint32_t (&r)[4], bool trans) {
  const int w = t_linear / 32, lane = t_linear % 32;
  g_block->slots[w][lane] = addr;
  __syncwarp();
  const int g = lane / 4, t = lane % 4;
  auto elem = [&](int i, int row, int col) {
    uint16_t v;
    std::memcpy(&v, d2k_dyn_smem() + static_cast<uint32_t>(g_block->slots[w][8 * i + row]) + 2 * col, 2);
    return static_cast<uint32_t>(v);
  };
  for (int i = 0; i < 4; ++i)
    r[i] = trans ? (elem(i, 2 * t, g) | (elem(i, 2 * t + 1, g) << 16)) : (elem(i, g, 2 * t) | (elem(i, g, 2 * t + 1) << 16));
  __syncwarp();
}
