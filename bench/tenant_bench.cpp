// How long one client's pathological `patch` holds the server loop (issue 22.6): the time of
// apply_unified_diff on hostile diffs, and another client's `observe` round trip while several
// sessions send such patches to a real server. Prints figures; asserts nothing.
//   build/bin/bench_tenants [--attackers 4] [--sections 40] [--seconds 10] [--record 0|1]
//                           [--victim-record 0|1] [--endpoint tcp://127.0.0.1:5598] [--state-in /tmp]
//                           [--flood-sessions 16]
// --flood-sessions N (issue 22.6, per-client fairness): a last phase where one flooding client (one
// connection) keeps an honest patch in flight on each of N sessions of the 256 KiB file, while the
// victim alternates observe and a small write_file step (its step queues with the flood's for the
// step workers). 0 skips it.
// --victim-record 0 (with --record 1): the victim's own session is not logged (reset
// options.record=false), so its observe waits for no fdatasync of its own: what it measures is
// the delay the others' logging causes it, not its own disk write.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.hpp"
#include "env/patch.hpp"
#include "env/server.hpp"
#include "protocol/client.hpp"
#include "protocol/codec.hpp"

using namespace std::chrono;
using d2k::protocol::Value;

namespace {

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

// A 256 KiB file of identical short lines whose only distinct line is the last one.
std::string hostile_file() {
  std::string f;
  for (int i = 0; i < 131000; ++i) f += "a\n";
  return f + "b\n";
}

// `sections` copies of one file section whose context-only hunk (k lines "a", then "b") is stated at
// line 1 but matches only at the end of the file: each placement scans the whole file, and with a
// line-by-line search each position compares k lines. Applying it leaves the file unchanged.
std::string far_hunk_diff(int k, int sections) {
  std::string section = "--- a/kernel.cu\n+++ b/kernel.cu\n@@ -1," + std::to_string(k + 1) + " +1," +
                        std::to_string(k + 1) + " @@\n";
  for (int i = 0; i < k; ++i) section += " a\n";
  section += " b\n";
  std::string d;
  for (int i = 0; i < sections; ++i) d += section;
  return d;
}

// One hunk whose old lines occur nowhere: k lines "a" then "c".
std::string no_match_diff(int k) {
  std::string d = "--- a/kernel.cu\n+++ b/kernel.cu\n@@ -1," + std::to_string(k + 1) + " +1," +
                  std::to_string(k + 1) + " @@\n";
  for (int i = 0; i < k; ++i) d += " a\n";
  return d + " c\n";
}

double apply_ms(const d2k::FileMap& files, const std::string& diff, std::string& outcome) {
  auto t0 = steady_clock::now();
  try {
    d2k::FileMap out = d2k::apply_unified_diff(files, diff);
    outcome = "applied";
  } catch (const d2k::PatchError& e) {
    outcome = std::string("refused: ") + std::string(e.what()).substr(0, 70);
  }
  return duration<double, std::milli>(steady_clock::now() - t0).count();
}

// One flooding client on one connection: N sessions with the 256 KiB file, an honest one-hunk patch
// always in flight on each; the victim (another client) alternates observe and a small step.
void flood_phase(const std::string& endpoint, const std::string& file, int n, double seconds, bool victim_record) {
  const std::string patch = "--- a/kernel.cu\n+++ b/kernel.cu\n@@ -131001 +131001 @@\n-b\n+b\n";
  std::atomic<bool> ready{false}, stop{false};
  std::atomic<long> answered{0};
  std::thread flood([&] {
    zmq::context_t ctx;
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::rcvtimeo, 200);
    dealer.connect(endpoint);
    d2k::protocol::Limits limits;
    limits.max_message_bytes = 256u << 20;
    std::uint64_t next_id = 1;
    auto send = [&](Value r) {
      r["v"] = 1;
      r["id"] = next_id;
      dealer.send(zmq::buffer(d2k::protocol::encode(r)), zmq::send_flags::none);
      return next_id++;
    };
    auto recv = [&]() -> std::optional<Value> {
      zmq::message_t m;
      if (!dealer.recv(m)) return std::nullopt;
      return d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), limits);
    };
    auto call = [&](Value r) {
      const std::uint64_t id = send(std::move(r));
      for (;;)
        if (auto reply = recv(); reply && (*reply)["id"] == id) return *reply;
    };
    std::vector<std::string> sessions;
    for (int i = 0; i < n; ++i) {
      Value r = call({{"op", "reset"}, {"task", "vector_add"}, {"layer", 1}, {"seed", 900 + i},
                      {"options", {{"max_steps", 1000}}}});
      sessions.push_back(r["session"].get<std::string>());
      call({{"op", "step"}, {"session", sessions.back()},
            {"action", {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", file}}}});
    }
    std::map<std::uint64_t, std::size_t> in_flight;
    auto step = [&](std::size_t i) {
      in_flight[send({{"op", "step"}, {"session", sessions[i]}, {"action", {{"type", "patch"}, {"diff", patch}}}})] = i;
    };
    for (std::size_t i = 0; i < sessions.size(); ++i) step(i);
    ready = true;
    while (!stop.load()) {
      auto reply = recv();
      if (!reply) continue;
      auto it = in_flight.find((*reply)["id"].get<std::uint64_t>());
      if (it == in_flight.end()) continue;
      const std::size_t i = it->second;
      in_flight.erase(it);
      ++answered;
      if ((*reply)["ok"] == true && !(*reply)["truncated"].get<bool>() && !(*reply)["terminated"].get<bool>()) step(i);
    }
    for (int wait = 0; !in_flight.empty() && wait < 50; ++wait)  // at most 10 s for those in flight
      if (auto reply = recv()) in_flight.erase((*reply)["id"].get<std::uint64_t>());
    for (const auto& s : sessions) call({{"op", "close"}, {"session", s}});
  });
  while (!ready.load()) std::this_thread::sleep_for(milliseconds(10));
  d2k::Client victim(endpoint);
  Value options = {{"max_steps", 1000}};
  if (!victim_record) options["record"] = false;
  std::string vs = victim.reset("vector_add", 1, 8, options)["session"].get<std::string>();
  std::vector<double> observe_ms, step_ms;
  const auto end = steady_clock::now() + duration<double>(seconds);
  for (int i = 0; steady_clock::now() < end; ++i) {
    auto t0 = steady_clock::now();
    victim.observe(vs);
    auto t1 = steady_clock::now();
    Value r = victim.step(vs, {{"type", "write_file"}, {"path", "v.h"}, {"content", std::to_string(i)}});
    auto t2 = steady_clock::now();
    observe_ms.push_back(duration<double, std::milli>(t1 - t0).count());
    step_ms.push_back(duration<double, std::milli>(t2 - t1).count());
    if (r["truncated"].get<bool>() || r["terminated"].get<bool>()) {
      victim.close(vs);
      vs = victim.reset("vector_add", 1, 8, options)["session"].get<std::string>();
    }
  }
  stop = true;
  flood.join();
  victim.close(vs);
  std::printf("  1 flooding client, %d sessions on one connection, an honest patch in flight on each, %.0f s: %ld answered\n",
              n, seconds, answered.load());
  std::printf("    victim observe (ms)    p50 %8.2f  p99 %8.2f  max %8.2f  (n=%zu)\n", pct(observe_ms, 0.5),
              pct(observe_ms, 0.99), pct(observe_ms, 1.0), observe_ms.size());
  std::printf("    victim step (ms)       p50 %8.2f  p99 %8.2f  max %8.2f  (n=%zu)\n", pct(step_ms, 0.5),
              pct(step_ms, 0.99), pct(step_ms, 1.0), step_ms.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint = "tcp://127.0.0.1:5598";
  int attackers = 4, sections = 40, record = 0, victim_record = 1, flood_sessions = 16;
  double seconds = 10;
  std::string state_in = "/tmp";  // where the server's state (and episode logs) go: its filesystem's fdatasync is measured
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  d2k::bench::Args args("bench_tenants",
                        "How long one client's pathological `patch` holds the server loop (issue 22.6): apply_unified_diff\n"
                        "on hostile diffs over a 256 KiB file, then another client's `observe` round trip while other\n"
                        "sessions send such patches to a real server, then (--flood-sessions) one client flooding honest\n"
                        "patches. Prints figures; asserts nothing. bench/README.md has the figures.");
  args.option("--endpoint", &endpoint, "the server's ZeroMQ endpoint");
  args.option("--attackers", &attackers, "sessions sending patches back to back (0: only the flood phase)");
  args.option("--sections", &sections, "file sections of the hostile diff");
  args.option("--seconds", &seconds, "length of each live phase");
  args.option("--record", &record, "1: episode logs for every session; 0: none");
  args.option("--victim-record", &victim_record, "with --record 1, 0 leaves the victim's own session unlogged");
  args.option("--state-in", &state_in, "folder for the server's state (its filesystem's fdatasync is measured)");
  args.option("--flood-sessions", &flood_sessions, "sessions of the flooding client (0 skips that phase)");
  if (const int rc = args.parse(argc, argv); rc >= 0) return rc;
  if (attackers < 0 || sections < 1 || seconds <= 0 || flood_sessions < 0) {
    std::fprintf(stderr, "bench_tenants: --attackers and --flood-sessions must be at least 0, --sections at least 1, --seconds above 0\n");
    return 2;
  }
  const std::string file = hostile_file();
  d2k::FileMap files{{"kernel.cu", file}};
  struct Case {
    const char* name;
    std::string diff;
  };
  std::vector<Case> cases = {
      {"far hunk, k=350, 1 section", far_hunk_diff(350, 1)},
      {"far hunk, k=350, N sections", far_hunk_diff(350, sections)},
      {"no match, k=2000", no_match_diff(2000)},
      {"no match, k=100000", no_match_diff(100000)},
      {"no match, k=2.7M (8 MiB diff)", no_match_diff(2'700'000)},
  };
  std::printf("d2k bench_tenants: apply_unified_diff on a 256 KiB file of 131001 lines (best of 3)\n");
  for (const Case& c : cases) {
    std::string outcome;
    double ms = 1e30;
    for (int rep = 0; rep < 3; ++rep) ms = std::min(ms, apply_ms(files, c.diff, outcome));  // best of 3
    std::printf("  %-32s diff %8zu B  %9.2f ms  %s\n", c.name, c.diff.size(), ms, outcome.c_str());
  }

  std::string state_template = state_in + "/d2k-bench-tenants-XXXXXX";
  char* state = state_template.data();
  if (!::mkdtemp(state)) return 1;
  d2k::env::Config cfg;
  cfg.endpoint = endpoint;
  cfg.tasks_dir = D2K_TASKS_DIR;
  cfg.state_dir = state;
  cfg.record = record != 0;  // off by default: the figure is then the loop's work, not the disk's fdatasync
  cfg.finalize();
  d2k::env::Server server(cfg, d2k::tasks::load_tasks(cfg.tasks_dir));
  server.bind();
  std::thread loop([&] { server.run(); });

  d2k::Client victim(server.endpoint());
  std::string vs = victim.reset("vector_add", 1, 7, victim_record ? Value::object() : Value{{"record", false}})["session"]
                       .get<std::string>();
  std::vector<double> quiet;
  for (int i = 0; i < 500; ++i) {  // no attacker yet
    auto t0 = steady_clock::now();
    victim.observe(vs);
    if (i >= 50) quiet.push_back(duration<double, std::milli>(steady_clock::now() - t0).count());
  }
  auto attacked = [&](const std::string& attack, const char* label) {
    std::atomic<bool> stop{false};
    std::atomic<long> patches{0};
    std::vector<std::thread> threads;
    for (int a = 0; a < attackers; ++a) {
      threads.emplace_back([&, a] {
        d2k::Client c(server.endpoint());
        auto fresh = [&] {
          std::string s = c.reset("vector_add", 1, 500 + a, {{"max_steps", 1000}})["session"].get<std::string>();
          c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", file}});
          return s;
        };
        std::string s = fresh();
        for (int n = 1; !stop.load(); ++n) {
          c.step(s, {{"type", "patch"}, {"diff", attack}});
          ++patches;
          if (n % 900 == 0) {  // a fresh episode before the step budget ends this one
            c.close(s);
            s = fresh();
          }
        }
        c.close(s);
      });
    }
    std::vector<double> loaded;
    auto end = steady_clock::now() + duration<double>(seconds);
    while (steady_clock::now() < end) {
      auto t0 = steady_clock::now();
      victim.observe(vs);
      loaded.push_back(duration<double, std::milli>(steady_clock::now() - t0).count());
    }
    stop = true;
    for (auto& t : threads) t.join();
    std::printf("  %d attackers, %s (%zu B diff), %.0f s: %ld patches answered\n", attackers, label, attack.size(),
                seconds, patches.load());
    std::printf("    victim observe (ms)    p50 %8.2f  p99 %8.2f  max %8.2f  (n=%zu)\n", pct(loaded, 0.5),
                pct(loaded, 0.99), pct(loaded, 1.0), loaded.size());
  };
  std::printf("server (episode logs %s%s), the attackers' kernel.cu is the 256 KiB file above:\n", record ? "on" : "off",
              record && !victim_record ? ", not the victim's" : "");
  std::printf("  no attacker\n    victim observe (ms)    p50 %8.2f  p99 %8.2f  max %8.2f  (n=%zu)\n", pct(quiet, 0.5),
              pct(quiet, 0.99), pct(quiet, 1.0), quiet.size());
  // Control: a one-line hunk at its stated line, the cheapest patch of that file; the rest of a
  // step (the observation in the reply holds the 256 KiB file) costs the same.
  if (attackers > 0) {  // --attackers 0: only the flood phase below
    attacked("--- a/kernel.cu\n+++ b/kernel.cu\n@@ -131001 +131001 @@\n-b\n+b\n", "control: one exact hunk");
    std::string label = "far hunk, k=350, " + std::to_string(sections) + " sections";
    attacked(far_hunk_diff(350, sections), label.c_str());
  }
  victim.close(vs);
  if (flood_sessions > 0) flood_phase(server.endpoint(), file, flood_sessions, seconds, victim_record != 0);
  server.request_stop();
  loop.join();
  std::filesystem::remove_all(state);
  return 0;
}
