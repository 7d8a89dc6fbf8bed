// stencil3d reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. One thread per cell, grid-stride over the flat index; interior cells sum the seven
// weighted terms in double and round once to fp32, boundary cells are copied.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

__global__ void stencil3d_reference(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz) {
  const int64_t total = nx * ny * nz;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t x = i % nx;
    const int64_t y = (i / nx) % ny;
    const int64_t z = i / (nx * ny);
    const bool interior = x > 0 && x < nx - 1 && y > 0 && y < ny - 1 && z > 0 && z < nz - 1;
    if (!interior) {
      out[i] = in[i];
      continue;
    }
    const double six = static_cast<double>(in[i - 1]) + static_cast<double>(in[i + 1]) +
                       static_cast<double>(in[i - nx]) + static_cast<double>(in[i + nx]) +
                       static_cast<double>(in[i - nx * ny]) + static_cast<double>(in[i + nx * ny]);
    out[i] = static_cast<float>(0.25 * static_cast<double>(in[i]) + 0.125 * six);
  }
}

}  // namespace

extern "C" int d2k_stencil3d(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz, cudaStream_t stream) {
  if (nx <= 0 || ny <= 0 || nz <= 0) return 0;
  const int64_t total = nx * ny * nz;
  const int threads = 256;
  const int64_t wanted = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  stencil3d_reference<<<blocks, threads, 0, stream>>>(in, out, nx, ny, nz);
  return static_cast<int>(cudaGetLastError());
}
