// CPU emulation shim for checking kernel logic (each CUDA thread = one OS thread, blocks run one
// after another). Only what the topk / radix_sort kernels use.
#pragma once
#include <atomic>
#include <cmath>
#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3() = default; dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
typedef void* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t n) { *p = std::aligned_alloc(256, (n + 255) / 256 * 256); return cudaSuccess; }
template <class T> cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc(reinterpret_cast<void**>(p), n); }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { std::memset(p, v, n); return cudaSuccess; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(unsigned v) { return __builtin_ffs(static_cast<int>(v)); }
template <class T> T __ldcg(const T* p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F> cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }

struct EmuWarp { std::barrier<> bar{32}; uint64_t slot[32]; };
struct EmuBlock {
  std::barrier<> bar;
  std::vector<std::unique_ptr<EmuWarp>> warps;
  std::mutex mu;
  std::map<int, void*> arena;  // conv.py --arena: the block's own shared variables, zeroed
  explicit EmuBlock(int n) : bar(n) { for (int i = 0; i < n / 32; ++i) warps.emplace_back(new EmuWarp); }
  ~EmuBlock() { for (auto& [id, p] : arena) std::free(p); }
};
inline thread_local EmuBlock* emu_block;
// The block's shared variable number id (every thread of the block gets the same storage).
inline void* emu_arena(int id, size_t bytes) {
  std::lock_guard<std::mutex> g(emu_block->mu);
  void*& p = emu_block->arena[id];
  if (p == nullptr) { const size_t n = (bytes + 63) / 64 * 64; p = std::aligned_alloc(64, n); std::memset(p, 0, n); }
  return p;
}
template <class T> T* emu_shared(int id) { return static_cast<T*>(emu_arena(id, sizeof(T))); }
template <class T> T* emu_shared_dyn() { return static_cast<T*>(emu_arena(-1, 512 << 10)); }
inline void __syncthreads() { emu_block->bar.arrive_and_wait(); }
inline EmuWarp& emu_warp() { return *emu_block->warps[threadIdx.x / 32]; }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp().bar.arrive_and_wait(); }
template <class T> T emu_exchange(T v, int src) {  // every lane posts v, reads lane src's
  EmuWarp& w = emu_warp();
  uint64_t bits = 0; std::memcpy(&bits, &v, sizeof(T));
  w.slot[threadIdx.x % 32] = bits;
  w.bar.arrive_and_wait();
  uint64_t got = w.slot[src & 31]; T r; std::memcpy(&r, &got, sizeof(T));
  w.bar.arrive_and_wait();
  return r;
}
inline unsigned __match_any_sync(unsigned, unsigned v) {
  EmuWarp& w = emu_warp();
  w.slot[threadIdx.x % 32] = v;
  w.bar.arrive_and_wait();
  unsigned m = 0; for (int l = 0; l < 32; ++l) if (w.slot[l] == v) m |= 1u << l;
  w.bar.arrive_and_wait();
  return m;
}
inline unsigned __ballot_sync(unsigned, bool p) {
  EmuWarp& w = emu_warp();
  w.slot[threadIdx.x % 32] = p;
  w.bar.arrive_and_wait();
  unsigned m = 0; for (int l = 0; l < 32; ++l) if (w.slot[l]) m |= 1u << l;
  w.bar.arrive_and_wait();
  return m;
}
template <class T> T __shfl_sync(unsigned, T v, int src) { return emu_exchange(v, src); }
template <class T> T __shfl_xor_sync(unsigned, T v, int m) { return emu_exchange(v, static_cast<int>(threadIdx.x % 32) ^ m); }
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d) {
  const int lane = threadIdx.x % 32; T r = emu_exchange(v, lane >= static_cast<int>(d) ? lane - static_cast<int>(d) : lane); return r;
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned d) {
  const int lane = threadIdx.x % 32; return emu_exchange(v, lane + static_cast<int>(d) < 32 ? lane + static_cast<int>(d) : lane);
}
// Blocks run one after another, or EMU_BLOCKS at a time (only for files converted with
// conv.py --arena, whose shared variables are per block): then a onesweep look-back can meet
// predecessors that are still running.
template <class K, class... A> void d2k_launch(dim3 g, dim3 b, K kernel, A... args) {
  const char* env = std::getenv("EMU_BLOCKS");
  const unsigned wave = env != nullptr && std::atoi(env) > 1 ? static_cast<unsigned>(std::atoi(env)) : 1u;
  for (unsigned b0 = 0; b0 < g.x; b0 += wave) {
    const unsigned nb = g.x - b0 < wave ? g.x - b0 : wave;
    std::vector<std::unique_ptr<EmuBlock>> blocks;
    for (unsigned i = 0; i < nb; ++i) blocks.emplace_back(new EmuBlock(static_cast<int>(b.x)));
    std::vector<std::thread> ts;
    for (unsigned i = 0; i < nb; ++i)
      for (unsigned t = 0; t < b.x; ++t) {
        EmuBlock* blk = blocks[i].get();
        const unsigned bx = b0 + i;
        ts.emplace_back([=] { threadIdx = dim3(t); blockIdx = dim3(bx); blockDim = b; gridDim = g; emu_block = blk; kernel(args...); });
      }
    for (auto& th : ts) th.join();
  }
}
