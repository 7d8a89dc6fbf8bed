// The profile and sanitize parsers on the output formats of ncu (--csv --page raw --print-units
// base) and of compute-sanitizer's four tools, as their versions print them; the fixed command
// lines; the tool host's namespace (CPU only: no GPU needed).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "sandbox/runner/confine.hpp"
#include "sandbox/runner/tool_host.hpp"
#include "sandbox/tools/gpu_tool.hpp"
#include "tasks/loader/task.hpp"
#include "skip.hpp"

namespace fs = std::filesystem;
using namespace d2k;
using nlohmann::json;

namespace {

// `ncu --csv --page raw --print-units base` with a runner kernel, two agent launches and the
// section metrics the curation reads (a subset of the real ~200 columns; order as ncu prints).
const char* kNcuCsv =
    "==PROF== Connected to process 4242 (/opt/d2k/libexec/d2k/d2k-runner)\n"
    "==PROF== Profiling \"generate_kernel\" - 0: 0%....50%....100% - 9 passes\n"
    "==PROF== Disconnected from process 4242\n"
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\","
    "\"Device\",\"CC\",\"dram__bytes_read.sum\",\"dram__bytes_write.sum\",\"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed\",\"gpu__time_duration.sum\",\"l1tex__t_sector_hit_rate.pct\","
    "\"launch__occupancy_limit_blocks\",\"launch__occupancy_limit_registers\",\"launch__occupancy_limit_shared_mem\","
    "\"launch__occupancy_limit_warps\",\"launch__registers_per_thread\",\"launch__shared_mem_per_block_static\","
    "\"lts__t_sector_hit_rate.pct\",\"lts__throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"sm__inst_executed_pipe_fma_cycles_active.avg.pct_of_peak_sustained_active\","
    "\"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active\",\"sm__throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"sm__warps_active.avg.pct_of_peak_sustained_active\",\"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio\","
    "\"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio\",\"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio\"\n"
    "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"byte\",\"byte\",\"%\",\"%\",\"nsecond\",\"%\",\"block\",\"block\",\"block\","
    "\"block\",\"register/thread\",\"byte/block\",\"%\",\"%\",\"%\",\"%\",\"%\",\"%\",\"\",\"\",\"\"\n"
    "\"0\",\"4242\",\"d2k-runner\",\"127.0.0.1\",\"void d2k::runner::(anonymous namespace)::generate_kernel<float>(float *, unsigned long, int, double, double, unsigned long)\","
    "\"1\",\"7\",\"(256, 1, 1)\",\"(4096, 1, 1)\",\"0\",\"9.0\",\"0\",\"4,194,304\",\"80.1\",\"80.1\",\"1,500\",\"0\",\"32\",\"8\",\"32\",\"8\",\"16\",\"0\","
    "\"50\",\"40\",\"10\",\"0\",\"30\",\"90\",\"0.1\",\"0.2\",\"0.3\"\n"
    "\"1\",\"4242\",\"d2k-runner\",\"127.0.0.1\",\"add_kernel(const float *, const float *, float *, int)\",\"1\",\"7\","
    "\"(256, 1, 1)\",\"(65536, 1, 1)\",\"0\",\"9.0\",\"134,217,728\",\"67,108,864\",\"91.5\",\"91.2\",\"48,000\",\"0\",\"32\",\"10\","
    "\"32\",\"8\",\"12\",\"0\",\"33.3\",\"60.2\",\"3.5\",\"0\",\"12.25\",\"85.5\",\"0.01\",\"17.5\",\"1.25\"\n"
    "\"2\",\"4242\",\"d2k-runner\",\"127.0.0.1\",\"add_kernel(const float *, const float *, float *, int)\",\"1\",\"7\","
    "\"(256, 1, 1)\",\"(65536, 1, 1)\",\"0\",\"9.0\",\"100\",\"50\",\"91.5\",\"91.2\",\"2,000\",\"0\",\"32\",\"6\","
    "\"6\",\"8\",\"12\",\"0\",\"33.3\",\"60.2\",\"3.5\",\"0\",\"12.25\",\"85.5\",\"0.01\",\"17.5\",\"1.25\"\n";

}  // namespace

TEST_CASE("ncu's raw CSV: quoted fields with commas, units, thousands separators", "[tools][profile]") {
  CHECK(tools::split_csv_line(R"("a","b, c","d ""q""",e)") == std::vector<std::string>{"a", "b, c", "d \"q\"", "e"});
  CHECK(tools::parse_ncu_number("134,217,728") == 134217728.0);
  CHECK(tools::parse_ncu_number(" 12.25 ") == 12.25);
  CHECK_FALSE(tools::parse_ncu_number("n/a"));
  CHECK_FALSE(tools::parse_ncu_number(""));
  const auto t = tools::parse_ncu_csv(kNcuCsv);
  CHECK(t.columns.size() == 32);
  CHECK(t.units.size() == 32);
  CHECK(t.rows.size() == 3);
  CHECK(t.messages.size() == 3);
}

TEST_CASE("curate_profile: the agent's launches only, per-section numbers, the limiter, stalls, bytes vs the task", "[tools][profile]") {
  tools::ProfileContext ctx;
  ctx.task_bytes = 3.0 * 4 * (1 << 24);  // 201,326,592: a, b read, c written
  ctx.max_launches = 1;
  const json p = tools::curate_profile(tools::parse_ncu_csv(kNcuCsv), ctx);
  INFO(p.dump(2));
  CHECK(p["launches_total"] == 2);         // the runner's generate_kernel is not the agent's
  CHECK(p["truncated"] == true);           // capped at one launch in the reply
  REQUIRE(p["launches"].size() == 1);
  const json& l = p["launches"][0];
  CHECK(l["kernel"] == "add_kernel(const float *, const float *, float *, int)");
  CHECK(l["duration_s"].get<double>() == Approx(48e-6));
  CHECK(l["speed_of_light"]["dram_pct"] == 91.2);
  CHECK(l["speed_of_light"]["sm_pct"] == 12.25);
  CHECK(l["memory"]["l2_hit_pct"] == 33.3);
  CHECK(l["memory"]["dram_read_bytes"] == 134217728.0);
  CHECK(l["occupancy"]["achieved_pct"] == 85.5);
  CHECK(l["occupancy"]["limiter"] == json::array({"warps"}));
  CHECK(l["compute"]["tensor_pipe_pct"] == 0.0);
  CHECK(l["compute"]["top_pipes_pct"]["fma"] == 3.5);
  REQUIRE(l["warp_stalls"].size() == 3);
  CHECK(l["warp_stalls"][0]["reason"] == "long_scoreboard");
  CHECK(l["launch"]["registers_per_thread"] == 12.0);
  // The call: both agent launches summed.
  CHECK(p["call"]["duration_s"].get<double>() == Approx(50e-6));
  CHECK(p["call"]["dram_bytes"].get<double>() == Approx(134217728.0 + 67108864.0 + 150));
  CHECK(p["call"]["bytes_vs_task"].get<double>() == Approx((201326592.0 + 150) / 201326592.0));

  // Only the sections asked for.
  ctx.sections = {"occupancy"};
  const json o = tools::curate_profile(tools::parse_ncu_csv(kNcuCsv), ctx);
  CHECK(o["launches"][0].contains("occupancy"));
  CHECK_FALSE(o["launches"][0].contains("speed_of_light"));
  CHECK_FALSE(o["launches"][0].contains("warp_stalls"));
}

TEST_CASE("profile sections come from a fixed list; ncu's command line is ours", "[tools][profile]") {
  CHECK(tools::validate_sections({"memory", "memory", "occupancy"}) == std::vector<std::string>{"memory", "occupancy"});
  CHECK_THROWS_WITH(tools::validate_sections({"--metrics"}), Catch::Contains("unknown profile section '--metrics'"));
  const auto a = tools::ncu_arguments({"memory"}, "/tmp/x.csv", 64);
  auto has = [&](const std::string& s) { return std::find(a.begin(), a.end(), s) != a.end(); };
  CHECK(has("MemoryWorkloadAnalysis"));
  CHECK_FALSE(has("SpeedOfLight"));
  CHECK(has("none"));  // --clock-control none: the card as it runs
  CHECK(has("application-only"));
  // Only the agent's kernels: the runner's NVTX range around each call of the entry point.
  CHECK(has("--nvtx"));
  const auto inc = std::find(a.begin(), a.end(), "--nvtx-include");
  REQUIRE(inc != a.end());
  REQUIRE(inc + 1 != a.end());
  CHECK(*(inc + 1) == std::string(d2k::runner::kAgentNvtxRange) + "/");
}

TEST_CASE("durations are seconds whatever unit row ncu prints: base (nanoseconds), short names, none", "[tools][profile]") {
  tools::ProfileContext ctx;
  ctx.task_bytes = 12e6;
  const std::string header = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__bytes_read.sum\"\n";
  const std::string row = "\"0\",\"add2_kernel\",\"5,090\",\"8,006,912\"\n";
  for (const std::string& units : {std::string("\"\",\"\",\"nsecond\",\"byte\"\n"),
                                   std::string("\"\",\"\",\"ns\",\"B\"\n"), std::string()}) {
    const json p = tools::curate_profile(tools::parse_ncu_csv(header + units + row), ctx);
    INFO(units);
    REQUIRE(p["launches"].size() == 1);
    CHECK(p["launches"][0]["duration_s"].get<double>() == Approx(5.09e-6));
    CHECK(p["call"]["dram_bytes"].get<double>() == Approx(8006912.0));
  }
  // A microsecond unit row is honoured.
  const json us = tools::curate_profile(tools::parse_ncu_csv(header + "\"\",\"\",\"usecond\",\"byte\"\n" + row), ctx);
  CHECK(us["launches"][0]["duration_s"].get<double>() == Approx(5.09e-3));
}

TEST_CASE("tool messages: refused system calls by name first, then the tool's errors without our paths", "[tools]") {
  const std::string text = "probe output\n==WARNING== Note: clocks\nd2k-runner: refused system call 41\n"
                           "d2k-runner: refused system call 41\nd2k-runner: refused system call 9x\n"
                           "==ERROR== Failed to open /scratch/tool-1/x\nd2k-runner: refused system call 101\n";
  const auto m = tools::tool_messages(text, "/scratch/tool-1");
  REQUIRE(m.size() == 4);
  CHECK(m[0].find("syscall 41 (socket)") != std::string::npos);  // once, by name
  CHECK(m[1].find("syscall 101 (ptrace)") != std::string::npos);
  CHECK(m[2] == "==WARNING== Note: clocks");
  CHECK(m[3] == "==ERROR== Failed to open …/x");
}

TEST_CASE("memcheck reports in the formats of several compute-sanitizer versions fold into typed findings", "[tools][sanitize]") {
  const std::string text =
      "========= COMPUTE-SANITIZER\n"
      "========= Invalid __global__ write of size 4 bytes\n"
      "=========     at oob_kernel(float *, int)+0x70 in /job/src/kernel.cu:12\n"
      "=========     by thread (255,0,0) in block (3,0,0)\n"
      "=========     Access to 0x7f1a2c000400 is out of bounds\n"
      "=========     and is 1 bytes after the nearest allocation at 0x7f1a2c000000 of size 1024 bytes\n"
      "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
      "=========         Host Frame: [0x2ee7a0] in libcuda.so.1\n"
      "=========         Host Frame: run in /job/src/kernel.cu:30 [0x1234] in kernel.so\n"
      "=========\n"
      "========= Invalid __global__ write of size 4 bytes\n"
      "=========     at oob_kernel(float *, int)+0x70 in /job/src/kernel.cu:12\n"
      "=========     by thread (0,0,0) in block (4,0,0)\n"
      "=========     Access to 0x7f1a2c000800 is out of bounds\n"
      "=========\n"
      "========= Invalid __shared__ read of size 16 bytes\n"
      "=========     at 0x00000230 in /tmp/build/kernels.cu:57:tile_kernel(float const*, float*)\n"
      "=========     by thread (1,0,0) in block (0,0,0)\n"
      "=========     Address 0x00000ffc is misaligned\n"
      "=========\n"
      "========= Program hit cudaErrorLaunchFailure (error 719) due to \"unspecified launch failure\" on CUDA API call to cudaStreamSynchronize.\n"
      "=========\n"
      "the runner's own line, not the tool's\n"
      "========= ERROR SUMMARY: 4 errors\n";
  const auto rep = tools::parse_sanitizer(text);
  CHECK(rep.reported == 4);
  REQUIRE(rep.findings.size() == 3);
  const auto& a = rep.findings[0];
  CHECK(a.kind == "invalid_access");
  CHECK(a.address_space == "global");
  CHECK(a.access == "write");
  CHECK(a.size == 4);
  CHECK(a.kernel == "oob_kernel(float *, int)");
  CHECK(a.file == "src/kernel.cu");  // workspace-relative: the jail's /job/ is cut
  CHECK(a.line == 12);
  CHECK(a.count == 2);
  CHECK(a.thread == "(255,0,0)");
  CHECK(a.block == "(3,0,0)");
  CHECK(a.address == "0x7f1a2c000400 (out of bounds)");
  CHECK(a.detail.find("1 bytes after the nearest allocation") != std::string::npos);
  const auto& b = rep.findings[1];
  CHECK(b.address_space == "shared");
  CHECK(b.access == "read");
  CHECK(b.file == "kernels.cu");     // no server path: only the base name
  CHECK(b.line == 57);
  CHECK(b.kernel == "tile_kernel(float const*, float*)");
  CHECK(b.address == "0x00000ffc (misaligned)");
  CHECK(rep.findings[2].kind == "api_error");
  CHECK(rep.summary_errors == 4u);

  const json j = tools::sanitizer_to_json(rep, "memcheck", 2);
  CHECK(j["findings"].size() == 2);
  CHECK(j["truncated"] == true);
  CHECK(j["clean"] == false);
  CHECK(j["findings"][0]["count"] == 2);
  CHECK(j["findings"][0].dump().find("/job/") == std::string::npos);
}

TEST_CASE("racecheck, initcheck and synccheck records, and a clean run", "[tools][sanitize]") {
  const std::string text =
      "========= COMPUTE-SANITIZER\n"
      "========= Error: Race reported between Write access at reduce_kernel(float *)+0x1b0 in red.cu:20\n"
      "=========     and Read access at reduce_kernel(float *)+0x220 in red.cu:22 [1024 hazards]\n"
      "=========\n"
      "========= Uninitialized __global__ memory read of size 4 bytes\n"
      "=========     at 0x70 in /job/init.cu:5:read_kernel(float*)\n"
      "=========     by thread (0,0,0) in block (0,0,0)\n"
      "=========     Address 0x7f0000000000\n"
      "=========\n"
      "========= Barrier error detected. Divergent thread(s) in warp\n"
      "=========     at sync_kernel(int *)+0x90 in sync.cu:9\n"
      "=========     by thread (0,0,0) in block (0,0,0)\n"
      "=========\n"
      "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n";
  const auto rep = tools::parse_sanitizer(text);
  REQUIRE(rep.findings.size() == 3);
  CHECK(rep.findings[0].kind == "race");
  CHECK(rep.findings[0].access == "Write/Read");
  CHECK(rep.findings[0].file == "red.cu");
  CHECK(rep.findings[0].line == 20);
  CHECK(rep.findings[1].kind == "uninitialized_access");
  CHECK(rep.findings[1].file == "init.cu");
  CHECK(rep.findings[2].kind == "barrier_error");
  CHECK(rep.findings[2].line == 9);

  const auto clean = tools::parse_sanitizer("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n");
  CHECK(clean.findings.empty());
  CHECK(tools::sanitizer_to_json(clean, "memcheck", 20)["clean"] == true);
  CHECK(tools::is_sanitizer_tool("synccheck"));
  CHECK_FALSE(tools::is_sanitizer_tool("--tool"));
}

TEST_CASE("counter permission is read from the driver's parameters", "[tools][profile]") {
  const fs::path p = fs::temp_directory_path() / ("d2k-params-" + std::to_string(::getpid()));
  std::ofstream(p) << "ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n";
  CHECK(tools::counters_open_to_all(p) == false);
  std::ofstream(p) << "RmProfilingAdminOnly: 0\n";
  CHECK(tools::counters_open_to_all(p) == true);
  std::ofstream(p) << "nothing\n";
  CHECK_FALSE(tools::counters_open_to_all(p).has_value());
  fs::remove(p);
}

namespace {

// Runs `cmd` through /bin/sh with its output (stdout and stderr) in a file; returns {status, output}.
std::pair<int, std::string> shell(const std::string& cmd) {
  const fs::path out = fs::temp_directory_path() / ("d2k-toolhost-" + std::to_string(::getpid()));
  const int rc = std::system(("{ " + cmd + "; } > \"" + out.string() + "\" 2>&1").c_str());
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  fs::remove(out);
  return {rc, text};
}

}  // namespace

TEST_CASE("the tool host: the runner's user and mount namespaces, loopback-only network, no PID namespace, "
          "only CAP_SYS_ADMIN and CAP_SETPCAP passed down, no_new_privs", "[tools][host]") {
  if (::geteuid() != 0 && !fs::exists("/proc/sys/kernel/unprivileged_userns_clone")) {
    test::skip("user namespaces need root here");
    return;
  }
  const auto [rc, text] = shell(std::string("\"") + D2K_RUNNER + "\" --mode tool-host -- /bin/sh -c "
                                "'echo PID $$; echo IF $(tail -n +3 /proc/self/net/dev | cut -d: -f1); "
                                "grep -E \"^(NoNewPrivs|CapAmb|CapEff|CapBnd)\" /proc/self/status; "
                                "grep -c \" shared:\" /proc/self/mountinfo; cat /proc/self/uid_map'");
  INFO(text);
  REQUIRE(rc == 0);  // 70..73: a step failed (the reason is in the text)
  CHECK(text.find("IF lo\n") != std::string::npos);  // loopback and nothing else
  // No PID namespace: CUDA start-up fails in one under ncu and compute-sanitizer (the H200).
  CHECK(text.find("PID 1\n") == std::string::npos);
  CHECK(text.find("NoNewPrivs:\t1") != std::string::npos);
  // CAP_SYS_ADMIN (bit 21, the runner's mounts) and CAP_SETPCAP (bit 8, its bounding-set drop) of
  // the tool host's user namespace; no other.
  CHECK(text.find("CapAmb:\t0000000000200100") != std::string::npos);
  CHECK(text.find("CapEff:\t0000000000200100") != std::string::npos);
  CHECK(text.find("CapBnd:\t0000000000200100") != std::string::npos);
  CHECK(text.find("\n0\n") != std::string::npos);  // no shared mount: nothing propagates out
  std::istringstream map(text.substr(text.rfind('\n', text.size() - 2) + 1));
  long inside = -1, outside = -1, count = 0;
  map >> inside >> outside >> count;
  CHECK(inside == 1000);  // the runner's uid (confine.hpp kInsideUid), never 0 inside
  CHECK(outside == static_cast<long>(::getuid()));
  CHECK(count == 1);
}

TEST_CASE("the tool host mounts a small tmpfs on the scratch folder it is given (ncu's lock folder), seen by the tool",
          "[tools][host]") {
  if (::geteuid() != 0 && !fs::exists("/proc/sys/kernel/unprivileged_userns_clone")) {
    test::skip("user namespaces need root here");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("d2k-scratch-host-" + std::to_string(::getpid()));
  fs::create_directories(dir / "nvidia");
  const auto [rc, text] = shell(std::string(d2k::runner::kToolScratchEnv) + "=" + (dir / "nvidia").string() + " \"" +
                                D2K_RUNNER + "\" --mode tool-host -- /bin/sh -c "
                                "'grep \" $" + d2k::runner::kToolScratchEnv + " \" /proc/self/mountinfo; "
                                "mkdir -p $" + d2k::runner::kToolScratchEnv + "/nsight_compute && "
                                "touch $" + d2k::runner::kToolScratchEnv + "/nsight_compute/lock && echo LOCK OK; "
                                "head -c 2000000 /dev/zero > $" + d2k::runner::kToolScratchEnv + "/big || echo FULL'");
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(text.find(" - tmpfs d2k-tool-scratch ") != std::string::npos);
  CHECK(text.find("size=1024k") != std::string::npos);
  CHECK(text.find("nosuid,nodev,noexec") != std::string::npos);
  CHECK(text.find("LOCK OK") != std::string::npos);
  CHECK(text.find("FULL") != std::string::npos);  // 1 MiB, no more
  CHECK(fs::is_empty(dir / "nvidia"));             // nothing lands in the real folder
  fs::remove_all(dir);
}

// The H200, 2026-12-01: under ncu the agent runner exited with code 2 before reporting. ncu's
// injection library, preloaded into the runner, starts a thread before main, and the runner's own
// unshare(CLONE_NEWUSER) refuses a multi-threaded process. A preloaded library that starts a thread
// shows it here without a GPU: on its own the runner fails its namespace step; under the tool host
// it adopts the host's namespaces and goes on to CUDA start-up (ready on a GPU, a CUDA error here).
TEST_CASE("an agent runner made multi-threaded before main (a tool's injection) still confines itself under the tool host",
          "[tools][host]") {
  if (::geteuid() != 0 && !fs::exists("/proc/sys/kernel/unprivileged_userns_clone")) {
    test::skip("user namespaces need root here");
    return;
  }
  const std::string runner = std::string("\"") + D2K_RUNNER + "\"";
  const std::string preload = std::string("LD_PRELOAD=\"") + D2K_THREAD_PRELOAD + "\"";
  // Alone, as before the fix: the stand-in injection breaks the runner's own namespace step.
  const auto [alone_rc, alone] = shell(preload + " " + runner + " --mode agent --isolate --result-fd 3 3>&1 </dev/null");
  INFO(alone);
  CHECK(alone.find("\"status\":\"setup_error\"") != std::string::npos);
  CHECK(alone.find("unshare: Invalid argument") != std::string::npos);

  // Under the tool host (`sh` as the tool, preloading the stand-in as ncu preloads its injection).
  const auto [rc, text] = shell(runner + " --mode tool-host -- /bin/sh -c '" + preload + " exec " + runner +
                                " --mode agent --isolate --keep-net --result-fd 3 3>&1 </dev/null'");
  INFO(text);
  CHECK(text.find("unshare") == std::string::npos);
  CHECK(text.find("tool host's namespace") == std::string::npos);
  CHECK(text.find("mount") == std::string::npos);
  // Past the namespaces: CUDA start-up (ready with a GPU, then "no job on stdin"; a CUDA error without).
  const bool ready = text.find("\"event\":\"ready\"") != std::string::npos;
  const bool cuda_error = text.find("\"message\":\"cuda") != std::string::npos;
  CHECK((ready || cuda_error));

  // The runner checks the namespaces it adopts: outside a tool host, --keep-net is refused.
  const auto [plain_rc, plain] = shell(runner + " --mode agent --isolate --keep-net --result-fd 3 3>&1 </dev/null");
  INFO(plain);
  CHECK(plain.find("not in the tool host's namespaces") != std::string::npos);
}

TEST_CASE("maps_only: exactly one id, the runner's, mapped", "[tools][host]") {
  CHECK(runner::maps_only("      1000          0          1\n", 1000));
  CHECK(runner::maps_only("1000 4242 1", 1000));
  CHECK_FALSE(runner::maps_only("         0          0 4294967295\n", 1000));  // the initial namespace
  CHECK_FALSE(runner::maps_only("1000 0 2\n", 1000));
  CHECK_FALSE(runner::maps_only("1000 0 1\n1001 5 1\n", 1000));
  CHECK_FALSE(runner::maps_only("", 1000));
}

namespace {

// A stand-in for compute-sanitizer: speaks the runner's wire on fd 3 (ready, then the result once
// the job line arrived), writes a memcheck report to its --log-file, or hangs (MODE=hang) with a
// grandchild in a process group of its own.
const char* kFakeTool = R"(#!/bin/sh
log=""
while [ $# -gt 0 ]; do case "$1" in --log-file) log="$2"; shift 2;; *) shift;; esac; done
echo '{"event":"ready","device":{},"init_s":0}' >&3
read job
if [ -f "$(dirname "$0")/noresult" ]; then
  echo "==ERROR== The application returned an error code (2)."
  exit 0
fi
if [ -f "$(dirname "$0")/hang" ]; then
  setsid sh -c "readlink /proc/self > '$(dirname "$0")/grandchild.pid'; exec sleep 1000" &
  sleep 1000
fi
cat > "$log" <<'REPORT'
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob(float *)+0x70 in /job/kernel.cu:9
=========     by thread (3,0,0) in block (0,0,0)
=========     Access to 0x7f0000000400 is out of bounds
=========
========= ERROR SUMMARY: 1 error
REPORT
echo '{"event":"result","status":"runtime_error","message":"an illegal memory access was encountered"}' >&3
)";

}  // namespace

TEST_CASE("run_gpu_tool end to end with a stand-in tool: the wire, the log, the typed result, the deadline kills the tree", "[tools][host]") {
  if (::geteuid() != 0) {
    test::skip("the tool host's namespaces need root here");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("d2k-faketool-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path tool = dir / "compute-sanitizer";
  std::ofstream(tool) << kFakeTool;
  fs::permissions(tool, fs::perms::owner_all);
  const tasks::Task task = tasks::load_task(std::string(D2K_TASKS_DIR) + "/vector_add");
  std::ofstream(dir / "kernel.so") << "not looked at by the stand-in";

  tools::GpuToolConfig c;
  c.runner = D2K_RUNNER;
  c.compute_sanitizer = tool;
  c.scratch_dir = dir / "scratch";
  c.deadline_s = 20;
  tools::GpuToolRequest r;
  r.kind = tools::GpuToolKind::sanitize;
  r.task = &task;
  r.so_path = dir / "kernel.so";
  const auto ok = tools::run_gpu_tool(c, r);
  INFO(ok.message << "\n" << ok.result.dump(2));
  REQUIRE(ok.status == sandbox::Outcome::ok);
  CHECK(ok.result["workload"] == "odd_1m");
  CHECK(ok.result["kernel_status"] == "runtime_error");
  REQUIRE(ok.result["findings"].size() == 1);
  CHECK(ok.result["findings"][0]["file"] == "kernel.cu");
  CHECK(ok.result["findings"][0]["line"] == 9);
  CHECK(fs::is_empty(c.scratch_dir));  // the tool's private folder is gone

  // The tool's front end sees the runner's masks: a scratch folder under a hidden path is refused.
  tools::GpuToolConfig under = c;
  under.hidden_paths = {dir};
  const auto refused = tools::run_gpu_tool(under, r);
  CHECK(refused.status == sandbox::Outcome::internal_error);
  CHECK(refused.message.find("lies under the hidden path") != std::string::npos);

  // Missing tool, unknown options: typed before anything runs.
  tools::GpuToolConfig none = c;
  none.compute_sanitizer.clear();
  CHECK(tools::run_gpu_tool(none, r).unavailable);
  tools::GpuToolRequest bad = r;
  bad.sanitizer_tool = "--save";
  CHECK(tools::run_gpu_tool(c, bad).status == sandbox::Outcome::bad_request);

  // The runner under the tool never reports, the tool exits 0 (seen with ncu on the H200): typed, not ok.
  std::ofstream(dir / "noresult") << "";
  const auto silent = tools::run_gpu_tool(c, r);
  INFO(silent.message);
  CHECK(silent.status == sandbox::Outcome::runtime_error);
  CHECK(silent.message.find("before the runner reported") != std::string::npos);
  fs::remove(dir / "noresult");

  // A tool that hangs: timeout at the deadline, and nothing of it left behind, not even a
  // grandchild in a session of its own (killed by the sweep of the tool host's network namespace).
  std::ofstream(dir / "hang") << "";
  c.deadline_s = 3;
  const auto hung = tools::run_gpu_tool(c, r);
  CHECK(hung.status == sandbox::Outcome::timeout);
  std::string pid;
  std::ifstream(dir / "grandchild.pid") >> pid;
  REQUIRE_FALSE(pid.empty());
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {  // killed, then reaped by its new parent
    gone = !fs::exists("/proc/" + pid + "/status");
    if (!gone) ::usleep(50000);
  }
  CHECK(gone);
  fs::remove_all(dir);
}

TEST_CASE("the tools' scratch root: a private folder of this user outside the server's state", "[tools][host]") {
  const fs::path tmp = fs::temp_directory_path() / ("d2k-scratchroot-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const fs::path root = tools::tool_scratch_root(tmp);
  CHECK(root == tmp / ("d2k-tools-" + std::to_string(::getuid())));
  CHECK((fs::status(root).permissions() & fs::perms::all) == fs::perms::owner_all);
  CHECK(tools::tool_scratch_root(tmp) == root);  // again: the same folder
  fs::permissions(root, fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
  CHECK_THROWS_WITH(tools::tool_scratch_root(tmp), Catch::Contains("not a private folder"));
  fs::remove(root);
  fs::create_directory_symlink(tmp, root);  // planted by someone else: never followed
  CHECK_THROWS_WITH(tools::tool_scratch_root(tmp), Catch::Contains("not a private folder"));
  fs::remove_all(tmp);
}
