// The agent-mode runner's confinement steps, one function per step, called in order from
// runner_main.cpp (namespaces before CUDA start-up; the rest after it, before the agent's code is
// loaded). Each step throws ConfineError with what failed; the runner reports it as setup_error.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace d2k::runner {

struct ConfineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Own user namespace (kInsideUid/kInsideGid inside, mapped to our ids: never uid 0 in there),
// mount namespace (private) and an empty network namespace. The process keeps its capabilities
// in the new namespace until drop_privileges (the mount steps need them).
inline constexpr unsigned kInsideUid = 1000;
inline constexpr unsigned kInsideGid = 1000;
void enter_namespaces(bool own_network = true);  // false: under tool-host (loopback only)

// Covers each existing path the way the jail hides paths (sandbox::mask_path).
void hide_paths(const std::vector<std::string>& paths);

// The process's current virtual size (VmSize) and private writable size (VmData), 0 when unknown.
std::uint64_t vm_size_bytes();
std::uint64_t vm_data_bytes();

// Sets soft and hard limit of `resource` to `value`.
void set_limit(int resource, rlim_t value);

// The runner's rlimits before foreign code: no core files, files no larger than the outputs
// (at least 1 MiB), and (host_memory_bytes > 0) private writable memory (RLIMIT_DATA) = current
// VmData + host_memory_bytes;
// descriptors: the highest open one + kSpareFds; threads: kMaxThreads (RLIMIT_NPROC, counted in
// the runner's own user namespace; the kernel does not apply it to uid 0 outside).
inline constexpr rlim_t kSpareFds = 256;
inline constexpr rlim_t kMaxThreads = 256;
void set_agent_limits(std::uint64_t output_bytes, std::uint64_t host_memory_bytes);

// The highest open descriptor of this process (-1 when none can be read).
int highest_open_fd();

// Thread ids of this process (/proc/self/task).
std::set<std::string> all_threads();

// Threads not in `baseline`, by thread id, as "tid (name)". Names are reported, never trusted:
// any thread can rename itself (/proc/self/task/<tid>/comm).
std::set<std::string> foreign_threads(const std::set<std::string>& baseline);

// Makes CUDA start the thread that runs host callbacks (it does so lazily, on the first
// cudaLaunchHostFunc / cudaStreamAddCallback), on `stream` and the legacy default stream, so the
// thread is in the baseline taken next and an honest callback is not foreign.
void start_callback_thread(cudaStream_t stream);

// ---- Class 6: a minimal read-only file view, then no privileges --------------------------------
// What agent code may open (Landlock; checked on the file an open reaches, so /proc/<pid>/root,
// /proc/self/fd and symlinks cannot leave the view). Nothing is writable but /dev/null and the
// GPU device nodes; nothing can be created anywhere.
struct FileView {
  std::vector<std::string> read;        // directories or files: read (and map executable)
  std::vector<std::string> read_write;  // files: read and write (device nodes)
  std::vector<int> read_fds;            // already open files: read and map executable (the .so)
};
// The view for the agent: system libraries, /etc/ld.so.*, /sys, this process's own /proc entry and
// the driver's /proc files, /dev/{null,zero,random,urandom} and /dev/nvidia* (masked ones resolve
// to /dev/null), LD_LIBRARY_PATH directories, and `so_fd`.
FileView agent_file_view(int so_fd);
// Applies `view` to every later open of this process (Landlock, all threads that exist later too;
// call before CUDA's threads only matter for opens they make afterwards). Throws when Landlock is
// unavailable: the runner refuses to run agent code without it.
void restrict_files(const FileView& view);
// Drops every capability (effective, permitted, inheritable, ambient, bounding set): from here on
// the process is an unprivileged uid in its namespace (no mounts, no changes to its view).
void drop_privileges();

// ---- Class 14: a verified clean device before each job -----------------------------------------
// Device memory in use by anyone (other pool runners' contexts included) at most this much: the
// larger of 4 GiB and a tenth of the board. More means something outlived its evaluation.
std::uint64_t max_foreign_device_bytes(std::uint64_t total_bytes);
// Checks (and where it can, resets) what an earlier job could have left on the GPU: the persisting
// L2 limit and lines (reset to 0 and read back), free device memory (max_foreign_device_bytes),
// no sticky error. Throws ConfineError ("unclean device: ...") otherwise: the job is refused.
// Called before every job, agent and trusted (calibration) alike.
void check_clean_device();

// ---- Class 16: only the runner's own GPU's device node ----------------------------------------
// "Device Minor: N" from /proc/driver/nvidia/gpus/<bus id>/information; nullopt when absent.
std::optional<unsigned> parse_device_minor(const std::string& information);
// Of `nodes` (/dev/nvidiaN name → minor number), those that are not `own_minor`.
std::vector<std::string> other_gpu_nodes(const std::vector<std::pair<std::string, unsigned>>& nodes, unsigned own_minor);
// Masks every /dev/nvidiaN but the one of the GPU at `pci_bus_id` (as CUDA spells it) in the
// runner's own mount namespace (nothing is masked outside one: enter_namespaces not called).
// nvidiactl, nvidia-uvm, nvidia-uvm-tools and nvidia-modeset stay (CUDA needs them). Throws when
// several GPU nodes exist and the own one cannot be identified.
void hide_other_gpus(const std::string& pci_bus_id);

}  // namespace d2k::runner
