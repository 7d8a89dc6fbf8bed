// Where a train's spread comes from (issue 23's "CV of medians across fresh runners <= 1 %"; prints
// figures, asserts nothing). A plain CUDA program, outside the harness, that does what the runner's
// train does (docs/timing-protocol.md "The train"): a room of fresh input sets is filled, then
// --calls calls of a vector_add kernel run one after another, each on its own inputs and output,
// each followed by a device-wide synchronisation, timed by the host clock from the first launch to
// the last synchronisation. Each of --procs fresh processes (fork before CUDA: a fresh context and
// fresh allocations) makes --trains trains with --gap-ms of idle GPU before each (the harness's
// gaps between evaluations are process start-ups). Printed: every train (its per-call mean, median,
// min, max, first call, SM clock and temperature), then the spread split into its parts: across
// processes (the CV of the processes' means), within a process (the pooled CV of a process's
// trains), across every train, and the same for the trains' median calls; then the CV of groups of
// 2-4 consecutive trains of a process, by their mean and by their median (several trains as one
// time: EvalConfig::train_count).
// --alloc says where the room lies: `cuda` (a cudaMalloc per array, the default), `one` (one
// cudaMalloc carved into the arrays, 2 MiB apart, as the harness carves its slots), `vmm` (one
// virtual-memory allocation per process, as the trusted runner's exported slots), `shared` (one
// virtual-memory allocation made once by a keeper process and mapped by every process: the same
// physical memory for every process; does the spread across processes follow the memory?).
//   build/bin/bench_train_noise [--procs 6] [--trains 8] [--calls 32] [--elements 67108864]
//                               [--gap-ms 100] [--realloc] [--pad-gib 0] [--rooms 1] [--device 0]
//                               [--alloc cuda|one|vmm|shared]
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "bench/bench_args.hpp"
#include "bench/bench_stats.hpp"
#include "sandbox/runner/fd_pass.hpp"
#include "sandbox/runner/gpu_slots.hpp"
#include "sandbox/runner/nvml.hpp"

namespace {

using Clock = std::chrono::steady_clock;

__global__ void __launch_bounds__(1024) add_vec4(const float4* __restrict__ a, const float4* __restrict__ b,
                                                 float4* __restrict__ y, int64_t n4) {
  constexpr int kVec = 4;
  const int64_t tile = int64_t{1024} * kVec;
  for (int64_t base = int64_t{blockIdx.x} * tile; base < n4; base += int64_t{gridDim.x} * tile) {
    float4 va[kVec], vb[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int64_t i = base + k * 1024 + threadIdx.x;
      if (i < n4) va[k] = a[i], vb[k] = b[i];
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int64_t i = base + k * 1024 + threadIdx.x;
      if (i < n4) y[i] = make_float4(va[k].x + vb[k].x, va[k].y + vb[k].y, va[k].z + vb[k].z, va[k].w + vb[k].w);
    }
  }
}

// Inputs from a hash of (seed, index); the output poisoned (NaN).
__global__ void fill(float* p, int64_t n, uint32_t seed, bool poison) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = poison ? __int_as_float(0x7fc00000) : static_cast<float>(h & 0xffffff) * (1.0f / 16777216.0f);
  }
}

#define CHECK(x)                                                                   \
  do {                                                                             \
    const cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "bench_train_noise: %s: %s\n", #x, cudaGetErrorString(e_)); \
      _exit(3);                                                                    \
    }                                                                              \
  } while (0)

struct Train {
  int proc = 0, index = 0;
  double total_us = 0, mean_us = 0, median_us = 0, min_us = 0, max_us = 0, first_us = 0;
  double gpu_mean_us = 0, gpu_median_us = 0;  // each call's own GPU time (events around its launch)
  unsigned clock_before = 0, clock_after = 0, temp = 0;
};

using d2k::bench::cv_percent;
using d2k::bench::mean;
using d2k::bench::median;

// One fresh process's trains, written to fd as text lines.
constexpr std::size_t kAlign = std::size_t{2} << 20;  // the carved arrays' spacing (the VMM granularity)

// The room's bytes when carved: three arrays per call set, each rounded up to kAlign.
std::size_t room_bytes(int slots, std::size_t bytes) { return std::size_t(slots) * 3 * ((bytes + kAlign - 1) / kAlign * kAlign); }

// `shared_fd`: the keeper's exported room (--alloc shared), -1 otherwise.
void child(int fd, int proc, int trains, int calls, int64_t n, int gap_ms, bool realloc, int device, double pad_gib, int rooms,
           const std::string& where, int shared_fd, bool sync_each) {
  CHECK(cudaSetDevice(device));
  // Device memory taken (and written) before the room: the room's arrays then lie elsewhere in the
  // GPU's memory (does where they lie change their speed?).
  void* pad = nullptr;
  if (pad_gib > 0) {
    const auto pad_bytes = static_cast<std::size_t>(pad_gib * double(1ull << 30));
    CHECK(cudaMalloc(&pad, pad_bytes));
    CHECK(cudaMemset(pad, 0, pad_bytes));
  }
  char bus[32] = {};
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  d2k::runner::Nvml nvml;
  nvml.open(bus);
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  // `rooms` rooms of `calls` input sets each, allocated at once; train t uses room t % rooms (the
  // same process, other memory for each train).
  const int slots = calls * rooms;
  std::vector<float*> a(slots), b(slots), y(slots);
  const std::size_t stride = (bytes + kAlign - 1) / kAlign * kAlign;
  char* one = nullptr;                 // --alloc one
  d2k::runner::SharedSlots vmm;        // --alloc vmm / shared
  auto carve = [&](char* base) {
    for (int c = 0; c < slots; ++c) {
      a[c] = reinterpret_cast<float*>(base + (3 * std::size_t(c) + 0) * stride);
      b[c] = reinterpret_cast<float*>(base + (3 * std::size_t(c) + 1) * stride);
      y[c] = reinterpret_cast<float*>(base + (3 * std::size_t(c) + 2) * stride);
    }
  };
  auto alloc = [&] {
    if (where == "cuda") {
      for (int c = 0; c < slots; ++c) {
        CHECK(cudaMalloc(&a[c], bytes));
        CHECK(cudaMalloc(&b[c], bytes));
        CHECK(cudaMalloc(&y[c], bytes));
      }
    } else if (where == "one") {
      CHECK(cudaMalloc(&one, room_bytes(slots, bytes)));
      carve(one);
    } else {
      int out = -1;
      const std::string e = where == "vmm" ? vmm.create(room_bytes(slots, bytes), out)
                                           : vmm.import(dup(shared_fd), room_bytes(slots, bytes));
      if (out >= 0) close(out);
      if (!e.empty()) {
        std::fprintf(stderr, "bench_train_noise: the room (--alloc %s): %s\n", where.c_str(), e.c_str());
        _exit(3);
      }
      carve(vmm.data());
    }
  };
  auto release = [&] {
    if (where == "cuda") {
      for (int c = 0; c < slots; ++c) {
        CHECK(cudaFree(a[c]));
        CHECK(cudaFree(b[c]));
        CHECK(cudaFree(y[c]));
      }
    } else if (where == "one") {
      CHECK(cudaFree(one));
      one = nullptr;
    } else {
      vmm.release();
    }
  };
  alloc();
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t n4 = n / 4;
  const int grid = static_cast<int>(std::min<int64_t>((n4 + 4095) / 4096, int64_t{sms} * 32));
  for (int t = 0; t < trains; ++t) {
    if (realloc && t > 0) {
      release();
      alloc();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
    const int base = (t % rooms) * calls;
    for (int c = base; c < base + calls; ++c) {  // the room: fresh inputs, poisoned outputs
      fill<<<sms * 8, 256>>>(a[c], n, static_cast<uint32_t>(t * 7919 + c * 2 + 1), false);
      fill<<<sms * 8, 256>>>(b[c], n, static_cast<uint32_t>(t * 7919 + c * 2 + 2), false);
      fill<<<sms * 8, 256>>>(y[c], n, 0, true);
    }
    CHECK(cudaDeviceSynchronize());
    Train tr;
    tr.proc = proc;
    tr.index = t;
    tr.clock_before = nvml.sm_clock_mhz();
    std::vector<double> each(calls), gpu(calls);
    std::vector<cudaEvent_t> ev_start(calls), ev_end(calls);
    for (int c = 0; c < calls; ++c) {
      CHECK(cudaEventCreate(&ev_start[c]));
      CHECK(cudaEventCreate(&ev_end[c]));
    }
    const auto t0 = Clock::now();
    auto prev = t0;
    for (int c = 0; c < calls; ++c) {
      CHECK(cudaEventRecord(ev_start[c]));
      add_vec4<<<grid, 1024>>>(reinterpret_cast<const float4*>(a[base + c]), reinterpret_cast<const float4*>(b[base + c]),
                               reinterpret_cast<float4*>(y[base + c]), n4);
      CHECK(cudaEventRecord(ev_end[c]));
      if (sync_each || c == calls - 1) CHECK(cudaDeviceSynchronize());
      const auto now = Clock::now();
      each[c] = std::chrono::duration<double, std::micro>(now - prev).count();
      prev = now;
    }
    tr.total_us = std::chrono::duration<double, std::micro>(prev - t0).count();
    for (int c = 0; c < calls; ++c) {
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, ev_start[c], ev_end[c]));
      gpu[c] = 1000.0 * ms;
      CHECK(cudaEventDestroy(ev_start[c]));
      CHECK(cudaEventDestroy(ev_end[c]));
    }
    tr.gpu_mean_us = mean(gpu);
    tr.gpu_median_us = median(gpu);
    CHECK(cudaGetLastError());
    tr.clock_after = nvml.sm_clock_mhz();
    tr.temp = nvml.condition().temperature_c;
    tr.mean_us = tr.total_us / calls;
    tr.median_us = median(each);
    tr.min_us = *std::min_element(each.begin(), each.end());
    tr.max_us = *std::max_element(each.begin(), each.end());
    tr.first_us = each[0];
    char line[256];
    const int len = std::snprintf(line, sizeof line, "%d %d %.3f %.3f %.3f %.3f %.3f %.3f %u %u %u %.3f %.3f\n", tr.proc,
                                  tr.index, tr.total_us, tr.mean_us, tr.median_us, tr.min_us, tr.max_us, tr.first_us,
                                  tr.clock_before, tr.clock_after, tr.temp, tr.gpu_mean_us, tr.gpu_median_us);
    if (write(fd, line, static_cast<std::size_t>(len)) != len) _exit(4);
  }
  release();
  if (pad != nullptr) CHECK(cudaFree(pad));
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 6, trains = 8, calls = 32, gap_ms = 100, device = 0, elements = 67108864, rooms = 1;
  bool realloc = false, sync_end = false;
  std::string where = "cuda";
  double pad_gib = 0;
  d2k::bench::Args args("bench_train_noise",
                        "Where a train's spread comes from: --procs fresh processes, each making --trains trains of "
                        "--calls vector_add calls (fresh inputs per call, a device sync after each, timed by the host "
                        "clock), as the runner's train does. Prints every train and the spread across processes, within "
                        "a process and across all trains. Needs a GPU; asserts nothing.");
  args.option("--procs", &procs, "fresh processes (each a new CUDA context and new allocations)");
  args.option("--trains", &trains, "trains per process");
  args.option("--calls", &calls, "calls per train (the room holds one input set per call)");
  args.option("--elements", &elements, "floats per array (3 arrays per call)");
  args.option("--gap-ms", &gap_ms, "idle milliseconds before each train's fill");
  args.option("--device", &device, "CUDA device ordinal");
  args.flag("--sync-end", &sync_end,
            "launch a train's calls back to back and synchronise once after the last (default: after every call); "
            "the per-call host figures then show launch times, the GPU figures (events) each call's own time");
  args.flag("--realloc", &realloc, "free and allocate the room again before every train of a process");
  args.option("--rooms", &rooms, "rooms allocated at once; train t uses room t % rooms (other memory per train)");
  args.option("--pad-gib", &pad_gib, "GiB of device memory each process takes (and writes) before its room");
  args.option("--alloc", &where,
              "where the room lies: cuda (a cudaMalloc per array), one (one cudaMalloc, carved), vmm (one "
              "virtual-memory allocation per process), shared (one virtual-memory allocation made once by a keeper "
              "process, mapped by every process)");
  if (const int rc = args.parse(argc, argv); rc >= 0) return rc;
  const auto n = static_cast<int64_t>(elements);
  if (procs < 1 || trains < 1 || calls < 1 || n < 4 || gap_ms < 0 || !(pad_gib >= 0) || rooms < 1) {
    std::fprintf(stderr, "bench_train_noise: --procs, --trains, --calls, --rooms must be >= 1, --elements >= 4, --gap-ms and --pad-gib >= 0\n");
    return 2;
  }
  if (where != "cuda" && where != "one" && where != "vmm" && where != "shared") {
    std::fprintf(stderr, "bench_train_noise: --alloc is cuda, one, vmm or shared (got '%s')\n", where.c_str());
    return 2;
  }
  if (where == "shared" && realloc) {
    std::fprintf(stderr, "bench_train_noise: --realloc and --alloc shared exclude each other (the keeper's room is the same for all)\n");
    return 2;
  }
  // --alloc shared: a keeper process (forked before anything here touches CUDA) makes the room,
  // hands its exported descriptor over, and holds it until this process closes the socket.
  int shared_fd = -1, keeper_sock = -1;
  pid_t keeper = -1;
  if (where == "shared") {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 3;
    keeper = fork();
    if (keeper == 0) {
      close(sv[0]);
      if (cudaSetDevice(device) != cudaSuccess) _exit(3);
      d2k::runner::SharedSlots room;
      int out = -1;
      const std::string e = room.create(room_bytes(calls * rooms, static_cast<std::size_t>(n) * sizeof(float)), out);
      if (!e.empty()) {
        std::fprintf(stderr, "bench_train_noise: the keeper's room: %s\n", e.c_str());
        _exit(3);
      }
      if (!d2k::runner::send_fd(sv[1], out).empty()) _exit(3);
      close(out);
      char c;
      while (read(sv[1], &c, 1) > 0) {
      }
      _exit(0);  // the room goes with the process
    }
    close(sv[1]);
    keeper_sock = sv[0];
    std::string err;
    shared_fd = d2k::runner::recv_fd(keeper_sock, 120000, err);
    if (shared_fd < 0) {
      std::fprintf(stderr, "bench_train_noise: no room from the keeper: %s\n", err.c_str());
      return 3;
    }
  }
  std::printf("bench_train_noise: %d processes x %d trains x %d calls of vector_add on %lld floats (%.0f MiB per call), "
              "gap %d ms, pad %.1f GiB, %d room(s)%s, --alloc %s\n",
              procs, trains, calls, static_cast<long long>(n), 3.0 * static_cast<double>(n) * 4 / (1 << 20), gap_ms, pad_gib,
              rooms, realloc ? ", room allocated again per train" : "", where.c_str());
  std::printf("  proc train   total_us  mean_us  median   min      max      first    sm_MHz before/after  temp_C\n");
  std::fflush(stdout);
  std::vector<Train> all;
  for (int p = 0; p < procs; ++p) {
    int fds[2];
    if (pipe(fds) != 0) return 3;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      child(fds[1], p, trains, calls, n, gap_ms, realloc, device, pad_gib, rooms, where, shared_fd, !sync_end);
      _exit(0);
    }
    close(fds[1]);
    std::string text;
    char buf[4096];
    for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(r));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::printf("  process %d ended with status %d\n", p, status);
    std::size_t at = 0;
    for (std::size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
      Train t;
      if (std::sscanf(text.c_str() + at, "%d %d %lf %lf %lf %lf %lf %lf %u %u %u %lf %lf", &t.proc, &t.index, &t.total_us,
                      &t.mean_us, &t.median_us, &t.min_us, &t.max_us, &t.first_us, &t.clock_before, &t.clock_after,
                      &t.temp, &t.gpu_mean_us, &t.gpu_median_us) == 13) {
        all.push_back(t);
        std::printf("  %4d %5d %10.1f %8.2f %8.2f %8.2f %8.2f %8.2f %6u / %-6u %6u\n", t.proc, t.index, t.total_us,
                    t.mean_us, t.median_us, t.min_us, t.max_us, t.first_us, t.clock_before, t.clock_after, t.temp);
      }
    }
    std::fflush(stdout);
  }
  if (keeper > 0) {  // the keeper lets its room go
    close(shared_fd);
    close(keeper_sock);
    waitpid(keeper, nullptr, 0);
  }
  if (all.empty()) return 1;
  // The spread in parts, for the trains' per-call means (what the parent's clock sees) and for
  // their median calls (robust to a slow call, which the parent cannot see).
  // Then each call's own GPU time (events around its launch: no launch or sync in it), as a mean
  // (the whole train's GPU time per call) and as a median.
  for (const int figure : {0, 1, 2, 3}) {
    std::map<int, std::vector<double>> per_proc;
    std::vector<double> every, firsts;
    for (const auto& t : all) {
      const double v = figure == 0 ? t.mean_us : figure == 1 ? t.median_us : figure == 2 ? t.gpu_mean_us : t.gpu_median_us;
      per_proc[t.proc].push_back(v);
      every.push_back(v);
      if (t.index == 0) firsts.push_back(v);
    }
    std::vector<double> proc_means;
    double pooled = 0;
    int dof = 0;
    for (auto& [p, v] : per_proc) {
      const double m = mean(v);
      proc_means.push_back(m);
      for (double x : v) pooled += (x - m) * (x - m);
      dof += static_cast<int>(v.size()) - 1;
    }
    const double within = dof > 0 ? 100 * std::sqrt(pooled / dof) / mean(every) : 0;
    std::printf("%s: mean %.2f us; CV across all %zu trains %.2f%%; across processes (their means) %.2f%%; within a "
                "process (pooled) %.2f%%; the processes' first trains %.2f%%\n",
                figure == 0 ? "train mean " : figure == 1 ? "median call" : figure == 2 ? "GPU mean   " : "GPU median ", mean(every), every.size(), cv_percent(every), cv_percent(proc_means),
                within, cv_percent(firsts));
  }
  // Several trains as one time (EvalConfig::train_count): each process's trains taken K at a time
  // (consecutive, whole groups only), the group's time the mean or the median of its trains' means;
  // the CV across the groups, against that of single trains.
  std::map<int, std::vector<double>> means_of;  // process -> its trains' means, in order
  for (const auto& t : all) means_of[t.proc].push_back(t.mean_us);
  for (int k = 2; k <= std::min(trains, 4); ++k) {
    std::vector<double> by_mean, by_median;
    for (const auto& [p, v] : means_of)
      for (std::size_t i = 0; i + static_cast<std::size_t>(k) <= v.size(); i += static_cast<std::size_t>(k)) {
        const std::vector<double> g(v.begin() + static_cast<std::ptrdiff_t>(i), v.begin() + static_cast<std::ptrdiff_t>(i) + k);
        by_mean.push_back(mean(g));
        by_median.push_back(median(g));
      }
    std::printf("groups of %d trains (%zu groups): CV of their mean %.2f%%, of their median %.2f%%\n", k, by_mean.size(),
                cv_percent(by_mean), cv_percent(by_median));
  }
  return 0;
}
