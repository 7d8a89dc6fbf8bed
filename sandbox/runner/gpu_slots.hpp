// GPU-resident outputs (docs/timing-protocol.md, "GPU-resident outputs"): the trusted runner owns
// the memory that receives the candidate's outputs (CUDA virtual-memory API, exported as a POSIX
// file descriptor), the agent runner maps it and copies each call's outputs there device to
// device, and after the agent runner has exited the trusted runner compares them with the
// reference's on the GPU. Outputs never cross to the host.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

// One VMM allocation mapped into this process (the runner's one visible GPU, device 0).
class SharedSlots {
 public:
  SharedSlots() = default;
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;
  ~SharedSlots();
  void release();  // unmaps (and, for an owner, frees) the allocation; a no-op when none

  // Owner: allocates at least `bytes` (rounded up to the allocation granularity), maps it
  // read-write, fills it with 0xFF (poison) and exports it; `fd` receives the exported descriptor
  // (the caller closes it). Returns "" or why not.
  std::string create(std::uint64_t bytes, int& fd);
  // User: imports an exported descriptor (closed here in every case) and maps `bytes` of it
  // read-write (the owner's rounded size), or read-only when asked and the driver grants it
  // (read_only() says which). Returns "" or why not.
  std::string import(int fd, std::uint64_t bytes, bool read_only = false);

  char* data() const { return reinterpret_cast<char*>(ptr_); }
  std::uint64_t size() const { return size_; }
  bool mapped() const { return ptr_ != 0; }
  bool read_only() const { return read_only_; }

 private:
  unsigned long long ptr_ = 0;   // CUdeviceptr
  unsigned long long handle_ = 0;  // CUmemGenericAllocationHandle (owner only; the user releases at once)
  std::uint64_t size_ = 0;
  bool read_only_ = false;
};

// Compares `count` elements of `got` with `want` (both device memory) with the semantics of
// sandbox/eval/compare.hpp's compare_tensors (the parent's CPU comparison): integers exactly when
// atol and rtol are 0; for floats, a non-finite reference must be matched in kind, a non-finite
// candidate element where the reference is finite is a mismatch and counted as nonfinite,
// otherwise |got - want| > atol + rtol·|want| is a mismatch; max_abs and max_rel (where
// |want| > atol) over all finite pairs; the first bad index with its two values. Synchronous on
// `stream`. Returns cudaSuccess or the failing call's error.
cudaError_t compare_on_gpu(const void* got, const void* want, Dtype dtype, std::uint64_t count, double atol,
                           double rtol, cudaStream_t stream, TensorCheck& out);

}  // namespace d2k::runner
