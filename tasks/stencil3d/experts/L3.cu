// stencil3d expert, layer 3 (low level): layer 2's dataflow (2.5D blocking: a block owns an x-y
// tile and marches through a z range, the column's planes z-1, z, z+1 in registers, the next plane
// in flight, nothing read past the range, the current plane in shared memory with a halo) with
// 128-bit accesses: a thread owns 4 consecutive cells along x, so a block of 32 x 8 threads covers
// a 128 x 8 tile (16 x 16 or 8 x 32 threads where that leaves fewer lanes past the row's end, e.g.
// nx = 36), every global load and store of a cell moves 16 bytes (4x the bytes in flight per
// instruction), and the y neighbours are read from shared memory as one 16-byte vector; only the x
// neighbours of the first and last cell of the four are scalar shared loads. The plane's rows in
// shared memory start 4 floats in, so the vectors are 16-byte aligned and the x halo sits in the
// word before and after. Results are stored with a streaming hint (evict first: the output is not
// read again), the input with the default policy (the halo rows are read again by the neighbouring
// tiles, from L2). The halo cells an edge thread contributes are loaded as far ahead as its own
// column (a register ring each), so no load of the march is used in the plane it was issued; the
// plane sits in one shared buffer, with a barrier after it is written and one after it is read
// (measured on the H200 faster than two alternating buffers with one barrier). 48 registers: 5
// blocks of 256 threads per SM. The z split fills whole waves of as many blocks as the occupancy
// API says fit. Grids whose nx is not a multiple of 4, or misaligned pointers, take layer 2's kernel.
// A thin slab (ny >= 2 nz) marches along y instead, its tiles spanning x and z (the stencil is
// symmetric in y and z: the kernel takes the row and plane strides). Session 13 on the H200: the
// 1000 x 601 x 97 slab took 152.4 us marching in y against 153.2 in z (sweep), 147.8 in
// verify-tasks, inside the 140-151 us the z-march gave in earlier runs: no measurable gain, kept as
// verified. ST_L2AHEAD (bulk L2 prefetch of the rows a few planes ahead) was no faster either.
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


constexpr int kVx = 4;   // cells per thread along x
#ifndef ST_AHEAD
#define ST_AHEAD 1  // tasks/stencil3d/bench/sweep/build.sh builds variants with -DST_AHEAD=..., -DST_MINB=..., -DST_BUFS=..., -DST_STCS=...
#endif
#ifndef ST_MINB
#define ST_MINB 5
#endif
#ifndef ST_BUFS
#define ST_BUFS 1
#endif
#ifndef ST_STCS
#define ST_STCS 1
#endif
#ifndef ST_YMARCH
#define ST_YMARCH 1  // 1: a thin slab (ny >= 2 nz) marches along y, its tiles spanning x and z
#endif
#ifndef ST_L2AHEAD
#define ST_L2AHEAD 0  // planes beyond the loads' that are prefetched into L2 (0: none)
#endif
constexpr int kAheadV = ST_AHEAD;  // planes in flight beyond z+1, for the column and for the halo
constexpr int kBufs = ST_BUFS;     // shared plane buffers: 1 = two barriers per plane, 2 = one
constexpr int kPad = 4;  // floats before the row (16-byte aligned vectors)

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 v) {
#if ST_STCS
  __stcs(reinterpret_cast<float4*>(p), v);
#else
  *reinterpret_cast<float4*>(p) = v;
#endif
}

// Asks L2 for the bytes at row (bytes long, 16-byte aligned) without waiting: a hint, correct
// whatever it does. One instruction moves a whole row segment of the tile (512 bytes for 128 cells).
#if ST_L2AHEAD > 0
__device__ __forceinline__ void prefetch_l2(const float* row, unsigned bytes) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"(bytes) : "memory");
#endif
}
#endif

// A block of 256 threads: TX threads along x (4 cells each: a tile TX * 4 cells wide) and 256 / TX
// rows; TX is 32, or 16 or 8 where that leaves fewer lanes past the row's end. Each thread keeps
// two register rings as deep as the planes in flight: its column (planes z-1 .. z+1+kAheadV) and,
// for the tile's edge threads, the halo cell (x) and halo vector (y) it contributes (planes z ..
// z+kAheadV), so that no load is used sooner than kAheadV planes after it was issued. The plane in
// shared memory: one buffer, a barrier after it is written and one after it is read (kBufs = 2:
// two buffers alternating by plane, one barrier per plane; slower on the H200).
template <int TX>
__global__ void __launch_bounds__(256, ST_MINB)
stencil3d_march_vec4(const float* __restrict__ in, float* __restrict__ out, int nx, int ny, int nz, int row, int plane, int zchunk) {
  constexpr int kTxv = TX;
  constexpr int kTyv = 256 / TX;
  constexpr int kTileX = kTxv * kVx;
  constexpr int kRow = kPad + kTileX + kPad;
  __shared__ __align__(16) float s[kBufs][kTyv + 2][kRow];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int x = static_cast<int>(blockIdx.x) * kTileX + tx * kVx;  // first of the thread's 4 cells
  const int y = static_cast<int>(blockIdx.y) * kTyv + ty;
  const int z0 = static_cast<int>(blockIdx.z) * zchunk;
  const int z1 = z0 + zchunk < nz ? z0 + zchunk : nz;  // uniform over the block
  const int zlim = z1 < nz ? z1 + 1 : nz;              // planes z0-1 .. zlim-1 are read
  const bool in_xy = x < nx && y < ny;                 // nx % 4 == 0: all four cells or none
  const bool interior_y = y > 0 && y < ny - 1;
  const int xy = in_xy ? y * row + x : 0;   // only threads inside the grid load or store
  const bool left = tx == 0 && in_xy && x > 0;
  const bool right = tx == kTxv - 1 && x + kVx < nx && y < ny;
  const bool down = ty == 0 && in_xy && y > 0;
  const bool up = ty == kTyv - 1 && y + 1 < ny && x < nx;
  const bool has_hx = left || right, has_hy = down || up;
  const int hx_at = xy + (left ? -1 : kVx);
  const int hy_at = (down ? y - 1 : y + 1) * row + x;
  const int c = kPad + tx * kVx;  // the thread's column in the shared rows
  const int hx_col = left ? c - 1 : c + kVx;
  const int hy_row = down ? 0 : kTyv + 1;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  // The column: q[0] = plane z-1, q[1] = z, q[2] = z+1, q[3 ..] = the planes in flight.
  float4 q[kAheadV + 2];
#pragma unroll
  for (int k = 0; k < kAheadV + 2; ++k) {
    const int zk = z0 - 1 + k;
    q[k] = (in_xy && zk >= 0 && zk < zlim) ? ld4(in + zk * plane + xy) : zero;
  }
  // The halo rings: hx[k], hy[k] = plane z+k (only the planes z0 .. z1-1 are computed).
  float hx[kAheadV + 1];
  float4 hy[kAheadV + 1];
#pragma unroll
  for (int k = 0; k < kAheadV + 1; ++k) {
    const int zk = z0 + k;
    hx[k] = (has_hx && zk < z1) ? in[zk * plane + hx_at] : 0.0f;
    hy[k] = (has_hy && zk < z1) ? ld4(in + zk * plane + hy_at) : zero;
  }
#if ST_L2AHEAD > 0
  // L2 prefetch of plane z + kAheadV + 1 + ST_L2AHEAD at plane z: the row's first thread asks for
  // its row, those of the tile's first and last rows also for the halo row beside the tile.
  const int x0 = static_cast<int>(blockIdx.x) * kTileX;
  const bool pf = tx == 0 && y < ny && x0 < nx;
  const unsigned pf_bytes = static_cast<unsigned>((nx - x0 < kTileX ? nx - x0 : kTileX) * 4);
  const int pf_off = y * row + x0;
  const bool pf_dn = ty == 0 && y > 0, pf_up = ty == kTyv - 1 && y + 1 < ny;
#endif
  for (int z = z0; z < z1; ++z) {
    const int base = z * plane + xy;
    // Issued now, used kAheadV planes later (in flight behind the planes being computed).
#if ST_L2AHEAD > 0
    if (pf && z + kAheadV + 1 + ST_L2AHEAD < zlim) {
      const float* r = in + (z + kAheadV + 1 + ST_L2AHEAD) * plane + pf_off;
      prefetch_l2(r, pf_bytes);
      if (pf_dn) prefetch_l2(r - row, pf_bytes);
      if (pf_up) prefetch_l2(r + row, pf_bytes);
    }
#endif
    const float4 next = (in_xy && z + kAheadV + 1 < zlim) ? ld4(in + base + (kAheadV + 1) * plane) : zero;
    const int zh = z + kAheadV + 1;
    const float hx_next = (has_hx && zh < z1) ? in[zh * plane + hx_at] : 0.0f;
    const float4 hy_next = (has_hy && zh < z1) ? ld4(in + zh * plane + hy_at) : zero;
    const int b = kBufs == 2 ? (z - z0) & 1 : 0;
    const float4 cur = q[1], below = q[0], above = q[2];
    *reinterpret_cast<float4*>(&s[b][ty + 1][c]) = cur;
    if (has_hx) s[b][ty + 1][hx_col] = hx[0];
    if (has_hy) *reinterpret_cast<float4*>(&s[b][hy_row][c]) = hy[0];
    __syncthreads();
    if (in_xy) {
      float4 r = cur;
      if (interior_y && z > 0 && z < nz - 1) {
        const float4 n = *reinterpret_cast<const float4*>(&s[b][ty][c]);
        const float4 so = *reinterpret_cast<const float4*>(&s[b][ty + 2][c]);
        const float l = s[b][ty + 1][c - 1], rr = s[b][ty + 1][c + kVx];
        const float4 t = make_float4(0.25f * cur.x + 0.125f * (((l + cur.y) + (n.x + so.x)) + (below.x + above.x)),
                                     0.25f * cur.y + 0.125f * (((cur.x + cur.z) + (n.y + so.y)) + (below.y + above.y)),
                                     0.25f * cur.z + 0.125f * (((cur.y + cur.w) + (n.z + so.z)) + (below.z + above.z)),
                                     0.25f * cur.w + 0.125f * (((cur.z + rr) + (n.w + so.w)) + (below.w + above.w)));
        r = t;
        if (x == 0) r.x = cur.x;               // the x boundary keeps its value
        if (x + kVx == nx) r.w = cur.w;
      }
      st4(out + base, r);
    }
    // One buffer: the next plane overwrites it only after every thread has read this one. (With two
    // buffers the next plane goes to the other one, and the barrier of the next plane keeps this
    // one from being overwritten while a slow thread still reads it.)
    if (kBufs == 1) __syncthreads();
#pragma unroll
    for (int k = 0; k < kAheadV + 1; ++k) q[k] = q[k + 1];
    q[kAheadV + 1] = next;
#pragma unroll
    for (int k = 0; k < kAheadV; ++k) {
      hx[k] = hx[k + 1];
      hy[k] = hy[k + 1];
    }
    hx[kAheadV] = hx_next;
    hy[kAheadV] = hy_next;
  }
}

template <typename K>
int occupancy(K kernel) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 256, 0) != cudaSuccess) n = 4;
  return n > 0 ? n : 1;
}

// The vector kernels need more registers than layer 2's: ask how many of their blocks fit (once).
int vec_blocks(int tx) {
  static const int fit[3] = {occupancy(stencil3d_march_vec4<32>), occupancy(stencil3d_march_vec4<16>),
                             occupancy(stencil3d_march_vec4<8>)};
  return tx == 32 ? fit[0] : tx == 16 ? fit[1] : fit[2];
}

}  // namespace

extern "C" int d2k_stencil3d(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz, cudaStream_t stream) {
  if (nx <= 0 || ny <= 0 || nz <= 0) return 0;
  if (nx > 0x7fffffff || ny > 0x7fffffff || nz > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const bool aligned = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  dim3 grid;
  int64_t zchunk = 0;
  if (aligned && nx % kVx == 0) {
    // Threads along x: 16 or 8 instead of 32 only where that leaves fewer lanes past the row's end
    // (nx = 36: 16 threads, a 64-cell tile, where 32 threads would leave 23 of 32 idle).
    const int64_t quads = nx / kVx;
    int tx = 32;
    if ((quads + 15) / 16 * 16 < (quads + 31) / 32 * 32) tx = 16;
    if (tx == 16 && (quads + 7) / 8 * 8 < (quads + 15) / 16 * 16) tx = 8;
    const int ty = 256 / tx;
    // The march axis: z, or y for a thin slab (ST_YMARCH: ny >= 2 nz). The stencil is symmetric in y
    // and z, so the kernel only sees the tile's second axis ("y": rows `row` floats apart) and the
    // march axis ("z": planes `plane` floats apart); for the y-march they are z and y.
    const bool ym = ST_YMARCH && ny >= 2 * nz;
    const int64_t tn = ym ? nz : ny, mn = ym ? ny : nz;
    const int64_t row = ym ? nx * ny : nx, plane = ym ? nx : nx * ny;
    if (!march_grid((quads + tx - 1) / tx, (tn + ty - 1) / ty, mn, vec_blocks(tx), grid, zchunk))
      return static_cast<int>(cudaErrorInvalidValue);
    const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
    const int ix = static_cast<int>(nx), iy = static_cast<int>(tn), iz = static_cast<int>(mn), ic = static_cast<int>(zchunk);
    const int ir = static_cast<int>(row), ip = static_cast<int>(plane);
    if (tx == 32) stencil3d_march_vec4<32><<<grid, block, 0, stream>>>(in, out, ix, iy, iz, ir, ip, ic);
    else if (tx == 16) stencil3d_march_vec4<16><<<grid, block, 0, stream>>>(in, out, ix, iy, iz, ir, ip, ic);
    else stencil3d_march_vec4<8><<<grid, block, 0, stream>>>(in, out, ix, iy, iz, ir, ip, ic);
  } else {
    // Layer 2's kernel: one cell per thread.
    if (!march_grid((nx + kTx - 1) / kTx, (ny + kTy - 1) / kTy, nz, 8, grid, zchunk))
      return static_cast<int>(cudaErrorInvalidValue);
    stencil3d_march<<<grid, dim3(kTx, kTy), 0, stream>>>(in, out, static_cast<int>(nx), static_cast<int>(ny),
                                                         static_cast<int>(nz), static_cast<int>(zchunk));
  }
  return static_cast<int>(cudaGetLastError());
}
