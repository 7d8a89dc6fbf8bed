// CPU-only tests of the GPU-resident evaluation's pieces (docs/timing-protocol.md, "GPU-resident
// outputs"): descriptor passing over the runners' slots socket, the wire's slot roles, tolerances
// and checks, and the frame order of a slot owner. The GPU half is in gpu_resident_gpu_test.cpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <tuple>

#include "catch.hpp"
#include "sandbox/eval/evaluator.hpp"
#include "sandbox/eval/frames.hpp"
#include "sandbox/eval/runner_process.hpp"
#include "sandbox/runner/fd_pass.hpp"
#include "sandbox/runner/wire.hpp"
#include "tasks/loader/task.hpp"

using namespace d2k::runner;

namespace {
const d2k::tasks::Task& vector_add() {
  static const d2k::tasks::Task t = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "vector_add");
  return t;
}
std::string code(const std::function<void()>& f) {
  try {
    f();
  } catch (const WireError& e) {
    return e.code;
  }
  return "";
}
struct Pair {
  int a = -1, b = -1;
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, &a) == 0); }
  ~Pair() {
    ::close(a);
    ::close(b);
  }
};
}  // namespace

TEST_CASE("gpu-resident: a descriptor crosses the slots socket and still names the same file", "[runner][resident]") {
  Pair p;
  const int mfd = memfd_create("slots-test", MFD_CLOEXEC);
  REQUIRE(mfd >= 0);
  REQUIRE(::write(mfd, "slots", 5) == 5);
  CHECK(send_fd(p.a, mfd) == "");
  ::close(mfd);  // the message in flight keeps the file alive
  std::string err;
  const int got = recv_fd(p.b, 1000, err);
  REQUIRE(got >= 0);
  CHECK(err.empty());
  char buf[8] = {};
  CHECK(::pread(got, buf, 5, 0) == 5);
  CHECK(std::string(buf) == "slots");
  CHECK((fcntl(got, F_GETFD) & FD_CLOEXEC) != 0);  // never leaks into a child
  ::close(got);
}

TEST_CASE("gpu-resident: recv_fd refuses a message without a descriptor, a closed peer and silence", "[runner][resident]") {
  {
    Pair p;
    REQUIRE(::send(p.a, "x", 1, 0) == 1);
    std::string err;
    CHECK(recv_fd(p.b, 1000, err) == -1);
    CHECK(err.find("without a descriptor") != std::string::npos);
  }
  {
    Pair p;
    std::string err;
    CHECK(recv_fd(p.b, 50, err) == -1);
    CHECK(err.find("in time") != std::string::npos);
    ::close(p.a);
    p.a = -1;
    CHECK(recv_fd(p.b, 1000, err) == -1);
    CHECK(err.find("closed") != std::string::npos);
  }
}

TEST_CASE("gpu-resident: slot roles, sizes and tolerances survive the wire; bad ones are typed", "[runner][resident][wire]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0]};
  Job job = make_job(vector_add(), wls, {1, 2}, "/x.so", TimingSpec{});
  CHECK(job_from_json(to_json(job)).gpu_slots == SlotsRole::none);
  job.gpu_slots = SlotsRole::owner;
  job.tolerances["f32"] = Tolerance{1e-6, 1e-5};
  Job back = job_from_json(to_json(job));
  CHECK(back.gpu_slots == SlotsRole::owner);
  REQUIRE(back.tolerances.count("f32") == 1);
  CHECK(back.tolerances["f32"].atol == 1e-6);
  CHECK(back.tolerances["f32"].rtol == 1e-5);
  job.gpu_slots = SlotsRole::user;
  job.gpu_slots_bytes = 0;
  CHECK(code([&] { job_from_json(to_json(job)); }) == "bad_job");  // a user must know what to map
  job.gpu_slots_bytes = 2ull << 20;
  CHECK(job_from_json(to_json(job)).gpu_slots_bytes == 2ull << 20);
  // Only an owner stays for another job (EvalConfig::owner_reuse); an agent runner never does.
  CHECK_FALSE(job_from_json(to_json(job)).stay);
  job.stay = true;
  CHECK(code([&] { job_from_json(to_json(job)); }) == "bad_job");
  job.gpu_slots = SlotsRole::owner;
  CHECK(job_from_json(to_json(job)).stay);
  job.gpu_slots = SlotsRole::user;
  job.stay = false;
  // Only an owner replays with an oracle (EvalConfig::replay_oracle); an agent runner's job naming
  // one is refused, so no agent-side path can load a library of the parent's choosing this way.
  CHECK(job_from_json(to_json(job)).oracle_so_path.empty());
  job.oracle_so_path = "/trusted/L3.so";
  CHECK(code([&] { job_from_json(to_json(job)); }) == "bad_job");
  job.gpu_slots = SlotsRole::owner;
  CHECK(job_from_json(to_json(job)).oracle_so_path == "/trusted/L3.so");
  job.gpu_slots = SlotsRole::user;
  job.oracle_so_path.clear();
  auto j = to_json(job);
  j["gpu_slots"] = "thief";
  CHECK(code([&] { job_from_json(j); }) == "bad_job");
  j = to_json(job);
  j["tolerances"] = {{"f32", {{"atol", -1}, {"rtol", 0}}}};
  CHECK(code([&] { job_from_json(j); }) == "bad_job");
}

TEST_CASE("gpu-resident: an owner's checks travel in its result, non-finite values included", "[runner][resident][wire]") {
  RunnerResult r;
  WorkloadResult w;
  w.name = "odd_1m";
  TensorCheck c;
  c.seed_index = -3;
  c.count = 100;
  c.mismatches = 2;
  c.nonfinite = 1;
  c.max_abs = INFINITY;
  c.max_rel = 0.5;
  c.first_bad = 7;
  c.first_bad_got = std::nan("");
  c.first_bad_want = 1.25;
  c.arg_index = 2;
  w.checks.push_back(c);
  r.workloads.push_back(w);
  const RunnerResult back = result_from_json(to_json(r));
  REQUIRE(back.workloads.size() == 1);
  REQUIRE(back.workloads[0].checks.size() == 1);
  const TensorCheck& b = back.workloads[0].checks[0];
  CHECK(b.seed_index == -3);
  CHECK(b.count == 100);
  CHECK(b.mismatches == 2);
  CHECK(b.nonfinite == 1);
  CHECK(std::isinf(b.max_abs));
  CHECK(b.max_rel == 0.5);
  CHECK(b.first_bad == 7);
  CHECK(std::isnan(b.first_bad_got));
  CHECK(b.first_bad_want == 1.25);
  CHECK(b.arg_index == 2);
  CHECK_FALSE(b.ok());
  // Counts that cannot be are refused.
  auto j = to_json(r);
  j["workloads"][0]["checks"][0]["mismatches"] = 101;
  CHECK(code([&] { result_from_json(j); }) == "bad_result");
  j = to_json(r);
  j["workloads"][0]["checks"][0]["max_abs"] = "lots";
  CHECK(code([&] { result_from_json(j); }) == "bad_result");
}

TEST_CASE("gpu-resident: the owner replay's parts travel in its result, and malformed ones are refused",
          "[runner][resident]") {
  RunnerResult r;
  WorkloadResult w;
  w.name = "pow2_64m";
  w.replay_parts = {{"alloc", 0.0015}, {"calls", 0.0487}, {"checks", 0.0063}};
  r.workloads.push_back(w);
  const RunnerResult back = result_from_json(to_json(r));
  REQUIRE(back.workloads.size() == 1);
  REQUIRE(back.workloads[0].replay_parts.size() == 3);
  CHECK(back.workloads[0].replay_parts[1].first == "calls");
  CHECK(back.workloads[0].replay_parts[1].second == 0.0487);
  CHECK(result_from_json(to_json(RunnerResult{})).workloads.empty());
  // A part that is not [name, seconds], a negative or non-finite time, too many parts: bad_result.
  for (const nlohmann::json& bad : {nlohmann::json::array({nlohmann::json::array({"calls"})}),
                                    nlohmann::json::array({nlohmann::json::array({"calls", -1.0})}),
                                    nlohmann::json::array({nlohmann::json::array({7, 1.0})}),
                                    nlohmann::json::object({{"calls", 1.0}})}) {
    auto j = to_json(r);
    j["workloads"][0]["replay_parts"] = bad;
    CHECK(code([&] { result_from_json(j); }) == "bad_result");
  }
  auto j = to_json(r);
  j["workloads"][0]["replay_parts"] = nlohmann::json::array();
  for (int i = 0; i < 17; ++i) j["workloads"][0]["replay_parts"].push_back(nlohmann::json::array({"p", 0.1}));
  CHECK(code([&] { result_from_json(j); }) == "bad_result");
  // A long name is cut to 32 characters (it is printed, never interpreted).
  j = to_json(r);
  j["workloads"][0]["replay_parts"] = nlohmann::json::array({nlohmann::json::array({std::string(100, 'x'), 0.5})});
  CHECK(result_from_json(j).workloads[0].replay_parts[0].first.size() == 32);
}

TEST_CASE("gpu-resident: an owner sends slots before any call and never a timing frame", "[runner][resident][frames]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0], &vector_add().workloads[1]};
  Job job = make_job(vector_add(), wls, {1}, "/ref.so", TimingSpec{});
  job.gpu_slots = SlotsRole::owner;  // keeps the candidate's timing spec (same layout)
  auto checker = [&] {
    FrameChecker c(job);
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    return c;
  };
  {
    FrameChecker c = checker();
    CHECK(c.accept({{"event", "slots"}, {"bytes", 1 << 21}, {"seq", 1}}) == "");
    CHECK(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", 2}}) == "");
    CHECK(c.accept({{"event", "call"}, {"workload", 1}, {"seed", 0}, {"seq", 3}}) == "");
    CHECK(c.all_done());  // no timing phase for an owner, although its job's workload 1 is timed
    CHECK(c.accept({{"event", "result"}, {"seq", 4}}) == "");
  }
  {
    FrameChecker c = checker();
    CHECK(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", 1}}) != "");  // slots first
  }
  {
    FrameChecker c = checker();
    CHECK(c.accept({{"event", "result"}, {"seq", 1}}) == "");  // a failing owner may end at once
  }
  {
    Job cand = job;
    cand.gpu_slots = SlotsRole::user;
    FrameChecker c(cand);
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    CHECK(c.accept({{"event", "slots"}, {"bytes", 1}, {"seq", 1}}) != "");  // only an owner sends slots
  }
}

TEST_CASE("gpu-resident: the switch is on by default, with the tight bound; the host path keeps the looser one",
          "[runner][resident]") {
  // On since the owner's phase snapshot closed the output rewrite there (docs/threat-model.md) and
  // the H200 flagged no honest kernel on it (2026-12-02 10:15Z, 10:22Z).
  const EvalConfig c;
  CHECK(c.gpu_resident);
  CHECK(c.bound.batch_rel_slack == 0.25);
  CHECK(c.host_bound.batch_rel_slack == 0.5);
}

TEST_CASE("gpu-resident: a pool's wait_started waits for spares still starting, bounded by its deadline", "[runner][resident][process]") {
  // A stand-in runner: says ready on fd 3 after 0.3 s of "start-up", then idles.
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "resident-pool";
  std::filesystem::create_directories(dir);
  const auto script = dir / "slow-ready.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nsleep 0.3\necho '{\"event\":\"ready\",\"seq\":0}' >&3\nsleep 30\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  RunnerPool pool({script, Mode::trusted, -1, false}, 2);
  // Too short a deadline: a start-up is still in flight.
  CHECK_FALSE(pool.wait_started(std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(pool.wait_started(t0 + std::chrono::seconds(30)));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(150));  // it did wait
  // Held with spares ready: nothing more starts, and nothing is in flight.
  pool.hold(true);
  CHECK(pool.wait_started(std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
  pool.hold(false);
}

namespace {
const d2k::tasks::Task& spmv_csr() {
  static const d2k::tasks::Task t = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "spmv_csr");
  return t;
}
std::vector<const d2k::tasks::Workload*> all_workloads(const d2k::tasks::Task& t) {
  std::vector<const d2k::tasks::Workload*> v;
  for (const auto& w : t.workloads) v.push_back(&w);
  return v;
}
}  // namespace

TEST_CASE("class 11: the agent runner's go line holds no key; a keyless runner refuses a key", "[runner][resident][threat]") {
  const std::uint64_t key = 0x9E3779B97F4A7C15ull;  // 11400714819323198485
  // GPU-resident with an input arena: the line to the agent runner names the workload and the
  // warm-up count only; the key goes to the owner in its fill line.
  const std::string go = phase_line(2, std::nullopt, 4);
  CHECK(go.find("key") == std::string::npos);
  CHECK(go.find(std::to_string(key)) == std::string::npos);
  const std::string fill = arena_fill_line(2, key, 17);
  CHECK(fill.find(std::to_string(key)) != std::string::npos);
  const PhaseStart s = parse_phase_line(go, 2, true, 5);
  CHECK_FALSE(s.key.has_value());
  CHECK(s.warmup == 4);
  // A keyless runner refuses a line that carries a key (its process must never hold one), a go for
  // another workload and a warm-up count beyond its layout.
  CHECK(code([&] { parse_phase_line(phase_line(2, key, 4), 2, true, 5); }) == "bad_job");
  CHECK(code([&] { parse_phase_line(R"({"go":2,"warmup":4,"key":1})", 2, true, 5); }) == "bad_job");
  CHECK(code([&] { parse_phase_line(phase_line(1, std::nullopt, 4), 2, true, 5); }) == "bad_job");
  CHECK(code([&] { parse_phase_line(phase_line(2, std::nullopt, 6), 2, true, 5); }) == "bad_job");
  CHECK(code([&] { parse_phase_line("not json", 2, true, 5); }) == "bad_job");
  // The host path keeps its key (no arena there): the line carries it, a go line is refused.
  const PhaseStart h = parse_phase_line(phase_line(2, key, 3), 2, false, 5);
  REQUIRE(h.key.has_value());
  CHECK(*h.key == key);
  CHECK(h.warmup == 3);
  CHECK(code([&] { parse_phase_line(go, 2, false, 5); }) == "bad_job");
}

TEST_CASE("class 11: the input arena holds every timed call's own inputs, aligned, for the largest phase",
          "[runner][resident][threat]") {
  Job job = make_job(vector_add(), all_workloads(vector_add()), {1, 2}, "/x.so", TimingSpec{});
  std::uint64_t most = 0;
  for (std::size_t w = 0; w < job.workloads.size(); ++w) {
    const ArenaPhase p = input_arena_phase(job, w);
    const WireWorkload& wl = job.workloads[w];
    if (!wl.time) {
      CHECK(p.calls == 0);
      CHECK(p.bytes == 0);
      continue;
    }
    CHECK(p.calls == timed_call_slots(job, w));  // every warm-up a key may ask for and every sample
    CHECK(p.bytes <= job.timing.batch_bytes);     // the batch budget bounds the arena as it did the batch
    most = std::max(most, p.bytes);
    // Each call's inputs: disjoint from every other call's and argument's, 256-byte aligned, inside.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (int c = 0; c < p.calls; ++c)
      for (std::size_t a = 0; a < wl.args.size(); ++a) {
        if (wl.args[a].role != ArgRole::input) {
          CHECK(p.arg_offset[a] == -1);
          continue;
        }
        const std::uint64_t at = p.at(c, a), bytes = wl.args[a].count * dtype_size(wl.args[a].dtype);
        CHECK(at % kArenaAlign == 0);
        CHECK(at + bytes <= p.bytes);
        spans.emplace_back(at, at + bytes);
      }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].second <= spans[i].first);
  }
  CHECK(most > 0);
  CHECK(input_arena_bytes(job) == most);
  // No timing, no arena.
  job.timing.enabled = false;
  CHECK(input_arena_bytes(job) == 0);

  // A CSR structure is one host-built copy per phase, shared by its calls (their values differ).
  const Job sp = make_job(spmv_csr(), all_workloads(spmv_csr()), {1}, "/x.so", TimingSpec{});
  bool saw_csr = false;
  for (std::size_t w = 0; w < sp.workloads.size(); ++w) {
    const ArenaPhase p = input_arena_phase(sp, w);
    if (p.calls < 2) continue;
    for (std::size_t a = 0; a < sp.workloads[w].args.size(); ++a) {
      if (p.arg_offset[a] < 0) continue;
      if (p.shared[a]) {
        saw_csr = true;
        CHECK(p.at(0, a) == p.at(p.calls - 1, a));
        CHECK(p.at(0, a) < p.shared_bytes);
      } else {
        CHECK(p.at(1, a) == p.at(0, a) + p.call_stride);
        CHECK(p.at(0, a) >= p.shared_bytes);
      }
    }
  }
  CHECK(saw_csr);
}

TEST_CASE("class 11: the arena's size and mapping travel on the wire; only a slots user maps an arena",
          "[runner][resident][wire][threat]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0]};
  Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  job.gpu_slots = SlotsRole::user;
  job.gpu_slots_bytes = 2ull << 20;
  job.input_arena_bytes = 6ull << 20;
  CHECK(job_from_json(to_json(job)).input_arena_bytes == 6ull << 20);
  job.gpu_slots = SlotsRole::owner;  // an owner makes the arena; it is never told to map one
  CHECK(code([&] { job_from_json(to_json(job)); }) == "bad_job");
  RunnerResult r;
  r.input_arena = "read";
  CHECK(result_from_json(to_json(r)).input_arena == "read");
  CHECK(result_from_json(to_json(RunnerResult{})).input_arena.empty());
}

TEST_CASE("class 11: what the parent writes on the agent runner's stdin holds no key on the resident path",
          "[runner][resident][process][threat]") {
  // A stand-in runner: says ready, then copies everything the parent writes on its stdin to a file
  // (cat writes what it reads at once).
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "resident-stdin";
  std::filesystem::create_directories(dir);
  auto lines_of = [](const std::filesystem::path& p, std::size_t n) {  // once it holds n lines, at most 20 s
    std::vector<std::string> lines;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      lines.clear();
      std::ifstream in(p);
      for (std::string l; std::getline(in, l);) lines.push_back(l);
      if (lines.size() >= n) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return lines;
  };
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0], &vector_add().workloads[1]};
  const Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  const std::uint64_t key = 0xD1B54A32D192ED03ull;
  const std::string key_text = std::to_string(key);
  for (const bool resident : {true, false}) {
    INFO((resident ? "resident" : "host"));
    const auto file = dir / (resident ? "resident.txt" : "host.txt");
    const auto script = dir / (resident ? "resident.sh" : "host.sh");
    std::filesystem::remove(file);
    {
      std::ofstream f(script);
      f << "#!/bin/sh\necho '{\"event\":\"ready\",\"seq\":0}' >&3\nexec cat > '" << file.string() << "'\n";
    }
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    auto proc = RunnerProcess::start({script, Mode::agent, -1, false});
    REQUIRE(proc->wait_ready(std::chrono::seconds(20)));
    proc->send_job(job);
    // The owner's side, as the evaluator's fill hook: it alone receives the key.
    std::vector<std::tuple<std::size_t, std::uint64_t, int>> filled;
    const FillPhase fill = [&](std::size_t w, std::uint64_t k, int calls, int, std::string&) {
      filled.emplace_back(w, k, calls);
      return true;
    };
    std::string err;
    CHECK(release_phase(*proc, 1, key, 3, 3 + timed_slots(job, 1), resident ? fill : FillPhase(), err) >= 0);
    CHECK(err.empty());
    const auto lines = lines_of(file, 2);
    proc->kill();
    proc->wait();
    REQUIRE(lines.size() == 2);  // the job, then the phase's line
    CHECK(lines[0].find(key_text) == std::string::npos);  // the job never holds a timed key
    if (resident) {
      CHECK(lines[1].find("key") == std::string::npos);
      CHECK(lines[1].find(key_text) == std::string::npos);
      CHECK_FALSE(parse_phase_line(lines[1], 1, true, 5).key.has_value());
      REQUIRE(filled.size() == 1);
      CHECK(std::get<0>(filled[0]) == 1);
      CHECK(std::get<1>(filled[0]) == key);
      CHECK(std::get<2>(filled[0]) == 3 + timed_slots(job, 1));
    } else {  // the host path keeps its key line
      CHECK(parse_phase_line(lines[1], 1, false, 5).key == key);
      CHECK(filled.empty());
    }
  }
  // An owner that cannot make the inputs: no line reaches the agent runner, the error says why.
  const auto file = dir / "refused.txt";
  const auto script = dir / "refused.sh";
  std::filesystem::remove(file);
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho '{\"event\":\"ready\",\"seq\":0}' >&3\nexec cat > '" << file.string() << "'\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto proc = RunnerProcess::start({script, Mode::agent, -1, false});
  REQUIRE(proc->wait_ready(std::chrono::seconds(20)));
  proc->send_job(job);
  std::string err;
  CHECK(release_phase(*proc, 1, key, 3, 9, [](std::size_t, std::uint64_t, int, int, std::string& e) {
    e = "out of memory";
    return false;
  }, err) < 0);
  CHECK(err == "out of memory");
  const auto lines = lines_of(file, 1);
  proc->kill();
  proc->wait();
  CHECK(lines.size() == 1);  // the job only
}

TEST_CASE("class 13: the recorded warm-up travels in the phase's line, never in the job, and stays in the phase",
          "[runner][resident][threat]") {
  const std::uint64_t key = 42;
  for (const bool keyless : {true, false}) {
    const std::optional<std::uint64_t> k = keyless ? std::nullopt : std::optional<std::uint64_t>(key);
    CHECK(parse_phase_line(phase_line(0, k, 4, 2), 0, keyless, 5).record == 2);
    CHECK(parse_phase_line(phase_line(0, k, 4), 0, keyless, 5).record == -1);  // no launch records asked
    CHECK(phase_line(0, k, 4).find("record") == std::string::npos);
    CHECK(code([&] { parse_phase_line(phase_line(0, k, 4, 4), 0, keyless, 5); }) == "bad_job");  // not a warm-up
    CHECK(code([&] { parse_phase_line(phase_line(0, k, 0, 0), 0, keyless, 5); }) == "bad_job");
  }
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0]};
  Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  job.record_launches = true;
  CHECK(to_json(job).dump().find("record\"") == std::string::npos);  // only record_launches, no position
}

TEST_CASE("class 3, the train: its calls lead the phase's layout and arena, travel on the wire, and write 256-byte aligned slots",
          "[runner][resident][threat]") {
  Job job = make_job(vector_add(), all_workloads(vector_add()), {1}, "/x.so", TimingSpec{});
  job.gpu_slots = SlotsRole::user;
  job.gpu_slots_bytes = 1 << 21;
  std::vector<int> before;
  for (std::size_t w = 0; w < job.workloads.size(); ++w) before.push_back(timed_call_slots(job, w));
  for (auto& wl : job.workloads)
    if (wl.time) wl.train = 7;
  const Layout layout = output_layout(job);
  for (std::size_t w = 0; w < job.workloads.size(); ++w) {
    if (!job.workloads[w].time) continue;
    // The train's 7 calls come first, then every warm-up a key may ask for and every sample slot.
    CHECK(timed_call_slots(job, w) == before[w] + 7);
    CHECK(timed_call_slots(job, w) == 7 + warmup_range(job.timing).second + timed_slots(job, w));
    CHECK(input_arena_phase(job, w).calls == timed_call_slots(job, w));
    for (int c = 0; c < 7; ++c)
      for (std::size_t a = 0; a < job.workloads[w].args.size(); ++a)
        if (job.workloads[w].args[a].role == ArgRole::output) CHECK(layout.find(w, -1 - c, a) != nullptr);
  }
  for (const Slot& s : layout.slots) CHECK(s.offset % 256 == 0);  // kernels may assume cudaMalloc's alignment
  // The count travels in the job (not secret: the runner must know which calls are the train's).
  const Job back = job_from_json(to_json(job));
  for (std::size_t w = 0; w < job.workloads.size(); ++w) CHECK(back.workloads[w].train == job.workloads[w].train);
  nlohmann::json bad = to_json(job);
  bad["workloads"][0]["train"] = -1;
  CHECK(code([&] { job_from_json(bad); }) == "bad_job");
  // The train's line names its workload, its least calls (in the room) and its time cap, and holds
  // nothing else (no key: class 11).
  const TrainStart ts = parse_train_line(train_line(1, 3, 0.1), 1, 7);
  CHECK(ts.least == 3);
  CHECK(ts.cap_s == 0.1);
  CHECK(ts.queue == 1);  // a device-wide sync after every call, unless the line asks otherwise
  CHECK(train_line(1, 3, 0.1).find("queue") == std::string::npos);
  // Measurement only (bench_gpu --train-queue): calls in flight, 2..64.
  CHECK(parse_train_line(train_line(1, 3, 0.1, 4), 1, 7).queue == 4);
  CHECK(code([&] { parse_train_line("{\"train\":1,\"least\":3,\"cap_s\":0.1,\"queue\":1}", 1, 7); }) == "bad_job");
  CHECK(code([&] { parse_train_line("{\"train\":1,\"least\":3,\"cap_s\":0.1,\"queue\":65}", 1, 7); }) == "bad_job");
  CHECK(code([&] { parse_train_line("{\"train\":1,\"least\":3,\"cap_s\":0.1,\"queue\":\"4\"}", 1, 7); }) == "bad_job");
  CHECK(code([&] { parse_train_line(train_line(0, 3, 0.1), 1, 7); }) == "bad_job");
  CHECK(code([&] { parse_train_line(train_line(1, 8, 0.1), 1, 7); }) == "bad_job");  // beyond the room
  CHECK(code([&] { parse_train_line(train_line(1, 0, 0.1), 1, 7); }) == "bad_job");
  CHECK(code([&] { parse_train_line(train_line(1, 3, -1), 1, 7); }) == "bad_job");
  CHECK(code([&] { parse_train_line("{\"train\":1,\"least\":3,\"cap_s\":0.1,\"key\":5}", 1, 7); }) == "bad_job");
  CHECK(code([&] { parse_train_line("not json", 1, 7); }) == "bad_job");
  // The prime line (before the train line) names only its workload; another line is not one.
  CHECK(is_prime_line(prime_line(1), 1));
  CHECK_FALSE(is_prime_line(train_line(1, 3, 0.1), 1));
  CHECK_FALSE(is_prime_line("not json", 1));
  CHECK(code([&] { is_prime_line(prime_line(0), 1); }) == "bad_job");
  CHECK(code([&] { is_prime_line("{\"prime\":1,\"key\":5}", 1); }) == "bad_job");
  CHECK(code([&] { is_prime_line("{\"prime\":\"1\"}", 1); }) == "bad_job");
  // The owner's fill line says which calls: the train's first, the rest after its train_end.
  const auto fill = nlohmann::json::parse(arena_fill_line(1, 99, 30, 7));
  CHECK(fill.at("from") == 7);
  CHECK(fill.at("calls") == 30);
}

TEST_CASE("class 3, the train: train_end with a count in the train's room is due between timing_ready and timing_end",
          "[runner][resident][frames][threat]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0], &vector_add().workloads[1]};
  Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  job.gpu_slots = SlotsRole::user;
  for (auto& wl : job.workloads)
    if (wl.time) wl.train = 5;
  REQUIRE(job.workloads[1].time);
  auto to_timing = [&](FrameChecker& c) {
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    std::uint64_t seq = 1;
    if (job.workloads[0].time) {  // (vector_add's first workload is untimed; be safe either way)
      REQUIRE(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", seq++}}) == "");
      REQUIRE(c.accept({{"event", "timing_ready"}, {"workload", 0}, {"seq", seq++}}) == "");
      REQUIRE(c.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 5}, {"seq", seq++}}) == "");
      REQUIRE(c.accept({{"event", "timing_end"}, {"workload", 0}, {"samples", 3}, {"seq", seq++}}) == "");
    } else {
      REQUIRE(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", seq++}}) == "");
    }
    REQUIRE(c.accept({{"event", "call"}, {"workload", 1}, {"seed", 0}, {"seq", seq++}}) == "");
    REQUIRE(c.accept({{"event", "timing_ready"}, {"workload", 1}, {"seq", seq++}}) == "");
    return seq;
  };
  {  // honest
    FrameChecker c(job);
    std::uint64_t seq = to_timing(c);
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "timing_end"}, {"workload", 1}, {"samples", 3}, {"seq", seq++}}) == "");
    CHECK(c.all_done());
  }
  {  // the train skipped: timing_end before train_end
    FrameChecker c(job);
    std::uint64_t seq = to_timing(c);
    CHECK(c.accept({{"event", "timing_end"}, {"workload", 1}, {"samples", 3}, {"seq", seq}}) != "");
  }
  {  // a train that stopped at its time cap (the parent checks it against its line's least calls)
    FrameChecker c(job);
    std::uint64_t seq = to_timing(c);
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 4}, {"seq", seq}}) == "");
  }
  {  // beyond the room, or none
    FrameChecker c(job);
    std::uint64_t seq = to_timing(c);
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 6}, {"seq", seq}}) != "");
    FrameChecker d(job);
    seq = to_timing(d);
    CHECK(d.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 0}, {"seq", seq}}) != "");
  }
  {  // twice
    FrameChecker c(job);
    std::uint64_t seq = to_timing(c);
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq}}) != "");
  }
  {  // primed: once, between timing_ready and train_end (the parent also checks that it asked)
    FrameChecker c(job);
    std::uint64_t seq = to_timing(c);
    CHECK(c.accept({{"event", "primed"}, {"workload", 1}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "primed"}, {"workload", 1}, {"seq", seq}}) != "");  // after the train
    FrameChecker d(job);
    seq = to_timing(d);
    CHECK(d.accept({{"event", "primed"}, {"workload", 1}, {"seq", seq++}}) == "");
    CHECK(d.accept({{"event", "primed"}, {"workload", 1}, {"seq", seq}}) != "");  // twice
    FrameChecker e(job);
    seq = to_timing(e);
    CHECK(e.accept({{"event", "primed"}, {"workload", 0}, {"seq", seq}}) != "");  // another workload's
  }
  {  // a workload without a train never sends one
    Job plain = job;
    for (auto& wl : plain.workloads) wl.train = 0;
    FrameChecker c(plain);
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    std::uint64_t seq = 1;
    for (std::size_t w = 0; w < plain.workloads.size(); ++w) {
      REQUIRE(c.accept({{"event", "call"}, {"workload", w}, {"seed", 0}, {"seq", seq++}}) == "");
      if (!plain.workloads[w].time) continue;
      REQUIRE(c.accept({{"event", "timing_ready"}, {"workload", w}, {"seq", seq++}}) == "");
      if (w == 1) {
        CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 0}, {"seq", seq}}) != "");
        break;
      }
      REQUIRE(c.accept({{"event", "timing_end"}, {"workload", w}, {"samples", 3}, {"seq", seq++}}) == "");
    }
  }
}

TEST_CASE("class 3, the train: a job whose trains do not fit the GPU's memory has its longest trains shortened",
          "[runner][resident][threat]") {
  EvalConfig cfg;
  const auto task = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "moe_permute");
  Job job = make_job(task, all_workloads(task), {1}, "/x.so", TimingSpec{});
  for (auto& wl : job.workloads) wl.train = train_calls_for(cfg, wl);
  const std::uint64_t gib = 1ull << 30;
  // Output-heavy: the slots, their owner copy and the arena by the layout, far beyond an H200.
  REQUIRE(resident_job_bytes(job) > 140 * gib);
  const Job before = job;
  // A budget no train length meets: every train at its least, and the answer says so.
  Job tiny = before;
  CHECK_FALSE(fit_trains(cfg, tiny, gib));
  for (const auto& wl : tiny.workloads)
    if (wl.train > 0) CHECK(wl.train == cfg.train_min_calls);
  const std::uint64_t least = resident_job_bytes(tiny);
  // A budget between that and the full trains: met, by shortening some trains, none below its least.
  const std::uint64_t budget = least + (resident_job_bytes(before) - least) / 2;
  CHECK(fit_trains(cfg, job, budget));
  CHECK(resident_job_bytes(job) <= budget);
  bool shorter = false;
  for (std::size_t w = 0; w < job.workloads.size(); ++w) {
    CHECK(job.workloads[w].train <= before.workloads[w].train);
    if (before.workloads[w].train > 0) CHECK(job.workloads[w].train >= cfg.train_min_calls);
    else CHECK(job.workloads[w].train == 0);  // an untimed workload gets no train
    shorter = shorter || job.workloads[w].train < before.workloads[w].train;
  }
  CHECK(shorter);
  // vector_add with every workload fits in 0.7 of an H200 (139 GiB): its trains stay as they were.
  Job va = make_job(vector_add(), all_workloads(vector_add()), {1}, "/x.so", TimingSpec{});
  for (auto& wl : va.workloads) wl.train = train_calls_for(cfg, wl);
  const Job va_before = va;
  CHECK(fit_trains(cfg, va, static_cast<std::uint64_t>(cfg.train_job_fraction * 139.0 * static_cast<double>(gib))));
  for (std::size_t w = 0; w < va.workloads.size(); ++w) CHECK(va.workloads[w].train == va_before.workloads[w].train);
}

TEST_CASE("class 3, several trains: the count travels, each earlier train's snapshot has a place of its own, "
          "the frames want every train_end, and memory drops trains before it shortens them",
          "[runner][resident][threat][frames]") {
  Job job = make_job(vector_add(), all_workloads(vector_add()), {1}, "/x.so", TimingSpec{});
  job.gpu_slots = SlotsRole::user;
  job.gpu_slots_bytes = 1 << 21;
  for (auto& wl : job.workloads)
    if (wl.time) {
      wl.train = 5;
      wl.trains = 3;
    }
  // The count travels in the job; out of 1..16 it is refused.
  const Job back = job_from_json(to_json(job));
  for (std::size_t w = 0; w < job.workloads.size(); ++w) CHECK(back.workloads[w].trains == job.workloads[w].trains);
  for (const int bad_count : {0, 17, -1}) {
    nlohmann::json bad = to_json(job);
    bad["workloads"][1]["trains"] = bad_count;
    CHECK(code([&] { job_from_json(bad); }) == "bad_job");
  }
  // The places: (trains - 1) copies of each room, in an area of their own, none overlapping another
  // and each as large as its slot; nothing outside the room or for the last train.
  const Layout layout = output_layout(job);
  const TrainSnaps snaps = train_snaps(job, layout);
  std::uint64_t want_extra = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (std::size_t w = 0; w < job.workloads.size(); ++w) {
    const WireWorkload& wl = job.workloads[w];
    if (!wl.time) continue;
    std::uint64_t room = 0;
    for (const Slot& s : layout.slots)
      if (s.workload == w && s.seed_index < 0 && -1 - s.seed_index < wl.train) room += (s.bytes + 255) / 256 * 256;
    CHECK(snaps.room_bytes[w] == room);
    want_extra += 2 * room;
  }
  CHECK(snaps.extra == want_extra);
  for (const Slot& s : layout.slots) {
    const WireWorkload& wl = job.workloads[s.workload];
    const bool in_room = s.seed_index < 0 && -1 - s.seed_index < wl.train;
    for (int t = 0; t < 3; ++t) {
      const std::int64_t at = snaps.offset(job, s, t);
      if (!in_room || t == 2) {
        CHECK(at == -1);
        continue;
      }
      REQUIRE(at >= 0);
      CHECK(at % 256 == 0);
      CHECK(static_cast<std::uint64_t>(at) + s.bytes <= snaps.extra);
      spans.emplace_back(at, at + static_cast<std::int64_t>(s.bytes));
    }
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i].first >= spans[i - 1].second);
  // One train: no area at all, and the job's memory counts the area.
  Job one = job;
  for (auto& wl : one.workloads) wl.trains = 1;
  CHECK(train_snaps(one, output_layout(one)).extra == 0);
  CHECK(resident_job_bytes(job) == resident_job_bytes(one) + snaps.extra);
  // The owner's snapshot line names an earlier train; the last train's and the phase's name none.
  CHECK(nlohmann::json::parse(snap_line(1, 0, 5, 0)).at("train") == 0);
  CHECK_FALSE(nlohmann::json::parse(snap_line(1, 5, 20)).contains("train"));

  // Frames: three trains (each with its primed), then timing_end; fewer or more are refused.
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0], &vector_add().workloads[1]};
  Job fj = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  fj.gpu_slots = SlotsRole::user;
  REQUIRE(fj.workloads[1].time);
  for (auto& wl : fj.workloads)
    if (wl.time) {
      wl.train = 5;
      wl.trains = 3;
    }
  auto to_timing = [&](FrameChecker& c) {
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    std::uint64_t seq = 1;
    REQUIRE_FALSE(fj.workloads[0].time);
    REQUIRE(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", seq++}}) == "");
    REQUIRE(c.accept({{"event", "call"}, {"workload", 1}, {"seed", 0}, {"seq", seq++}}) == "");
    REQUIRE(c.accept({{"event", "timing_ready"}, {"workload", 1}, {"seq", seq++}}) == "");
    return seq;
  };
  {  // honest: primed and train_end three times
    FrameChecker c(fj);
    std::uint64_t seq = to_timing(c);
    for (int t = 0; t < 3; ++t) {
      CHECK(c.accept({{"event", "primed"}, {"workload", 1}, {"seq", seq++}}) == "");
      CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq++}}) == "");
    }
    CHECK(c.accept({{"event", "timing_end"}, {"workload", 1}, {"samples", 3}, {"seq", seq++}}) == "");
    CHECK(c.all_done());
  }
  {  // a train skipped: timing_end after two
    FrameChecker c(fj);
    std::uint64_t seq = to_timing(c);
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "timing_end"}, {"workload", 1}, {"samples", 3}, {"seq", seq}}) != "");
  }
  {  // a fourth train, or two primes in one train
    FrameChecker c(fj);
    std::uint64_t seq = to_timing(c);
    for (int t = 0; t < 3; ++t) CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "train_end"}, {"workload", 1}, {"calls", 5}, {"seq", seq}}) != "");
    FrameChecker d(fj);
    seq = to_timing(d);
    CHECK(d.accept({{"event", "primed"}, {"workload", 1}, {"seq", seq++}}) == "");
    CHECK(d.accept({{"event", "primed"}, {"workload", 1}, {"seq", seq}}) != "");
  }

  // Memory: rooms are shortened to train_keep_calls first, then trains dropped (the largest copies
  // first), then rooms shortened further.
  EvalConfig cfg;
  cfg.train_count = 3;
  const std::uint64_t gib = 1ull << 30;
  Job va = make_job(vector_add(), all_workloads(vector_add()), {1}, "/x.so", TimingSpec{});
  for (auto& wl : va.workloads) {
    wl.train = train_calls_for(cfg, wl);
    wl.trains = wl.train > 0 ? cfg.train_count : 1;
  }
  const Job va_before = va;
  Job va_one = va;
  for (auto& wl : va_one.workloads) wl.trains = 1;
  // Rooms at train_keep_calls with every train: the least a budget can be met with before trains go.
  Job kept = va_before;
  for (auto& wl : kept.workloads)
    if (wl.train > 0) wl.train = std::min(wl.train, cfg.train_keep_calls);
  {  // a budget just above it: rooms shortened, not below the floor, every train kept
    Job j = va_before;
    const std::uint64_t budget = resident_job_bytes(kept) + (1ull << 20);
    CHECK(fit_trains(cfg, j, budget));
    CHECK(resident_job_bytes(j) <= budget);
    for (std::size_t w = 0; w < j.workloads.size(); ++w) {
      CHECK(j.workloads[w].trains == va_before.workloads[w].trains);
      if (va_before.workloads[w].train > 0) CHECK(j.workloads[w].train >= cfg.train_keep_calls);
    }
  }
  {  // below it: trains dropped, rooms at the floor, none below it while a train can still go
    Job j = va_before;
    Job kept_one = kept;
    for (auto& wl : kept_one.workloads) wl.trains = 1;
    const std::uint64_t budget = resident_job_bytes(kept_one) + (resident_job_bytes(kept) - resident_job_bytes(kept_one)) / 2;
    CHECK(fit_trains(cfg, j, budget));
    CHECK(resident_job_bytes(j) <= budget);
    int dropped = 0;
    for (std::size_t w = 0; w < j.workloads.size(); ++w) {
      if (va_before.workloads[w].train > 0) CHECK(j.workloads[w].train == cfg.train_keep_calls);
      CHECK(j.workloads[w].trains >= 1);
      dropped += va_before.workloads[w].trains - j.workloads[w].trains;
    }
    CHECK(dropped > 0);
  }
  {  // below one train each at the floor: rooms shortened further, one train each
    Job j = va_before;
    Job kept_one = kept;
    for (auto& wl : kept_one.workloads) wl.trains = 1;
    const std::uint64_t budget = resident_job_bytes(kept_one) - (1ull << 30);
    CHECK(fit_trains(cfg, j, budget));
    for (std::size_t w = 0; w < j.workloads.size(); ++w)
      if (va_before.workloads[w].train > 0) {
        CHECK(j.workloads[w].trains == 1);
        CHECK(j.workloads[w].train >= cfg.train_min_calls);
      }
  }
  // vector_add's visible workloads with three trains each fit in 0.7 of an H200 (139 GiB) as they are.
  Job vis = make_job(vector_add(), {&vector_add().workloads[0], &vector_add().workloads[1]}, {1}, "/x.so", TimingSpec{});
  for (auto& wl : vis.workloads) {
    wl.train = train_calls_for(cfg, wl);
    wl.trains = wl.train > 0 ? cfg.train_count : 1;
  }
  const Job vis_before = vis;
  const std::uint64_t h200 = static_cast<std::uint64_t>(cfg.train_job_fraction * 139.0 * static_cast<double>(gib));
  CHECK(fit_trains(cfg, vis, h200));
  for (std::size_t w = 0; w < vis.workloads.size(); ++w) {
    CHECK(vis.workloads[w].trains == vis_before.workloads[w].trains);
    CHECK(vis.workloads[w].train == vis_before.workloads[w].train);
  }
  // With every workload (93 GiB with one train of 32 calls each): every train kept, shorter rooms.
  Job all = va_before;
  CHECK(fit_trains(cfg, all, h200));
  for (std::size_t w = 0; w < all.workloads.size(); ++w) {
    INFO(all.workloads[w].name << ": " << all.workloads[w].trains << " trains of " << all.workloads[w].train);
    CHECK(all.workloads[w].trains == va_before.workloads[w].trains);
    if (all.workloads[w].train > 0) CHECK(all.workloads[w].train >= cfg.train_keep_calls);
  }
}

TEST_CASE("class 3, the train: its count follows the call's bytes within limits; its time is the parent's window per call plus the fill's excess",
          "[runner][resident][threat]") {
  EvalConfig cfg;
  CHECK(cfg.train);  // on by default: a server's rewards rest on the parent's clock alone
  const Job job = make_job(vector_add(), all_workloads(vector_add()), {1}, "/x.so", TimingSpec{});
  for (const WireWorkload& wl : job.workloads) {
    const int k = train_calls_for(cfg, wl);
    if (!wl.time) {
      CHECK(k == 0);
      continue;
    }
    CHECK(k >= 2);
    CHECK(k <= cfg.train_max_calls);
    const std::uint64_t bytes = call_bytes(wl);
    // At least train_bytes of calls (and train_window_calls) unless a limit says otherwise, never
    // more than the room's cap (the larger of train_max_bytes and the batch's bytes).
    const std::uint64_t cap = std::max(cfg.train_max_bytes, cfg.timing.batch_bytes);
    if (k < cfg.train_max_calls && static_cast<std::uint64_t>(k + 1) * bytes <= cap) {
      CHECK(static_cast<std::uint64_t>(k) * bytes >= cfg.train_bytes);
      CHECK(k >= cfg.train_window_calls);
    }
    CHECK((static_cast<std::uint64_t>(k) * bytes <= cap || k == 2));
  }
  WireWorkload one;  // 12 MiB per call (vector_add of 1 M floats): 12 GiB / 12 MiB
  one.args.resize(3);
  for (auto& a : one.args) a.count = 1 << 20;
  one.args[2].role = ArgRole::output;
  CHECK(train_calls_for(cfg, one) == 1024);
  for (auto& a : one.args) a.count = 4 << 20;  // 48 MiB per call: 256
  CHECK(train_calls_for(cfg, one) == 256);
  for (auto& a : one.args) a.count = 64 << 20;  // 768 MiB per call: 16 by the bytes, raised to 32 (24 GiB)
  CHECK(train_calls_for(cfg, one) == 32);
  cfg.train_max_bytes = 12ull << 30;  // a smaller cap: the batch's 16 GiB then, 21 calls
  CHECK(train_calls_for(cfg, one) == 21);
  cfg.train_window_calls = 0;  // none asked beyond the bytes: 16
  CHECK(train_calls_for(cfg, one) == 16);
  cfg.train_window_calls = 32;
  cfg.train_max_bytes = 24ull << 30;
  for (auto& a : one.args) a.count = 128 << 20;  // 1.5 GiB per call: 16, the most that fit in 24 GiB
  CHECK(train_calls_for(cfg, one) == 16);
  for (auto& a : one.args) a.count = 1ull << 31;  // 24 GiB per call: the least a train may have
  CHECK(train_calls_for(cfg, one) == 2);
  for (auto& a : one.args) a.count = 1 << 10;  // 12 KiB per call: the most
  CHECK(train_calls_for(cfg, one) == cfg.train_max_calls);
  for (auto& a : one.args) a.count = 1 << 20;
  one.time = false;
  CHECK(train_calls_for(cfg, one) == 0);
  one.time = true;
  cfg.train = false;
  CHECK(train_calls_for(cfg, one) == 0);

  const ParentBound b;
  double charge = -1;
  // 100 calls in a 10 ms window, the fill as long as the replay's: 100 us a call, nothing charged.
  CHECK(train_time_s(10e-3, 100, 5e-3, 5e-3, b, &charge) == Approx(100e-6));
  CHECK(charge == 0);
  // Within the fill's slack: nothing charged either.
  CHECK(train_time_s(10e-3, 100, 5e-3 * (1 + b.fill_rel_slack) + b.fill_allow_s - 1e-6, 5e-3, b, &charge) == Approx(100e-6));
  CHECK(charge == 0);
  // A fill twice the replay's (agent GPU work time-sliced with the owner while it made the inputs):
  // the excess is the train's.
  const double took = 10e-3;
  const double expect = took - (1 + b.fill_rel_slack) * 5e-3 - b.fill_allow_s;
  CHECK(train_time_s(10e-3, 100, took, 5e-3, b, &charge) == Approx((10e-3 + expect) / 100));
  CHECK(charge == Approx(expect));
  // Nothing to divide by, or a window that is not a number: no time (the evaluator flags it first).
  CHECK(train_time_s(10e-3, 0, 0, 0, b, nullptr) == 0);
  CHECK(train_time_s(std::nan(""), 10, 0, 0, b, nullptr) == 0);
}

TEST_CASE("class 3, the train: an owner's timed checks merge into runs that count every slot and keep a failing one",
          "[runner][resident][wire]") {
  std::vector<TensorCheck> in;
  auto add = [&](int seed, std::size_t arg, std::uint64_t bad) {
    TensorCheck c;
    c.seed_index = seed;
    c.arg_index = arg;
    c.count = 100;
    c.mismatches = bad;
    c.first_bad = bad > 0 ? 7 : -1;
    c.max_abs = static_cast<double>(bad);
    in.push_back(c);
  };
  add(0, 2, 0);  // correctness checks stay as they are
  add(1, 2, 0);
  for (int i = 0; i < 5000; ++i) add(-1 - i, 2, 0);  // a train's worth of ok slots
  add(-5001, 2, 3);                                  // two failing ones
  add(-5002, 2, 5);
  add(-5003, 2, 0);
  const std::vector<TensorCheck> out = merge_timed_checks(in, 0);
  REQUIRE(out.size() == 5);
  CHECK(out[0].seed_index == 0);
  CHECK(out[1].seed_index == 1);
  CHECK(out[2].seed_index == -1);
  CHECK(out[2].span == 5000);
  CHECK(out[2].count == 500000);
  CHECK(out[2].ok());
  CHECK(out[3].seed_index == -5001);  // the failing run keeps its first check's detail
  CHECK(out[3].span == 2);
  CHECK(out[3].mismatches == 8);
  CHECK(out[3].first_bad == 7);
  CHECK(out[3].max_abs == 5);
  CHECK_FALSE(out[3].ok());
  CHECK(out[4].span == 1);
  std::size_t slots = 0;
  for (const auto& c : out) slots += c.span;
  CHECK(slots == in.size());
  // The span travels; a span on a correctness check, or none at all, is refused.
  CHECK(check_from_json(out[2].to_json()).span == 5000);
  nlohmann::json bad = out[0].to_json();
  bad["span"] = 2;
  CHECK(code([&] { check_from_json(bad); }) == "bad_result");
  bad = out[2].to_json();
  bad["span"] = 0;
  CHECK(code([&] { check_from_json(bad); }) == "bad_result");
  // Another output's slots are another run.
  std::vector<TensorCheck> two(2);
  two[0].seed_index = -1;
  two[1].seed_index = -2;
  two[1].arg_index = 3;
  CHECK(merge_timed_checks(two).size() == 2);
  // The first failing timed checks stay as they are (a wrong kernel's report shows them), the
  // rest merge.
  std::vector<TensorCheck> wrong(20);
  for (int i = 0; i < 20; ++i) {
    wrong[static_cast<std::size_t>(i)].seed_index = -1 - i;
    wrong[static_cast<std::size_t>(i)].count = 10;
    wrong[static_cast<std::size_t>(i)].mismatches = 1;
  }
  const auto kept = merge_timed_checks(wrong, 8);
  REQUIRE(kept.size() == 9);
  for (int i = 0; i < 8; ++i) CHECK(kept[static_cast<std::size_t>(i)].span == 1);
  CHECK(kept[8].seed_index == -9);
  CHECK(kept[8].span == 12);
  CHECK(kept[8].mismatches == 12);
}

TEST_CASE("class 3, the split train: train_half is due once in a split train, before a train_end with calls after it",
          "[runner][resident][frames][threat]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[1]};
  Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  job.gpu_slots = SlotsRole::user;
  REQUIRE(job.workloads[0].time);
  job.workloads[0].train = 8;
  job.workloads[0].split = 4;
  job.gpu_slots_bytes = 2ull << 20;
  // The split travels in the job; a first half that leaves no call for the second is refused.
  CHECK(job_from_json(to_json(job)).workloads[0].split == 4);
  {
    nlohmann::json bad = to_json(job);
    bad["workloads"][0]["split"] = 8;
    CHECK(code([&] { job_from_json(bad); }) == "bad_job");
    bad["workloads"][0]["split"] = -1;
    CHECK(code([&] { job_from_json(bad); }) == "bad_job");
  }
  auto to_train = [&](FrameChecker& c) {
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    REQUIRE(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", 1}}) == "");
    REQUIRE(c.accept({{"event", "timing_ready"}, {"workload", 0}, {"seq", 2}}) == "");
    return std::uint64_t{3};
  };
  {  // honest: the first half (4 calls, or fewer at half the cap), then train_end with more
    FrameChecker c(job);
    std::uint64_t seq = to_train(c);
    CHECK(c.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 8}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "timing_end"}, {"workload", 0}, {"samples", 3}, {"seq", seq++}}) == "");
    CHECK(c.all_done());
    FrameChecker d(job);
    seq = to_train(d);
    CHECK(d.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 3}, {"seq", seq++}}) == "");
    CHECK(d.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 6}, {"seq", seq++}}) == "");
  }
  {  // train_end without train_half, or with no call after it
    FrameChecker c(job);
    std::uint64_t seq = to_train(c);
    CHECK(c.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 8}, {"seq", seq}}) != "");
    FrameChecker d(job);
    seq = to_train(d);
    CHECK(d.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq++}}) == "");
    CHECK(d.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 4}, {"seq", seq}}) != "");
  }
  {  // twice, beyond the first half, none, or after train_end
    FrameChecker c(job);
    std::uint64_t seq = to_train(c);
    CHECK(c.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq++}}) == "");
    CHECK(c.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq}}) != "");
    FrameChecker d(job);
    seq = to_train(d);
    CHECK(d.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 5}, {"seq", seq}}) != "");
    FrameChecker e(job);
    seq = to_train(e);
    CHECK(e.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 0}, {"seq", seq}}) != "");
    FrameChecker f(job);
    seq = to_train(f);
    CHECK(f.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq++}}) == "");
    CHECK(f.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 8}, {"seq", seq++}}) == "");
    CHECK(f.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq}}) != "");
  }
  {  // a train that is not split never sends one
    Job whole = job;
    whole.workloads[0].split = 0;
    FrameChecker c(whole);
    std::uint64_t seq = to_train(c);
    CHECK(c.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq}}) != "");
  }
}

TEST_CASE("class 3, the split train: the time is the back-to-back half's, floored by the synced half's less the sync cost",
          "[runner][resident][threat]") {
  const ParentBound bound;  // split_eps 2 %
  bool floored = true;
  // Honest, vector_add-like (H200, session 21): synced 200 us, back to back 190 us, the sync's cost
  // 10 us: the floor is 0.98 × 190 = 186.2 us, below: the time is 190 us.
  CHECK(split_train_time_s(200e-6, 190e-6, 10e-6, bound, &floored) == Approx(190e-6));
  CHECK_FALSE(floored);
  // Calls that overlap through streams of the kernel's own (back to back 60 us of real 190): the
  // floor holds the time at 0.98 × 190 us, at most split_eps below the real per-call time.
  CHECK(split_train_time_s(200e-6, 60e-6, 10e-6, bound, &floored) == Approx(0.98 * 190e-6));
  CHECK(floored);
  // Work moved from the synced half into the back-to-back one (synced 100 us, back to back 280 us):
  // the time is the larger half, above the real 190 us: nothing gained.
  CHECK(split_train_time_s(100e-6, 280e-6, 10e-6, bound) == Approx(280e-6));
  // The other way (synced 300 us, back to back 80 us): the floor, 0.98 × 290 us.
  CHECK(split_train_time_s(300e-6, 80e-6, 10e-6, bound) == Approx(0.98 * 290e-6));
  // A sync cost that is missing or negative counts as 0 (the floor's highest).
  CHECK(split_train_time_s(200e-6, 60e-6, -5e-6, bound) == Approx(0.98 * 200e-6));
  // Short calls: the sync cost counts for at most split_sync_cap (10 %) of the synced time (H200,
  // session 21: overlapping 10-20 us calls read 5.2-9.2 us with it subtracted whole). Honest, synced
  // 20.8 us, back to back 11.2, cost 9.8: the floor, 0.98 × 0.9 × 20.8 us.
  CHECK(split_train_time_s(20.8e-6, 11.2e-6, 9.8e-6, bound, &floored) == Approx(0.98 * 0.9 * 20.8e-6));
  CHECK(floored);
  // Overlapping streams on the same calls (back to back 5.4 us): the same floor.
  CHECK(split_train_time_s(20.8e-6, 5.4e-6, 9.8e-6, bound) == Approx(0.98 * 0.9 * 20.8e-6));
  // A call shorter than its sync cost: 0.98 × 0.9 of the synced time, whatever the back-to-back half says.
  CHECK(split_train_time_s(5e-6, 1e-6, 10e-6, bound) == Approx(0.98 * 0.9 * 5e-6));
}

TEST_CASE("class 3, disturbed trains: a split train whose halves disagree beyond the band is made again",
          "[runner][resident][threat]") {
  const ParentBound bound;  // split_eps 2 %, split_sync_cap 10 %
  const EvalConfig cfg;
  REQUIRE(cfg.train_retries == 3);
  REQUIRE(cfg.train_retry_band == Approx(0.01));
  const double band = cfg.train_retry_band;
  // Honest vector_add trains on the H200 (session 22, bench_gpu (a)): synced 204.1 us, back to back
  // 190.8, sync cost 10.2: the halves agree (back to back / (synced - cost) = 0.984).
  CHECK_FALSE(split_train_disturbed(204.1e-6, 190.8e-6, 10.2e-6, bound, band));
  CHECK_FALSE(split_train_disturbed(205.13e-6, 191.93e-6, 10.54e-6, bound, band));
  // Floored a little (0.3 %): within the band, kept.
  CHECK_FALSE(split_train_disturbed(206.61e-6, 191.41e-6, 10.63e-6, bound, band));
  // The runner's host stalled between synced calls (synced 214.8, back to back 191.5, cost 11.9:
  // the floor 3.8 % above): made again.
  CHECK(split_train_disturbed(214.78e-6, 191.54e-6, 11.89e-6, bound, band));
  // The parent read train_half late (synced 1061.5 us, back to back 89.6: shorter than the kernel).
  CHECK(split_train_disturbed(1061.5e-6, 89.6e-6, 10.75e-6, bound, band));
  // The back-to-back half stalled (275.7 against synced 206 - 10.2).
  CHECK(split_train_disturbed(206e-6, 275.7e-6, 10.2e-6, bound, band));
  // Calls that overlap through streams of their own: disturbed too (made again, then floored).
  CHECK(split_train_disturbed(200e-6, 60e-6, 10e-6, bound, band));
  // Short calls (the sync cost beyond 10 % of the synced time): the capped floor is their rule, never made again.
  CHECK_FALSE(split_train_disturbed(20.8e-6, 11.2e-6, 9.8e-6, bound, band));
  CHECK_FALSE(split_train_disturbed(12.1e-6, 7.4e-6, 9.9e-6, bound, band));
  // Halves that are not positive or not finite: never (the evaluator flags such halves).
  CHECK_FALSE(split_train_disturbed(0, 190e-6, 10e-6, bound, band));
  CHECK_FALSE(split_train_disturbed(200e-6, -1e-6, 10e-6, bound, band));
  CHECK_FALSE(split_train_disturbed(std::numeric_limits<double>::infinity(), 190e-6, 10e-6, bound, band));
  // band -1 (tests): every long-call train.
  CHECK(split_train_disturbed(204.1e-6, 190.8e-6, 10.2e-6, bound, -1));

  // Made again: disturbed, and not a repeat of the train's previous making (previous_s 0: none).
  CHECK(split_train_retry(214.78e-6, 191.54e-6, 11.89e-6, 0, bound, band));
  CHECK_FALSE(split_train_retry(204.1e-6, 190.8e-6, 10.2e-6, 0, bound, band));  // undisturbed
  // A runner process whose synced call costs ~5 us more than the owner's (H200 23:55Z: synced
  // 208.1, back to back 191.1, cost 9.84, floor 194.3 us, three makings alike): the second making,
  // within 1 % of the first, is kept.
  const double first = split_train_time_s(207.62e-6, 190.65e-6, 9.84e-6, bound);
  CHECK(first == Approx(0.98 * (207.62e-6 - 9.84e-6)));
  CHECK_FALSE(split_train_retry(208.12e-6, 191.09e-6, 9.84e-6, first, bound, band));
  // After a stall (first making 362.9 us), a making at 196.3 us is no repeat: made again.
  CHECK(split_train_retry(210.3e-6, 191.1e-6, 10.0e-6, 362.9e-6, bound, band));
  // mempool_scratch on odd_1m (synced 240.0 and 219.2 us, back to back 34.0 and 33.7, cost 9.1 and
  // 9.8: its pool freed at every sync): 9 % apart, made again; a third at 215.1 us is kept.
  const double m1 = split_train_time_s(240.03e-6, 34.03e-6, 9.06e-6, bound);
  CHECK(split_train_retry(219.21e-6, 33.70e-6, 9.82e-6, m1, bound, band));
  const double m2 = split_train_time_s(219.21e-6, 33.70e-6, 9.82e-6, bound);
  CHECK_FALSE(split_train_retry(218.0e-6, 33.5e-6, 9.7e-6, m2, bound, band));
  // band -1 never finds a repeat.
  CHECK(split_train_retry(204.1e-6, 190.8e-6, 10.2e-6, split_train_time_s(204.1e-6, 190.8e-6, 10.2e-6, bound), bound, -1));
}

TEST_CASE("diagnosis: last_cpu_of reads the CPU a process last ran on, whatever its name", "[runner][resident]") {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  const int self = last_cpu_of(::getpid());
  CHECK(self >= 0);
  if (cpus > 0) CHECK(self < cpus);
  // A child whose name holds spaces and parentheses (the stat line's name field is parsed from its last ')').
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "a) b (c) 4 5", 0, 0, 0);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  const int theirs = last_cpu_of(child);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  CHECK(theirs >= 0);
  if (cpus > 0) CHECK(theirs < cpus);
  CHECK(last_cpu_of(0) == -1);
  CHECK(last_cpu_of(child) == -1);  // reaped: no /proc entry
}

TEST_CASE("class 3, disturbed trains: the frame checker wants one more train when the parent discards one",
          "[runner][resident][frames][threat]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[1]};
  Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  job.gpu_slots = SlotsRole::user;
  job.workloads[0].train = 8;
  job.workloads[0].split = 4;
  job.gpu_slots_bytes = 2ull << 20;
  auto to_train = [&](FrameChecker& c) {
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    REQUIRE(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", 1}}) == "");
    CHECK_FALSE(c.train_again());  // no train yet
    REQUIRE(c.accept({{"event", "timing_ready"}, {"workload", 0}, {"seq", 2}}) == "");
    CHECK_FALSE(c.train_again());  // no train_end yet
    return std::uint64_t{3};
  };
  FrameChecker c(job);
  std::uint64_t seq = to_train(c);
  CHECK(c.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq++}}) == "");
  CHECK(c.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 8}, {"seq", seq++}}) == "");
  REQUIRE(c.train_again());
  // The discarded train's end does not end the phase: timing_end is not due yet, a train is.
  {
    FrameChecker d = c;
    CHECK(d.accept({{"event", "timing_end"}, {"workload", 0}, {"samples", 3}, {"seq", seq}}) != "");
  }
  {
    FrameChecker d = c;  // the new train needs its own train_half
    CHECK(d.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 8}, {"seq", seq}}) != "");
  }
  CHECK(c.accept({{"event", "primed"}, {"workload", 0}, {"seq", seq++}}) == "");
  CHECK(c.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq++}}) == "");
  CHECK(c.accept({{"event", "train_end"}, {"workload", 0}, {"calls", 7}, {"seq", seq++}}) == "");
  {
    FrameChecker d = c;  // no third train unasked
    CHECK(d.accept({{"event", "train_half"}, {"workload", 0}, {"calls", 4}, {"seq", seq}}) != "");
  }
  CHECK(c.accept({{"event", "timing_end"}, {"workload", 0}, {"samples", 3}, {"seq", seq++}}) == "");
  CHECK(c.all_done());
  CHECK_FALSE(c.train_again());  // the phase is over
  // The runner tells another train from the phase line.
  CHECK(is_train_line(train_line(0, 3, 0.03, 3)));
  CHECK_FALSE(is_train_line(prime_line(0)));
  CHECK_FALSE(is_train_line(R"({"go": 0, "warmup": 2})"));
  CHECK_FALSE(is_train_line("not json"));
}

TEST_CASE("class 3, the split train: rooms of at least twice the least calls are halved, after the fit; off leaves none",
          "[runner][resident][threat]") {
  std::vector<const d2k::tasks::Workload*> wls;
  for (const auto& w : vector_add().workloads) wls.push_back(&w);
  Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  REQUIRE(job.workloads.size() >= 3);
  job.workloads[0].train = 0;   // no train
  job.workloads[1].train = 5;   // fewer than 2 x 3
  job.workloads[2].train = 33;  // odd: the first half 16, the second 17
  EvalConfig cfg;
  REQUIRE(cfg.train_split);  // the default
  REQUIRE(cfg.train_min_calls == 3);
  assign_splits(cfg, job);
  CHECK(job.workloads[0].split == 0);
  CHECK(job.workloads[1].split == 0);
  CHECK(job.workloads[2].split == 16);
  job.workloads[1].train = 6;
  assign_splits(cfg, job);
  CHECK(job.workloads[1].split == 3);
  // Every split the job carries is one the wire takes (a first half that leaves calls for the second).
  job.gpu_slots = SlotsRole::user;
  job.gpu_slots_bytes = 2ull << 20;
  CHECK(job_from_json(to_json(job)).workloads[2].split == 16);
  cfg.train_split = false;
  assign_splits(cfg, job);
  for (const auto& wl : job.workloads) CHECK(wl.split == 0);
}
