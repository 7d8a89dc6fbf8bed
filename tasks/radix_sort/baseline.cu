// radix_sort baseline: the kernel a beginner writes first. Correct (stable LSD radix sort, 8-bit
// digits, 4 passes), but each thread owns a contiguous chunk of 1,024 elements and walks it alone:
// it counts its chunk's digits into its own column of a digit-major count matrix in global memory,
// one block scans the whole matrix, and each thread walks its chunk again, scattering every element
// to its slot. Neighbouring threads touch addresses 4 KB apart (uncoalesced), every count is a
// global read-modify-write, and the scan runs on one SM.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int64_t kChunk = 1024;
constexpr int kScanThreads = 1024;

__global__ void count_chunks(const uint32_t* keys, int64_t n, int shift, uint32_t* counts, int64_t chunks) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= chunks) return;
  const int64_t end = (t + 1) * kChunk < n ? (t + 1) * kChunk : n;
  for (int64_t i = t * kChunk; i < end; ++i) counts[((keys[i] >> shift) & 255u) * chunks + t] += 1;
}

// Exclusive scan of counts[0, m) in place, one block.
__global__ void scan_counts(uint32_t* counts, int64_t m) {
  __shared__ uint32_t sums[kScanThreads];
  const int64_t per = (m + kScanThreads - 1) / kScanThreads;
  const int64_t begin = threadIdx.x * per;
  const int64_t end = begin + per < m ? begin + per : m;
  uint32_t total = 0;
  for (int64_t i = begin; i < end; ++i) total += counts[i];
  sums[threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t run = 0;
    for (int i = 0; i < kScanThreads; ++i) { const uint32_t s = sums[i]; sums[i] = run; run += s; }
  }
  __syncthreads();
  uint32_t run = sums[threadIdx.x];
  for (int64_t i = begin; i < end; ++i) { const uint32_t c = counts[i]; counts[i] = run; run += c; }
}

__global__ void scatter_chunks(const uint32_t* keys, const uint32_t* vals, uint32_t* keys_out, uint32_t* vals_out,
                               int64_t n, int shift, uint32_t* offsets, int64_t chunks) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= chunks) return;
  const int64_t end = (t + 1) * kChunk < n ? (t + 1) * kChunk : n;
  for (int64_t i = t * kChunk; i < end; ++i) {
    const uint32_t key = keys[i];
    const uint32_t pos = offsets[((key >> shift) & 255u) * chunks + t]++;
    keys_out[pos] = key;
    vals_out[pos] = vals[i];
  }
}

struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
};

cudaError_t ensure(Scratch& s, size_t bytes) {
  if (s.bytes >= bytes) return cudaSuccess;
  if (s.ptr != nullptr) cudaFree(s.ptr);
  s.ptr = nullptr;
  s.bytes = 0;
  const cudaError_t err = cudaMalloc(&s.ptr, bytes);
  if (err == cudaSuccess) s.bytes = bytes;
  return err;
}

}  // namespace

extern "C" int d2k_radix_sort(const uint32_t* keys_in, const uint32_t* vals_in, uint32_t* keys_out,
                              uint32_t* vals_out, int64_t n, cudaStream_t stream) {
  static Scratch scratch;  // kept between calls: temporary keys, values and the count matrix
  if (n <= 0) return 0;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t m = 256 * chunks;
  cudaError_t err = ensure(scratch, static_cast<size_t>(2 * n + m) * sizeof(uint32_t));
  if (err != cudaSuccess) return static_cast<int>(err);
  uint32_t* tmp_keys = static_cast<uint32_t*>(scratch.ptr);
  uint32_t* tmp_vals = tmp_keys + n;
  uint32_t* counts = tmp_vals + n;
  const unsigned blocks = static_cast<unsigned>((chunks + 127) / 128);
  const uint32_t* src_k = keys_in;
  const uint32_t* src_v = vals_in;
  for (int pass = 0; pass < 4; ++pass) {  // in -> tmp -> out -> tmp -> out
    uint32_t* dst_k = pass % 2 == 0 ? tmp_keys : keys_out;
    uint32_t* dst_v = pass % 2 == 0 ? tmp_vals : vals_out;
    err = cudaMemsetAsync(counts, 0, static_cast<size_t>(m) * sizeof(uint32_t), stream);
    if (err != cudaSuccess) return static_cast<int>(err);
    count_chunks<<<blocks, 128, 0, stream>>>(src_k, n, 8 * pass, counts, chunks);
    scan_counts<<<1, kScanThreads, 0, stream>>>(counts, m);
    scatter_chunks<<<blocks, 128, 0, stream>>>(src_k, src_v, dst_k, dst_v, n, 8 * pass, counts, chunks);
    src_k = dst_k;
    src_v = dst_v;
  }
  return static_cast<int>(cudaGetLastError());
}
