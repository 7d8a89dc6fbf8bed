// The agent-mode runner's confinement steps, one function per step, called in order from
// runner_main.cpp (namespaces before CUDA start-up; the rest after it, before the agent's code is
// loaded). Each step throws ConfineError with what failed; the runner reports it as setup_error.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "sandbox/runner/nvml.hpp"

namespace d2k::runner {

struct ConfineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Own user namespace (kInsideUid/kInsideGid inside, mapped to our ids: never uid 0 in there),
// mount namespace (private) and an empty network namespace. The process keeps its capabilities
// in the new namespace until drop_privileges (the mount steps need them).
inline constexpr unsigned kInsideUid = 1000;
inline constexpr unsigned kInsideGid = 1000;
void enter_namespaces(bool own_network = true);

// Under a GPU tool (tool_host.hpp): ncu's and compute-sanitizer's injection libraries are loaded
// into the runner before main (LD_PRELOAD) and start threads there, and unshare(CLONE_NEWUSER)
// refuses a multi-threaded process (EINVAL). So the tool host enters the runner's namespaces
// (user with kInsideUid mapped to the server's uid, mount private, loopback-only network) before it
// starts the tool, and passes CAP_SYS_ADMIN and CAP_SETPCAP of that user namespace down as ambient
// capabilities for the mount steps and the bounding-set drop. This checks that the process is in such a namespace (`uid_map`: exactly
// "kInsideUid <outside> 1", `gid_map` likewise) and can mount in it (makes "/" private again),
// then lets the mount steps work as after enter_namespaces. Throws ConfineError otherwise.
void adopt_tool_host_namespaces();
// Pure: whether a /proc/self/{uid,gid}_map text maps exactly one id, `inside`, to one outside.
bool maps_only(const std::string& id_map, unsigned inside);

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

// ---- Class 17: a pids cgroup per runner --------------------------------------------------------
// RLIMIT_NPROC does not bind a runner whose uid outside is 0 (a root server); a pids cgroup binds
// every uid. Where the runner's cgroup may go, from /proc/self/cgroup and /proc/self/mountinfo:
//   v2: the parent of the runner's own cgroup, when that parent hands `pids` to its children
//       (`pids` in its cgroup.subtree_control: delegated by the operator, docs/threat-model-
//       confinement.md says how) — the runner's cgroup is a sibling of the server's;
//   v1: the runner's own cgroup in a `pids` hierarchy (cgroup v1 or hybrid hosts).
// Each is a directory to create "d2k-runner-<pid>" in; v2 comes first. Pure: unit-tested.
struct PidsParent {
  std::string dir;
  std::string version;  // "v2" or "v1"
};
std::vector<PidsParent> pids_cgroup_parents(const std::string& proc_self_cgroup, const std::string& mountinfo);
// Creates "<parent>/d2k-runner-<pid>" in the first usable parent (removing empty leaves of runners
// that are gone), sets pids.max = tasks now + `extra_tasks` and moves this process into it.
// Returns the cgroup's directory, or "" when no parent is usable (the fallback: RLIMIT_NPROC,
// which binds a non-root server, and the thread census). Never throws.
std::string limit_pids(std::uint64_t extra_tasks);

// ---- Class 3: the output file and the runner's own image ---------------------------------------
// The output memfd (written with pwrite) is the one file agent code could fill with machine code
// and then map private+executable: MFD_NOEXEC_SEAL and F_SEAL_EXEC only guard execve and the mode's
// x bits (on Linux 6.18 a private PROT_EXEC mapping of such a memfd still works). Replaces `fd` by
// a write-only open of the same file (no mapping of any kind needs less than read access) and
// takes every bit but the owner's write off its mode, so reopening /proc/self/fd/N for reading
// fails once the capabilities are gone (drop_privileges); the agent gate refuses chmod.
void make_write_only(int fd);
// Seals (mseal, Linux 6.10+) the read-only and executable segments and the RELRO regions of the
// runner and of the libraries its own calls go through (the loader, libc, libm, libstdc++,
// libgcc_s, libffi, libseccomp) and the vDSO (clock_gettime): no mprotect, munmap, mremap or
// MAP_FIXED mapping over them afterwards, so agent code can neither map other bytes over that code
// nor make a GOT (or the loader's vDSO pointers) writable again. Returns the number of ranges
// sealed, 0 when the kernel has no mseal (then the gate's exec rules are the only guard). A range
// of the runner that cannot be sealed throws; one of a library is skipped.
int seal_runner_image();

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
  std::vector<std::string> scratch_dirs; // directories: read, write, create and remove beneath (only
                                         // a GPU tool's private tmpfs, runner/tool_host.hpp)
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
// `owned_bytes`: device memory the evaluation itself holds (a GPU-resident owner's output slots).
void check_clean_device(std::uint64_t owned_bytes = 0);
// The thermal half (nvml.hpp hot_reason on `read()`, Nvml::condition in the runner): waits, polling
// every 100 ms and calling `beat` about every 0.5 s (the parent's silence deadline), until the GPU
// is more than kThermalMarginC below its slowdown temperature and no heat or power slowdown holds
// its clocks down; at most `max_wait_s`, then ConfineError ("unclean device: ... still after N s").
// Returns the seconds waited. Without NVML the reading is empty and it returns at once (the
// throttle flag around the samples remains the clock check).
inline constexpr double kMaxCoolWaitS = 20;
double wait_until_cool(const std::function<DeviceCondition()>& read, double max_wait_s,
                       const std::function<void()>& beat);

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
