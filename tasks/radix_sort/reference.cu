// radix_sort reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. CUB's DeviceRadixSort::SortPairs (stable LSD radix sort over all 32 key bits),
// an implementation independent of the baseline and the experts; its temporary storage is
// allocated and freed on the stream.
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

extern "C" int d2k_radix_sort(const uint32_t* keys_in, const uint32_t* vals_in, uint32_t* keys_out,
                              uint32_t* vals_out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (n > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int items = static_cast<int>(n);
  size_t temp_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                                    items, 0, 32, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  void* temp = nullptr;
  err = cudaMallocAsync(&temp, temp_bytes, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  err = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out, items, 0, 32, stream);
  const cudaError_t freed = cudaFreeAsync(temp, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (freed != cudaSuccess) return static_cast<int>(freed);
  return static_cast<int>(cudaGetLastError());
}
