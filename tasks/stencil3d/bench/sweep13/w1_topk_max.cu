// topk expert, layer 3 (low level, and one pass): the row crosses DRAM once. One block of 256
// threads per row, four blocks per SM (512 rows are all in flight at once). The first step's 8,192
// keys are a sample: two rounds of a 256-bin shared histogram (16 bits of the key) give a threshold
// above which about min(4k + 256, (k + 4,096) / 2) elements of the whole row should lie; every
// element at or above it (tested on the floats when the threshold is a positive normal float) is
// appended, as a (key, index) word, to its warp's 512-word region of a 4,096-word shared buffer
// (four ballots per 16-byte vector, slots by popcount from a warp count kept in a register: no
// atomics) while the row streams through 128-bit loads (eight 16-byte vectors per thread per step;
// a scalar head and tail so that any row alignment works). Then an exact radix select over the candidates' 8 bytes (256 bins per
// round, counted with one atomic per distinct bin per warp via match-any, the bin found by a warp
// suffix scan) finds the k-th largest word; the k winners are gathered and sorted by a bitonic sort
// whose strides below 32 run in registers through butterfly shuffles. A row where the sample
// misjudged (fewer than k candidates, or more than the buffer: ties, sorted rows) falls back to
// layer 2's two passes, exact for any input. TOPK_INFLIGHT / TOPK_PREFETCH select the load depth
// (the H200 sweep of 2026-12-02: 8 vectors without prefetch was the fastest of 4 settings).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

#ifndef TOPK_THREADS
#define TOPK_THREADS 256
#endif
#ifndef TOPK_INFLIGHT
#define TOPK_INFLIGHT 8
#endif
#ifndef TOPK_MAXSAMPLE
#define TOPK_MAXSAMPLE 1
#endif
#ifndef TOPK_MAXRANK
#define TOPK_MAXRANK 128
#endif
#ifndef TOPK_PREFETCH
#define TOPK_PREFETCH 0
#endif
constexpr int kThreads = TOPK_THREADS;
constexpr int kMinBlocks = 1024 / kThreads;  // 4 blocks of 256 per SM: 512 rows are in flight at once
constexpr int kMaxK = 1024;
constexpr int kTopBits = 11;
constexpr int kBins = 1 << kTopBits;
constexpr int kCap = 4096;
constexpr int kWarps = kThreads / 32;
constexpr int kRegion = kCap / kWarps;  // the one-pass path: each warp appends to its own region
constexpr int kInFlight = TOPK_INFLIGHT;  // 16-byte vectors per thread per step (with TOPK_PREFETCH, the next step's too)
constexpr unsigned kFull = 0xffffffffu;
constexpr int64_t kMaxRank = TOPK_MAXRANK;  // the threads' maxima give the threshold when r <= this (of 256)

__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

__device__ __forceinline__ unsigned long long rank_word(unsigned key, int64_t idx) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<unsigned>(idx));
}

__device__ __forceinline__ unsigned lane_id() { return threadIdx.x & 31u; }

// Calls f(key, column, valid) for every element of the row once, in steps that are uniform over
// the block: every lane of every warp makes the same calls (valid == false past the data), so f
// may use warp-wide votes. Scalar step first (threads 0..3: head up to the first 16-byte boundary;
// threads 4..7: the tail after the last whole vector), then 4 vectors per thread per step.
template <class F>
__device__ __forceinline__ void for_each_key(const float* xr, int64_t vocab, F& f) {
  const unsigned misaligned = static_cast<unsigned>(reinterpret_cast<uintptr_t>(xr) >> 2) & 3u;
  const int64_t head = vocab < static_cast<int64_t>((4u - misaligned) & 3u) ? vocab : static_cast<int64_t>((4u - misaligned) & 3u);
  const int64_t nvec = (vocab - head) / 4;
  const int64_t tail_start = head + 4 * nvec;
  {
    const int t = static_cast<int>(threadIdx.x);
    int64_t c = 0;
    bool valid = false;
    if (t < head) { c = t; valid = true; }
    else if (t >= 4 && t - 4 < vocab - tail_start) { c = tail_start + (t - 4); valid = true; }
    f(valid ? order_key(xr[c]) : 0u, c, valid);
  }
  const float4* xv = reinterpret_cast<const float4*>(xr + head);
  for (int64_t base = 0; base < nvec; base += static_cast<int64_t>(kThreads) * kInFlight) {
    float4 v[kInFlight];
#pragma unroll
    for (int m = 0; m < kInFlight; ++m) {
      const int64_t i = base + m * kThreads + threadIdx.x;
      v[m] = i < nvec ? xv[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int m = 0; m < kInFlight; ++m) {
      const int64_t i = base + m * kThreads + threadIdx.x;
      const bool ok = i < nvec;
      const int64_t c = head + 4 * i;
      f(order_key(v[m].x), c, ok);
      f(order_key(v[m].y), c + 1, ok);
      f(order_key(v[m].z), c + 2, ok);
      f(order_key(v[m].w), c + 3, ok);
    }
  }
}

// dst[counter++] = word for every lane with take: one atomic per warp.
__device__ __forceinline__ void warp_append(unsigned* counter, unsigned long long* dst, bool take,
                                            unsigned long long word) {
  const unsigned ballot = __ballot_sync(kFull, take);
  if (ballot == 0) return;
  unsigned base = 0;
  if (lane_id() == 0) base = atomicAdd(counter, static_cast<unsigned>(__popc(ballot)));
  base = __shfl_sync(kFull, base, 0);
  if (take) dst[base + __popc(ballot & ((1u << lane_id()) - 1u))] = word;
}

// Sorts s[0, p) descending (p a power of two); strides >= 32 through shared memory, the strides
// below 32 of each merge in registers with butterfly shuffles. Ends with a barrier.
__device__ void bitonic_sort_desc(unsigned long long* s, int p) {
  for (int size = 2; size <= p; size <<= 1) {
    int stride = size >> 1;
    for (; stride >= 32; stride >>= 1) {
      for (int i = threadIdx.x; i < p; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const unsigned long long a = s[i], b = s[j];
          const bool desc = (i & size) == 0;
          if (desc ? a < b : a > b) { s[i] = b; s[j] = a; }
        }
      }
      __syncthreads();
    }
    for (int base = 0; base < p; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      const bool valid = i < p;
      unsigned long long v = valid ? s[i] : 0ull;
      const bool desc = (i & size) == 0;
      for (int st = stride; st > 0; st >>= 1) {
        const unsigned long long other = __shfl_xor_sync(kFull, v, st);
        const bool lower = (i & st) == 0;
        v = (desc == lower) ? (v > other ? v : other) : (v < other ? v : other);
      }
      if (valid) s[i] = v;
    }
    __syncthreads();
  }
}

struct Shared {
  unsigned hist[kBins];
  unsigned long long buf[kCap];
  unsigned digit, need, ties, count, count2;
  unsigned wcount[kWarps];  // the one-pass path: candidates per warp region
};


__device__ void pick_digit(Shared& s, int bins, unsigned need) {
  unsigned above = 0;
  int d = bins - 1;
  for (; d > 0; --d) {
    if (above + s.hist[d] >= need) break;
    above += s.hist[d];
  }
  s.digit = static_cast<unsigned>(d);
  s.need = need - above;
  s.ties = s.hist[d];
}

struct TopBinCount {
  unsigned* hist;
  __device__ void operator()(unsigned key, int64_t, bool valid) {
    if (valid) atomicAdd(&hist[key >> (32 - kTopBits)], 1u);
  }
};

struct PrefixCount {
  unsigned* hist;
  unsigned prefix, mask, dmask;
  int shift;
  __device__ void operator()(unsigned key, int64_t, bool valid) {
    if (valid && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & dmask], 1u);
  }
};

struct AppendTopBins {
  Shared* s;
  unsigned b;
  __device__ void operator()(unsigned key, int64_t c, bool valid) {
    warp_append(&s->count, s->buf, valid && (key >> (32 - kTopBits)) >= b, rank_word(key, c));
  }
};

struct AppendAboveThreshold {
  Shared* s;
  unsigned threshold, above;
  bool all_ties;
  __device__ void operator()(unsigned key, int64_t c, bool valid) {
    warp_append(&s->count, s->buf, valid && key > threshold, rank_word(key, c));
    warp_append(&s->count2, s->buf + above, valid && all_ties && key == threshold, rank_word(key, c));
  }
};

// Fallback (a row where the sampled threshold misjudged: more candidates than the buffer holds, or
// fewer than k): layer 2's two passes over the row, exact for any input.
__device__ void two_pass(Shared& s, const float* xr, float* values, int* indices, int64_t row, int64_t vocab, int k) {

  for (int i = threadIdx.x; i < kBins; i += kThreads) s.hist[i] = 0;
  __syncthreads();
  TopBinCount count_top{s.hist};
  for_each_key(xr, vocab, count_top);
  __syncthreads();
  if (threadIdx.x == 0) {
    pick_digit(s, kBins, static_cast<unsigned>(k));
    s.count = 0;
    s.count2 = 0;
  }
  __syncthreads();
  const unsigned b = s.digit;
  const unsigned candidates = static_cast<unsigned>(k) - s.need + s.ties;
  int p = 1;

  if (candidates <= static_cast<unsigned>(kCap)) {
    AppendTopBins append{&s, b};
    for_each_key(xr, vocab, append);
    while (p < static_cast<int>(candidates)) p <<= 1;
    for (int i = static_cast<int>(candidates) + static_cast<int>(threadIdx.x); i < p; i += kThreads) s.buf[i] = 0;
    __syncthreads();
  } else {
    // Fallback: radix select over the low 21 bits (8 + 8 + 5), then gather the k winners.
    unsigned prefix = b << (32 - kTopBits), mask = 0xffffffffu << (32 - kTopBits), need = s.need;
    const int shifts[3] = {13, 5, 0};
    const int widths[3] = {8, 8, 5};
    for (int pass = 0; pass < 3; ++pass) {
      const unsigned dmask = (1u << widths[pass]) - 1u;
      for (int i = threadIdx.x; i <= static_cast<int>(dmask); i += kThreads) s.hist[i] = 0;
      __syncthreads();
      PrefixCount count_prefix{s.hist, prefix, mask, dmask, shifts[pass]};
      for_each_key(xr, vocab, count_prefix);
      __syncthreads();
      if (threadIdx.x == 0) pick_digit(s, static_cast<int>(dmask) + 1, need);
      __syncthreads();
      prefix |= s.digit << shifts[pass];
      mask |= dmask << shifts[pass];
      need = s.need;
      __syncthreads();
    }
    const unsigned above = static_cast<unsigned>(k) - need;
    const bool all_ties = s.ties == need;
    AppendAboveThreshold append{&s, prefix, above, all_ties};
    for_each_key(xr, vocab, append);
    __syncthreads();
    if (!all_ties && threadIdx.x == 0) {  // more ties than places: the smallest indices win
      unsigned got = 0;
      for (int64_t c = 0; c < vocab && got < need; ++c) {
        const unsigned key = order_key(xr[c]);
        if (key == prefix) s.buf[above + got++] = rank_word(key, c);
      }
    }
    while (p < k) p <<= 1;
    for (int i = k + static_cast<int>(threadIdx.x); i < p; i += kThreads) s.buf[i] = 0;
    __syncthreads();
  }
  bitonic_sort_desc(s.buf, p);
  for (int j = threadIdx.x; j < k; j += kThreads) {
    const unsigned long long w = s.buf[j];
    values[row * k + j] = key_value(static_cast<unsigned>(w >> 32));
    indices[row * k + j] = static_cast<int>(0xffffffffu - static_cast<unsigned>(w));
  }
}

// ---- The one-pass path ----

// region[wc++] = word for every lane with take (wc: the warp's count, the same in every lane);
// slots past the region are counted but not written (the caller sees wc > kRegion and falls back).
__device__ __forceinline__ void warp_append_region(unsigned long long* region, unsigned& wc, bool take,
                                                   unsigned long long word) {
  const unsigned ballot = __ballot_sync(kFull, take);
  const unsigned slot = wc + static_cast<unsigned>(__popc(ballot & ((1u << lane_id()) - 1u)));
  if (take && slot < static_cast<unsigned>(kRegion)) region[slot] = word;
  wc += static_cast<unsigned>(__popc(ballot));
}

// h[bin] += 1 for every lane with valid, one shared atomic per distinct bin in the warp (match-any):
// the candidates' first bytes are nearly all equal (they lie within a few octaves of each other),
// so plain increments would collide. Every lane of the warp must call it.
__device__ __forceinline__ void warp_count(unsigned* h, unsigned bin, bool valid) {
  const unsigned peers = __match_any_sync(kFull, valid ? bin : 0xffffffffu);
  if (valid && (peers & ((1u << lane_id()) - 1u)) == 0) atomicAdd(&h[bin], static_cast<unsigned>(__popc(peers)));
}

// Warp 0: the bin of the 256-bin histogram h holding the need-th largest element, counting from
// the top (1 <= need <= total). Lane l sums bins 8l..8l+7; a suffix sum over the lanes (shuffles)
// tells each lane how many elements lie in the bins above its own; the one lane where the count
// crosses need finds the bin. Writes s.digit, s.need (need left inside the bin), s.ties (its count).
__device__ void pick_bin(Shared& s, const unsigned* h, unsigned need) {
  const unsigned lane = lane_id();
  unsigned c[8];
  unsigned sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) { c[j] = h[lane * 8 + j]; sum += c[j]; }
  unsigned suffix = sum;  // elements in the bins of lanes >= lane
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const unsigned y = __shfl_down_sync(kFull, suffix, off);
    if (lane + off < 32) suffix += y;
  }
  unsigned above = suffix - sum;
  if (above < need && need <= suffix) {
#pragma unroll
    for (int j = 7; j >= 0; --j) {
      if (above + c[j] >= need) {
        s.digit = lane * 8 + j;
        s.need = need - above;
        s.ties = c[j];
        break;
      }
      above += c[j];
    }
  }
}

__device__ __forceinline__ void load_step(const float4* xv, int64_t nvec, int64_t base, float4 (&v)[kInFlight]) {
#pragma unroll
  for (int m = 0; m < kInFlight; ++m) {
    const int64_t i = base + m * kThreads + threadIdx.x;
    v[m] = i < nvec ? xv[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// Appends the step's elements whose key is >= thr (thr = 0: every element). kFloat: thr is the key
// of a positive normal float tf, and key >= thr is tested as the float compare x >= tf (the keys of
// positive floats are ordered as the floats; negative values and zeros fail both tests; a
// flushed denormal is 0 < tf), one instruction per element instead of the key's four; a vector
// with no candidate costs three max instructions, a compare and the vote.
template <bool kFloat>
__device__ __forceinline__ void append_step(unsigned long long* region, unsigned& wc, const float4 (&v)[kInFlight],
                                            int64_t nvec, int64_t base, int64_t head, unsigned thr, float tf) {
#pragma unroll
  for (int m = 0; m < kInFlight; ++m) {
    const int64_t i = base + m * kThreads + threadIdx.x;
    const bool ok = i < nvec;
    bool any;
    if constexpr (kFloat) {
      any = ok && fmaxf(fmaxf(v[m].x, v[m].y), fmaxf(v[m].z, v[m].w)) >= tf;
    } else {
      const unsigned k0 = order_key(v[m].x), k1 = order_key(v[m].y), k2 = order_key(v[m].z), k3 = order_key(v[m].w);
      any = ok && (k0 >= thr || k1 >= thr || k2 >= thr || k3 >= thr);
    }
    if (__ballot_sync(kFull, any) == 0) continue;  // the usual case once the threshold is set
    const unsigned k0 = order_key(v[m].x), k1 = order_key(v[m].y), k2 = order_key(v[m].z), k3 = order_key(v[m].w);
    // Slots in the warp's region in the order x of every lane, then y, z, w: each lane's slot = the
    // warp's count so far + the earlier components' counts + its lanes below. No atomic: the count
    // is the same register in every lane.
    const bool t0 = ok && k0 >= thr, t1 = ok && k1 >= thr, t2 = ok && k2 >= thr, t3 = ok && k3 >= thr;
    const unsigned b0 = __ballot_sync(kFull, t0), b1 = __ballot_sync(kFull, t1);
    const unsigned b2 = __ballot_sync(kFull, t2), b3 = __ballot_sync(kFull, t3);
    const unsigned n0 = __popc(b0), n1 = __popc(b1), n2 = __popc(b2);
    const unsigned base_slot = wc;
    wc += n0 + n1 + n2 + static_cast<unsigned>(__popc(b3));
    const unsigned below = (1u << lane_id()) - 1u;
    const int64_t c = head + 4 * i;
    const unsigned q0 = base_slot + __popc(b0 & below);
    const unsigned q1 = base_slot + n0 + __popc(b1 & below);
    const unsigned q2 = base_slot + n0 + n1 + __popc(b2 & below);
    const unsigned q3 = base_slot + n0 + n1 + n2 + __popc(b3 & below);
    if (t0 && q0 < static_cast<unsigned>(kRegion)) region[q0] = rank_word(k0, c);
    if (t1 && q1 < static_cast<unsigned>(kRegion)) region[q1] = rank_word(k1, c + 1);
    if (t2 && q2 < static_cast<unsigned>(kRegion)) region[q2] = rank_word(k2, c + 2);
    if (t3 && q3 < static_cast<unsigned>(kRegion)) region[q3] = rank_word(k3, c + 3);
  }
}

// One block per row, one pass over the row from DRAM. The first step's keys (4,096 of them) are a
// sample: two rounds of a 256-bin histogram find a threshold (16 bits of the key) above which
// about (k + 4,096) / 2 elements of the whole row should lie. Every element at or above it goes to
// the shared buffer as a (key, index) word. If the row holds fewer than k such elements or more
// than the buffer, the block falls back to the exact two-pass method.
__global__ void __launch_bounds__(kThreads, kMinBlocks)
topk_one_pass(const float* x, float* values, int* indices, int64_t vocab, int k) {
  __shared__ Shared s;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * vocab;
  const int t = static_cast<int>(threadIdx.x);
  const unsigned misaligned = static_cast<unsigned>(reinterpret_cast<uintptr_t>(xr) >> 2) & 3u;
  const int64_t head = vocab < static_cast<int64_t>((4u - misaligned) & 3u) ? vocab : static_cast<int64_t>((4u - misaligned) & 3u);
  const int64_t nvec = (vocab - head) / 4;
  const int64_t tail_start = head + 4 * nvec;
  const float4* xv = reinterpret_cast<const float4*>(xr + head);
  constexpr int64_t kStep = static_cast<int64_t>(kThreads) * kInFlight;  // vectors per step

  for (int i = t; i < 512; i += kThreads) s.hist[i] = 0;
  if (t == 0) { s.count = 0; s.count2 = 0; }
  __syncthreads();

  float4 cur[kInFlight];
  load_step(xv, nvec, 0, cur);
#if TOPK_PREFETCH
  float4 nxt[kInFlight];
  load_step(xv, nvec, kStep, nxt);  // the next step's loads are in flight during the sample and the appends
#endif
  unsigned thr = 0;
  if (vocab > kCap) {
    // Threshold from the sample: the key of rank r among its n keys, with r / n = target / vocab.
    const int64_t n = 4 * (nvec < kStep ? nvec : kStep);
    // target: enough that fewer than k candidates is out of reach (4k + 256), at most half way from
    // k to the buffer's size (more than the buffer is as far out of reach); every candidate costs
    // an append.
    const int64_t middle = (static_cast<int64_t>(k) + kCap) / 2, ample = 4 * static_cast<int64_t>(k) + 256;
    const int64_t target = ample < middle ? ample : middle;
    int64_t r = (target * n + vocab - 1) / vocab;
    r = r < 1 ? 1 : (r > n ? n : r);
#if TOPK_MAXSAMPLE
    if (r <= kMaxRank) {
      // The threads' maxima: each thread's largest of its (up to) 32 sample keys. The r-th largest
      // of the 256 maxima has at least r sample keys at or above it (r distinct threads' maxima),
      // and for logits hardly more (the top keys of the sample rarely share a thread): the same
      // threshold as the r-th key of the sample, from 256 keys instead of 8,192, one atomic per
      // thread and round instead of 32 contending ones.
      float mx = cur[0].x;  // every thread has vector 0: nvec >= 1,023 here
#pragma unroll
      for (int m = 0; m < kInFlight; ++m)
        if (static_cast<int64_t>(m) * kThreads + t < nvec)
          mx = fmaxf(mx, fmaxf(fmaxf(cur[m].x, cur[m].y), fmaxf(cur[m].z, cur[m].w)));
      const unsigned km = order_key(mx);
      atomicAdd(&s.hist[km >> 24], 1u);
      __syncthreads();
      if (t < 32) pick_bin(s, s.hist, static_cast<unsigned>(r));
      __syncthreads();
      const unsigned top = s.digit, need2 = s.need;
      unsigned* h2 = s.hist + 256;
      if ((km >> 24) == top) atomicAdd(&h2[(km >> 16) & 255u], 1u);
      __syncthreads();
      if (t < 32) pick_bin(s, h2, need2);
      __syncthreads();
      thr = (top << 24) | (s.digit << 16);
    } else
#endif
    {
#pragma unroll
    for (int m = 0; m < kInFlight; ++m) {
      if (static_cast<int64_t>(m) * kThreads + t < nvec) {
        atomicAdd(&s.hist[order_key(cur[m].x) >> 24], 1u);
        atomicAdd(&s.hist[order_key(cur[m].y) >> 24], 1u);
        atomicAdd(&s.hist[order_key(cur[m].z) >> 24], 1u);
        atomicAdd(&s.hist[order_key(cur[m].w) >> 24], 1u);
      }
    }    __syncthreads();
    if (t < 32) pick_bin(s, s.hist, static_cast<unsigned>(r));
    __syncthreads();
    const unsigned top = s.digit, need2 = s.need;
    unsigned* h2 = s.hist + 256;
#pragma unroll
    for (int m = 0; m < kInFlight; ++m) {
      if (static_cast<int64_t>(m) * kThreads + t < nvec) {
        const unsigned kk[4] = {order_key(cur[m].x), order_key(cur[m].y), order_key(cur[m].z), order_key(cur[m].w)};
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if ((kk[j] >> 24) == top) atomicAdd(&h2[(kk[j] >> 16) & 255u], 1u);
      }
    }
    __syncthreads();
    if (t < 32) pick_bin(s, h2, need2);
    __syncthreads();
    thr = (top << 24) | (s.digit << 16);
    }
  }

  // A positive normal threshold (the usual case: the k-th largest logit is above zero) is tested
  // on the floats themselves; otherwise on the keys.
  const bool float_test = thr >= 0x80800000u;
  unsigned long long* region = s.buf + (t / 32) * kRegion;
  unsigned wc = 0;
  const float tf = __uint_as_float(thr & 0x7fffffffu);
  for (int64_t base = 0; base < nvec; base += kStep) {
#if TOPK_PREFETCH
    if (float_test) append_step<true>(region, wc, cur, nvec, base, head, thr, tf);
    else append_step<false>(region, wc, cur, nvec, base, head, thr, tf);
#pragma unroll
    for (int m = 0; m < kInFlight; ++m) cur[m] = nxt[m];
    load_step(xv, nvec, base + 2 * kStep, nxt);
#else
    if (base > 0) load_step(xv, nvec, base, cur);
    if (float_test) append_step<true>(region, wc, cur, nvec, base, head, thr, tf);
    else append_step<false>(region, wc, cur, nvec, base, head, thr, tf);
#endif
  }
  {  // the scalar head (threads 0..3) and tail (threads 4..7)
    int64_t c = 0;
    bool valid = false;
    if (t < head) { c = t; valid = true; }
    else if (t >= 4 && t - 4 < vocab - tail_start) { c = tail_start + (t - 4); valid = true; }
    const unsigned key = valid ? order_key(xr[c]) : 0u;
    warp_append_region(region, wc, valid && key >= thr, rank_word(key, c));
  }
  if (lane_id() == 0) s.wcount[t / 32] = wc;
  __syncthreads();
  unsigned count = 0;
  bool overflow = false;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) { count += s.wcount[w]; overflow |= s.wcount[w] > static_cast<unsigned>(kRegion); }
  __syncthreads();  // every thread has read the counts (the fallback reuses the shared memory)
  if (overflow || count < static_cast<unsigned>(k)) {
    two_pass(s, xr, values, indices, row, vocab, k);
    return;
  }

  // Exact selection among the candidates: the k-th largest (key, index) word W, by radix select
  // over its 8 bytes from the top (a fresh 256-bin histogram per round), stopping as soon as the
  // bin holding W is taken whole. The words >= W are exactly the k winners.
  for (int i = t; i < kBins; i += kThreads) s.hist[i] = 0;
  __syncthreads();
  unsigned long long prefix = 0, mask = 0;
  unsigned need = static_cast<unsigned>(k);
  const unsigned mine = wc;  // this warp's candidates (at most kRegion here)
  for (int round = 0; round < 8; ++round) {
    const int shift = 56 - 8 * round;
    unsigned* h = s.hist + 256 * round;
    for (int base = 0; base < static_cast<int>(mine); base += 32) {  // each warp its region: uniform trips
      const int i = base + static_cast<int>(lane_id());
      const unsigned long long w = i < static_cast<int>(mine) ? region[i] : 0ull;
      warp_count(h, static_cast<unsigned>(w >> shift) & 255u, i < static_cast<int>(mine) && (w & mask) == prefix);
    }
    __syncthreads();
    if (t < 32) pick_bin(s, h, need);
    __syncthreads();
    prefix |= static_cast<unsigned long long>(s.digit) << shift;
    mask |= 255ull << shift;
    const bool whole = s.ties == s.need;
    need = s.need;
    if (whole) break;
  }
  // Gather the k winners (the words >= prefix) from the regions into the histograms' space, free
  // now (2,048 words of 4 bytes hold 1,024 of 8), and sort them there.
  unsigned long long* win = reinterpret_cast<unsigned long long*>(s.hist);
  for (int base = 0; base < static_cast<int>(mine); base += 32) {
    const int i = base + static_cast<int>(lane_id());
    const bool ok = i < static_cast<int>(mine);
    const unsigned long long w = ok ? region[i] : 0ull;
    warp_append(&s.count2, win, ok && w >= prefix, w);
  }
  int p = 1;
  while (p < k) p <<= 1;
  for (int i = k + t; i < p; i += kThreads) win[i] = 0;
  __syncthreads();
  bitonic_sort_desc(win, p);
  for (int j = t; j < k; j += kThreads) {
    const unsigned long long w = win[j];
    values[row * k + j] = key_value(static_cast<unsigned>(w >> 32));
    indices[row * k + j] = static_cast<int>(0xffffffffu - static_cast<unsigned>(w));
  }
}

}  // namespace

extern "C" int d2k_topk(const float* x, float* values, int* indices, int64_t rows, int64_t vocab, int64_t k,
                        cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0 || k <= 0) return 0;
  if (k > kMaxK || k > vocab) return static_cast<int>(cudaErrorInvalidValue);
  topk_one_pass<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, values, indices, vocab, static_cast<int>(k));
  return static_cast<int>(cudaGetLastError());
}
