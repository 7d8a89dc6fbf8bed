// stencil3d expert, layer 2 (dataflow): 2.5D blocking. A block of 32 x 8 threads owns a 32 x 8
// tile of the x-y plane and marches through a range of z planes. Each thread keeps its column's
// cells of planes z-1, z and z+1 in registers (the z neighbours never come from memory twice) and
// kAhead planes ahead in flight: the load of plane z+kAhead+1 is issued before computing plane z,
// so kAhead DRAM loads per thread are always in flight behind the arithmetic (8 KB of reads per
// SM per plane ahead at 8 blocks of 256 threads; the DRAM latency at the copy rate needs about
// 35 KB). No plane past the block's range (and the one above it) is read. The current plane goes
// to shared memory with a one-cell halo (the edge threads of the tile load it, one plane ahead, so
// no load is waited for before a barrier) and the x/y neighbours are read from there. The z range
// per block is chosen so that the grid fills whole waves of 8 resident blocks per SM (march_grid):
// each block re-reads only two planes (the one below and the one above its range). Offsets are
// 32-bit: the grid has fewer than 2^31 cells.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kTx = 32;
constexpr int kTy = 8;
constexpr int kAhead = 4;  // planes z+2 .. z+kAhead+1 in flight while plane z is computed

__global__ void __launch_bounds__(kTx * kTy, 8)  // 32 registers: 8 blocks of 256 threads per SM
stencil3d_march(const float* __restrict__ in, float* __restrict__ out, int nx, int ny, int nz, int zchunk) {
  __shared__ float s[kTy + 2][kTx + 2];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int x = static_cast<int>(blockIdx.x) * kTx + tx;
  const int y = static_cast<int>(blockIdx.y) * kTy + ty;
  const int z0 = static_cast<int>(blockIdx.z) * zchunk;
  const int z1 = z0 + zchunk < nz ? z0 + zchunk : nz;  // the same for the whole block: barriers are uniform
  const int zlim = z1 < nz ? z1 + 1 : nz;  // planes z0-1 .. zlim-1 are read: nothing past the range's "above"
  const bool in_xy = x < nx && y < ny;
  const bool interior_xy = in_xy && x > 0 && x < nx - 1 && y > 0 && y < ny - 1;
  // 32-bit offsets: the grid has fewer than 2^31 cells, and only threads inside it load or store.
  const int plane = nx * ny;
  const int xy = in_xy ? y * nx + x : 0;
  // Halo cells this thread loads besides its own (edge threads of the tile only; a thread is on
  // at most one x edge and one y edge), one plane ahead like its own cells.
  const bool left = tx == 0 && in_xy && x > 0;
  const bool right = tx == kTx - 1 && x + 1 < nx && y < ny;
  const bool down = ty == 0 && in_xy && y > 0;
  const bool up = ty == kTy - 1 && y + 1 < ny && x < nx;
  const bool has_hx = left || right, has_hy = down || up;
  const int hx_off = left ? -1 : 1;
  const int hy_off = down ? -nx : nx;
  const int hx_col = left ? 0 : kTx + 1;
  const int hy_row = down ? 0 : kTy + 1;

  // The column: q[0] = plane z-1, q[1] = z, q[2] = z+1, q[3 ..] = the planes in flight.
  float q[kAhead + 2];
#pragma unroll
  for (int k = 0; k < kAhead + 2; ++k) {
    const int zk = z0 - 1 + k;
    q[k] = (in_xy && zk >= 0 && zk < zlim) ? in[zk * plane + xy] : 0.0f;
  }
  float hx = has_hx ? in[z0 * plane + xy + hx_off] : 0.0f;
  float hy = has_hy ? in[z0 * plane + xy + hy_off] : 0.0f;
  for (int z = z0; z < z1; ++z) {
    const int base = z * plane + xy;
    // Issued now, used kAhead planes later: in flight behind the planes being computed.
    const float next = (in_xy && z + kAhead + 1 < zlim) ? in[base + (kAhead + 1) * plane] : 0.0f;
    const bool more = z + 1 < z1;
    const float hx_next = (has_hx && more) ? in[base + plane + hx_off] : 0.0f;
    const float hy_next = (has_hy && more) ? in[base + plane + hy_off] : 0.0f;
    const float cur = q[1];
    s[ty + 1][tx + 1] = cur;
    if (has_hx) s[ty + 1][hx_col] = hx;
    if (has_hy) s[hy_row][tx + 1] = hy;
    __syncthreads();
    if (in_xy) {
      float r = cur;
      if (interior_xy && z > 0 && z < nz - 1)
        r = 0.25f * cur + 0.125f * (((s[ty + 1][tx] + s[ty + 1][tx + 2]) + (s[ty][tx + 1] + s[ty + 2][tx + 1])) +
                                    (q[0] + q[2]));
      out[base] = r;
    }
    __syncthreads();  // the plane in shared memory is overwritten next
#pragma unroll
    for (int k = 0; k < kAhead + 1; ++k) q[k] = q[k + 1];
    q[kAhead + 1] = next;
    hx = hx_next;
    hy = hy_next;
  }
}

int sm_count() {
  static int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      n = 132;
    return n > 0 ? n : 132;
  }();
  return sms;
}

// The z split. Every block of a launch does about the same work (a tile times its z range), so
// the launch runs in waves of `resident` blocks (blocks_per_sm on every SM) and a last, partial
// wave leaves SMs idle: pick the number of z ranges that fills the waves best, discounted by the
// two extra planes each range reads (planes below and above it): maximise
//   blocks / (waves * resident) * zchunk / (zchunk + 1).
bool march_grid(int64_t gx, int64_t gy, int64_t nz, int blocks_per_sm, dim3& grid, int64_t& zchunk) {
  if (gx > 0x7fffffff || gy > 65535) return false;
  const int64_t tiles = gx * gy;
  const int64_t resident = static_cast<int64_t>(blocks_per_sm > 0 ? blocks_per_sm : 1) * sm_count();
  const int64_t max_split = nz < 256 ? nz : 256;
  double best = -1.0;
  int64_t best_chunk = nz;
  for (int64_t split = 1; split <= max_split; ++split) {
    const int64_t chunk = (nz + split - 1) / split;
    const int64_t blocks = tiles * ((nz + chunk - 1) / chunk);
    const int64_t waves = (blocks + resident - 1) / resident;
    const double score = static_cast<double>(blocks) / static_cast<double>(waves * resident) *
                         static_cast<double>(chunk) / static_cast<double>(chunk + 1);
    if (score > best + 1e-9) {
      best = score;
      best_chunk = chunk;
    }
  }
  zchunk = best_chunk;
  const int64_t zsplit = (nz + zchunk - 1) / zchunk;
  if (zsplit > 65535) return false;
  grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(zsplit));
  return true;
}

}  // namespace

extern "C" int d2k_stencil3d(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz, cudaStream_t stream) {
  if (nx <= 0 || ny <= 0 || nz <= 0) return 0;
  if (nx > 0x7fffffff || ny > 0x7fffffff || nz > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  dim3 grid;
  int64_t zchunk = 0;
  // 8 resident blocks of 256 threads per SM (32 registers per thread, see the launch bounds).
  if (!march_grid((nx + kTx - 1) / kTx, (ny + kTy - 1) / kTy, nz, 8, grid, zchunk))
    return static_cast<int>(cudaErrorInvalidValue);
  stencil3d_march<<<grid, dim3(kTx, kTy), 0, stream>>>(in, out, static_cast<int>(nx), static_cast<int>(ny),
                                                       static_cast<int>(nz), static_cast<int>(zchunk));
  return static_cast<int>(cudaGetLastError());
}
