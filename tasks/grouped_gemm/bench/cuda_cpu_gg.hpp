// Additions to tasks/stencil3d/bench/cuda_cpu_shim.hpp and tasks/gemm_skinny/bench/cuda_cpu_extra.hpp
// for the grouped_gemm kernels (included after both): __ballot_sync, __float2bfloat16_rn, and the
// emulations that emulate_gg.py substitutes for the experts' inline PTX: cp.async (synchronous,
// with zero fill), ldmatrix.x4, st.shared, named barriers (bar.sync id, 128), wgmma m64n256k16
// bf16 reading K-major 128B-swizzled operands through their descriptors, and the 2-D TMA store.
// The emulation encodes our reading of the PTX ISA; the hardware's agreement is checked on the H200.
#pragma once
#include <barrier>
#include <map>
#include <memory>
#include <mutex>

#define __CUDA_ARCH_FEAT_SM90_ALL 1

inline bf16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline unsigned __ballot_sync(unsigned, int pred) {
  const int w = t_linear / 32;
  g_block->slots[w][t_linear % 32] = pred ? 1 : 0;
  __syncwarp();
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) if (g_block->slots[w][l]) m |= 1u << l;
  __syncwarp();
  return m;
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: src_bytes copied, the rest zero-filled.
inline void emu_cp_async(uint32_t dst, const void* src, int src_bytes) {
  unsigned char* d = d2k_dyn_smem() + dst;
  std::memset(d, 0, 16);
  if (src_bytes > 0) std::memcpy(d, src, static_cast<size_t>(src_bytes));
}
inline void emu_sts32(uint32_t a, uint32_t v) { std::memcpy(d2k_dyn_smem() + a, &v, 4); }

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: lanes 8i..8i+7 give the row addresses of matrix i;
// lane l receives, from each matrix i, the 32-bit word 4*(l%4) bytes into row l/4.
inline uint32_t g_emu_ldm_addr[1024];
inline void emu_ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  const int lane = t_linear % 32, w0 = t_linear - lane;
  g_emu_ldm_addr[t_linear] = addr;
  __syncwarp();
  uint32_t* r[4] = {&r0, &r1, &r2, &r3};
  uint32_t v[4];
  for (int i = 0; i < 4; ++i) std::memcpy(&v[i], d2k_dyn_smem() + g_emu_ldm_addr[w0 + 8 * i + lane / 4] + 4 * (lane % 4), 4);
  __syncwarp();
  for (int i = 0; i < 4; ++i) *r[i] = v[i];
}

// bar.sync id, 128: a barrier per id among 128 threads (one per consumer warpgroup).
inline std::map<int, std::unique_ptr<std::barrier<>>> g_emu_named;
inline void emu_named_bar(int id) {
  std::barrier<>* b;
  {
    std::lock_guard<std::mutex> lock(g_emu_mu);
    auto& p = g_emu_named[id];
    if (!p) p = std::make_unique<std::barrier<>>(128);
    b = p.get();
  }
  b->arrive_and_wait();
}

// Element (row i, k) of a K-major operand with the 128-byte swizzle, described by `desc` (start
// address in bits 0-13 as addr >> 4; 8-row groups 1024 bytes apart): the logical byte address
// start + (i / 8) * 1024 + (i % 8) * 128 + 2k, its 16-byte chunk XOR-ed with address bits 7-9.
inline float emu_wgmma_elem(uint64_t desc, int i, int k) {
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
  const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  const uint32_t a = start + (i / 8) * sbo + (i % 8) * 128 + 2 * k;
  const uint32_t p = a ^ (((a >> 7) & 7u) << 4);
  uint16_t v;
  std::memcpy(&v, d2k_dyn_smem() + p, 2);
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
// wgmma.mma_async m64n256k16 f32.bf16.bf16 (scale-d 1): this thread's 128 accumulators, laid out
// as acc[4j + 2h + c] = (row 16 w + lane/4 + 8h, column 8j + 2(lane%4) + c) of the 64 x 256 tile,
// computed at issue time from shared memory (the kernel keeps the stage until the MMA completed).
inline void emu_wgmma_m64n256k16(float* d, uint64_t da, uint64_t db) {
  emu_named_bar(1000 + t_linear / 128);  // .sync.aligned: the warpgroup's 128 threads meet here
  const int lt = t_linear % 128, w = lt / 32, lane = lt % 32;
  float a[2][16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) a[h][k] = emu_wgmma_elem(da, 16 * w + lane / 4 + 8 * h, k);
  for (int j = 0; j < 32; ++j)
    for (int c = 0; c < 2; ++c) {
      const int col = 8 * j + 2 * (lane % 4) + c;
      float b[16];
      for (int k = 0; k < 16; ++k) b[k] = emu_wgmma_elem(db, col, k);
      for (int h = 0; h < 2; ++h) {
        float s = d[4 * j + 2 * h + c];
        for (int k = 0; k < 16; ++k) s += a[h][k] * b[k];
        d[4 * j + 2 * h + c] = s;
      }
    }
}

// cp.async.bulk.tensor.2d.global.shared::cta: the box (box[1] rows of box[0] bf16, 128-byte rows
// swizzled as the loads) written at (c1, c0); parts outside the tensor are not written.
inline void emu_tma_store_2d(uint64_t map_addr, uint32_t src, int c0, int c1) {
  const CUtensorMap* m = reinterpret_cast<const CUtensorMap*>(map_addr);
  const unsigned char* s = d2k_dyn_smem() + src;
  for (uint32_t r = 0; r < m->box[1]; ++r)
    for (uint32_t k = 0; k < m->box[0]; ++k) {
      const int64_t gr = c1 + static_cast<int64_t>(r), gk = c0 + static_cast<int64_t>(k);
      if (gr < 0 || gk < 0 || gr >= static_cast<int64_t>(m->dims[1]) || gk >= static_cast<int64_t>(m->dims[0])) continue;
      const uint32_t byte = k * 2;
      std::memcpy(const_cast<unsigned char*>(m->base) + gr * m->stride + gk * 2,
                  s + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15), 2);
    }
}
inline int min(int a, int b) { return a < b ? a : b; }
// try_wait for the emulation's hundreds of real threads: sleep between polls (a yield-only spin of
// 256 waiting consumer threads starves the producer thread on a 2-core machine).
#include <chrono>
inline uint32_t emu_mbar_test_sleep(uint32_t a, uint32_t parity) {
  const uint32_t done = emu_mbar_test(a, parity);
  if (!done) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return done;
}
