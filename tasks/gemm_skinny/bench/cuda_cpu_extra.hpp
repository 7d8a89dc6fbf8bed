// Additions to tasks/stencil3d/bench/cuda_cpu_shim.hpp for the gemm_skinny kernels: __shfl_xor_sync,
// the allocator calls and cudaFuncSetAttribute. Included after the shim.
#pragma once
#include <cstdlib>
#include <cstring>

template <typename T> T __shfl_xor_sync(unsigned, T v, int mask) {
  const int w = t_linear / 32;
  long long x = 0;
  std::memcpy(&x, &v, sizeof(T));
  g_block->slots[w][t_linear % 32] = x;
  __syncwarp();
  long long o = g_block->slots[w][(t_linear % 32) ^ mask];
  __syncwarp();
  T r;
  std::memcpy(&r, &o, sizeof(T));
  return r;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename K> cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t b) { *p = std::malloc(b); return *p ? cudaSuccess : 2; }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }

// ---- L3 emulation (emulate_l3.py rewrites L3's inline PTX into these calls) -------------------
#include <map>
#include <mutex>
#include <thread>

// 32-bit shared addresses: offsets into the block's dynamic buffer; other shared objects (the
// mbarriers, function-local statics here) get handles with the top bit set.
inline std::mutex g_emu_mu;
inline std::vector<const void*> g_emu_handles;
inline uint32_t __cvta_generic_to_shared(const void* p) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  if (c >= d2k_dyn_smem() && c < d2k_dyn_smem() + g_dyn_smem.size()) return static_cast<uint32_t>(c - d2k_dyn_smem());
  std::lock_guard<std::mutex> lock(g_emu_mu);
  for (size_t i = 0; i < g_emu_handles.size(); ++i)
    if (g_emu_handles[i] == p) return 0x80000000u | static_cast<uint32_t>(i);
  g_emu_handles.push_back(p);
  return 0x80000000u | static_cast<uint32_t>(g_emu_handles.size() - 1);
}

struct EmuBarrier { int count = 0, pending = 0; long long tx = 0; unsigned phase = 0; };
inline std::map<uint32_t, EmuBarrier> g_emu_bars;
inline void emu_bar_check(EmuBarrier& b) {
  if (b.pending == 0 && b.tx == 0) { ++b.phase; b.pending = b.count; }
}
inline void emu_mbar_init(uint32_t a, int count) {
  std::lock_guard<std::mutex> lock(g_emu_mu);
  g_emu_bars[a] = EmuBarrier{count, count, 0, 0};
}
inline void emu_mbar_arrive(uint32_t a) {
  std::lock_guard<std::mutex> lock(g_emu_mu);
  EmuBarrier& b = g_emu_bars.at(a);
  --b.pending;
  emu_bar_check(b);
}
inline void emu_mbar_expect_tx(uint32_t a, uint32_t bytes) {
  std::lock_guard<std::mutex> lock(g_emu_mu);
  EmuBarrier& b = g_emu_bars.at(a);
  b.tx += bytes;
  --b.pending;
  emu_bar_check(b);
}
// try_wait.parity P: true once the phase with parity P has completed (the current phase's parity
// differs from P).
inline uint32_t emu_mbar_test(uint32_t a, uint32_t parity) {
  bool done;
  {
    std::lock_guard<std::mutex> lock(g_emu_mu);
    done = (g_emu_bars.at(a).phase & 1u) != (parity & 1u);
  }
  if (!done) std::this_thread::yield();
  return done ? 1u : 0u;
}

// Tensor maps: what cuTensorMapEncodeTiled records, for the emulated copies.
typedef int CUresult;
enum { CUDA_SUCCESS = 0 };
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;
enum CUtensorMapDataType { CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9 };
enum CUtensorMapInterleave { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum CUtensorMapSwizzle { CU_TENSOR_MAP_SWIZZLE_128B = 3 };
enum CUtensorMapL2promotion { CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3 };
enum CUtensorMapFloatOOBfill { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };
struct CUtensorMap { const unsigned char* base; uint64_t dims[2]; uint64_t stride; uint32_t box[2]; int swizzle; };
#define __grid_constant__
inline CUresult emu_encode_tiled(CUtensorMap* m, CUtensorMapDataType, cuuint32_t rank, void* base, const cuuint64_t* dims,
                                 const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle sw, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill) {
  if (rank != 2 || strides[0] % 16 != 0 || box[0] * 2 > 128 || box[1] > 256) return 1;
  *m = CUtensorMap{static_cast<const unsigned char*>(base), {dims[0], dims[1]}, strides[0], {box[0], box[1]}, sw};
  return CUDA_SUCCESS;
}
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1 };
enum { cudaEnableDefault = 0, cudaErrorNotSupported = 801 };
inline cudaError_t cudaGetDriverEntryPointByVersion(const char* name, void** p, unsigned, int,
                                                    cudaDriverEntryPointQueryResult* q) {
  *p = std::strcmp(name, "cuTensorMapEncodeTiled") == 0 ? reinterpret_cast<void*>(&emu_encode_tiled) : nullptr;
  *q = *p ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

// 2-D tile copy: box[1] rows of box[0] bf16 from (c1, c0), zeros outside the tensor, rows of
// 128 bytes with the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)); then the
// transaction bytes complete on the barrier.
inline void emu_tma_load_2d(uint32_t dst, uint64_t map_addr, uint32_t bar, int c0, int c1) {
  const CUtensorMap* m = reinterpret_cast<const CUtensorMap*>(map_addr);
  unsigned char* d = d2k_dyn_smem() + dst;
  for (uint32_t r = 0; r < m->box[1]; ++r)
    for (uint32_t k = 0; k < m->box[0]; ++k) {
      const int64_t gr = c1 + static_cast<int64_t>(r), gk = c0 + static_cast<int64_t>(k);
      uint16_t v = 0;
      if (gr >= 0 && gk >= 0 && gr < static_cast<int64_t>(m->dims[1]) && gk < static_cast<int64_t>(m->dims[0]))
        std::memcpy(&v, m->base + gr * m->stride + gk * 2, 2);
      const uint32_t byte = k * 2;
      std::memcpy(d + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15), &v, 2);
    }
  std::lock_guard<std::mutex> lock(g_emu_mu);
  EmuBarrier& b = g_emu_bars.at(bar);
  b.tx -= static_cast<long long>(m->box[0]) * m->box[1] * 2;
  emu_bar_check(b);
}

inline uint32_t emu_lds32(uint32_t a) { uint32_t v; std::memcpy(&v, d2k_dyn_smem() + a, 4); return v; }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, fragments as in the PTX ISA (groupID g =
// lane / 4, t = lane % 4; the lower-indexed element of a pair in the low 16 bits):
// A a0:(g, 2t..2t+1) a1:(g+8, 2t..) a2:(g, 2t+8..) a3:(g+8, 2t+8..); B b0:(k 2t..2t+1, n g)
// b1:(k 2t+8.., n g); C/D d0,d1:(g, 2t..2t+1) d2,d3:(g+8, 2t..2t+1).
inline uint32_t g_emu_frag[1024][6];
inline float emu_bf(uint32_t pair, int hi) { return __uint_as_float((hi ? pair >> 16 : pair & 0xffffu) << 16); }
inline void emu_mma_m16n8k16(float& d0, float& d1, float& d2, float& d3, uint32_t a0, uint32_t a1, uint32_t a2,
                             uint32_t a3, uint32_t b0, uint32_t b1) {
  const int lane = t_linear % 32, w0 = t_linear - lane;
  uint32_t* f = g_emu_frag[t_linear];
  f[0] = a0; f[1] = a1; f[2] = a2; f[3] = a3; f[4] = b0; f[5] = b1;
  __syncwarp();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const uint32_t* q = g_emu_frag[w0 + l];
    const int g = l / 4, t = l % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = emu_bf(q[0], h);
      A[g + 8][2 * t + h] = emu_bf(q[1], h);
      A[g][2 * t + 8 + h] = emu_bf(q[2], h);
      A[g + 8][2 * t + 8 + h] = emu_bf(q[3], h);
      B[2 * t + h][g] = emu_bf(q[4], h);
      B[2 * t + 8 + h][g] = emu_bf(q[5], h);
    }
  }
  __syncwarp();
  const int g = lane / 4, t = lane % 4;
  float* d[4] = {&d0, &d1, &d2, &d3};
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float s = *d[e];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    *d[e] = s;
  }
}

// ldmatrix.sync.aligned.m8n8.x{count}.shared.b16 (no .trans): lanes 8i..8i+7 give the 16-byte row
// addresses of matrix i; lane l receives row l / 4, bf16 columns 2 (l % 4) and 2 (l % 4) + 1 of every
// matrix (register i from matrix i).
inline void emu_ldsm(uint32_t* r, int count, uint32_t addr) {
  const int w = t_linear / 32, lane = t_linear % 32;
  g_block->slots[w][lane] = addr;
  __syncwarp();
  for (int i = 0; i < count; ++i) {
    const uint32_t row = static_cast<uint32_t>(g_block->slots[w][8 * i + lane / 4]);
    std::memcpy(&r[i], d2k_dyn_smem() + row + (lane % 4) * 4, 4);
  }
  __syncwarp();
}
inline void emu_ldsm4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  uint32_t r[4];
  emu_ldsm(r, 4, addr);
  r0 = r[0]; r1 = r[1]; r2 = r[2]; r3 = r[3];
}
inline void emu_ldsm2(uint32_t& r0, uint32_t& r1, uint32_t addr) {
  uint32_t r[2];
  emu_ldsm(r, 2, addr);
  r0 = r[0]; r1 = r[1];
}
inline void emu_tma_load_2d_hint(uint32_t dst, uint64_t map_addr, uint32_t bar, int c0, int c1, uint64_t) {
  emu_tma_load_2d(dst, map_addr, bar, c0, c1);
}
inline float atomicAdd(float* p, float v) {
  uint32_t old = __atomic_load_n(reinterpret_cast<uint32_t*>(p), __ATOMIC_SEQ_CST), nw;
  do {
    float f;
    std::memcpy(&f, &old, 4);
    f += v;
    std::memcpy(&nw, &f, 4);
  } while (!__atomic_compare_exchange_n(reinterpret_cast<uint32_t*>(p), &old, nw, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
  return 0.0f;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t b, cudaStream_t = nullptr) {
  std::memset(p, v, b);
  return cudaSuccess;
}

// bar.sync id, count among the consumer warps: blocks run one after another in the emulation, so
// one barrier of `count` threads, made anew for each block.
inline std::mutex g_emu_named_mu;
inline std::unique_ptr<std::barrier<>> g_emu_named;
inline const void* g_emu_named_block = nullptr;
inline void emu_named_bar(int count) {
  std::barrier<>* b;
  {
    std::lock_guard<std::mutex> lock(g_emu_named_mu);
    if (g_emu_named_block != g_block) {
      g_emu_named = std::make_unique<std::barrier<>>(count);
      g_emu_named_block = g_block;
    }
    b = g_emu_named.get();
  }
  b->arrive_and_wait();
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <typename T> T __ldcg(const T* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
inline float __ldcg(const float* p) {
  uint32_t u = __atomic_load_n(reinterpret_cast<const uint32_t*>(p), __ATOMIC_SEQ_CST);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
