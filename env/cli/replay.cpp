// `d2k replay FILE`: shows an episode log step by step; `--verify` re-executes it on a fresh
// environment and compares every reply with the recorded one (docs/debugging.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <iostream>
#include <sstream>
#include <thread>

#include "env/cli/recording.hpp"
#include "env/episode_log.hpp"
#include "env/gpu_setup.hpp"
#include "env/recorder.hpp"
#include "env/server.hpp"
#include "protocol/client.hpp"
#include "protocol/codec.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::cli {

using nlohmann::json;

namespace {

std::string s_of(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string num(const json& j, const char* f = "%.4g") {
  if (!j.is_number()) return j.is_null() ? "n/a" : j.dump();
  char buf[64];
  std::snprintf(buf, sizeof buf, f, j.get<double>());
  return buf;
}

const json& at(const json& j, const char* key) {
  static const json null;
  if (!j.is_object()) return null;
  auto it = j.find(key);
  return it == j.end() ? null : *it;
}

std::string action_summary(const json& action) {
  std::string type = s_of(action, "type");
  std::ostringstream o;
  o << type;
  if (type == "write_file") o << " " << s_of(action, "path") << " (" << s_of(action, "content").size() << " bytes)";
  if (type == "edit") o << " " << s_of(action, "path");
  if (type == "patch") o << " (" << s_of(action, "diff").size() << " bytes of diff)";
  return o.str();
}

std::string timestamp(double unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

std::string render_exchange(const json& request, const json& reply, FileMap& files) {
  std::ostringstream o;
  std::string op = s_of(request, "op");
  o << op;
  if (op == "step") o << " " << action_summary(at(request, "action"));
  if (op == "reset")
    o << " task " << s_of(request, "task") << " L" << s_of(request, "layer")
      << (at(request, "seed").is_null() ? "" : " seed " + s_of(request, "seed"));
  if (!reply.value("ok", false)) {
    const json& e = at(reply, "error");
    o << "\n  request refused [" << s_of(e, "code") << "] " << s_of(e, "message") << "\n";
    return o.str();
  }
  o << "\n";
  const json& obs = at(reply, "observation");
  if (const json& f = at(obs, "files"); f.is_object()) {
    FileMap now;
    for (auto it = f.begin(); it != f.end(); ++it)
      if (it->is_string()) now[it.key()] = it->get<std::string>();
    if (op != "reset") {
      std::string diff = make_unified_diff(files, now);
      if (!diff.empty()) {
        std::istringstream lines(diff);
        for (std::string line; std::getline(lines, line);) o << "  | " << line << "\n";
      }
    }
    files = std::move(now);
  }
  const json& last = at(obs, "last");
  if (op == "step" && last.is_object()) {
    o << "  " << (last.value("ok", false) ? "ok" : "FAILED");
    if (const json& e = at(last, "error"); e.is_object()) o << " [" << s_of(e, "code") << "] " << s_of(e, "message");
    o << "\n";
    if (const json& c = at(last, "compile"); c.is_object()) {
      o << "  compile " << (c.value("ok", false) ? "ok" : "failed") << " in " << num(at(c, "seconds"), "%.2f") << " s"
        << (c.value("cached", false) ? " (cached)" : "") << "\n";
      if (const json& d = at(c, "diagnostics"); d.is_array())
        for (const json& x : d)
          o << "    " << s_of(x, "file") << ":" << s_of(x, "line") << ":" << s_of(x, "column") << ": "
            << s_of(x, "severity") << ": " << s_of(x, "message") << "\n";
    }
    if (const json& ev = at(last, "evaluation"); ev.is_object()) {
      o << "  evaluation " << s_of(ev, "status");
      if (!s_of(ev, "message").empty()) o << ": " << s_of(ev, "message");
      o << "\n";
    }
    const json& b = at(at(reply, "info"), "reward");
    if (b.is_object())
      o << "  correct " << s_of(b, "correct") << ", t " << num(at(b, "t_agent_us")) << " us (expert "
        << num(at(b, "t_expert_us")) << ", baseline " << num(at(b, "t_baseline_us")) << "), score "
        << num(at(b, "score")) << ", speedup " << num(at(b, "speedup_vs_baseline")) << "\n";
    o << "  reward " << num(at(reply, "reward")) << (reply.value("terminated", false) ? ", terminated" : "")
      << (reply.value("truncated", false) ? ", truncated" : "") << "\n";
  }
  if (obs.is_object() && obs.value("done", false) && op == "step")
    o << "  episode ended: " << s_of(obs, "end_reason") << "\n";
  if (op == "close") o << "  closed after " << s_of(reply, "steps") << " steps, total reward " << num(at(reply, "total_reward")) << "\n";
  return o.str();
}

namespace {

struct ReplayOptions {
  std::string file;
  bool verify = false;
  std::string endpoint;  // verify against a running server
  std::string tasks;
  double tolerance = 0.25;
  bool quiet = false;
};

void show(const env::EpisodeLog& log, std::ostream& out) {
  const json& h = log.header;
  out << "episode " << s_of(h, "session") << ": task " << s_of(at(h, "task"), "id") << " (hash "
      << s_of(at(h, "task"), "content_hash").substr(0, 16) << ") L" << s_of(h, "layer") << ", seed "
      << s_of(h, "seed") << (s_of(h, "label").empty() ? "" : ", label " + s_of(h, "label")) << "\n";
  const json& server = at(h, "server");
  // The toolchain string is the compilers' full version banners; show their version lines.
  std::string toolchain;
  std::istringstream banner(s_of(server, "toolchain"));
  for (std::string line; std::getline(banner, line);)
    if (line.find("release") != std::string::npos || line.find("g++") != std::string::npos ||
        line.find("clang") != std::string::npos)
      toolchain += (toolchain.empty() ? "" : "; ") + line;
  out << "server " << s_of(server, "version") << ", protocol " << s_of(h, "protocol") << ", log format "
      << log.format_version << "\ntoolchain: " << (toolchain.empty() ? s_of(server, "toolchain") : toolchain) << "\n";
  if (const json& g = at(server, "gpus"); g.is_array() && !g.empty())
    for (const json& x : g) out << "gpu " << s_of(x, "index") << ": " << s_of(x, "name") << "\n";
  else
    out << "gpu: none (compile-only)\n";
  out << "started " << timestamp(h.value("started_at", 0.0)) << "\n\n";
  FileMap files;
  double t0 = h.value("started_at", 0.0);
  for (const env::LogExchange& x : log.exchanges) {
    char head[96];
    std::snprintf(head, sizeof head, "#%llu  +%.3f s  (%.3f s)  ", static_cast<unsigned long long>(x.n),
                  x.t_request - t0, x.t_reply - x.t_request);
    out << head << render_exchange(x.request, x.reply, files);
  }
  if (log.end)
    out << "\nended: " << s_of(*log.end, "end_reason") << " (" << s_of(*log.end, "reason") << "), "
        << s_of(*log.end, "steps") << " steps, total reward " << num(at(*log.end, "total_reward")) << ", outcome "
        << s_of(*log.end, "outcome") << "\n";
  else
    out << "\nno end record yet: the session is still open on a running server (replay again after it ends),\n"
           "or its server stopped before the session ended (killed?)\n";
  if (log.torn_tail)
    out << "torn tail at byte " << log.torn_tail->offset << " (" << log.torn_tail->bytes
        << " bytes unreadable: " << log.torn_tail->reason << "); everything before it is shown\n";
}

// Why this build cannot replay the log, or "" when it can.
std::string compatibility(const env::EpisodeLog& log) {
  const json& p = at(log.header, "protocol");
  if (!p.is_number_unsigned())
    return "the header names no protocol version";
  if (p.get<std::uint64_t>() != protocol::kVersion)
    return "the log was recorded with protocol v" + p.dump() + "; this build speaks v" +
           std::to_string(protocol::kVersion) + " only";
  return "";
}

int verify(const ReplayOptions& opt, const env::EpisodeLog& log) {
  if (std::string why = compatibility(log); !why.empty()) {
    std::cerr << "d2k replay: cannot verify " << opt.file << ": " << why << "\n";
    return 2;
  }
  if (log.exchanges.empty() || s_of(log.exchanges.front().request, "op") != "reset") {
    std::cerr << "d2k replay: cannot verify " << opt.file << ": the log holds no reset\n";
    return 2;
  }
  std::unique_ptr<env::Server> server;
  std::thread thread;
  std::filesystem::path state;
  std::string endpoint = opt.endpoint;
  if (endpoint.empty()) {
    env::Config config;
    const json& cfg = at(at(log.header, "server"), "config");
    if (cfg.is_object()) {
      try {
        config = env::Config::from_json(cfg);
      } catch (const std::exception& e) {
        std::cerr << "d2k replay: cannot verify " << opt.file << ": the recorded server config does not load here ("
                  << e.what() << ")\n";
        return 2;
      }
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "d2k-replay-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    state = tmpl;
    config.state_dir = state;
    config.log_dir.clear();
    config.catalogue.clear();
    config.record = false;
    config.events_endpoint = "none";
    config.endpoint = "ipc://" + (state / "server.sock").string();
    config.tasks_dir = std::filesystem::absolute(opt.tasks.empty() ? default_tasks_dir() : std::filesystem::path(opt.tasks));
    config.compile_workers = 1;
    config.finalize();
    tasks::TaskSet set = tasks::load_tasks(config.tasks_dir);
    const json& task = at(log.header, "task");
    const tasks::Task* t = set.find(s_of(task, "id"));
    if (!t) {
      std::cerr << "d2k replay: cannot verify: task '" << s_of(task, "id") << "' is not in " << config.tasks_dir << "\n";
      return 2;
    }
    if (t->content_hash != s_of(task, "content_hash")) {
      std::cerr << "d2k replay: cannot verify: task '" << t->id << "' changed since the recording (content hash "
                << s_of(task, "content_hash").substr(0, 16) << " recorded, " << t->content_hash.substr(0, 16)
                << " here)\n";
      return 2;
    }
    std::string note;
    std::shared_ptr<env::GpuBackend> gpu = env::make_gpu_backend(config, set, note);
    server = std::make_unique<env::Server>(config, std::move(set), gpu);
    server->bind();
    endpoint = server->endpoint();
    thread = std::thread([&] { server->run(); });
  }
  struct Cleanup {
    std::unique_ptr<env::Server>& s;
    std::thread& t;
    std::filesystem::path dir;
    ~Cleanup() {
      if (t.joinable()) {
        s->request_stop();
        t.join();
      }
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{server, thread, state};

  Client::Options co;
  co.timeout = std::chrono::milliseconds(600000);
  co.retries = 0;
  Client client(endpoint, co);
  std::string recorded_session = s_of(log.header, "session");
  std::string session;
  std::size_t compared = 0, skipped_busy = 0;
  // The log is in reply order; requests are sent again in the order they arrived, and a request
  // that arrived while earlier ones were in flight (a close or a busy step during a compile) is
  // sent while they are in flight again: replies are collected by request id (issue 22.8).
  std::vector<const env::LogExchange*> by_arrival;
  for (const env::LogExchange& x : log.exchanges) by_arrival.push_back(&x);
  std::stable_sort(by_arrival.begin(), by_arrival.end(),
                   [](const auto* a, const auto* b) { return a->t_request < b->t_request; });
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 600000);
  dealer.connect(endpoint);
  protocol::Limits reply_limits;
  reply_limits.max_message_bytes = 256u << 20;
  std::map<std::uint64_t, const env::LogExchange*> outstanding;
  auto diverged = [&](const env::LogExchange& x, const json& replayed) {
    json a = x.reply, b = replayed;
    for (json* r : {&a, &b})
      if (r->is_object() && r->contains("session")) (*r)["session"] = "(session)";
    if (auto d = env::compare_recorded(a, b, opt.tolerance)) {
      const std::string op = s_of(x.request, "op");
      std::cout << "DIVERGED at exchange #" << x.n << " (" << op
                << (op == "step" ? " " + s_of(at(x.request, "action"), "type") : std::string()) << ")\n"
                << "  path:     " << (d->path.empty() ? "/" : d->path) << "\n"
                << "  recorded: " << d->recorded.dump().substr(0, 400) << "\n"
                << "  replayed: " << d->replayed.dump().substr(0, 400) << "\n";
      return true;
    }
    ++compared;
    return false;
  };
  // Waits for one reply; false when it diverged or none came.
  auto collect_one = [&]() -> bool {
    zmq::message_t m;
    if (!dealer.recv(m)) {
      std::cout << "DIVERGED: no reply from the replay server in time\n";
      return false;
    }
    json reply = protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), reply_limits);
    auto it = outstanding.find(reply.value("id", std::uint64_t{0}));
    if (it == outstanding.end()) return true;  // not one we wait for
    const env::LogExchange& x = *it->second;
    outstanding.erase(it);
    if (s_of(x.request, "op") == "reset" && reply.value("ok", false)) session = s_of(reply, "session");
    return !diverged(x, reply);
  };
  for (const env::LogExchange* xp : by_arrival) {
    const env::LogExchange& x = *xp;
    // A request answered `busy` had no effect and only says an action was in flight: how far that
    // action had got is a matter of timing, so it is not sent again.
    if (at(at(x.reply, "error"), "code") == "busy") {
      ++skipped_busy;
      continue;
    }
    // Everything answered before this request arrived is answered before it is sent again.
    for (;;) {
      bool wait = false;
      for (const auto& [id, earlier] : outstanding) wait = wait || earlier->t_reply <= x.t_request;
      if (!wait) break;
      if (!collect_one()) return 1;
    }
    json request = x.request;
    std::string op = s_of(request, "op");
    if (op == "reset") {
      request["seed"] = log.header.at("seed");
      if (!request.contains("options") || !request["options"].is_object()) request["options"] = json::object();
      request["options"]["record"] = false;
    } else if (request.contains("session")) {
      request["session"] = session;
    }
    outstanding[request.value("id", std::uint64_t{0})] = &x;
    dealer.send(zmq::buffer(protocol::encode(request)), zmq::send_flags::none);
  }
  while (!outstanding.empty())
    if (!collect_one()) return 1;
  if (!session.empty() && !log.end) {
    try {
      client.close(session);
    } catch (const std::exception&) {
    }
  }
  std::cout << "verified: " << compared << " exchange(s) of session " << recorded_session
            << " replay identically (timings ignored; measured times within " << opt.tolerance * 100 << "%)"
            << (skipped_busy ? "; " + std::to_string(skipped_busy) + " busy answer(s) not re-sent (no effect)" : std::string())
            << (log.torn_tail ? "; the log has a torn tail, verified up to it" : "") << "\n";
  return 0;
}

}  // namespace

void add_replay(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("replay", "Show an episode log step by step; --verify re-executes it");
  auto opt = std::make_shared<ReplayOptions>();
  cmd->add_option("file", opt->file, "Episode log (<state dir>/episodes/<session>.d2klog)")->required();
  cmd->add_flag("--verify", opt->verify,
                "Re-execute every request on a fresh environment with the recorded seeds and compare every reply "
                "field (timings excepted); exit 1 at the first divergence");
  cmd->add_option("--endpoint", opt->endpoint, "Verify against this running server instead of an in-process one");
  cmd->add_option("--tasks", opt->tasks, "Tasks folder for the in-process server (default: the built-in tasks)");
  cmd->add_option("--tolerance", opt->tolerance,
                  "Relative tolerance for measured GPU times and the scores and rewards derived from them")
      ->capture_default_str();
  cmd->add_flag("--quiet,-q", opt->quiet, "With --verify: do not show the episode first");
  cmd->callback([&run, opt] {
    run = [opt]() -> int {
      env::EpisodeLog log;
      try {
        log = env::read_episode_log(opt->file);
      } catch (const env::LogError& e) {
        std::cerr << "d2k replay: " << e.what() << "\n";
        return 2;
      }
      if (!opt->verify || !opt->quiet) show(log, std::cout);
      if (!opt->verify) return 0;
      std::cout << std::flush;
      return verify(*opt, log);
    };
  });
}

}  // namespace d2k::cli
