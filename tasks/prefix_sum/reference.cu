// prefix_sum reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. Three passes over chunks of 4096 elements: (1) one thread per chunk sums its chunk
// exactly (int64 for int32 input, double for fp32 input), (2) a single thread turns the chunk sums
// into exclusive chunk offsets, (3) one thread per chunk rescans its chunk from its offset and writes
// y: int32 gets the low 32 bits of the exact sum (two's complement wraparound), fp32 the double-
// precision prefix rounded once to float.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int64_t kChunk = 4096;
constexpr int64_t kMaxN = 0x7fffffff;  // every tensor has fewer than 2^31 elements
constexpr int64_t kMaxChunks = (kMaxN + kChunk - 1) / kChunk;
constexpr int kThreads = 256;

__device__ long long g_int_chunk[kMaxChunks];
__device__ double g_float_chunk[kMaxChunks];

__device__ __forceinline__ long long widen(int32_t v) { return static_cast<long long>(v); }
__device__ __forceinline__ double widen(float v) { return static_cast<double>(v); }

// The exact int64 prefix, wrapped to int32 (|prefix| < 2^62, so the int64 sum never overflows).
__device__ __forceinline__ int32_t narrow(long long acc, int32_t) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<unsigned long long>(acc)));
}
__device__ __forceinline__ float narrow(double acc, float) { return static_cast<float>(acc); }

// Pass 1: sums[c] = x[c*kChunk] + ... + x[min(n, (c+1)*kChunk) - 1].
template <typename In, typename Acc>
__global__ void chunk_sums(const In* x, int64_t n, int64_t chunks, Acc* sums) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  const int64_t begin = c * kChunk;
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  Acc s = 0;
  for (int64_t i = begin; i < end; ++i) s += widen(x[i]);
  sums[c] = s;
}

// Pass 2 (one thread): sums[c] becomes the sum of all chunks before c.
template <typename Acc>
__global__ void chunk_offsets(Acc* sums, int64_t chunks) {
  Acc running = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    const Acc s = sums[c];
    sums[c] = running;
    running += s;
  }
}

// Pass 3: y[i] = offset of i's chunk + x[chunk start] + ... + x[i].
template <typename In, typename Acc>
__global__ void chunk_scan(const In* x, In* y, int64_t n, int64_t chunks, const Acc* offsets) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  const int64_t begin = c * kChunk;
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  Acc running = offsets[c];
  for (int64_t i = begin; i < end; ++i) {
    running += widen(x[i]);
    y[i] = narrow(running, In{});
  }
}

template <typename In, typename Acc>
void run(const void* x, void* y, int64_t n, Acc* scratch, cudaStream_t stream) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const unsigned blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
  const In* in = static_cast<const In*>(x);
  In* out = static_cast<In*>(y);
  chunk_sums<In, Acc><<<blocks, kThreads, 0, stream>>>(in, n, chunks, scratch);
  chunk_offsets<Acc><<<1, 1, 0, stream>>>(scratch, chunks);
  chunk_scan<In, Acc><<<blocks, kThreads, 0, stream>>>(in, out, n, chunks, scratch);
}

}  // namespace

extern "C" int d2k_prefix_sum(const void* x, void* y, int64_t n, int is_float, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (n > kMaxN) return static_cast<int>(cudaErrorInvalidValue);
  if (is_float) {
    double* scratch = nullptr;
    cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(&scratch), g_float_chunk);
    if (err != cudaSuccess) return static_cast<int>(err);
    run<float, double>(x, y, n, scratch, stream);
  } else {
    long long* scratch = nullptr;
    cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(&scratch), g_int_chunk);
    if (err != cudaSuccess) return static_cast<int>(err);
    run<int32_t, long long>(x, y, n, scratch, stream);
  }
  return static_cast<int>(cudaGetLastError());
}
