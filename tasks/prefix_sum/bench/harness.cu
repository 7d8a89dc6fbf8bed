// Benchmark + correctness harness for prefix_sum L3 candidates (see README.md).
//   harness LIB.so LABEL [--no-check] [--reps N]   check + time one d2k_prefix_sum implementation
//   harness --copy [--reps N]                        cudaMemcpy D2D and a 128-bit copy kernel
// A library built with -DPS_TRACE (tasks/prefix_sum/experts/L3.cu) also gets a per-tile phase
// breakdown of one int32 2^28 call and one of 100000007 (TRACE lines, with a timeline of tiles in
// flight; PS_TILE=elements per tile if not 16384).
// Checks: n in {1, 5, 4095, 4096, 4097, 1e6+3, 100000007, 2^28} for int32 (exact) and fp32
// (|y - ref| <= 1e-6 + 5e-4 |ref|, ref = double prefix), y pre-filled with garbage before each call;
// then misaligned pointers (x+1, y+1), full-range int32 wraparound, and the size list again in a
// different order (epoch reuse across calls). Timing: int32 n = 2^28 and fp32 n = 2^28-3 (plus the
// task's i32_100m_odd and f32_16m_odd), 256 MiB L2 flush and a stream sync before every sample (the
// GPU is idle when the first event is recorded, as in d2k's runner), events around the call only,
// median and min of N samples (default 30). bytes = 8 n. Lines starting with RESULT / CHECK are
// machine-readable summaries (run.sh tabulates them).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

typedef int (*Entry)(const void*, void*, int64_t, int, cudaStream_t);

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);            \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)

static const int64_t kBig = 1ll << 28;

static uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void copy_kernel(const uint4* __restrict__ a, uint4* __restrict__ b, int64_t nv) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv; i += (int64_t)gridDim.x * blockDim.x)
    b[i] = a[i];
}

struct Ctx {
  Entry f = nullptr;
  cudaStream_t s;
  char* dx;      // device x (kBig + 64 elements)
  char* dy;      // device y
  char* flush;   // 256 MiB
  std::vector<int32_t> hi;   // int32 inputs in [-100, 100]
  std::vector<float> hf;     // fp32 inputs in [0, 1)
  std::vector<int32_t> ri;   // int32 inclusive prefix (wraparound)
  std::vector<double> rf;    // double inclusive prefix of hf
  std::vector<char> out;     // host copy of y
};

static void scan_ref_int(const int32_t* in, int32_t* out, int64_t n) {
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) { acc += (uint32_t)in[i]; out[i] = (int32_t)acc; }
}
static void scan_ref_float(const float* in, double* out, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) { acc += (double)in[i]; out[i] = acc; }
}

// Runs the candidate on x (already on the device at dx + off elements), compares y[0..n) with ref.
static bool run_check(Ctx& c, const char* what, int64_t n, int isf, int off, const void* ref) {
  char* xx = c.dx + 4 * off;
  char* yy = c.dy + 4 * off;
  CK(cudaMemsetAsync(yy, 0xFF, n * 4, c.s));
  int rc = c.f(xx, yy, n, isf, c.s);
  cudaError_t se = cudaStreamSynchronize(c.s);
  if (rc != 0 || se != cudaSuccess) {
    printf("FAIL %-12s n=%-10lld %s off=%d: entry rc=%d sync=%s\n", what, (long long)n, isf ? "f32" : "i32",
           off, rc, cudaGetErrorString(se));
    fflush(stdout);
    exit(3);  // the context may be dead; stop this candidate
  }
  if ((int64_t)c.out.size() < n * 4) c.out.resize(n * 4);
  CK(cudaMemcpy(c.out.data(), yy, n * 4, cudaMemcpyDeviceToHost));
  int64_t bad = 0, first = -1;
  double maxrel = 0;
  if (isf) {
    const float* o = (const float*)c.out.data();
    const double* r = (const double*)ref;
    for (int64_t i = 0; i < n; ++i) {
      double d = std::fabs((double)o[i] - r[i]);
      bool ok = d <= 1e-6 + 5e-4 * std::fabs(r[i]);  // NaN fails
      if (r[i] != 0) maxrel = std::max(maxrel, d / std::fabs(r[i]));
      if (!ok) { if (first < 0) first = i; ++bad; }
    }
  } else {
    const int32_t* o = (const int32_t*)c.out.data();
    const int32_t* r = (const int32_t*)ref;
    for (int64_t i = 0; i < n; ++i)
      if (o[i] != r[i]) { if (first < 0) first = i; ++bad; }
  }
  if (bad) {
    if (isf)
      printf("FAIL %-12s n=%-10lld f32 off=%d bad=%lld first=%lld got=%.9g want=%.9g\n", what, (long long)n,
             off, (long long)bad, (long long)first, ((const float*)c.out.data())[first],
             ((const double*)ref)[first]);
    else
      printf("FAIL %-12s n=%-10lld i32 off=%d bad=%lld first=%lld got=%d want=%d\n", what, (long long)n, off,
             (long long)bad, (long long)first, ((const int32_t*)c.out.data())[first],
             ((const int32_t*)ref)[first]);
  } else {
    printf("ok   %-12s n=%-10lld %s off=%d%s\n", what, (long long)n, isf ? "f32" : "i32", off,
           isf ? (std::string(" maxrel=") + std::to_string(maxrel)).c_str() : "");
  }
  fflush(stdout);
  return bad == 0;
}

static void upload(Ctx& c, int isf, int64_t n, int off, const void* host) {
  CK(cudaMemcpy(c.dx + 4 * off, host, n * 4, cudaMemcpyHostToDevice));
}

static std::vector<float> time_call(Ctx& c, int64_t n, int isf, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) c.f(c.dx, c.dy, n, isf, c.s);  // warm-up (lazy setup, first-touch)
  CK(cudaStreamSynchronize(c.s));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaMemsetAsync(c.flush, i & 0xff, 256ull << 20, c.s));
    CK(cudaStreamSynchronize(c.s));  // idle GPU at the first event, as in the runner: host-side
                                     // launch costs of the call (memsets, launches) then count
    CK(cudaEventRecord(a, c.s));
    int rc = c.f(c.dx, c.dy, n, isf, c.s);
    CK(cudaEventRecord(b, c.s));
    CK(cudaEventSynchronize(b));
    if (rc) { printf("entry rc=%d while timing\n", rc); exit(3); }
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3f);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t;
}

// A -DPS_TRACE build exports d2k_prefix_sum_trace: per tile (8 words) the start time (globaltimer
// ns), then SM cycles from the start to: ticket, tile loaded and reduced, look-back done, own stores
// issued; the SM; look-back window steps | (distance to the nearest inclusive prefix << 32).
typedef int (*TraceFn)(unsigned long long*, int64_t);

static void pct_line(const char* what, std::vector<double> v, const char* unit) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto at = [&](double q) { return v[std::min(v.size() - 1, (size_t)(q * (v.size() - 1)))]; };
  printf("TRACE %-28s mean %9.1f  p10 %9.1f  p50 %9.1f  p90 %9.1f  p99 %9.1f  max %9.1f %s\n", what,
         sum / v.size(), at(0.1), at(0.5), at(0.9), at(0.99), v.back(), unit);
}

static void report_trace(Ctx& c, TraceFn tf, int64_t n, int isf, int64_t tile_elems) {
  CK(cudaMemsetAsync(c.flush, 7, 256ull << 20, c.s));
  CK(cudaStreamSynchronize(c.s));
  cudaEvent_t ea, eb;
  CK(cudaEventCreate(&ea));
  CK(cudaEventCreate(&eb));
  CK(cudaEventRecord(ea, c.s));
  if (c.f(c.dx, c.dy, n, isf, c.s)) { printf("entry failed in the traced call\n"); return; }
  CK(cudaEventRecord(eb, c.s));
  CK(cudaStreamSynchronize(c.s));
  float call_ms = 0;
  CK(cudaEventElapsedTime(&call_ms, ea, eb));
  CK(cudaEventDestroy(ea));
  CK(cudaEventDestroy(eb));
  const int64_t tiles = (n + tile_elems - 1) / tile_elems;
  std::vector<unsigned long long> t(8 * tiles);
  if (tf(t.data(), tiles) != 0) { printf("d2k_prefix_sum_trace failed\n"); return; }
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const double ns_per_cycle = 1e6 / khz;  // at the maximum SM clock
  std::vector<double> ticket, load, look, tail, total, steps, dist, look_early, look_late;
  unsigned long long g_min = ~0ull, g_max = 0;
  double busy_ns = 0;
  for (int64_t i = 0; i < tiles; ++i) {
    const unsigned long long* r = &t[8 * i];
    const double c1 = r[1] * ns_per_cycle, c2 = r[2] * ns_per_cycle, c4 = r[3] * ns_per_cycle, c5 = r[4] * ns_per_cycle;
    ticket.push_back(c1);
    load.push_back(c2 - c1);
    look.push_back(c4 - c2);
    tail.push_back(c5 - c4);
    total.push_back(c5);
    (i < 2 * 132 * 4 ? look_early : look_late).push_back(c4 - c2);  // 2 waves of 4 blocks per SM
    if (i > 0) {
      steps.push_back((double)(r[6] & 0xffffffffull));
      dist.push_back((double)(r[6] >> 32));
    }
    g_min = std::min(g_min, r[0]);
    g_max = std::max(g_max, r[0] + (unsigned long long)c5);
    busy_ns += c5;
  }
  const double span = (double)(g_max - g_min);
  printf("TRACE n=%lld tiles=%lld SM clock %.0f MHz (max; cycles -> ns at that clock)\n", (long long)n, (long long)tiles,
         khz / 1e3);
  pct_line("ticket (start -> tile)", ticket, "ns");
  pct_line("load + reduce", load, "ns");
  pct_line("look-back (incl. publish)", look, "ns");
  pct_line("  first 2 waves", look_early, "ns");
  pct_line("  later", look_late, "ns");
  pct_line("scan + stores issued", tail, "ns");
  pct_line("tile total", total, "ns");
  pct_line("look-back window steps", steps, "");
  pct_line("distance to inclusive", dist, "tiles");
  printf("TRACE span %.1f us (first start -> last end, globaltimer), tiles in flight on average %.1f, %.2f ns per tile\n",
         span / 1e3, span > 0 ? busy_ns / span : 0.0, span / tiles);
  // Timeline: tiles in flight and tiles finished per 1/kBins of the span, to see the ramp at the
  // start and the drain at the end (the fixed cost of a call beyond tiles x steady-state time).
  constexpr int kBins = 24;
  std::vector<double> inflight(kBins, 0.0);
  std::vector<int> done(kBins, 0);
  const double bin = span / kBins;
  for (int64_t i = 0; i < tiles && bin > 0; ++i) {
    const unsigned long long* r = &t[8 * i];
    const double s0 = (double)(r[0] - g_min), s1 = s0 + r[4] * ns_per_cycle;
    for (int b = 0; b < kBins; ++b) {
      const double lo = b * bin, hi = lo + bin;
      const double overlap = std::min(hi, s1) - std::max(lo, s0);
      if (overlap > 0) inflight[b] += overlap / bin;
    }
    done[std::min(kBins - 1, (int)(s1 / bin))] += 1;
  }
  printf("TRACE timeline (%d bins of %.1f us): tiles in flight / tiles finished per bin\nTRACE  ", kBins, bin / 1e3);
  for (int b = 0; b < kBins; ++b) printf(" %.0f/%d", inflight[b], done[b]);
  printf("\n");
  // The first and last 40 us in 2 us bins: tiles in flight, tiles started, tiles finished.
  constexpr double kFine = 2000.0;
  constexpr int kFineBins = 20;
  for (int end = 0; end < 2; ++end) {
    std::vector<double> fin(kFineBins, 0.0);
    std::vector<int> fstart(kFineBins, 0), fdone(kFineBins, 0);
    const double origin = end ? span - kFine * kFineBins : 0.0;
    for (int64_t i = 0; i < tiles; ++i) {
      const unsigned long long* r = &t[8 * i];
      const double s0 = (double)(r[0] - g_min) - origin, s1 = s0 + r[4] * ns_per_cycle;
      for (int b = 0; b < kFineBins; ++b) {
        const double lo = b * kFine, hi = lo + kFine;
        const double overlap = std::min(hi, s1) - std::max(lo, s0);
        if (overlap > 0) fin[b] += overlap / kFine;
      }
      const int bs = (int)std::floor(s0 / kFine), be = (int)std::floor(s1 / kFine);
      if (bs >= 0 && bs < kFineBins) ++fstart[bs];
      if (be >= 0 && be < kFineBins) ++fdone[be];
      if (s1 >= kFine * kFineBins && be == kFineBins) ++fdone[kFineBins - 1];  // the last end
    }
    printf("TRACE %s 40 us in 2 us bins: in flight / started / finished\nTRACE  ", end ? "last" : "first");
    for (int b = 0; b < kFineBins; ++b) printf(" %.0f/%d/%d", fin[b], fstart[b], fdone[b]);
    printf("\n");
  }
  // The last tile (by ticket) and the last tile to finish, relative to the end of the span.
  int64_t last_end_tile = 0;
  double last_end = -1;
  for (int64_t i = 0; i < tiles; ++i) {
    const double e = (double)(t[8 * i] - g_min) + t[8 * i + 4] * ns_per_cycle;
    if (e > last_end) { last_end = e; last_end_tile = i; }
  }
  const unsigned long long* lt = &t[8 * (tiles - 1)];
  printf("TRACE last ticket %lld: start %.1f us before the end, load %.1f, look-back %.1f, stores %.1f us; "
         "last to finish: tile %lld\n", (long long)(tiles - 1),
         (span - (double)(lt[0] - g_min)) / 1e3, (lt[2] - lt[1]) * ns_per_cycle / 1e3,
         (lt[3] - lt[2]) * ns_per_cycle / 1e3, (lt[4] - lt[3]) * ns_per_cycle / 1e3, (long long)last_end_tile);
  printf("TRACE call %.1f us (events, idle GPU) vs span %.1f us: %.1f us outside the blocks (launch, exit)\n",
         call_ms * 1e3, span / 1e3, call_ms * 1e3 - span / 1e3);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    printf("usage: harness LIB.so LABEL [--no-check] [--reps N] | harness --copy [--reps N]\n");
    return 1;
  }
  bool copy_mode = std::string(argv[1]) == "--copy";
  bool do_check = true;
  int reps = 30;
  std::string label = copy_mode ? "copy" : (argc > 2 ? argv[2] : argv[1]);
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-check") do_check = false;
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) reps = atoi(argv[++i]);
  }
  Ctx c;
  CK(cudaStreamCreate(&c.s));
  CK(cudaMalloc(&c.dx, (kBig + 64) * 4));
  CK(cudaMalloc(&c.dy, (kBig + 64) * 4));
  CK(cudaMalloc(&c.flush, 256ull << 20));

  if (copy_mode) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    const size_t bytes = kBig * 4;
    CK(cudaMemset(c.dx, 1, bytes));
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<float> t;
      int dev = 0, sms = 0;
      CK(cudaGetDevice(&dev));
      CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      for (int i = -2; i < reps; ++i) {
        CK(cudaMemsetAsync(c.flush, i & 0xff, 256ull << 20, c.s));
        CK(cudaStreamSynchronize(c.s));
        CK(cudaEventRecord(a, c.s));
        if (kind == 0)
          CK(cudaMemcpyAsync(c.dy, c.dx, bytes, cudaMemcpyDeviceToDevice, c.s));
        else
          copy_kernel<<<sms * 8, 256, 0, c.s>>>((const uint4*)c.dx, (uint4*)c.dy, (int64_t)(bytes / 16));
        CK(cudaEventRecord(b, c.s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 0) t.push_back(ms * 1e3f);
      }
      std::sort(t.begin(), t.end());
      double med = t[t.size() / 2];
      printf("RESULT %-22s %-4s n=%-10lld median_us=%9.1f min_us=%9.1f TB/s=%.3f\n",
             kind == 0 ? "cudaMemcpyD2D_1GiB" : "copy_kernel_v4_1GiB", "-", (long long)kBig, med, t[0],
             2.0 * bytes / (med * 1e-6) / 1e12);
    }
    return 0;
  }

  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen %s: %s\n", argv[1], dlerror()); return 2; }
  c.f = (Entry)dlsym(h, "d2k_prefix_sum");
  if (!c.f) { printf("dlsym d2k_prefix_sum failed in %s\n", argv[1]); return 2; }

  // Inputs and references for the largest size (smaller sizes use prefixes of the same data).
  c.hi.resize(kBig);
  c.hf.resize(kBig);
  {
    uint64_t s = 12345;
    for (int64_t i = 0; i < kBig; ++i) {
      uint64_t r = splitmix(s);
      c.hi[i] = (int32_t)(r % 201) - 100;
      c.hf[i] = (float)(r >> 40) * (1.0f / 16777216.0f);
    }
  }
  int fails = 0, checks = 0;
  if (do_check) {
    c.ri.resize(kBig);
    c.rf.resize(kBig);
    scan_ref_int(c.hi.data(), c.ri.data(), kBig);
    scan_ref_float(c.hf.data(), c.rf.data(), kBig);
    const int64_t sizes[] = {1, 5, 4095, 4096, 4097, 1000003, 100000007, kBig};
    for (int isf = 0; isf < 2; ++isf) {
      upload(c, isf, kBig, 0, isf ? (const void*)c.hf.data() : (const void*)c.hi.data());
      for (int64_t n : sizes) {
        ++checks;
        fails += !run_check(c, "size", n, isf, 0, isf ? (const void*)c.rf.data() : (const void*)c.ri.data());
      }
      // Same sizes again, another order: descriptors left by earlier calls must not confuse later ones.
      const int64_t again[] = {kBig - 3, 12289, 1, 100000007, 4097, 16777259, 3};
      for (int64_t n : again) {
        ++checks;
        fails += !run_check(c, "repeat", n, isf, 0, isf ? (const void*)c.rf.data() : (const void*)c.ri.data());
      }
    }
    // Misaligned pointers (x + 1, y + 1): the guarded path.
    {
      const int64_t n = 1000003;
      std::vector<int32_t> ri(n);
      std::vector<double> rf(n);
      scan_ref_int(c.hi.data(), ri.data(), n);
      scan_ref_float(c.hf.data(), rf.data(), n);
      upload(c, 0, n, 1, c.hi.data());
      ++checks;
      fails += !run_check(c, "misaligned", n, 0, 1, ri.data());
      upload(c, 1, n, 1, c.hf.data());
      ++checks;
      fails += !run_check(c, "misaligned", n, 1, 1, rf.data());
    }
    // Full-range int32: wraparound must be exact.
    {
      const int64_t n = 5000011;
      std::vector<int32_t> in(n), ri(n);
      uint64_t s = 777;
      for (int64_t i = 0; i < n; ++i) in[i] = (int32_t)(uint32_t)splitmix(s);
      scan_ref_int(in.data(), ri.data(), n);
      upload(c, 0, n, 0, in.data());
      ++checks;
      fails += !run_check(c, "wraparound", n, 0, 0, ri.data());
    }
    printf("CHECK %-22s %s (%d/%d passed)\n", label.c_str(), fails ? "FAIL" : "PASS", checks - fails, checks);
  } else {
    printf("CHECK %-22s SKIPPED (--no-check)\n", label.c_str());
  }
  fflush(stdout);

  struct W { const char* name; int64_t n; int isf; };
  const W wls[] = {{"i32_2p28", kBig, 0}, {"f32_2p28m3", kBig - 3, 1}, {"i32_100m_odd", 100000007, 0},
                   {"f32_16m_odd", 16777259, 1}};
  int last_isf = -1;
  for (const W& w : wls) {
    if (w.isf != last_isf) {
      upload(c, w.isf, kBig, 0, w.isf ? (const void*)c.hf.data() : (const void*)c.hi.data());
      last_isf = w.isf;
    }
    std::vector<float> t = time_call(c, w.n, w.isf, reps);
    double med = t[t.size() / 2];
    printf("RESULT %-22s %-12s n=%-10lld median_us=%9.1f min_us=%9.1f TB/s=%.3f\n", label.c_str(), w.name,
           (long long)w.n, med, t[0], 8.0 * w.n / (med * 1e-6) / 1e12);
    fflush(stdout);
  }
  if (TraceFn tf = (TraceFn)dlsym(h, "d2k_prefix_sum_trace")) {
    const int64_t tile_elems = getenv("PS_TILE") ? atoll(getenv("PS_TILE")) : 16384;
    upload(c, 0, kBig, 0, c.hi.data());
    report_trace(c, tf, kBig, 0, tile_elems);
    // The task's i32_100m_odd workload, where the fixed cost per call weighs most.
    const int64_t kMid = 100000007;
    upload(c, 0, kMid, 0, c.hi.data());
    report_trace(c, tf, kMid, 0, tile_elems);
  }
  return fails ? 4 : 0;
}
