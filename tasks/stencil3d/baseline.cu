// stencil3d baseline: the kernel a beginner writes first, one thread per cell with the flat thread
// index split as (x, y, z) with z fastest (the loop nest order of a[x][y][z]). Correct, but the 32
// threads of a warp sit on 32 consecutive z planes, nx * ny floats apart: each of the seven loads
// of a warp touches 32 different cache lines and uses 4 bytes of each, and a line is needed again
// only when the grid-wide sweep reaches the next x, long after it has left the caches.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void stencil3d_z_fastest(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= nx * ny * nz) return;
  const int64_t z = t % nz;
  const int64_t y = (t / nz) % ny;
  const int64_t x = t / (nz * ny);
  const int64_t i = (z * ny + y) * nx + x;
  if (x == 0 || x == nx - 1 || y == 0 || y == ny - 1 || z == 0 || z == nz - 1) {
    out[i] = in[i];
    return;
  }
  out[i] = 0.25f * in[i] + 0.125f * (in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx] + in[i - nx * ny] +
                                     in[i + nx * ny]);
}

extern "C" int d2k_stencil3d(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz, cudaStream_t stream) {
  if (nx <= 0 || ny <= 0 || nz <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (nx * ny * nz + threads - 1) / threads;
  stencil3d_z_fastest<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(in, out, nx, ny, nz);
  return static_cast<int>(cudaGetLastError());
}
