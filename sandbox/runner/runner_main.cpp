// d2k-runner: the trusted harness that runs one kernel shared object on one GPU, once.
//
//   d2k-runner --mode agent|trusted [--isolate] [--result-fd 3] [--out-fd 4]
//
// Started ahead of need by the parent's pool; the steps, in order:
//   1. (--isolate) own user, mount and network namespaces (no network at all); under a GPU tool
//      (--keep-net) those the tool host entered for it, checked and adopted (tool_host.hpp);
//   2. CUDA start-up on the one visible GPU, flush buffer, stream, events, NVML; "ready" event;
//   3. read the job (one JSON line on stdin), open the .so, size the output file;
//   4. time empty samples (before any foreign code is loaded);
//   5. agent mode: hide the job's paths, rlimits, seccomp filter;
//   6. dlopen the .so, find the entry point;
//   7. per workload: per seed, generate inputs, poison outputs, call, sync, hand outputs over
//      through the output file; a trusted replay of the candidate's timed calls (reference only);
//      then "timing_ready", the phase's key from the parent on stdin, one batch that makes every
//      timed call's own inputs (from the key) and poisoned outputs, warm-up and timed samples
//      (each an L2 flush and the call), and the samples' outputs handed over in one batch
//      (GPU-resident: the owner makes the inputs in its input arena from the key, the agent runner
//      gets a keyless go line and only poisons its outputs: class 11);
//   8. "result" event, then _exit (the agent's static destructors never run); a GPU-resident owner
//      whose job says `stay` and whose result is ok instead lets go of the job's GPU memory and
//      library, says "ready" again (its sequence from 0) and goes back to 3 (EvalConfig::owner_reuse).
// Comparison with the reference happens in the parent, never here.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <ffi.h>
#include <nvtx3/nvToolsExt.h>
#include <nlohmann/json.hpp>

#include "sandbox/outcome.hpp"
#include "sandbox/process.hpp"
#include "sandbox/runner/confine.hpp"
#include "sandbox/runner/launch_records.hpp"
#include "sandbox/runner/nvml.hpp"
#include "sandbox/runner/csr_gen.hpp"
#include "sandbox/runner/fd_pass.hpp"
#include "sandbox/runner/gpu_slots.hpp"
#include "sandbox/runner/runner_device.hpp"
#include "sandbox/runner/runner_seccomp.hpp"
#include "sandbox/runner/tool_host.hpp"
#include "sandbox/runner/wire.hpp"

namespace d2k::runner {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using sandbox::Outcome;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A failure that ends the run with a typed status.
struct Stop {
  Outcome status;
  std::string message;
};

// Runs one confinement step; its failure ends the run as setup_error.
template <class Step>
void confine_step(Step&& step) {
  try {
    step();
  } catch (const ConfineError& e) {
    throw Stop{Outcome::setup_error, e.what()};
  }
}

#define RUNNER_CUDA(call, status)                                                             \
  do {                                                                                        \
    const cudaError_t rc_ = (call);                                                           \
    if (rc_ != cudaSuccess)                                                                   \
      throw Stop{Outcome::status, std::string(cudaGetErrorName(rc_)) + ": " + cudaGetErrorString(rc_) + \
                             " (" #call ")"};                                                 \
  } while (0)

// Every frame carries the next sequence number ("seq": 0 for the first, ready or probe); the parent
// refuses a duplicate, a gap or a frame out of the protocol's order (sandbox/eval/frames.hpp).
class Emitter {
 public:
  explicit Emitter(int fd) : fd_(fd) {}
  void restart() { seq_ = 0; }  // a staying owner's next job: its frames count from its "ready" again
  void send(json j) {
    j["seq"] = seq_++;
    std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
    line.push_back('\n');
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(3);  // the parent is gone
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
  std::uint64_t seq_ = 0;
};

// One line from stdin, spinning until it is there (poll without a timeout, at most 5 s, then a
// blocking read): for the lines whose hop is inside the parent's window. Data already in stdin's
// buffer (glibc's FILE: std::cin reads through it) counts as there.
bool spin_line(std::string& line) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (stdin->_IO_read_ptr >= stdin->_IO_read_end && std::chrono::steady_clock::now() < until) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) break;  // readable, closed, or an error: the read tells
  }
  return static_cast<bool>(std::getline(std::cin, line));
}

void pwrite_all(int fd, const void* data, std::size_t bytes, std::uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Stop{Outcome::setup_error, std::string("writing outputs: ") + std::strerror(errno)};
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One argument's storage for the libffi call.
union ScalarValue {
  float f32;
  double f64;
  std::int32_t i32;
  std::int64_t i64;
  std::uint32_t u32;
  std::uint8_t u8;
};

struct Gpu {
  cudaStream_t stream = nullptr;
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  void* flush = nullptr;
  std::uint64_t flush_bytes = 0;
  std::uint32_t salt = 1;
};

struct Sample {
  double event_s = 0;
  double wall_s = 0;
};

class Runner {
 public:
  Runner(bool agent_mode, int result_fd, int out_fd, int slots_fd)
      : agent_(agent_mode), emit_(result_fd), out_fd_(out_fd), slots_fd_(slots_fd) {}

  int run(bool isolate, bool keep_net = false) {
    const auto t0 = Clock::now();
    try {
      // Under a tool (--keep-net) the tool host entered the namespaces: the tool's injection made
      // this process multi-threaded before main, and unshare(CLONE_NEWUSER) would fail (EINVAL).
      if (isolate) confine_step([keep_net] { keep_net ? adopt_tool_host_namespaces() : enter_namespaces(); });
      under_tool_ = keep_net;
      if (under_tool_) tool_scratch_ = tool_scratch_dir();
      start_cuda();
    } catch (const Stop& s) {
      emit_.send({{"event", "result"}, {"status", sandbox::to_string(s.status)}, {"message", s.message}});
      return 2;
    }
    const double init_s = seconds_since(t0);
    result_.init_s = init_s;
    emit_.send({{"event", "ready"}, {"device", to_json(device_)}, {"init_s", init_s}});
    for (;;) {
      try {
        read_job();
        execute();
      } catch (const Stop& s) {
        result_.status = s.status;
        result_.message = s.message;
      } catch (const WireError& e) {
        result_.status = Outcome::bad_job;
        result_.message = e.what();
      } catch (const std::exception& e) {
        result_.status = Outcome::runtime_error;
        result_.message = e.what();
      }
      const bool stay = !agent_ && job_.stay && job_.gpu_slots == SlotsRole::owner && result_.status == Outcome::ok;
      emit_.send(to_json(result_));
      if (!stay) return result_.status == Outcome::ok ? 0 : 1;
      if (!let_go_of_job()) return 1;  // the context is not clean: end (the parent sees no "ready")
      result_.init_s = init_s;
      emit_.restart();
      emit_.send({{"event", "ready"}, {"device", to_json(device_)}, {"init_s", init_s}, {"jobs", jobs_done_}});
    }
  }

 private:
  void start_cuda() {
    RUNNER_CUDA(cudaSetDevice(0), setup_error);
    RUNNER_CUDA(cudaFree(nullptr), setup_error);
    cudaDeviceProp prop{};
    RUNNER_CUDA(cudaGetDeviceProperties(&prop, 0), setup_error);
    char bus[32] = {};
    RUNNER_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), setup_error);
    device_.name = prop.name;
    device_.pci_bus_id = bus;
    device_.sm_count = prop.multiProcessorCount;
    device_.cc_major = prop.major;
    device_.cc_minor = prop.minor;
    device_.memory_bytes = prop.totalGlobalMem;
    device_.l2_bytes = static_cast<std::uint64_t>(prop.l2CacheSize);
    cudaDeviceGetAttribute(&device_.memory_clock_khz, cudaDevAttrMemoryClockRate, 0);
    cudaDeviceGetAttribute(&device_.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
    cudaDriverGetVersion(&device_.cuda_driver_version);
    cudaRuntimeGetVersion(&device_.runtime_version);
    device_.nvml = nvml_.open(bus);
    device_.driver = nvml_.driver_version();
    // NVML's first clock queries can be slow; they happen here, not inside a timed phase's window.
    (void)nvml_.sm_clock_mhz();
    (void)nvml_.sm_clock_max_mhz();
    // Twice the L2, at least 64 MiB: every line of an earlier call is evicted.
    gpu_.flush_bytes = std::max<std::uint64_t>(2 * device_.l2_bytes, 64ull << 20);
    RUNNER_CUDA(cudaMalloc(&gpu_.flush, gpu_.flush_bytes), setup_error);
    RUNNER_CUDA(cudaMemset(gpu_.flush, 0, gpu_.flush_bytes), setup_error);
    RUNNER_CUDA(cudaStreamCreateWithFlags(&gpu_.stream, cudaStreamNonBlocking), setup_error);
    RUNNER_CUDA(cudaEventCreate(&gpu_.ev0), setup_error);
    RUNNER_CUDA(cudaEventCreate(&gpu_.ev1), setup_error);
    // One launch of our own so module loading is off the measured path.
    RUNNER_CUDA(l2_flush(gpu_.flush, gpu_.flush_bytes, 0, gpu_.stream), setup_error);
    RUNNER_CUDA(cudaDeviceSynchronize(), setup_error);
    // Under a tool: NVTX loads the tool's injection now, before Landlock and seccomp (tool_host.hpp).
    if (under_tool_) {
      nvtxRangePushA("d2k_runner_start");
      nvtxRangePop();
    }
  }

  // A staying owner after an ok result: everything its job held on the GPU and on the host is let
  // go (the candidate's slots and input arena, the phase snapshots, the reference's library and
  // its descriptor), so that the next job starts as on a fresh runner but for the CUDA context
  // (with its flush buffer, stream and events). False when the context is not clean afterwards.
  bool let_go_of_job() {
    if (snap_ != nullptr) cudaFree(snap_);
    if (snap_trains_ != nullptr) cudaFree(snap_trains_);
    snap_ = snap_trains_ = nullptr;
    slots_.release();
    arena_.release();
    arena_phases_.clear();
    arena_used_ = false;
    train_snaps_ = TrainSnaps{};
    snapped_.clear();
    go_parts_.clear();
    train_fill_ref_.clear();
    csr_ = CsrStructure{};
    csr_valid_ = false;
    csr_seed_ = 0;
    entry_ = nullptr;
    oracle_entry_ = nullptr;  // its library stays loaded (load_oracle)
    if (lib_ != nullptr) dlclose(lib_);  // best effort: a library that stays loaded keeps its own name
    lib_ = nullptr;
    for (int* fd : {&so_fd_, &so_load_fd_})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
    job_ = Job{};
    layout_ = Layout{};
    result_ = RunnerResult{};
    baseline_threads_.clear();
    ++jobs_done_;
    return cudaDeviceSynchronize() == cudaSuccess && cudaGetLastError() == cudaSuccess && slots_fd_ >= 0;
  }

  // ncu's lock folder as the server named it and the tool host mounted it (tool_host.hpp): an
  // absolute path to a directory, not a link, on a tmpfs; anything else is ignored (the profile
  // then fails typed).
  static std::string tool_scratch_dir() {
    const char* p = std::getenv(kToolScratchEnv);
    if (p == nullptr || p[0] != '/') return {};
    struct stat st{};
    struct statfs fs{};
    if (::lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || ::statfs(p, &fs) != 0 ||
        static_cast<unsigned long>(fs.f_type) != TMPFS_MAGIC)
      return {};
    return p;
  }

  void read_job() {
    std::string line;
    if (!std::getline(std::cin, line)) throw Stop{Outcome::bad_job, "no job on stdin"};
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw Stop{Outcome::bad_job, std::string("job is not JSON: ") + e.what()};
    }
    job_ = job_from_json(j);
    layout_ = output_layout(job_);  // an owner's job has no replay yet: this is the candidate's layout
    if (job_.gpu_slots == SlotsRole::user && agent_ == false)
      throw Stop{Outcome::bad_job, "gpu_slots user is for agent runners"};
    if (job_.gpu_slots == SlotsRole::owner && agent_) throw Stop{Outcome::bad_job, "gpu_slots owner is for trusted runners"};
  }

  // Resets what an earlier call may have left in the cache hierarchy, then evicts the L2.
  void flush() {
    cudaCtxResetPersistingL2Cache();
    cudaStreamAttrValue none{};
    none.accessPolicyWindow.num_bytes = 0;
    cudaStreamSetAttribute(gpu_.stream, cudaStreamAttributeAccessPolicyWindow, &none);
    RUNNER_CUDA(l2_flush(gpu_.flush, gpu_.flush_bytes, gpu_.salt++, gpu_.stream), runtime_error);
    RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
  }

  // cudaDeviceReset (or anything else that destroys the runner's context) in the entry: every
  // allocation of ours went with it. Checked right after each call, before anything that would
  // start a fresh context (whose new driver threads the census would report as the kernel's).
  void check_context() {
    cudaPointerAttributes attr{};
    const cudaError_t rc = cudaPointerGetAttributes(&attr, gpu_.flush);
    if (rc != cudaSuccess) {  // a sticky error of the call (an illegal address, ...) lands here first
      (void)cudaGetLastError();
      throw Stop{Outcome::runtime_error, std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc) +
                                             " (after the kernel's call; or its code reset the device)"};
    }
    if (attr.type != cudaMemoryTypeDevice)
      throw Stop{Outcome::runtime_error,
                 "the kernel's code destroyed the runner's CUDA context (cudaDeviceReset in the entry point?)"};
  }

  // One measured sample: events on the given stream, and a host bracket that ends only once the
  // whole device is idle (work on other streams or queued by other threads counts).
  template <class Call>
  Sample sample(Call&& call) {
    flush();
    RUNNER_CUDA(cudaEventRecord(gpu_.ev0, gpu_.stream), runtime_error);
    const auto t0 = Clock::now();
    call();
    const cudaError_t rec = cudaEventRecord(gpu_.ev1, gpu_.stream);
    const cudaError_t sync = cudaDeviceSynchronize();
    const auto t1 = Clock::now();
    check_context();
    RUNNER_CUDA(rec, runtime_error);
    RUNNER_CUDA(sync, runtime_error);
    float ms = 0;
    RUNNER_CUDA(cudaEventElapsedTime(&ms, gpu_.ev0, gpu_.ev1), runtime_error);
    return {ms * 1e-3, std::chrono::duration<double>(t1 - t0).count()};
  }

  // The host's cost of one train call's launch, device-wide sync and context check when the call
  // does nothing (a one-thread kernel): the median of 16, on this clock (a split train's sync cost).
  double measure_sync_call() {
    std::vector<double> each;
    for (int i = 0; i < 16; ++i) {
      const auto t = Clock::now();
      RUNNER_CUDA(launch_noop(gpu_.stream), runtime_error);
      RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
      cudaPointerAttributes attr{};
      RUNNER_CUDA(cudaPointerGetAttributes(&attr, gpu_.flush), runtime_error);
      each.push_back(seconds_since(t));
    }
    return median(each);
  }

  void measure_overhead() {
    std::vector<double> walls, whole;
    for (int i = 0; i < 25; ++i) {
      const auto t0 = Clock::now();
      walls.push_back(sample([] {}).wall_s);
      whole.push_back(seconds_since(t0));
    }
    result_.overhead_s = median(walls);
    result_.sample_overhead_s = median(whole);
  }

  // The confinement steps (confine.hpp), in order, before any foreign code is loaded.
  void confine(int so_fd) {
    confine_step([&] { hide_paths(job_.hide_paths); });
    confine_step([&] { hide_other_gpus(device_.pci_bus_id); });
    confine_step([&] { set_agent_limits(layout_.total_bytes, job_.host_memory_bytes); });
    confine_step([] { limit_pids(kMaxThreads); });  // a pids cgroup where the host allows one
    confine_step([&] { if (out_fd_ >= 0) make_write_only(out_fd_); });
    confine_step([&] {
      FileView view = agent_file_view(so_fd);
      if (!tool_scratch_.empty()) view.scratch_dirs.push_back(tool_scratch_);
      restrict_files(view);
    });
    confine_step([] { drop_privileges(); });
    confine_step([] { seal_runner_image(); });
    try {
      install_agent_filter(under_tool_);
    } catch (const std::exception& e) {
      throw Stop{Outcome::setup_error, e.what()};
    }
  }

  void execute() {
    const int so_fd = ::open(job_.so_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (so_fd < 0) throw Stop{Outcome::load_error, "cannot open " + job_.so_path + ": " + std::strerror(errno)};
    so_fd_ = so_fd;
    // A staying owner's later jobs load their library through a descriptor number never used
    // before in this process: the dynamic loader returns an already loaded object whose name
    // (/proc/self/fd/N) matches, whatever file that number names now.
    int load_fd = so_fd;
    if (jobs_done_ > 0) {
      load_fd = ::fcntl(so_fd, F_DUPFD_CLOEXEC, 512 + jobs_done_);
      if (load_fd < 0) throw Stop{Outcome::load_error, std::string("a fresh descriptor for the library: ") + std::strerror(errno)};
      so_load_fd_ = load_fd;
    }
    // (A staying owner keeps its slots socket: the next job's slots and arena go out on it.)
    const bool keep_socket = job_.stay && job_.gpu_slots == SlotsRole::owner && !agent_;
    const bool gpu_slots = job_.gpu_slots != SlotsRole::none;
    if (!gpu_slots && out_fd_ >= 0 && ftruncate(out_fd_, static_cast<off_t>(layout_.total_bytes)) != 0)
      throw Stop{Outcome::setup_error, std::string("sizing the output file: ") + std::strerror(errno)};
    if (!gpu_slots && out_fd_ < 0 && layout_.total_bytes > 0) throw Stop{Outcome::setup_error, "no output file"};
    // What an earlier job left behind (the owner's slots of this evaluation are expected).
    // (The owner holds its slots and, as large, its own copy of them for the phase snapshots.)
    // (and, on the resident path, its input arena).
    // (With trains > 1, the owner's copies of the earlier trains besides: train_snaps.)
    const std::uint64_t owned = job_.gpu_slots == SlotsRole::user
                                    ? 2 * job_.gpu_slots_bytes + job_.input_arena_bytes + train_snaps(job_, layout_).extra
                                    : 0;
    confine_step([&] { check_clean_device(owned); });
    confine_step([&] {  // a GPU left hot or slowed down is waited out (heartbeats) or refused
      wait_until_cool([&] { return nvml_.condition(); }, kMaxCoolWaitS, [&] { emit_.send({{"event", "heartbeat"}}); });
    });
    if (job_.gpu_slots == SlotsRole::owner) own_slots();
    if (job_.gpu_slots == SlotsRole::user) map_slots();
    if (slots_fd_ >= 0 && !keep_socket) {  // unused: agent code gets no channel to the parent beyond its frames
      ::close(slots_fd_);
      slots_fd_ = -1;
    }
    // stdin stays open: the parent releases each timed phase's key there, just in time.
    if (job_.measure_overhead) measure_overhead();
    if (job_.record_launches) start_launch_records();
    make_staging();
    if (agent_) confine(so_fd);
    confine_step([&] { start_callback_thread(gpu_.stream); });
    const auto baseline_threads = all_threads();

    const std::string so_path = "/proc/self/fd/" + std::to_string(load_fd);
    void* lib = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    lib_ = lib;
    if (lib == nullptr) {
      const char* err = dlerror();
      throw Stop{Outcome::load_error, std::string("dlopen: ") + (err != nullptr ? err : "unknown")};
    }
    void* entry = dlsym(lib, job_.entry.c_str());
    if (entry == nullptr) throw Stop{Outcome::load_error, "the shared object has no symbol '" + job_.entry + "'"};
    entry_ = reinterpret_cast<void (*)()>(entry);
    oracle_entry_ = nullptr;
    if (!job_.oracle_so_path.empty()) {
      if (agent_) throw Stop{Outcome::bad_job, "a replay oracle is for trusted owners"};
      oracle_entry_ = load_oracle(job_.oracle_so_path);
    }
    baseline_threads_ = baseline_threads;

    for (std::size_t w = 0; w < job_.workloads.size(); ++w) run_workload(w);
  }

  // The replay oracle's entry (a trusted owner only): loaded by its path the first time this process
  // sees it and kept loaded for the process's life, so a warm owner's jobs of the same task reuse it
  // (a library that keeps a device workspace in a static, as some experts do, keeps one, not one per
  // job). The entry symbol is the job's, as the reference's.
  void (*load_oracle(const std::string& path))() {
    const std::string key = path + "|" + job_.entry;
    if (auto it = oracles_.find(key); it != oracles_.end()) return it->second;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      throw Stop{Outcome::setup_error, std::string("the replay oracle: dlopen: ") + (err != nullptr ? err : "unknown")};
    }
    void* entry = dlsym(lib, job_.entry.c_str());
    if (entry == nullptr) throw Stop{Outcome::setup_error, "the replay oracle has no symbol '" + job_.entry + "'"};
    auto* fn = reinterpret_cast<void (*)()>(entry);
    oracles_.emplace(key, fn);
    return fn;
  }

  // Host path: a pinned buffer of the largest output slot, for the hand-over's device-to-host copies
  // (made before any foreign code; without it the copies go through pageable memory).
  void make_staging() {
    if (job_.gpu_slots != SlotsRole::none || out_fd_ < 0) return;
    std::uint64_t most = 0;
    for (const Slot& s : layout_.slots) most = std::max(most, s.bytes);
    if (most == 0) return;
    if (cudaMallocHost(&staging_, most) != cudaSuccess) {
      (void)cudaGetLastError();
      staging_ = nullptr;
      return;
    }
    staging_bytes_ = most;
  }

  // Host path: the pages of workload w's timed slots in the output file, allocated before the
  // window (the reference does the same before its batch clock), so the hand-over inside it copies
  // into existing pages on both ends. Best effort: a file that cannot be preallocated is written as before.
  void prefault_timed_slots(std::size_t w) {
    if (job_.gpu_slots != SlotsRole::none || out_fd_ < 0) return;
    std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
    for (const Slot& s : layout_.slots)
      if (s.workload == w && s.seed_index < 0) {
        lo = std::min(lo, s.offset);
        hi = std::max(hi, s.offset + s.bytes);
      }
    if (hi > lo) (void)::fallocate(out_fd_, 0, static_cast<off_t>(lo), static_cast<off_t>(hi - lo));
  }

  // GPU-resident owner (trusted): the candidate's output slots on the GPU, exported to the parent
  // (which hands the descriptor to the agent runner); then the parent's "go" line, sent once the
  // agent runner has exited, with the timed calls to replay.
  void own_slots() {
    if (slots_fd_ < 0) throw Stop{Outcome::setup_error, "no slots socket"};
    int fd = -1;
    if (std::string e = slots_.create(layout_.total_bytes, fd); !e.empty())
      throw Stop{Outcome::setup_error, "output slots: " + e};
    const std::string sent = send_fd(slots_fd_, fd);
    ::close(fd);
    if (!sent.empty()) throw Stop{Outcome::setup_error, "output slots: " + sent};
    // The input arena (issue 23, class 11): each timed phase's inputs are made here, from a key that
    // only this trusted runner receives, and the agent runner maps them (read-only where the driver
    // allows); no key enters the agent's process. One arena, sized for the largest phase.
    if (const std::uint64_t arena_bytes = input_arena_bytes(job_); arena_bytes > 0) {
      int afd = -1;
      if (std::string e = arena_.create(arena_bytes, afd); !e.empty()) {
        if (afd >= 0) ::close(afd);
        throw Stop{Outcome::setup_error, "input arena: " + e};
      }
      const std::string asent = send_fd(slots_fd_, afd);
      ::close(afd);
      if (!asent.empty()) throw Stop{Outcome::setup_error, "input arena: " + asent};
      for (std::size_t w = 0; w < job_.workloads.size(); ++w) arena_phases_.push_back(input_arena_phase(job_, w));
    }
    // The phase snapshots (the output-rewrite defence on this path): the owner's own copy of the
    // slots, poisoned like them, into which each timed phase's slots are copied when the parent
    // asks (the phase's timing_end has arrived and the agent runner is frozen); the timed calls
    // are compared from this copy, so what agent code writes into its slots after the phase is never
    // compared. The copy rate is measured here, before the candidate runs (no other context
    // competes), so that the parent can tell a snapshot delayed by agent GPU work from the copy's
    // own time. The replies go back on the slots socket (the parent's own channel to this runner).
    RUNNER_CUDA(cudaMalloc(&snap_, slots_.size()), setup_error);
    // The earlier trains' snapshots (trains > 1): an area of their own, poisoned.
    train_snaps_ = train_snaps(job_, layout_);
    if (train_snaps_.extra > 0) {
      RUNNER_CUDA(cudaMalloc(&snap_trains_, train_snaps_.extra), setup_error);
      RUNNER_CUDA(cudaMemsetAsync(snap_trains_, 0xFF, train_snaps_.extra, gpu_.stream), setup_error);
    }
    cudaEvent_t c0 = nullptr, c1 = nullptr;
    RUNNER_CUDA(cudaEventCreate(&c0), setup_error);
    RUNNER_CUDA(cudaEventCreate(&c1), setup_error);
    RUNNER_CUDA(cudaEventRecord(c0, gpu_.stream), setup_error);
    RUNNER_CUDA(cudaMemcpyAsync(snap_, slots_.data(), slots_.size(), cudaMemcpyDeviceToDevice, gpu_.stream), setup_error);
    RUNNER_CUDA(cudaEventRecord(c1, gpu_.stream), setup_error);
    RUNNER_CUDA(cudaStreamSynchronize(gpu_.stream), setup_error);
    float copy_ms = 0;
    RUNNER_CUDA(cudaEventElapsedTime(&copy_ms, c0, c1), setup_error);
    const double s_per_byte = slots_.size() > 0 ? copy_ms * 1e-3 / static_cast<double>(slots_.size()) : 0;
    emit_.send({{"event", "slots"}, {"bytes", slots_.size()}, {"arena_bytes", arena_.size()}});
    std::string line;
    // After a train's fill the next line is the train's snapshot, milliseconds later, whose round
    // trip the parent charges beyond the copy's own time: read it spinning (no wake-up of a
    // sleeping thread inside it). After a phase's fill the snapshot follows all its warm-ups and
    // samples (up to seconds): a blocking read, not a core burnt.
    bool spin_next = false;
    for (;;) {
      if (!(spin_next ? spin_line(line) : static_cast<bool>(std::getline(std::cin, line))))
        throw Stop{Outcome::bad_job, "no go line on stdin"};
      spin_next = false;
      json snap;
      try {
        snap = json::parse(line);
      } catch (const json::exception& e) {
        throw Stop{Outcome::bad_job, std::string("bad line on stdin: ") + e.what()};
      }
      if (snap.contains("fill")) {  // a timed phase is due: its inputs, into the arena
        spin_next = fill_arena(snap);
        continue;
      }
      if (!snap.contains("snap")) break;  // the go line
      std::string error;
      std::uint64_t bytes = 0;
      int copies = 0;
      try {
        const auto w = snap.at("snap").get<std::size_t>();
        const int calls = snap.at("calls").get<int>();
        // From the first call not yet taken: a train's calls are taken at its train_end, the rest
        // at the phase's timing_end (what agent code wrote into a train slot since is never taken).
        const int from = snap.value("from", 0);
        // An earlier train (of trains > 1) goes to its own place (train_snaps); the last train and
        // the phase to the slots' own offsets.
        const int train = snap.value("train", -1);
        if (w >= job_.workloads.size() || calls < 0 || calls > timed_call_slots(job_, w) || from < 0 || from > calls ||
            train < -1 || (train >= 0 && (train >= job_.workloads[w].trains - 1 || from != 0 || calls > job_.workloads[w].train)))
          throw Stop{Outcome::bad_job, "snapshot out of the layout"};
        for (const Slot& sl : layout_.slots) {
          if (sl.workload != w || sl.seed_index >= 0 || -1 - sl.seed_index >= calls || -1 - sl.seed_index < from) continue;
          char* into = static_cast<char*>(snap_) + sl.offset;
          if (train >= 0) {
            const std::int64_t at = train_snaps_.offset(job_, sl, train);
            if (at < 0 || snap_trains_ == nullptr) throw Stop{Outcome::bad_job, "a train's snapshot out of its place"};
            into = static_cast<char*>(snap_trains_) + at;
          }
          const cudaError_t rc = cudaMemcpyAsync(into, slots_.data() + sl.offset, sl.bytes,
                                                 cudaMemcpyDeviceToDevice, gpu_.stream);
          if (rc != cudaSuccess && error.empty()) error = cudaGetErrorString(rc);
          bytes += sl.bytes;
          ++copies;
        }
        const cudaError_t rc = cudaStreamSynchronize(gpu_.stream);
        if (rc != cudaSuccess && error.empty()) error = cudaGetErrorString(rc);
        snapped_.insert(w);
      } catch (const json::exception& e) {
        error = std::string("bad snapshot line: ") + e.what();
      }
      // The copy's own time at the rate measured above (plus 10 us per copy issued).
      const json reply = {{"snapped", snap.value("snap", -1)}, {"bytes", bytes},
                          {"copy_s", static_cast<double>(bytes) * s_per_byte + copies * 10e-6}, {"error", error}};
      const std::string text = reply.dump() + "\n";
      if (::write(slots_fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw Stop{Outcome::setup_error, "snapshot reply: " + std::string(std::strerror(errno))};
      if (!error.empty()) throw Stop{Outcome::runtime_error, "snapshot: " + error};
    }
    cudaEventDestroy(c0);
    cudaEventDestroy(c1);
    if (!job_.stay) {  // a staying owner keeps it for its next job's slots
      ::close(slots_fd_);
      slots_fd_ = -1;
    }
    arena_used_ = arena_.mapped();
    const auto t_go = Clock::now();
    try {
      const json go = json::parse(line);
      for (const auto& r : go.at("replay")) {
        const auto w = r.at("workload").get<std::size_t>();
        const int n = r.at("samples").get<int>();  // timed calls: warm-ups and samples
        const int cap = timed_call_slots(job_, w);    // the candidate's layout (and most its batch)
        if (w >= job_.workloads.size() || n < 0 || n > cap) throw Stop{Outcome::bad_job, "replay out of the layout"};
        job_.workloads[w].replay_key = r.at("key").get<std::uint64_t>();
        job_.workloads[w].replay_samples = n;
        const int batch = r.value("batch", 0);
        if (batch < 0 || batch > cap) throw Stop{Outcome::bad_job, "replay batch out of the layout"};
        job_.workloads[w].replay_batch = batch;
        const int train = r.value("train", 0);
        if (train < 0 || train > job_.workloads[w].train || train > n) throw Stop{Outcome::bad_job, "replay train out of the layout"};
        job_.workloads[w].replay_train = train;
        // The earlier trains (trains > 1): each its own key and calls, compared from its own snapshot.
        job_.workloads[w].replay_early_trains.clear();
        if (r.contains("early_trains")) {
          for (const auto& e : r.at("early_trains")) {
            const auto key = e.at("key").get<std::uint64_t>();
            const int calls = e.at("calls").get<int>();
            if (calls < 1 || calls > job_.workloads[w].train) throw Stop{Outcome::bad_job, "replay of a train out of the layout"};
            job_.workloads[w].replay_early_trains.emplace_back(key, calls);
          }
          if (static_cast<int>(job_.workloads[w].replay_early_trains.size()) > job_.workloads[w].trains - 1)
            throw Stop{Outcome::bad_job, "more trains replayed than the job has"};
        }
        // The fill charge's reference (class 3): the train's fill again, the same work into the
        // same memory (the room's inputs, its slots poisoned, the L2 flushed), now that the
        // candidate has exited and nothing else runs on the GPU. The slots it poisons are the
        // train's room, whose outputs are compared from the owner's phase snapshots, never from
        // the slots themselves. A staying owner measures it once per shape (the workload's
        // arguments and the room's calls) and reuses it in its later jobs: the same work alone on
        // the GPU, which no key or candidate changes (issue 15: 16-29 ms per evaluation).
        if (train > 0 && arena_.mapped() && w < arena_phases_.size()) {
          const int room = std::min(job_.workloads[w].train, arena_phases_[w].calls);
          const std::string shape = to_json(job_).at("workloads").at(w).at("args").dump() + "|" + std::to_string(room);
          if (const auto known = fill_ref_known_.find(shape); known != fill_ref_known_.end()) {
            train_fill_ref_[w] = known->second;
          } else {
            const auto t = Clock::now();
            make_arena_inputs(w, job_.workloads[w].replay_key, 0, room);
            RUNNER_CUDA(cudaStreamSynchronize(gpu_.stream), runtime_error);
            train_fill_ref_[w] = seconds_since(t);
            if (job_.stay) fill_ref_known_[shape] = train_fill_ref_[w];
          }
        }
      }
    } catch (const json::exception& e) {
      throw Stop{Outcome::bad_job, std::string("bad go line: ") + e.what()};
    }
    go_parts_.emplace_back("go_fill_refs", seconds_since(t_go));
    // The candidate has exited: its inputs are no longer needed (the replay makes its own, from the key).
    const auto t_release = Clock::now();
    arena_.release();
    go_parts_.emplace_back("go_release", seconds_since(t_release));
  }

  // Owner: timed calls [from, calls) of workload w get their inputs in the arena (no sync); with a
  // train, the first fill (from 0) also poisons the train's slots and flushes the L2 (its calls
  // write straight into their slots and start cold).
  void make_arena_inputs(std::size_t w, std::uint64_t key, int from, int calls) {
    const ArenaPhase& phase = arena_phases_[w];
    const WireWorkload& wl = job_.workloads[w];
    for (std::size_t a = 0; a < wl.args.size(); ++a) {
      if (phase.arg_offset[a] < 0) continue;
      if (phase.shared[a]) {  // once per phase, with its first fill
        if (from == 0) upload_csr_part(wl.args[a], arena_.data() + phase.at(0, a), timed_seed(key, 0));
        continue;
      }
      for (int c = from; c < calls; ++c)
        RUNNER_CUDA(generate(arena_.data() + phase.at(c, a), wl.args[a].dtype, wl.args[a].count, wl.args[a].gen,
                             timed_seed(key, static_cast<std::uint64_t>(c)), static_cast<std::uint32_t>(a),
                             gpu_.stream), runtime_error);
    }
    if (from == 0 && wl.train > 0) poison_train_slots(w, std::min(calls, wl.train));
  }

  // Owner: the output slots of workload w's train calls 0..calls-1 poisoned, then the L2 flushed.
  void poison_train_slots(std::size_t w, int calls) {
    for (const Slot& sl : layout_.slots)
      if (sl.workload == w && sl.seed_index < 0 && -1 - sl.seed_index < calls)
        RUNNER_CUDA(cudaMemsetAsync(slots_.data() + sl.offset, 0xFF, sl.bytes, gpu_.stream), runtime_error);
    RUNNER_CUDA(l2_flush(gpu_.flush, gpu_.flush_bytes, gpu_.salt++, gpu_.stream), runtime_error);
  }

  // GPU-resident owner: the parent's {"fill": w, "key": k, "from": f, "calls": n} (the agent runner waits at
  // its timing_ready): timed calls 0..n-1 of workload w get their inputs in the arena, each from
  // timed_seed(k, c), a CSR structure once from timed_seed(k, 0), made by the same code as any other
  // runner's; the reply {"filled": w, "error"} goes back on the slots socket once they exist.
  // Returns whether it was a train's fill (from its first call, in a workload with a train).
  bool fill_arena(const json& line) {
    const auto t0 = Clock::now();
    double sync_call_s = -1, took_s = -1;
    std::string error;
    long long w_out = -1;
    bool train_fill = false;
    try {
      const auto w = line.at("fill").get<std::size_t>();
      const auto key = line.at("key").get<std::uint64_t>();
      const int calls = line.at("calls").get<int>();
      const int from = line.value("from", 0);
      w_out = static_cast<long long>(w);
      if (w >= arena_phases_.size() || calls < 0 || calls > arena_phases_[w].calls || from < 0 || from > calls)
        throw Stop{Outcome::bad_job, "arena fill out of the layout"};
      train_fill = from == 0 && job_.workloads[w].train > 0;
      make_arena_inputs(w, key, from, calls);
      RUNNER_CUDA(cudaStreamSynchronize(gpu_.stream), runtime_error);
      took_s = seconds_since(t0);  // the fill alone (its replay is timed the same way: the fill charge)
      // A split train's sync cost (its first half's calls each pay it, its second half's do not):
      // what a call's launch, device-wide sync and context check take on this host when the call
      // itself does nothing, the median of 16, measured here right before the train.
      if (train_fill && job_.workloads[w].split > 0) sync_call_s = measure_sync_call();
    } catch (const json::exception& e) {
      error = std::string("bad fill line: ") + e.what();
    } catch (const Stop& s) {
      error = s.message;
    }
    // took_s: the fill's own time here (the parent's round trip adds its pipe hops and wake-ups).
    json reply{{"filled", w_out}, {"error", error}, {"took_s", took_s >= 0 ? took_s : seconds_since(t0)}};
    if (sync_call_s >= 0) reply["sync_call_s"] = sync_call_s;
    const std::string text = reply.dump() + "\n";
    if (::write(slots_fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      throw Stop{Outcome::setup_error, "arena fill reply: " + std::string(std::strerror(errno))};
    if (!error.empty()) throw Stop{Outcome::runtime_error, "arena fill: " + error};
    return train_fill;
  }

  // GPU-resident user (agent): maps the owner's slots, and its input arena when the job has one
  // (read-only where the driver allows), before any foreign code is loaded.
  void map_slots() {
    if (slots_fd_ < 0) throw Stop{Outcome::setup_error, "no slots socket"};
    if (job_.gpu_slots_bytes < layout_.total_bytes) throw Stop{Outcome::bad_job, "output slots smaller than the layout"};
    std::string err;
    const int fd = recv_fd(slots_fd_, 10000, err);
    const int afd = fd >= 0 && job_.input_arena_bytes > 0 ? recv_fd(slots_fd_, 10000, err) : -1;
    ::close(slots_fd_);
    slots_fd_ = -1;
    if (fd < 0) throw Stop{Outcome::setup_error, "output slots: " + err};
    if (std::string e = slots_.import(fd, job_.gpu_slots_bytes); !e.empty()) {
      if (afd >= 0) ::close(afd);
      throw Stop{Outcome::setup_error, "output slots: " + e};
    }
    if (job_.input_arena_bytes == 0) return;
    if (job_.input_arena_bytes < input_arena_bytes(job_)) throw Stop{Outcome::bad_job, "input arena smaller than its layout"};
    if (afd < 0) throw Stop{Outcome::setup_error, "input arena: " + err};
    if (std::string e = arena_.import(afd, job_.input_arena_bytes, true); !e.empty())
      throw Stop{Outcome::setup_error, "input arena: " + e};
    for (std::size_t w = 0; w < job_.workloads.size(); ++w) arena_phases_.push_back(input_arena_phase(job_, w));
    result_.input_arena = arena_.read_only() ? "read" : "readwrite";
  }

  // CUPTI is loaded and exercised once before any foreign code (and before the filter), so its
  // threads and files exist before the thread baseline is taken. Failure only loses the records.
  void start_launch_records() {
    std::string err;
    std::vector<LaunchRecord> ignored;
    if (!launches_.open(err) || !launches_.begin(err)) {
      result_.launches_error = err;
      return;
    }
    const cudaError_t rc = l2_flush(gpu_.flush, 1u << 20, 0, gpu_.stream);
    const cudaError_t sync = cudaDeviceSynchronize();
    if (!launches_.end(ignored, err)) {
      result_.launches_error = err;
    } else if (rc != cudaSuccess || sync != cudaSuccess) {
      result_.launches_error = "warm-up launch failed";
    } else if (ignored.empty()) {
      result_.launches_error = "CUPTI recorded no kernel launch";
    }
  }
  bool recording_launches() const { return job_.record_launches && result_.launches_error.empty(); }

  void check_threads() {
    const auto extra = foreign_threads(baseline_threads_);
    if (!extra.empty())
    {
      std::string names;
      for (const auto& t : extra) names += (names.empty() ? "" : ", ") + t;
      throw Stop{Outcome::flagged, "background_thread: the kernel's code left " + std::to_string(extra.size()) +
                                " thread(s) running after its call: " + names};
    }
  }

  void run_workload(std::size_t w) {
    const WireWorkload& wl = job_.workloads[w];
    const std::size_t n = wl.args.size();
    std::vector<void*> bufs(n, nullptr);
    // A trusted runner's host time, part by part (diagnosis only: replay_parts; never in any time).
    std::vector<std::pair<std::string, double>> parts;
    if (wl.replay_samples > 0 && !agent_) {  // the first replayed workload carries the go line's parts
      parts = std::move(go_parts_);
      go_parts_.clear();
    }
    auto part_t = Clock::now();
    auto part = [&](const char* name) {
      if (!agent_) parts.emplace_back(name, seconds_since(part_t));
      part_t = Clock::now();
    };
    struct Free {
      std::vector<void*>& b;
      ~Free() { for (void* p : b) if (p != nullptr) cudaFree(p); }
    } free_bufs{bufs};

    // libffi call description: arguments in order, then the stream.
    std::vector<ffi_type*> types;
    std::vector<ScalarValue> scalars(n);
    std::vector<void*> values;
    for (std::size_t a = 0; a < n; ++a) {
      const WireArg& arg = wl.args[a];
      if (arg.role == ArgRole::scalar) {
        ScalarValue& v = scalars[a];
        switch (arg.dtype) {
          case Dtype::f32: v.f32 = static_cast<float>(arg.scalar); types.push_back(&ffi_type_float); break;
          case Dtype::f64: v.f64 = arg.scalar; types.push_back(&ffi_type_double); break;
          case Dtype::i32: v.i32 = static_cast<std::int32_t>(arg.scalar); types.push_back(&ffi_type_sint32); break;
          case Dtype::i64: v.i64 = static_cast<std::int64_t>(arg.scalar); types.push_back(&ffi_type_sint64); break;
          case Dtype::u32: v.u32 = static_cast<std::uint32_t>(arg.scalar); types.push_back(&ffi_type_uint32); break;
          case Dtype::u8: v.u8 = static_cast<std::uint8_t>(arg.scalar); types.push_back(&ffi_type_uint8); break;
          default: throw Stop{Outcome::bad_job, "scalar arguments of type " + std::string(dtype_name(arg.dtype)) + " are not supported"};
        }
      } else {
        const std::uint64_t bytes = arg.count * dtype_size(arg.dtype);
        RUNNER_CUDA(cudaMalloc(&bufs[a], bytes), setup_error);
        types.push_back(&ffi_type_pointer);
      }
    }
    types.push_back(&ffi_type_pointer);
    part("buffers");
    // The pointers the next call gets: the correctness buffers, or one timed call's own (its batch).
    std::vector<void*> ptrs = bufs;
    auto use = [&](const std::vector<void*>& p) { std::copy(p.begin(), p.end(), ptrs.begin()); };  // never reallocates
    for (std::size_t a = 0; a < n; ++a)
      values.push_back(wl.args[a].role == ArgRole::scalar ? static_cast<void*>(&scalars[a])
                                                          : static_cast<void*>(&ptrs[a]));
    cudaStream_t stream = gpu_.stream;
    values.push_back(&stream);
    ffi_cif cif;
    if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, static_cast<unsigned>(types.size()),
                     job_.returns_int ? &ffi_type_sint : &ffi_type_void, types.data()) != FFI_OK)
      throw Stop{Outcome::setup_error, "ffi_prep_cif failed"};
    ffi_arg ret = 0;
    void (*active)() = entry_;  // the replay switches to the oracle, when the job has one
    auto call = [&] {
      if (under_tool_) nvtxRangePushA(kAgentNvtxRange);  // what ncu profiles (tool_host.hpp)
      ffi_call(&cif, active, &ret, values.data());
      if (under_tool_) nvtxRangePop();
    };
    auto check_ret = [&] {
      const int rc = static_cast<int>(static_cast<std::int64_t>(ret));
      if (job_.returns_int && rc != 0)
        throw Stop{Outcome::entry_error, "the entry point returned " + std::to_string(rc)};
    };

    // Inputs from `seed`, outputs poisoned. A CSR structure comes from `csr_seed` (host-built, about a
    // second per 50 M nonzeros: the timed calls share one structure, their values differ).
    auto is_csr = [&](std::size_t a) {
      return wl.args[a].role == ArgRole::input &&
             (wl.args[a].gen.dist == Dist::csr_row_ptr || wl.args[a].gen.dist == Dist::csr_col_idx);
    };
    auto upload_csr = [&](void* into, std::size_t a, std::uint64_t csr_seed) { upload_csr_part(wl.args[a], into, csr_seed); };
    // One call's arguments in `into`: inputs from `seed`, outputs poisoned (no sync); either half alone
    // where asked (the GPU-resident owner makes a keyless candidate's inputs in its arena).
    auto fill = [&](const std::vector<void*>& into, std::uint64_t seed, bool inputs = true, bool outputs = true) {
      for (std::size_t a = 0; a < n; ++a) {
        const WireArg& arg = wl.args[a];
        if (arg.role == ArgRole::input && !is_csr(a)) {
          if (inputs)
            RUNNER_CUDA(generate(into[a], arg.dtype, arg.count, arg.gen, seed,
                                 static_cast<std::uint32_t>(a), gpu_.stream), runtime_error);
        } else if (arg.role == ArgRole::output && outputs)  // poison: NaN for floats, all ones for integers
          RUNNER_CUDA(cudaMemsetAsync(into[a], 0xFF, arg.count * dtype_size(arg.dtype), gpu_.stream),
                      runtime_error);
      }
    };
    auto prepare = [&](std::uint64_t seed, std::uint64_t csr_seed) {
      use(bufs);
      for (std::size_t a = 0; a < n; ++a)
        if (is_csr(a)) upload_csr(bufs[a], a, csr_seed);
      fill(bufs, seed);
      RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
    };
    // The timed phase's batch (issue 23, class 3): every timed call gets its own inputs (from
    // timed_seed(key, call)) and poisoned outputs, all made right after the key and before the first
    // call, so the parent's window holds, per call, only the L2 flush and the call; the batch itself
    // is measured by the trusted replay, which makes the same batch. A CSR structure is host-built
    // once (timed_seed(key, 0)) and shared by the calls, whose values differ.
    std::vector<std::vector<void*>> batch;
    std::vector<void*> batch_owned;
    struct FreeBatch {
      std::vector<void*>& b;
      ~FreeBatch() { for (void* p : b) cudaFree(p); }
    } free_batch{batch_owned};
    auto alloc = [&](std::uint64_t bytes) {
      void* p = nullptr;
      const cudaError_t rc = cudaMalloc(&p, std::max<std::uint64_t>(bytes, 1));
      if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        throw Stop{Outcome::setup_error, "the timed calls' inputs and outputs do not fit on the GPU (" +
                                             std::string(cudaGetErrorString(rc)) + ")"};
      }
      batch_owned.push_back(p);
      return p;
    };
    // Allocation is not part of the batch (issue 23 item 1, H200 2026-12-02 02:22Z: the reference's
    // measured batch, then holding about a thousand cudaMalloc calls right after the candidate's
    // runner had freed as much, took 0.18-0.21 s against the candidate's whole window of
    // 0.09-0.15 s). Both ends allocate every call's buffers BEFORE the key (the candidate before
    // timing_ready, for the most warm-ups a key may ask for; the reference before its clock starts),
    // so the measured batch is GPU work (generation, poison) and the hand-over only, the same
    // route on both ends. Buffers hold no input before the key: knowing their addresses earns nothing.
    // GPU-resident agent runner with an input arena: every timed call's inputs are the arena's (made
    // by the owner from a key this process never sees); only its outputs are allocated here.
    const bool keyless = job_.gpu_slots == SlotsRole::user && arena_.mapped();
    auto alloc_batch = [&](int calls) {
      batch.assign(static_cast<std::size_t>(calls), std::vector<void*>(n, nullptr));
      if (keyless && calls > arena_phases_.at(w).calls) throw Stop{Outcome::bad_job, "more timed calls than the input arena holds"};
      for (std::size_t a = 0; a < n; ++a) {
        if (wl.args[a].role == ArgRole::scalar) continue;
        const std::uint64_t bytes = wl.args[a].count * dtype_size(wl.args[a].dtype);
        if (keyless && wl.args[a].role == ArgRole::input) {
          for (int c = 0; c < calls; ++c) batch[static_cast<std::size_t>(c)][a] = arena_.data() + arena_phases_[w].at(c, a);
        } else if (is_csr(a)) {
          void* shared = alloc(bytes);
          for (auto& c : batch) c[a] = shared;
        } else {
          // The train's calls (class 3) write straight into their owner-poisoned output slots.
          for (int c = 0; c < calls; ++c) {
            const Slot* slot = keyless && wl.args[a].role == ArgRole::output && c < wl.train ? layout_.find(w, -1 - c, a) : nullptr;
            batch[static_cast<std::size_t>(c)][a] = slot != nullptr ? slots_.data() + slot->offset : alloc(bytes);
          }
        }
      }
    };
    // The measured batch: the first `calls` calls' inputs from the key, outputs poisoned (either half
    // alone where asked: a keyless agent runner only poisons, its inputs are in the arena).
    auto fill_batch = [&](int calls, std::uint64_t key, bool inputs = true, bool outputs = true, int from = 0) {
      if (calls > static_cast<int>(batch.size())) throw Stop{Outcome::bad_job, "batch larger than its allocation"};
      for (std::size_t a = 0; a < n; ++a)
        if (inputs && from == 0 && wl.args[a].role != ArgRole::scalar && is_csr(a) && !batch.empty())
          upload_csr(batch[0][a], a, timed_seed(key, 0));
      for (int c = from; c < calls; ++c)
        fill(batch[static_cast<std::size_t>(c)], timed_seed(key, static_cast<std::uint64_t>(c)), inputs, outputs);
      RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
    };
    std::vector<char> host;  // pageable fallback when no pinned staging buffer could be made
    WorkloadResult wr;
    int snap_train = -1;  // owner: compare from this earlier train's snapshot (-1: the slots' own offsets)
    auto hand_over = [&](int seed_index) {
      for (std::size_t a = 0; a < n; ++a) {
        if (wl.args[a].role != ArgRole::output) continue;
        const Slot* slot = layout_.find(w, seed_index, a);
        if (slot == nullptr) continue;
        if (job_.gpu_slots == SlotsRole::user) {  // device to device, into the owner's memory
          if (ptrs[a] == slots_.data() + slot->offset) continue;  // the train's room: written in place
          RUNNER_CUDA(cudaMemcpyAsync(slots_.data() + slot->offset, ptrs[a], slot->bytes, cudaMemcpyDeviceToDevice,
                                      gpu_.stream), runtime_error);
          RUNNER_CUDA(cudaStreamSynchronize(gpu_.stream), runtime_error);
          continue;
        }
        if (job_.gpu_slots == SlotsRole::owner) {  // the candidate's slot against this reference output
          Tolerance tol;
          if (auto it = job_.tolerances.find(std::string(dtype_name(slot->dtype))); it != job_.tolerances.end())
            tol = it->second;
          TensorCheck check;
          // A timed call's slot is compared from the phase's snapshot when the parent took one
          // (always, on this path: the slot itself stays writable by agent code until it exits).
          const char* got = (slot->seed_index < 0 && snapped_.count(w) != 0 ? static_cast<const char*>(snap_)
                                                                             : slots_.data()) + slot->offset;
          if (snap_train >= 0) {  // an earlier train's call: from that train's own snapshot
            const std::int64_t at = train_snaps_.offset(job_, *slot, snap_train);
            if (at < 0 || snap_trains_ == nullptr) throw Stop{Outcome::bad_job, "a train's snapshot out of its place"};
            got = static_cast<const char*>(snap_trains_) + at;
          }
          RUNNER_CUDA(compare_on_gpu(got, ptrs[a], slot->dtype, slot->count, tol.atol, tol.rtol,
                                     gpu_.stream, check), runtime_error);
          check.seed_index = seed_index;
          check.arg_index = a;
          wr.checks.push_back(std::move(check));
          continue;
        }
        // Through the pinned staging buffer (made before any foreign code): a pageable copy of a
        // 256 MiB output took 0.15-0.25 s on the H200 and varied by a quarter between two runners.
        char* stage = staging_ != nullptr && slot->bytes <= staging_bytes_ ? static_cast<char*>(staging_) : nullptr;
        if (stage == nullptr) {
          host.resize(slot->bytes);
          stage = host.data();
        }
        RUNNER_CUDA(cudaMemcpy(stage, ptrs[a], slot->bytes, cudaMemcpyDeviceToHost), runtime_error);
        pwrite_all(out_fd_, stage, slot->bytes, slot->offset);
      }
    };

    // Correctness: one fresh, poisoned call per seed (every call's launches recorded on demand and
    // merged: issue 23, class 13).
    std::optional<std::vector<LaunchRecord>> launch_records;
    std::vector<LaunchRecord> first_launches;
    for (std::size_t s = 0; s < job_.seeds.size(); ++s) {
      prepare(job_.seeds[s], job_.seeds[s]);
      const bool record = recording_launches();
      std::string err;
      if (record && !launches_.begin(err)) result_.launches_error = err;
      call();
      check_context();
      const cudaError_t synced = cudaDeviceSynchronize();
      if (record && result_.launches_error.empty()) {
        std::vector<LaunchRecord> recs;
        if (!launches_.end(recs, err)) {
          result_.launches_error = err;
        } else if (!launch_records) {
          first_launches = recs;
          launch_records = std::move(recs);
        } else {
          merge_call_launches(*launch_records, first_launches, recs);
        }
      }
      RUNNER_CUDA(synced, runtime_error);
      RUNNER_CUDA(cudaGetLastError(), runtime_error);
      check_ret();
      check_threads();
      hand_over(static_cast<int>(s));
      emit_.send({{"event", "call"}, {"workload", w}, {"seed", s}});
    }

    wr.name = wl.name;
    wr.launches = std::move(launch_records);
    // Trusted replay (the reference, after the candidate): the outputs of the candidate's timed calls,
    // from the same key, each into its slot. It makes the same batch as the candidate (as many calls'
    // inputs and outputs) and hands the same outputs over, and reports how long both took: the
    // trusted batch time the parent's bound subtracts from the candidate's window.
    if (wl.replay_samples > 0) {
      if (agent_) throw Stop{Outcome::bad_job, "replay is for trusted runners"};
      const int calls = wl.replay_samples;  // the candidate's warm-ups and samples, all verified
      part("correctness");
      // The replayed calls run the oracle when the job names one (the correctness calls above ran
      // the reference): the same inputs from the same keys, compared with the same tolerances.
      if (oracle_entry_ != nullptr) active = oracle_entry_;
      // The candidate's window held its inputs' making, unless the owner made them in its arena
      // before the window opened (then only the poison is inside it, and only that is timed here).
      const bool inputs_outside = job_.gpu_slots == SlotsRole::owner && arena_used_;
      // The candidate's train (its first `train` calls) wrote straight into its slots, which the
      // owner poisoned in its fill: none of that was in the candidate's batch, whose poison (timed
      // here, as B) starts after them. (The fill charge's reference, train_fill_s, was timed when
      // the go line came, on the arena itself.)
      const int train = inputs_outside ? std::min(wl.replay_train, calls) : 0;
      const int all = std::max(wl.replay_batch, calls);
      if (auto it = train_fill_ref_.find(w); it != train_fill_ref_.end()) wr.train_fill_s = it->second;
      if (inputs_outside) {
        // The owner's replay: only the candidate's batch is timed (the poison of its own outputs,
        // calls train..all-1, and their hand-over), so only those outputs get buffers of their own,
        // as the candidate's did. Every call's inputs are made into the correctness buffers right
        // before it, and a train call's output (the correctness output buffer) is compared straight
        // after it (H200 2026-12-03: a batch of every call's inputs, 45 calls of 768 MiB, made the
        // replay ~0.3 s of allocation and frees).
        // One allocation carved into every output (2 MiB apart, as separate large cudaMalloc
        // blocks are): the replay starts while the pools' replacements create their CUDA contexts,
        // and beside them each cudaMalloc waited (H200 07:30Z: 13 outputs of 256 MiB took 63 ms,
        // 1.3 ms before the pools were let go that early).
        batch.assign(static_cast<std::size_t>(all), bufs);
        constexpr std::uint64_t kAlign = 2ull << 20;
        std::vector<std::uint64_t> stride(n, 0);  // each output's room in the block (0: not an output)
        std::uint64_t total = 0;
        for (std::size_t a = 0; a < n; ++a)
          if (wl.args[a].role == ArgRole::output) {
            stride[a] = (std::max<std::uint64_t>(wl.args[a].count * dtype_size(wl.args[a].dtype), 1) + kAlign - 1) / kAlign * kAlign;
            total += stride[a] * static_cast<std::uint64_t>(std::max(all - train, 0));
          }
        if (total > 0) {
          char* block = static_cast<char*>(alloc(total));
          for (std::size_t a = 0; a < n; ++a)
            for (int c = train; c < all && stride[a] > 0; ++c) {
              batch[static_cast<std::size_t>(c)][a] = block;
              block += stride[a];
            }
        }
        prefault_timed_slots(w);
        RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
        part("alloc");
        auto t0 = Clock::now();
        for (int c = train; c < all; ++c) fill(batch[static_cast<std::size_t>(c)], 0, false, true);
        RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
        wr.batch_in_s = seconds_since(t0);
        part("poison");
        for (std::size_t a = 0; a < n; ++a)
          if (wl.args[a].role == ArgRole::input && is_csr(a)) upload_csr(bufs[a], a, timed_seed(wl.replay_key, 0));
      } else {
        alloc_batch(all);
        prefault_timed_slots(w);
        RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
        part("alloc");
        auto t0 = Clock::now();
        fill_batch(all, wl.replay_key, true, true, 0);
        wr.batch_in_s = seconds_since(t0);
        part("fill");
      }
      // The earlier trains (trains > 1), before the last train and the phase: each call's inputs
      // from its train's key, its output compared with that train's own snapshot (outside any
      // timed part: none of it is the candidate's batch).
      if (inputs_outside && !wl.replay_early_trains.empty()) {
        auto tbeat = Clock::now();
        for (std::size_t t = 0; t < wl.replay_early_trains.size(); ++t) {
          const auto [tkey, tcalls] = wl.replay_early_trains[t];
          for (std::size_t a = 0; a < n; ++a)
            if (wl.args[a].role == ArgRole::input && is_csr(a)) upload_csr(bufs[a], a, timed_seed(tkey, 0));
          snap_train = static_cast<int>(t);
          for (int i = 0; i < tcalls; ++i) {
            fill(bufs, timed_seed(tkey, static_cast<std::uint64_t>(i)), true, true);
            RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
            use(bufs);
            call();
            RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
            check_ret();
            hand_over(-1 - i);
            if (seconds_since(tbeat) > 0.5) {
              emit_.send({{"event", "heartbeat"}});
              tbeat = Clock::now();
            }
          }
          snap_train = -1;
        }
        for (std::size_t a = 0; a < n; ++a)
          if (wl.args[a].role == ArgRole::input && is_csr(a)) upload_csr(bufs[a], a, timed_seed(wl.replay_key, 0));
        part("early_trains");
      }
      auto beat = Clock::now();
      for (int i = 0; i < calls; ++i) {
        if (inputs_outside) {  // this call's inputs (and a train call's output poisoned), just before it
          fill(batch[static_cast<std::size_t>(i)], timed_seed(wl.replay_key, static_cast<std::uint64_t>(i)), true, i < train);
          RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
        }
        use(batch[static_cast<std::size_t>(i)]);
        call();
        RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
        check_ret();
        if (i < train) hand_over(-1 - i);  // its output buffer is the next train call's
        if (seconds_since(beat) > 0.5) {
          emit_.send({{"event", "heartbeat"}});
          beat = Clock::now();
        }
      }
      part("calls");
      if (job_.gpu_slots == SlotsRole::owner) {
        // The candidate's hand-over is a device copy into its slot: timed here as copies of the same
        // bytes into scratch; the comparison (after) is the owner's own work, outside any window.
        std::uint64_t most = 0;
        for (std::size_t a = 0; a < n; ++a)
          if (wl.args[a].role == ArgRole::output) most = std::max(most, wl.args[a].count * dtype_size(wl.args[a].dtype));
        void* scratch = alloc(most);
        const auto t0 = Clock::now();
        for (int i = train; i < calls; ++i)  // the train's calls were not handed over
          for (std::size_t a = 0; a < n; ++a) {
            if (wl.args[a].role != ArgRole::output || layout_.find(w, -1 - i, a) == nullptr) continue;
            RUNNER_CUDA(cudaMemcpyAsync(scratch, batch[static_cast<std::size_t>(i)][a],
                                        wl.args[a].count * dtype_size(wl.args[a].dtype), cudaMemcpyDeviceToDevice,
                                        gpu_.stream), runtime_error);
            RUNNER_CUDA(cudaStreamSynchronize(gpu_.stream), runtime_error);
          }
        wr.batch_out_s = seconds_since(t0);
        part("copies");
        for (int i = train; i < calls; ++i) {  // the train's calls were compared after each
          use(batch[static_cast<std::size_t>(i)]);
          hand_over(-1 - i);
        }
        part("checks");
      } else {
        const auto t0 = Clock::now();
        for (int i = 0; i < calls; ++i) {
          use(batch[static_cast<std::size_t>(i)]);
          hand_over(-1 - i);
        }
        wr.batch_out_s = seconds_since(t0);
      }
      active = entry_;
    }

    if (job_.timing.enabled && wl.time && job_.gpu_slots != SlotsRole::owner) {
      // SM clocks before the key: NVML is slow and nothing but the batch and the calls should be
      // inside the parent's window.
      const unsigned clock_start = nvml_.sm_clock_mhz();
      const unsigned clock_max = nvml_.sm_clock_max_mhz();
      // The key of this timed phase arrives only now, from the parent (whose clock starts here):
      // every timed call gets inputs of its own, unknown to the process before they are due.
      const int slots = timed_slots(job_, w);
      if (wl.train > 0 && !keyless) throw Stop{Outcome::bad_job, "a train is for GPU-resident runners with an input arena"};
      alloc_batch(wl.train + warmup_range(job_.timing).second + slots);
      int train = 0;  // the calls this phase's train makes (the parent's train line)
      prefault_timed_slots(w);
      RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
      emit_.send({{"event", "timing_ready"}, {"workload", w}});
      // With trains > 1 the same again per train: the owner fills the room anew (fresh inputs from a
      // key of the train's own, the slots poisoned) before each; the phase follows the last one and
      // numbers its calls from the last train's count. After the job's count the parent may send
      // more trains (it discarded a disturbed one: EvalConfig::train_retries) before the phase
      // line, which is then read here (`after_trains`).
      std::string after_trains;
      for (int tr = 0; wl.train > 0; ++tr) {
        // The train (issue 23, class 3): the owner has made its calls' inputs and poisoned their
        // slots; from the parent's train line to the train_end frame its clock runs, and that is the
        // workload's time. The calls go one after another with nothing between them but a
        // device-wide synchronisation (no flush, no bracket: nothing of this process's own work is
        // subtracted, so none can be skipped to gain); the synchronisation keeps a call's work from
        // overlapping the next call's on other streams, as a single call's latency is what is timed.
        // A split train (WireWorkload::split) makes its second half's calls back to back instead:
        // the parent's floor from the first half bounds what overlapping calls could gain there.
        // Both lines are read spinning (no sleep): the train line's hop inside the parent's window
        // is then the pipe's alone, not a wake-up of this thread (H200: 150-400 us with a sleep).
        std::string line;
        if (!spin_line(line)) throw Stop{Outcome::bad_job, tr < std::max(1, wl.trains) ? "no train line on stdin" : "no timing line on stdin"};
        TrainStart ts;
        try {
          if (tr >= std::max(1, wl.trains)) {  // another train, or the phase line
            if (!is_prime_line(line, w) && !is_train_line(line)) {
              after_trains = std::move(line);
              break;
            }
            if (tr >= std::max(1, wl.trains) * (1 + kMaxExtraTrains)) throw Stop{Outcome::bad_job, "more trains than a phase may make"};
          }
          if (is_prime_line(line, w)) {
            // The owner's fill ran last on the GPU: switch to this context now, with work of this
            // runner's own (4 bytes of its flush buffer), before the parent opens the window (on the
            // H200 the first call after the fill took ~180 us more than the others). Agent code
            // has no GPU work in this context (the sync before timing_ready), and runs none here.
            RUNNER_CUDA(cudaMemsetAsync(gpu_.flush, 0, 4, gpu_.stream), runtime_error);
            RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
            emit_.send({{"event", "primed"}, {"workload", w}});
            if (!spin_line(line)) throw Stop{Outcome::bad_job, "no train line on stdin"};
          }
          ts = parse_train_line(line, w, wl.train);
        } catch (const WireError& e) {
          throw Stop{Outcome::bad_job, e.what()};
        }
        train = 0;  // this train's (after the line: the phase line above leaves the last train's count)
        const auto t_train = Clock::now();
        auto beat = t_train;
        double first_s = 0;
        std::vector<double> each;  // each call's time on this clock, sync to sync (a claim: diagnosis)
        each.reserve(static_cast<std::size_t>(wl.train));
        auto prev = t_train;
        // TrainStart::queue > 1: up to `queue` calls in flight, paced by an event after each call on
        // the stream, one device-wide sync after the last: the split train's second half, or (no
        // split) a whole train that way, for measurement only.
        std::vector<cudaEvent_t> ring(static_cast<std::size_t>(ts.queue > 1 ? ts.queue : 0));
        for (auto& e : ring) RUNNER_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), runtime_error);
        // The split train (WireWorkload::split): the first `split` calls (fewer once half the cap has
        // passed, after its least) each with a device-wide sync, then "train_half" (the parent's
        // clock divides the window there), then the rest, back to back, with half the cap of their own.
        const int half = wl.split > 0 && wl.split < wl.train ? wl.split : 0;
        int half_made = half > 0 ? -1 : 0;  // the first half's calls once it ended (-1: still in it)
        auto t_part = t_train;              // the current half's start
        for (int c = 0; c < wl.train; ++c) {
          if (half_made < 0 && (c >= half || (c >= ts.least && seconds_since(t_train) >= 0.5 * ts.cap_s))) {
            half_made = c;  // its last call has synced
            emit_.send({{"event", "train_half"}, {"workload", w}, {"calls", c}});
            t_part = Clock::now();
          }
          const bool queued = !ring.empty() && half_made >= 0;
          const int in_part = c - std::max(half_made, 0);
          if (half_made >= 0 && in_part >= ts.least && seconds_since(t_part) >= (half > 0 ? 0.5 : 1.0) * ts.cap_s)
            break;  // a slow kernel's train
          const auto slot = static_cast<std::size_t>(in_part % std::max(1, ts.queue));
          if (queued && in_part >= ts.queue) RUNNER_CUDA(cudaEventSynchronize(ring[slot]), runtime_error);
          ++train;
          use(batch[static_cast<std::size_t>(c)]);
          call();
          const cudaError_t synced = queued ? cudaEventRecord(ring[slot], gpu_.stream) : cudaDeviceSynchronize();
          const auto now = Clock::now();
          if (!queued) each.push_back(std::chrono::duration<double>(now - prev).count());
          prev = now;
          if (c == 0) first_s = seconds_since(t_train);
          check_context();
          RUNNER_CUDA(synced, runtime_error);
          check_ret();
          if (seconds_since(beat) > 0.5) {  // a slow kernel's train (the parent's silence deadline)
            emit_.send({{"event", "heartbeat"}});
            beat = Clock::now();
          }
        }
        if (!ring.empty()) {
          RUNNER_CUDA(cudaDeviceSynchronize(), runtime_error);
          check_context();
          for (auto& e : ring) (void)cudaEventDestroy(e);
        }
        RUNNER_CUDA(cudaGetLastError(), runtime_error);
        // self_s, first_s, median_s (the median call): this process's own clock (claims, for
        // diagnosis; never in any time).
        emit_.send({{"event", "train_end"}, {"workload", w}, {"calls", train}, {"self_s", seconds_since(t_train)},
                    {"first_s", first_s}, {"median_s", median(each)}});
      }
      const PhaseStart start = read_phase_line(w, keyless, wl.train > 0 ? &after_trains : nullptr);
      const int warm = start.warmup;
      // The runner's own figures of its batch (untrusted: reported for diagnosis only; the parent
      // bounds the phase with the reference's).
      auto t_batch = Clock::now();
      fill_batch(train + warm + slots, start.key.value_or(0), !keyless, true, train);
      wr.batch_in_s = seconds_since(t_batch);
      std::size_t next_call = static_cast<std::size_t>(train);  // timed calls so far: the train, warm-ups, then samples
      auto next = [&] { use(batch[next_call++]); };
      // Class 13: with launch records, the launches of one warm-up (drawn by the parent, never in the
      // job: a call with arena inputs, flushed like every other timed call, its time discarded) are
      // recorded too: recording starts after its flush, stops once the device is idle, and the
      // records are flushed only after the phase (nothing of CUPTI's inside the window but that).
      bool recorded = false;
      auto recorded_call = [&] {
        std::string err;
        if (!launches_.begin(err)) result_.launches_error = err;
        call();
      };
      for (int i = 0; i < warm; ++i) {
        next();
        if (i == start.record && recording_launches()) {
          sample(recorded_call);
          std::string err;
          if (result_.launches_error.empty() && !launches_.stop(err)) result_.launches_error = err;
          recorded = result_.launches_error.empty();
        } else {
          sample(call);
        }
        check_ret();
      }
      wr.timing = time_samples(call, check_ret, next, slots);
      // Every timed call's outputs (warm-ups too), handed over in one batch (the replay measures the
      // same hand-over).
      t_batch = Clock::now();
      for (int i = train; i < train + warm + wr.timing->samples; ++i) {  // the train's are in their slots
        use(batch[static_cast<std::size_t>(i)]);
        hand_over(-1 - i);  // (a call in the train's room writes its slot itself: nothing to copy)
      }
      wr.batch_out_s = seconds_since(t_batch);
      emit_.send({{"event", "timing_end"}, {"workload", w}, {"samples", wr.timing->samples}});
      TimingResult& t = *wr.timing;
      t.sm_clock_start_mhz = clock_start;
      t.sm_clock_max_mhz = clock_max;
      t.sm_clock_end_mhz = nvml_.sm_clock_mhz();
      // Throttled: the SM clock was well below the board's maximum around the samples.
      const unsigned low = std::min(clock_start, t.sm_clock_end_mhz);
      t.throttled = clock_max > 0 && low > 0 && low < 0.85 * clock_max;
      if (t.throttled && std::find(result_.flags.begin(), result_.flags.end(), "throttled") == result_.flags.end())
        result_.flags.push_back("throttled");
      if (recorded) {  // merged as a correctness call's launches are (merge_call_launches)
        std::vector<LaunchRecord> recs;
        std::string err;
        if (!launches_.collect(recs, err)) result_.launches_error = err;
        else if (wr.launches) merge_call_launches(*wr.launches, first_launches, recs);
      }
      check_threads();
    }
    // An owner's checks: runs of timed slots merged (a train's thousands of checks would not fit
    // its result frame; the parent counts the spans).
    if (job_.gpu_slots == SlotsRole::owner) wr.checks = merge_timed_checks(std::move(wr.checks));
    if (wl.replay_samples > 0) wr.replay_parts = std::move(parts);
    result_.workloads.push_back(std::move(wr));
  }

  // The line the parent writes on stdin when "timing_ready" arrives (wire.hpp, phase_line): the
  // phase's warm-up count drawn by the parent (never in the job), at most the job's max_warmup, and
  // on the host path the phase's key; with an input arena a keyless go line (the owner has made the
  // inputs already: a key would be refused).
  PhaseStart read_phase_line(std::size_t w, bool keyless, const std::string* read = nullptr) {
    std::string line;
    if (read != nullptr) line = *read;  // read already, after the phase's trains
    else if (!std::getline(std::cin, line)) throw Stop{Outcome::bad_job, "no timing line on stdin"};
    try {
      return parse_phase_line(line, w, keyless, warmup_range(job_.timing).second);
    } catch (const WireError& e) {
      throw Stop{Outcome::bad_job, e.what()};
    }
  }

  // Samples until the RSE target (after min_samples), max_samples, the time cap or the last output
  // slot: each sample is the next call of the batch (its own inputs, poisoned outputs); the caller
  // hands every sample's outputs over afterwards (every timed call is verified).
  template <class Call, class Check, class Next>
  TimingResult time_samples(Call& call, Check& check_ret, Next& next, int slots) {
    const TimingSpec& spec = job_.timing;
    const int max_samples = std::max(1, std::min(spec.max_samples, slots));
    const int min_samples = std::min(spec.min_samples, max_samples);
    TimingResult t;  // SM clocks are read before timing_ready / after timing_end (NVML is slow)
    std::vector<double> times, events, walls;
    const auto start = Clock::now();
    auto last_beat = start;
    for (;;) {
      next();
      const Sample s = sample(call);
      check_ret();
      const double wall = std::max(0.0, s.wall_s - result_.overhead_s);
      times.push_back(std::max(s.event_s, wall));
      events.push_back(s.event_s);
      walls.push_back(wall);
      const int n = static_cast<int>(times.size());
      if (n >= min_samples) {
        double mean = 0;
        for (double x : times) mean += x;
        mean /= n;
        double var = 0;
        for (double x : times) var += (x - mean) * (x - mean);
        var /= std::max(1, n - 1);
        const double rse = mean > 0 ? std::sqrt(var / n) / mean : 0;
        t.mean_s = mean;
        t.cv = mean > 0 ? std::sqrt(var) / mean : 0;
        t.rse = rse;
        if (rse <= spec.rse_target || n >= max_samples) break;
        if (seconds_since(start) >= spec.time_cap_s) {
          t.stopped_by_cap = true;
          break;
        }
      }
      if (std::chrono::duration<double>(Clock::now() - last_beat).count() > 0.5) {
        emit_.send({{"event", "heartbeat"}});
        last_beat = Clock::now();
      }
    }
    t.phase_s = seconds_since(start);
    t.samples = static_cast<int>(times.size());
    t.median_s = median(times);
    t.min_s = *std::min_element(times.begin(), times.end());
    t.event_median_s = median(events);
    t.wall_median_s = median(walls);
    return t;
  }

  bool agent_;
  bool under_tool_ = false;  // under a tool host (--keep-net): NVTX ranges, ncu's lock folder
  std::string tool_scratch_;
  Emitter emit_;
  int out_fd_;
  int slots_fd_;
  SharedSlots slots_;
  SharedSlots arena_;                  // resident: the timed calls' inputs (owner: made; user: mapped)
  std::vector<ArenaPhase> arena_phases_;  // per workload: where its timed calls' inputs lie in it
  bool arena_used_ = false;            // owner: the candidate's inputs came from its arena
  void* snap_ = nullptr;               // owner: its own copy of the phase snapshots (own_slots)
  void* snap_trains_ = nullptr;        // owner: the earlier trains' snapshots (trains > 1)
  TrainSnaps train_snaps_;             // owner: where each earlier train's snapshot lies in snap_trains_
  std::set<std::size_t> snapped_;      // owner: workloads whose timed slots were snapshotted
  std::vector<std::pair<std::string, double>> go_parts_;  // owner: its go line's handling (diagnosis)
  std::map<std::size_t, double> train_fill_ref_;  // owner: the train fill's reference time (class 3)
  void* staging_ = nullptr;  // pinned, host path (make_staging)
  std::uint64_t staging_bytes_ = 0;
  Nvml nvml_;
  LaunchRecorder launches_;
  Gpu gpu_;
  DeviceInfo device_;
  // One CSR part (row_ptr or col_idx) of the structure made from `csr_seed`, copied to `into`.
  void upload_csr_part(const WireArg& arg, void* into, std::uint64_t csr_seed) {
    const CsrStructure& csr = csr_for(arg.gen, csr_seed);
    const auto& part = arg.gen.dist == Dist::csr_row_ptr ? csr.row_ptr : csr.col_idx;
    if (part.size() != arg.count) throw Stop{Outcome::bad_job, "csr part size does not match the argument"};
    RUNNER_CUDA(cudaMemcpy(into, part.data(), part.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice),
                runtime_error);
  }

  // The last CSR structure built (both parts of a call and every call of a seed reuse it).
  const CsrStructure& csr_for(const Generator& g, std::uint64_t seed) {
    const bool same = csr_valid_ && csr_seed_ == seed && csr_gen_.rows == g.rows && csr_gen_.cols == g.cols &&
                      csr_gen_.nnz == g.nnz && csr_gen_.max_row == g.max_row && csr_gen_.pattern == g.pattern &&
                      csr_gen_.a == g.a;
    if (!same) {
      csr_valid_ = false;
      try {
        auto beat = Clock::now();
        csr_ = make_csr(g, seed, [&] {  // a large structure takes seconds: stay within the silence limit
          if (std::chrono::duration<double>(Clock::now() - beat).count() > 0.5) {
            emit_.send({{"event", "heartbeat"}});
            beat = Clock::now();
          }
        });
      } catch (const WireError& e) {
        throw Stop{Outcome::bad_job, e.what()};
      }
      csr_gen_ = g;
      csr_seed_ = seed;
      csr_valid_ = true;
    }
    return csr_;
  }

  Job job_;
  CsrStructure csr_;
  Generator csr_gen_;
  std::uint64_t csr_seed_ = 0;
  bool csr_valid_ = false;
  Layout layout_;
  RunnerResult result_;
  void (*entry_)() = nullptr;
  void (*oracle_entry_)() = nullptr;             // the job's replay oracle (Job::oracle_so_path), or none
  std::map<std::string, void (*)()> oracles_;    // oracles loaded by this process, kept loaded
  std::set<std::string> baseline_threads_;
  // A staying owner (Job::stay): the job's library and descriptors, let go of between jobs.
  void* lib_ = nullptr;
  int so_fd_ = -1, so_load_fd_ = -1;
  int jobs_done_ = 0;
  std::map<std::string, double> fill_ref_known_;  // a staying owner's train fill references, per shape
};

}  // namespace
}  // namespace d2k::runner

namespace {
// --mode probe: lists the visible GPUs (the server never initialises CUDA itself).
int probe(int result_fd) {
  d2k::runner::Emitter emit(result_fd);
  nlohmann::json devices = nlohmann::json::array();
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) count = 0;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, i);
    d2k::runner::DeviceInfo d;
    d.name = prop.name;
    d.pci_bus_id = bus;
    d.sm_count = prop.multiProcessorCount;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.memory_bytes = prop.totalGlobalMem;
    d.l2_bytes = static_cast<std::uint64_t>(prop.l2CacheSize);
    cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&d.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    cudaDriverGetVersion(&d.cuda_driver_version);
    cudaRuntimeGetVersion(&d.runtime_version);
    d2k::runner::Nvml nvml;
    d.nvml = nvml.open(bus);
    d.driver = nvml.driver_version();
    devices.push_back(to_json(d));
  }
  emit.send({{"event", "probe"}, {"devices", devices},
             {"error", rc == cudaSuccess ? "" : std::string(cudaGetErrorString(rc))}});
  return 0;
}

// --mode bandwidth: the device-to-device copy bandwidth of the one visible GPU (the speed of
// light of memory-bound kernels): cudaMemcpyAsync of 2 GiB, median of 15 copies timed with events,
// bytes read + written per second.
int bandwidth(int result_fd) {
  d2k::runner::Emitter emit(result_fd);
  constexpr std::uint64_t kBytes = 2ull << 30;
  constexpr int kSamples = 15;
  void* src = nullptr;
  void* dst = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<double> times;
  std::string error;
  auto check = [&](cudaError_t rc, const char* what) {
    if (rc != cudaSuccess && error.empty()) error = std::string(what) + ": " + cudaGetErrorString(rc);
    return error.empty();
  };
  if (check(cudaSetDevice(0), "cudaSetDevice") && check(cudaMalloc(&src, kBytes), "cudaMalloc") &&
      check(cudaMalloc(&dst, kBytes), "cudaMalloc") && check(cudaMemset(src, 0x5A, kBytes), "cudaMemset") &&
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") &&
      check(cudaEventCreate(&e0), "cudaEventCreate") && check(cudaEventCreate(&e1), "cudaEventCreate")) {
    for (int i = 0; i < kSamples + 2 && error.empty(); ++i) {
      check(cudaEventRecord(e0, stream), "cudaEventRecord");
      check(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
      check(cudaEventRecord(e1, stream), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      if (i >= 2) times.push_back(ms * 1e-3);  // two warm-up copies
    }
  }
  nlohmann::json ev = {{"event", "bandwidth"}, {"copy_bytes", kBytes}};
  if (!error.empty() || times.empty()) {
    ev["error"] = error.empty() ? "no samples" : error;
  } else {
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    ev["samples"] = times.size();
    ev["median_s"] = med;
    ev["min_s"] = times.front();
    ev["bytes_per_s"] = 2.0 * static_cast<double>(kBytes) / med;
  }
  emit.send(ev);
  return error.empty() ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  // --mode tool-host -- TOOL ARGS...: a GPU tool's host (sandbox/runner/tool_host.hpp, issue 20).
  if (argc > 3 && std::strcmp(argv[1], "--mode") == 0 && std::strcmp(argv[2], "tool-host") == 0 &&
      std::strcmp(argv[3], "--") == 0)
    return d2k::runner::tool_host_main(argc - 4, argv + 4);
  bool agent = false, isolate = false, mode_given = false, probe_mode = false, bandwidth_mode = false;
  bool keep_net = false;  // under tool-host: its namespaces (user, mount, loopback-only network, PID)
  int result_fd = 3, out_fd = 4, slots_fd = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      const std::string m = argv[++i];
      if (m != "agent" && m != "trusted" && m != "probe" && m != "bandwidth") break;
      agent = m == "agent";
      probe_mode = m == "probe";
      bandwidth_mode = m == "bandwidth";
      mode_given = true;
    } else if (a == "--isolate") {
      isolate = true;
    } else if (a == "--keep-net") {
      keep_net = true;
    } else if (a == "--result-fd" && i + 1 < argc) {
      result_fd = std::atoi(argv[++i]);
    } else if (a == "--out-fd" && i + 1 < argc) {
      out_fd = std::atoi(argv[++i]);
    } else if (a == "--slots-fd" && i + 1 < argc) {
      slots_fd = std::atoi(argv[++i]);
    } else {
      mode_given = false;
      break;
    }
  }
  if (!mode_given) {
    std::fprintf(stderr, "usage: d2k-runner --mode agent|trusted|probe|bandwidth [--isolate] [--result-fd N] [--out-fd N] [--slots-fd N]\n");
    return 64;
  }
  if (fcntl(result_fd, F_GETFD) < 0) {
    std::fprintf(stderr, "d2k-runner: result fd %d is not open\n", result_fd);
    return 64;
  }
  if (fcntl(out_fd, F_GETFD) < 0) out_fd = -1;
  if (fcntl(slots_fd, F_GETFD) < 0) slots_fd = -1;
  signal(SIGPIPE, SIG_IGN);
  if (probe_mode) _exit(probe(result_fd));
  if (bandwidth_mode) _exit(bandwidth(result_fd));
  d2k::runner::Runner runner(agent, result_fd, out_fd, slots_fd);
  const int rc = runner.run(isolate, keep_net);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(rc);  // skip the loaded code's static destructors and atexit handlers
}
