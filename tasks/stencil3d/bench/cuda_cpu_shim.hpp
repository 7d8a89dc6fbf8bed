// CPU emulation of the CUDA subset used by the stencil3d, moe_permute and embedding_bag kernels: a check of their
// index logic, halos, boundaries and warp/block collectives without a GPU. Blocks run one after
// another; the threads of a block are real threads (barriers are std::barrier, warp collectives go
// through per-warp slots), `__shared__` becomes a function-local static (shared by the block's
// threads because blocks do not overlap). Not a memory model: races that a GPU could expose are
// not found here, and nothing here says anything about speed.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#include <cstdio>
#include <cstdlib>

struct dim3 { unsigned x = 1, y = 1, z = 1; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct uint3_ { unsigned x, y, z; };
inline thread_local uint3_ threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
typedef int cudaError_t;
typedef void* cudaStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline int g_sms = 3;
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = g_sms; return cudaSuccess; }
template <typename K> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, K, int, size_t) { *n = 4; return cudaSuccess; }
template <typename T> cudaError_t cudaGetSymbolAddress(void** p, T& sym) { *p = static_cast<void*>(&sym); return cudaSuccess; }

struct bf16 { uint16_t v; };
typedef bf16 __nv_bfloat16;
inline float __bfloat162float(bf16 b) { uint32_t u = uint32_t(b.v) << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline bf16 __float2bfloat16(float f) { uint32_t u; std::memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return bf16{uint16_t(u >> 16)}; }
inline bf16 __double2bfloat16(double d) { return __float2bfloat16(float(d)); }  // test data: exact in float
struct __nv_bfloat162 { bf16 x, y; };
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

// Block execution state: one block at a time; its threads are real threads.
struct BlockState {
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
  std::vector<std::vector<long long>> slots;
};
inline BlockState* g_block = nullptr;
inline std::vector<unsigned char> g_dyn_smem;
inline thread_local int t_linear = 0;
inline unsigned char* d2k_dyn_smem() { return g_dyn_smem.data(); }

inline void __syncthreads() { g_block->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_block->warp_bar[t_linear / 32]->arrive_and_wait(); }
template <typename T> T __shfl_up_sync(unsigned, T v, int d) {
  const int w = t_linear / 32, lane = t_linear % 32;
  long long x = 0; std::memcpy(&x, &v, sizeof(T));
  g_block->slots[w][lane] = x;
  __syncwarp();
  long long y = lane >= d ? g_block->slots[w][lane - d] : x;
  __syncwarp();
  T r; std::memcpy(&r, &y, sizeof(T)); return r;
}
template <typename T> T __shfl_sync(unsigned, T v, int src) {
  const int w = t_linear / 32;
  long long x = 0; std::memcpy(&x, &v, sizeof(T));
  g_block->slots[w][t_linear % 32] = x;
  __syncwarp();
  long long y = g_block->slots[w][src & 31];
  __syncwarp();
  T r; std::memcpy(&r, &y, sizeof(T)); return r;
}
inline unsigned __match_any_sync(unsigned, int v) {
  const int w = t_linear / 32, lane = t_linear % 32;
  g_block->slots[w][lane] = v;
  __syncwarp();
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) if (g_block->slots[w][l] == v) m |= 1u << l;
  __syncwarp();
  (void)lane;
  return m;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
inline unsigned d2k_lanemask_lt() { return (1u << (t_linear % 32)) - 1u; }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <typename T> T __ldcs(const T* p) { return *p; }
template <typename T> void __stcs(T* p, T v) { *p = v; }
template <typename T> T __ldg(const T* p) { return *p; }

inline void d2k_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body) {
  gridDim = grid; blockDim = block;
  const unsigned nt = block.x * block.y * block.z;
  if (nt % 32 != 0) { std::fprintf(stderr, "block of %u threads\n", nt); std::exit(3); }
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        BlockState st;
        st.bar = std::make_unique<std::barrier<>>(nt);
        for (unsigned w = 0; w < nt / 32; ++w) st.warp_bar.push_back(std::make_unique<std::barrier<>>(32));
        st.slots.assign(nt / 32, std::vector<long long>(32));
        g_block = &st;
        g_dyn_smem.assign(smem + 16, 0xAB);
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < nt; ++t)
          ts.emplace_back([&, t] {
            t_linear = static_cast<int>(t);
            threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            blockIdx = {bx, by, bz};
            body();
            // threads that return early must not block barriers: none of the tested kernels
            // returns early before a barrier
          });
        for (auto& th : ts) th.join();
        g_block = nullptr;
      }
}
