// The runner's own device code (trusted): counter-based input generation and the L2 flush.
// Plain C++ interface so the host side of the runner needs no CUDA compiler.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

// Fills count elements of dtype at ptr from (seed, arg_index, element index): any runner with the
// same seed produces the same bits. Returns the launch status.
cudaError_t generate(void* ptr, Dtype dtype, std::uint64_t count, const Generator& gen,
                     std::uint64_t seed, std::uint32_t arg_index, cudaStream_t stream);

// Reads and writes every byte of buf (sized above the L2) so no line of an earlier call survives.
cudaError_t l2_flush(void* buf, std::uint64_t bytes, std::uint32_t salt, cudaStream_t stream);

// One launch of a kernel that does nothing (one thread): the owner's measure of what a train
// call's launch and device-wide sync cost the host (the split train's sync cost).
cudaError_t launch_noop(cudaStream_t stream);

}  // namespace d2k::runner
