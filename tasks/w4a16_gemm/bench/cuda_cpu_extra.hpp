// Additions to tasks/stencil3d/bench/cuda_cpu_shim.hpp for the w4a16_gemm kernels (adapted from
// tasks/gemm_skinny/bench's): __shfl_xor_sync, __float2bfloat16_rn, the allocator calls,
// cudaFuncSetAttribute, and the emulations of L3's inline PTX. Included after the shim.
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
inline bf16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }  // the shim rounds to nearest even
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
// The most phases any barrier of arrival count 1 (L3's "full" barriers, one per ring slot)
// completed in one block: 2 or more means a block refilled a ring slot. check_w4a16_gemm.cpp reads
// it (EMU_MAX_FULL_PHASES).
inline unsigned g_emu_full_phases = 0;
extern "C" unsigned emu_full_phases() { return g_emu_full_phases; }
inline void emu_bar_check(EmuBarrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase;
    b.pending = b.count;
    if (b.count == 1 && b.phase > g_emu_full_phases) g_emu_full_phases = b.phase;
  }
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
enum CUtensorMapDataType { CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9 };
enum CUtensorMapInterleave { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum CUtensorMapSwizzle { CU_TENSOR_MAP_SWIZZLE_128B = 3 };
enum CUtensorMapL2promotion { CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3 };
enum CUtensorMapFloatOOBfill { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };
struct CUtensorMap { const unsigned char* base; uint64_t dims[2]; uint64_t stride; uint32_t box[2]; int swizzle; uint32_t elem; };
#define __grid_constant__
inline CUresult emu_encode_tiled(CUtensorMap* m, CUtensorMapDataType type, cuuint32_t rank, void* base,
                                 const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle sw,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  const uint32_t elem = type == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2;
  if (rank != 2 || strides[0] % 16 != 0 || box[0] * elem > 128 || box[1] > 256 ||
      reinterpret_cast<uintptr_t>(base) % 16 != 0)
    return 1;
  *m = CUtensorMap{static_cast<const unsigned char*>(base), {dims[0], dims[1]}, strides[0], {box[0], box[1]}, sw, elem};
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

// 2-D tile copy: box[1] rows of box[0] elements from (c1, c0), zeros outside the tensor, rows of
// 128 bytes with the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)); then the
// transaction bytes complete on the barrier.
inline void emu_tma_load_2d(uint32_t dst, uint64_t map_addr, uint32_t bar, int c0, int c1) {
  const CUtensorMap* m = reinterpret_cast<const CUtensorMap*>(map_addr);
  unsigned char* d = d2k_dyn_smem() + dst;
  if (dst % 1024 != 0 || dst + m->box[1] * 128 > g_dyn_smem.size()) { std::fprintf(stderr, "bad TMA dst\n"); std::exit(4); }
  for (uint32_t r = 0; r < m->box[1]; ++r)
    for (uint32_t k = 0; k < m->box[0]; ++k) {
      const int64_t gr = c1 + static_cast<int64_t>(r), gk = c0 + static_cast<int64_t>(k);
      uint16_t v = 0;
      if (gr >= 0 && gk >= 0 && gr < static_cast<int64_t>(m->dims[1]) && gk < static_cast<int64_t>(m->dims[0]))
        std::memcpy(&v, m->base + gr * m->stride + gk * m->elem, m->elem);
      const uint32_t byte = k * m->elem;
      std::memcpy(d + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15), &v, m->elem);
    }
  std::lock_guard<std::mutex> lock(g_emu_mu);
  EmuBarrier& b = g_emu_bars.at(bar);
  b.tx -= static_cast<long long>(m->box[0]) * m->box[1] * m->elem;
  emu_bar_check(b);
}

inline float emu_bf(uint32_t pair, int hi) { return __uint_as_float((hi ? pair >> 16 : pair & 0xffffu) << 16); }
inline uint32_t emu_lds32(uint32_t a) { uint32_t v; std::memcpy(&v, d2k_dyn_smem() + a, 4); return v; }
inline void emu_lds128(uint32_t a, uint32_t& v0, uint32_t& v1, uint32_t& v2, uint32_t& v3) {
  if (a % 16 != 0) { std::fprintf(stderr, "misaligned ld.shared.v4\n"); std::exit(4); }
  uint32_t v[4];
  std::memcpy(v, d2k_dyn_smem() + a, 16);
  v0 = v[0]; v1 = v[1]; v2 = v[2]; v3 = v[3];
}
// lop3.b32 d, a, b, c, 0xea: (a & b) | c.
inline uint32_t emu_lop3_ea(uint32_t a, uint32_t b, uint32_t c) { return (a & b) | c; }
// prmt.b32 d, a, b, sel (default mode): byte i of d is byte (sel >> 4i) & 7 of {b, a} (a the low four).
inline uint32_t emu_prmt(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t src = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) d |= static_cast<uint32_t>((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return d;
}
// fma.rn.bf16x2 d, a, b, c: per half, a * b + c rounded once to bf16. Emulated as an fp32 fma then a
// rounding to bf16: the same single rounding for the operands L3 uses (a bf16 product of at most 16
// significant bits plus 0 or an integer: exact in fp32).
inline uint32_t emu_fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d = 0;
  for (int h = 0; h < 2; ++h) {
    const float r = std::fma(emu_bf(a, h), emu_bf(b, h), emu_bf(c, h));
    d |= static_cast<uint32_t>(__float2bfloat16(r).v) << (16 * h);
  }
  return d;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, fragments as in the PTX ISA (groupID g =
// lane / 4, t = lane % 4; the lower-indexed element of a pair in the low 16 bits):
// A a0:(g, 2t..2t+1) a1:(g+8, 2t..) a2:(g, 2t+8..) a3:(g+8, 2t+8..); B b0:(k 2t..2t+1, n g)
// b1:(k 2t+8.., n g); C/D d0,d1:(g, 2t..2t+1) d2,d3:(g+8, 2t..2t+1).
inline uint32_t g_emu_frag[1024][6];
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
