// stencil3d expert, layer 1 (algorithm): one thread per cell with x on consecutive threads, so each
// of the seven loads of a warp reads 32 consecutive floats (one 128-byte line, or two). Blocks of
// 32 x 8 threads cover a 32 x 8 tile of one z plane; the grid covers the plane tiles in x and y and
// the planes in z (grid-stride beyond 65,535 planes). The six neighbour loads of a cell are the
// centre loads of nearby threads: the x and y neighbours come from the same or adjacent lines
// (L1 cache), the z neighbours from the planes that the blocks of the next and previous z index
// read at about the same time (L2 cache), so DRAM serves most cells about once.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kTx = 32;
constexpr int kTy = 8;

__global__ void __launch_bounds__(kTx * kTy)
stencil3d_cell(const float* __restrict__ in, float* __restrict__ out, int64_t nx, int64_t ny, int64_t nz) {
  const int64_t x = static_cast<int64_t>(blockIdx.x) * kTx + threadIdx.x;
  const int64_t y = static_cast<int64_t>(blockIdx.y) * kTy + threadIdx.y;
  if (x >= nx || y >= ny) return;
  const int64_t plane = nx * ny;
  const bool interior_xy = x > 0 && x < nx - 1 && y > 0 && y < ny - 1;
  for (int64_t z = blockIdx.z; z < nz; z += gridDim.z) {
    const int64_t i = z * plane + y * nx + x;
    if (interior_xy && z > 0 && z < nz - 1)
      out[i] = 0.25f * in[i] + 0.125f * (((in[i - 1] + in[i + 1]) + (in[i - nx] + in[i + nx])) +
                                         (in[i - plane] + in[i + plane]));
    else
      out[i] = in[i];
  }
}

}  // namespace

extern "C" int d2k_stencil3d(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz, cudaStream_t stream) {
  if (nx <= 0 || ny <= 0 || nz <= 0) return 0;
  const int64_t gx = (nx + kTx - 1) / kTx;
  const int64_t gy = (ny + kTy - 1) / kTy;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(nz < 65535 ? nz : 65535));
  stencil3d_cell<<<grid, dim3(kTx, kTy), 0, stream>>>(in, out, nx, ny, nz);
  return static_cast<int>(cudaGetLastError());
}
