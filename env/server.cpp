#include "env/server.hpp"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "env/version.hpp"
#include "protocol/detail/utf8.hpp"
#include "sandbox/jail.hpp"

namespace d2k::env {

using nlohmann::json;
using protocol::Error;
using protocol::ErrorCode;
using protocol::Value;

namespace {

// Compiler output echoes agent source: make it valid UTF-8 before it goes on the wire or in a log.
std::string clean(const std::string& s) { return protocol::detail::sanitize_utf8(s, s.size() + 16); }

json compile_to_json(const sandbox::CompileOutcome& c) {
  json diagnostics = json::array();
  for (const auto& d : c.diagnostics)
    diagnostics.push_back({{"file", clean(d.file)},
                           {"line", d.line},
                           {"column", d.column},
                           {"severity", clean(d.severity)},
                           {"message", clean(d.message)}});
  json out = {{"ok", c.ok},
              {"cached", c.cached},
              {"seconds", c.seconds},
              {"exit_status", c.exit_status},
              {"signal", c.signal},
              {"timed_out", c.timed_out},
              {"sandbox_violation", c.sandbox_violation},
              {"diagnostics", diagnostics},
              {"diagnostics_dropped", c.diagnostics_dropped},
              {"log", clean(c.log)},
              {"log_truncated", c.log_truncated}};
  if (!c.violation.empty()) out["violation"] = clean(c.violation);
  return out;
}

json error_json(const Error& e) { return {{"code", protocol::to_string(e.code)}, {"message", e.what()}}; }

std::string route_key(const Route& route) {
  std::string key;
  for (const auto& f : route) {
    key += std::to_string(f.size());
    key += ':';
    key += f;
  }
  return key;
}

}  // namespace

Server::Server(Config config, tasks::TaskSet tasks, std::shared_ptr<GpuBackend> gpu)
    : config_(std::move(config)), tasks_(std::move(tasks)), gpu_(std::move(gpu)) {
  if (!config_.finalized()) throw std::logic_error("Server: the Config was not finalized (Config::finalize)");
  // Each open episode holds its log file; many sessions need more than the usual 1024 descriptors.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 1u << 16);
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));

  sandbox::CompilerConfig cc;
  cc.cache_dir = config_.state_dir / "compile-cache";
  cc.scratch_dir = config_.state_dir / "scratch";
  cc.hidden_paths = config_.hidden_paths();
  cc.deadline = std::chrono::milliseconds(static_cast<long long>(config_.compile_deadline_s * 1000));
  compiler_ = std::make_unique<sandbox::Compiler>(cc);

  auto log_error = [](const std::string& what) { std::cerr << "d2k serve: worker error: " << what << "\n"; };
  compile_pool_ = std::make_unique<WorkerPool>("compile", config_.compile_workers, log_error);
  if (gpu_) {
    gpu_info_ = gpu_->gpus();
    for (std::size_t i = 0; i < gpu_info_.size(); ++i)
      gpu_queues_.push_back(std::make_unique<WorkerPool>("gpu" + std::to_string(i), 1, log_error));
    gpu_load_.assign(gpu_info_.size(), 0);
  }
}

Server::~Server() {
  compile_pool_.reset();
  gpu_queues_.clear();
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void Server::bind() {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::router_mandatory, 0);
  // A hard cap well above our own limit: frames up to it get a typed too_large reply, frames above
  // it make ZeroMQ drop the peer's connection (it never reaches us).
  socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(config_.limits.max_message_bytes * 4));
  try {
    socket_.bind(config_.endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("cannot bind " + config_.endpoint + ": " + e.what());
  }
  bound_endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  if (config_.record || (!config_.events_endpoint.empty() && config_.events_endpoint != "none")) {
    RecorderConfig rc;
    if (config_.record) {
      rc.log_dir = config_.log_dir;
      rc.catalogue = config_.catalogue;
    }
    rc.events_endpoint = config_.events_endpoint == "none"  ? std::string()
                         : config_.events_endpoint.empty() ? default_events_endpoint(bound_endpoint_)
                                                           : config_.events_endpoint;
    rc.server_info = make_server_info(config_, compiler_->toolchain_version(), gpu_info_);
    try {
      recorder_ = std::make_unique<Recorder>(rc);
    } catch (const std::exception& e) {
      // A derived events endpoint (port + 1) may be taken by someone else: serve without live
      // events rather than not at all. An endpoint the user asked for stays an error.
      if (!config_.events_endpoint.empty() || rc.events_endpoint.empty()) throw;
      std::cerr << "d2k serve: no live events (" << e.what() << "); use --events to pick an endpoint\n";
      rc.events_endpoint.clear();
      recorder_ = std::make_unique<Recorder>(rc);
    }
  }
}

void Server::request_stop() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
}

bool Server::work_in_flight() const { return deferred_in_flight_ > 0; }

void Server::run() {
  using clock = std::chrono::steady_clock;
  std::optional<clock::time_point> stop_deadline;
  bool cancelled = false;
  auto last_reap = clock::now();
  for (;;) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, mailbox_.fd(), ZMQ_POLLIN, 0},
                               {nullptr, stop_fd_, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 3, std::chrono::milliseconds(stopping_ ? 100 : 500));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (items[2].revents & ZMQ_POLLIN) {
      std::uint64_t v;
      [[maybe_unused]] auto n = ::read(stop_fd_, &v, sizeof v);
      if (!stopping_) {
        stopping_ = true;
        stop_deadline = clock::now() + std::chrono::milliseconds(
                                           static_cast<long long>(config_.shutdown_grace_s * 1000));
        std::cerr << "d2k serve: stopping; " << deferred_in_flight_ << " action(s) in flight\n";
      }
    }
    if (items[1].revents & ZMQ_POLLIN) mailbox_.drain();
    // Take a bounded batch of requests per turn so completions are never starved.
    for (int i = 0; i < 256; ++i) {
      std::vector<zmq::message_t> frames;
      auto got = zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait);
      if (!got) break;
      on_frames(frames);
    }
    if (stopping_) {
      if (!work_in_flight()) break;
      if (!cancelled && clock::now() > *stop_deadline) {
        std::cerr << "d2k serve: grace period over; cancelling work in flight\n";
        sandbox::cancel_all_jails();
        if (gpu_) gpu_->cancel_all();
        cancelled = true;
      }
    } else if (clock::now() - last_reap > std::chrono::seconds(1)) {
      reap_idle();
      last_reap = clock::now();
    }
  }
  std::vector<std::string> remaining;
  for (auto& [id, session] : sessions_) {
    session.episode->end("server_shutdown");
    remaining.push_back(id);
  }
  for (const auto& id : remaining) erase_session(id, "server_shutdown");
  compile_pool_->stop();
  for (auto& q : gpu_queues_) q->stop();
}

void Server::on_frames(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) return;  // ROUTER always prefixes the routing id; nothing to answer
  Route route;
  for (std::size_t i = 0; i + 1 < frames.size(); ++i) route.emplace_back(frames[i].to_string());
  const auto& payload = frames.back();
  handle(route, std::string_view(static_cast<const char*>(payload.data()), payload.size()));
}

void Server::send(const Route& route, const std::string& bytes) {
  std::vector<zmq::const_buffer> parts;
  for (const auto& f : route) parts.emplace_back(zmq::buffer(f));
  parts.emplace_back(zmq::buffer(bytes));
  try {
    zmq::send_multipart(socket_, parts, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    // A peer that went away or stopped reading: its reply is dropped, the server carries on.
    std::cerr << "d2k serve: reply dropped: " << e.what() << "\n";
  }
}

void Server::handle(const Route& route, std::string_view payload) {
  ++requests_;
  const double t_request = unix_now();
  std::optional<std::uint64_t> id;
  std::optional<protocol::Envelope> parsed;
  Value reply;
  bool deferred = false;
  try {
    Value request = protocol::decode(payload, config_.limits);
    if (request.is_object()) {
      auto it = request.find("id");
      if (it != request.end() && it->is_number_unsigned()) id = it->get<std::uint64_t>();
    }
    parsed = protocol::parse_envelope(request);
    const protocol::Envelope& envelope = *parsed;
    if (stopping_) throw Error(ErrorCode::shutting_down, "the server is shutting down");
    // Retries of ops without a session are answered from the global cache.
    if (envelope.op == "reset" || envelope.op == "close") {
      std::string key = "c" + route_key(route) + "#" + std::to_string(envelope.id);
      if (envelope.op == "close") {
        auto s = envelope.body.find("session");
        key = "x" + (s != envelope.body.end() && s->is_string() ? s->get<std::string>() : std::string()) +
              "#" + std::to_string(envelope.id);
      }
      if (auto hit = global_index_.find(key); hit != global_index_.end()) {
        send(route, *hit->second->second);
        return;
      }
      reply = dispatch(route, envelope, deferred);
      auto bytes = std::make_shared<const std::string>(protocol::encode(reply));
      remember_global(key, bytes);
      record_exchange(envelope, reply, t_request);  // logged before it is sent (as below)
      send(route, *bytes);
      return;
    }
    reply = dispatch(route, envelope, deferred);
    if (deferred) {  // the reply goes out when the work lands (or a retry was answered from the cache)
      if (envelope.op == "step")
        if (auto it = sessions_.find(envelope.body.value("session", "")); it != sessions_.end() &&
                                                                          it->second.in_flight == envelope.id &&
                                                                          it->second.in_flight_request.is_null()) {
          it->second.in_flight_request = envelope.body;
          it->second.in_flight_t = t_request;
        }
      return;
    }
  } catch (const Error& e) {
    ++errors_;
    reply = protocol::make_error_reply(id, e);
  } catch (const std::exception& e) {
    ++errors_;
    std::cerr << "d2k serve: internal error: " << e.what() << "\n";
    reply = protocol::make_error_reply(id, Error(ErrorCode::internal, std::string("internal error: ") + e.what()));
  }
  // Recorded before it is sent: a client holding a reply can rely on its exchange being in the log
  // (a kill -9 right after the send used to lose the last exchange).
  if (parsed) record_exchange(*parsed, reply, t_request);
  send(route, protocol::encode(reply));
}

void Server::record_exchange(const protocol::Envelope& request, const Value& reply, double t_request) try {
  if (request.op == "reset") {
    if (!recorder_ || !reply.value("ok", false)) return;
    auto it = sessions_.find(reply.value("session", ""));
    if (it != sessions_.end()) recorder_->begin(*it->second.episode, request.body, reply, t_request, unix_now());
    return;
  }
  if (request.op != "step" && request.op != "observe" && request.op != "close") return;
  auto s = request.body.find("session");
  if (s == request.body.end() || !s->is_string()) return;
  auto it = sessions_.find(s->get<std::string>());
  if (it == sessions_.end()) return;
  if (recorder_) recorder_->record(*it->second.episode, request.body, reply, t_request, unix_now());
  // A close answered here ends the session once nothing is in flight.
  if (request.op == "close" && it->second.closing && !it->second.in_flight) erase_session(it->first, "closed");
} catch (const std::exception& e) {
  std::cerr << "d2k serve: recording failed: " << e.what() << "\n";  // never the server's end
}

Value Server::dispatch(const Route& route, const protocol::Envelope& request, bool& deferred) {
  const std::string& op = request.op;
  if (op == "hello") return protocol::make_ok_reply(request.id, op_hello());
  if (op == "list_tasks") return protocol::make_ok_reply(request.id, op_list_tasks());
  if (op == "reset") return protocol::make_ok_reply(request.id, op_reset(request));
  if (op == "step") return op_step(route, request, deferred);
  if (op == "observe") return protocol::make_ok_reply(request.id, op_observe(request));
  if (op == "close") return protocol::make_ok_reply(request.id, op_close(request));
  if (op == "stats") return protocol::make_ok_reply(request.id, op_stats());
  throw Error(ErrorCode::unknown_op, "unknown op '" + op + "'", "op");
}

json Server::toolchain_json() const {
  // toolchain_version() is the nvcc banner line, then the host compiler's first line.
  std::string v = compiler_->toolchain_version();
  std::string nvcc = v, host;
  if (auto nl = v.find('\n'); nl != std::string::npos) {
    nvcc = v.substr(0, nl);
    host = v.substr(nl + 1);
    if (auto nl2 = host.find('\n'); nl2 != std::string::npos) host = host.substr(0, nl2);
  }
  return {{"nvcc", clean(nvcc)}, {"host_compiler", clean(host)}};
}

Value Server::op_hello() const {
  json gpus = json::array();
  for (const auto& g : gpu_info_)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_mib", g.memory_mib}});
  const auto& l = config_.limits;
  return {{"server", "d2k-gym"},
          {"version", kVersionString},
          {"protocol", json::array({protocol::kVersion})},
          {"gpus", gpus},
          {"toolchain", toolchain_json()},
          {"limits",
           {{"max_message_bytes", l.max_message_bytes},
            {"max_depth", l.max_depth},
            {"max_string_bytes", l.max_string_bytes},
            {"max_array_items", l.max_array_items},
            {"max_map_entries", l.max_map_entries},
            {"max_file_bytes", l.max_file_bytes},
            {"max_files", l.max_files},
            {"max_path_bytes", l.max_path_bytes},
            {"max_total_items", l.max_total_items},
            {"max_label_bytes", l.max_label_bytes},
            {"max_workspace_bytes", config_.max_workspace_bytes}}},
          {"config", config_.to_json()}};
}

Value Server::op_list_tasks() const {
  json list = json::array();
  for (const auto& t : tasks_.tasks)
    list.push_back({{"id", t.id},
                    {"title", t.title},
                    {"category", t.category},
                    {"layers", json::array({0, 1, 2, 3})},
                    {"workloads", t.visible_workloads().size()}});
  return {{"tasks", list}};
}

std::string Server::new_session_id() {
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 2; ++i) {
    std::uint64_t v = rng_();
    for (int j = 0; j < 16; ++j) id += hex[(v >> (j * 4)) & 15];
  }
  return id;
}

Value Server::op_reset(const protocol::Envelope& request) {
  protocol::ResetRequest r = protocol::parse_reset(request, config_.limits);
  const tasks::Task* task = tasks_.find(r.task);
  if (!task) throw Error(ErrorCode::unknown_task, "no task '" + r.task + "'; list_tasks lists them", "task");
  if (sessions_.size() >= config_.max_sessions)
    throw Error(ErrorCode::capacity,
                "the server holds its maximum of " + std::to_string(config_.max_sessions) +
                    " sessions; close one or retry later");
  Budget b = config_.default_budget;
  const Budget& m = config_.max_budget;
  if (r.options.max_steps) b.max_steps = std::min(*r.options.max_steps, m.max_steps);
  if (r.options.max_compiles) b.max_compiles = std::min(*r.options.max_compiles, m.max_compiles);
  if (r.options.max_evaluations) b.max_evaluations = std::min(*r.options.max_evaluations, m.max_evaluations);
  if (r.options.wall_seconds) b.wall_seconds = std::min(*r.options.wall_seconds, m.wall_seconds);
  if (b.max_steps == 0) throw Error(ErrorCode::bad_request, "max_steps must be at least 1", "options.max_steps");
  Workspace::Limits wl;
  wl.max_files = config_.limits.max_files;
  wl.max_file_bytes = config_.limits.max_file_bytes;
  wl.max_path_bytes = config_.limits.max_path_bytes;
  wl.max_total_bytes = config_.max_workspace_bytes;
  std::uint64_t seed = r.seed ? *r.seed : rng_();
  std::string id = new_session_id();
  Session session;
  session.episode = std::make_unique<Episode>(id, *task, r.layer, seed, b, r.label, wl);
  if (!gpu_load_.empty()) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < gpu_load_.size(); ++i)
      if (gpu_load_[i] < gpu_load_[best]) best = i;
    ++gpu_load_[best];
    session_gpu_[id] = static_cast<int>(best);
  }
  json out = {{"session", id},
              {"observation", session.episode->observation()},
              {"info", session.episode->info()}};
  sessions_.emplace(id, std::move(session));
  ++sessions_opened_;
  return out;
}

Server::Session& Server::find_session(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.closing)
    throw Error(ErrorCode::unknown_session, "no session '" + id.substr(0, 64) + "' (closed, reaped or never opened)",
                "session");
  return it->second;
}

Value Server::step_reply(const Episode& episode, double reward, Value extra_info) const {
  json info = episode.info();
  if (extra_info.is_object())
    for (auto& [k, v] : extra_info.items()) info[k] = v;
  return {{"observation", episode.observation()},
          {"reward", reward},
          {"terminated", episode.terminated()},
          {"truncated", episode.truncated()},
          {"info", info}};
}

Value Server::op_step(const Route& route, const protocol::Envelope& request, bool& deferred) {
  protocol::StepRequest r = protocol::parse_step(request, config_.limits);
  Session& s = find_session(r.session);
  if (auto hit = cached(s, request.id)) {
    send(route, *hit);
    deferred = true;  // already answered
    return {};
  }
  if (s.in_flight) {
    if (*s.in_flight == request.id) {
      s.waiters.push_back(route);
      deferred = true;
      return {};
    }
    throw Error(ErrorCode::busy, "the session already has an action in flight (request id " +
                                     std::to_string(*s.in_flight) + "); wait for its reply");
  }
  Episode& ep = *s.episode;
  ep.touch();
  if (ep.ended())
    throw Error(ErrorCode::episode_ended,
                "the episode ended (" + *ep.end_reason() + "); observe or close it, or reset a new one");
  auto finish = [&](double reward) {
    Value reply = protocol::make_ok_reply(request.id, step_reply(ep, reward));
    remember(s, request.id, std::make_shared<const std::string>(protocol::encode(reply)));
    return reply;
  };
  if (ep.wall_time_exceeded()) {
    ep.end("wall_time");
    return finish(0.0);
  }
  const std::string type(protocol::action_name(r.action));
  json last = {{"action", type}, {"ok", true}};
  double reward = config_.step_reward.ok_step;
  auto fail = [&](const Error& e, double r_fail) {
    last["ok"] = false;
    last["error"] = error_json(e);
    reward = r_fail;
  };

  if (std::holds_alternative<protocol::Compile>(r.action)) {
    if (!ep.compiles_left()) {
      fail(Error(ErrorCode::budget_exhausted, "no compiles left (" + std::to_string(ep.budget().max_compiles) +
                                                   " used)"),
           config_.step_reward.invalid_action);
      ep.record_step(last, reward);
      return finish(reward);
    }
    ep.count_compile();
    start_compile(r.session, route, request.id);
    deferred = true;
    return {};
  }
  if (std::holds_alternative<protocol::Evaluate>(r.action) || std::holds_alternative<protocol::Submit>(r.action)) {
    bool submit = std::holds_alternative<protocol::Submit>(r.action);
    if (!gpu_ || gpu_info_.empty())
      throw Error(ErrorCode::no_gpu,
                  std::string(submit ? "submit" : "evaluate") +
                      " needs a GPU and this server has none; compile works without one");
    if (!submit && !ep.evaluations_left()) {
      fail(Error(ErrorCode::budget_exhausted,
                 "no evaluations left (" + std::to_string(ep.budget().max_evaluations) + " used)"),
           config_.step_reward.invalid_action);
      ep.record_step(last, reward);
      return finish(reward);
    }
    if (!submit) ep.count_evaluation();
    start_evaluation(r.session, route, request.id, submit);
    deferred = true;
    return {};
  }
  try {
    if (auto* w = std::get_if<protocol::WriteFile>(&r.action)) {
      ep.workspace().write(w->path, w->content);
    } else if (auto* e = std::get_if<protocol::Edit>(&r.action)) {
      ep.workspace().edit(e->path, e->old_text, e->new_text);
    } else if (auto* p = std::get_if<protocol::Patch>(&r.action)) {
      ep.workspace().patch(p->diff);
    }
  } catch (const Error& e) {
    fail(e, config_.step_reward.invalid_action);
  }
  ep.record_step(last, reward);
  return finish(reward);
}

void Server::start_compile(const std::string& session_id, const Route& route, std::uint64_t id) {
  Session& s = sessions_.at(session_id);
  s.in_flight = id;
  ++deferred_in_flight_;
  sandbox::CompileRequest req;
  req.files = s.episode->workspace().files();
  req.main_file = s.episode->task().main_file;
  req.flags = s.episode->task().compile_flags;
  compile_pool_->submit([this, req = std::move(req), session_id, route, id]() {
    sandbox::CompileOutcome outcome;
    try {
      outcome = compiler_->compile(req);
    } catch (const std::exception& e) {
      outcome.ok = false;
      outcome.log = std::string("internal error running the compiler: ") + e.what();
    }
    mailbox_.post([this, outcome = std::move(outcome), session_id, route, id]() {
      auto it = sessions_.find(session_id);
      if (it == sessions_.end()) {
        --deferred_in_flight_;
        return;
      }
      Episode& ep = *it->second.episode;
      json last = {{"action", "compile"}, {"ok", outcome.ok}, {"compile", compile_to_json(outcome)}};
      if (!outcome.ok) {
        std::string code = outcome.sandbox_violation ? "sandbox_violation"
                           : outcome.timed_out        ? "timeout"
                                                      : "compile_error";
        std::string message = outcome.sandbox_violation ? "the compiler was stopped by the sandbox: " + outcome.violation
                              : outcome.timed_out       ? "the compile ran past its deadline"
                                                        : "the compile failed; see compile.diagnostics";
        last["error"] = {{"code", code}, {"message", message}};
      }
      double reward = outcome.ok ? config_.step_reward.ok_step : config_.reward.compile_error;
      ep.record_step(last, reward);
      Value reply = protocol::make_ok_reply(id, step_reply(ep, reward));
      finish_deferred(session_id, id, std::move(reply), route);
    });
  });
}

void Server::start_evaluation(const std::string& session_id, const Route& route, std::uint64_t id, bool submit) {
  Session& s = sessions_.at(session_id);
  s.in_flight = id;
  ++deferred_in_flight_;
  int gpu = session_gpu_.count(session_id) ? session_gpu_[session_id] : 0;
  sandbox::CompileRequest req;
  req.files = s.episode->workspace().files();
  req.main_file = s.episode->task().main_file;
  req.flags = s.episode->task().compile_flags;
  EvaluationJob job;
  job.task = &s.episode->task();
  job.include_hidden = submit;
  job.layer = s.episode->layer();
  job.gpu = gpu;
  job.seed = s.episode->seed() ^ (id * 0x9e3779b97f4a7c15ull);
  // Compile on the CPU pool, then queue the timed run on the session's GPU.
  compile_pool_->submit([this, req = std::move(req), job, session_id, route, id, submit, gpu]() mutable {
    sandbox::CompileOutcome outcome;
    try {
      outcome = compiler_->compile(req);
    } catch (const std::exception& e) {
      outcome.ok = false;
      outcome.log = std::string("internal error running the compiler: ") + e.what();
    }
    auto land = [this, session_id, route, id, submit](json last, double reward, json breakdown) {
      mailbox_.post([this, last = std::move(last), reward, breakdown = std::move(breakdown), session_id, route, id,
                     submit]() {
        auto it = sessions_.find(session_id);
        if (it == sessions_.end()) {
          --deferred_in_flight_;
          return;
        }
        Episode& ep = *it->second.episode;
        ep.record_step(last, reward);
        if (submit) ep.end("submitted");
        json extra = json::object();
        if (!breakdown.is_null()) extra["reward"] = breakdown;
        Value reply = protocol::make_ok_reply(id, step_reply(ep, reward, extra));
        finish_deferred(session_id, id, std::move(reply), route);
      });
    };
    const std::string type = submit ? "submit" : "evaluate";
    if (!outcome.ok) {
      json last = {{"action", type},
                   {"ok", false},
                   {"compile", compile_to_json(outcome)},
                   {"error", {{"code", "compile_error"}, {"message", "the kernel did not compile"}}}};
      land(std::move(last), config_.reward.compile_error, nullptr);
      return;
    }
    job.kernel_so = outcome.artifact;
    json compile_json = compile_to_json(outcome);
    gpu_queues_.at(static_cast<std::size_t>(gpu))->submit([this, job, land, type, compile_json]() {
      EvaluationReport report;
      json last = {{"action", type}, {"compile", compile_json}};
      try {
        report = gpu_->evaluate(job);
        last["ok"] = report.evaluation.value("status", "") == "ok";
        last["evaluation"] = report.evaluation;
        if (!last["ok"].get<bool>())
          last["error"] = {{"code", report.evaluation.value("status", "runtime_error")},
                           {"message", report.evaluation.value("message", "the evaluation failed")}};
      } catch (const std::exception& e) {
        last["ok"] = false;
        last["error"] = {{"code", "internal"}, {"message", std::string("evaluation failed: ") + e.what()}};
      }
      land(std::move(last), report.reward, report.breakdown);
    });
  });
}

void Server::finish_deferred(const std::string& session_id, std::uint64_t id, Value reply, const Route& route) {
  --deferred_in_flight_;
  auto bytes = std::make_shared<const std::string>(protocol::encode(reply));
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  s.in_flight.reset();
  remember(s, id, bytes);
  if (recorder_ && !s.in_flight_request.is_null())  // in the log before any client has the reply
    recorder_->record(*s.episode, s.in_flight_request, reply, s.in_flight_t, unix_now());
  s.in_flight_request = nullptr;
  send(route, *bytes);
  for (const auto& w : s.waiters) send(w, *bytes);
  s.waiters.clear();
  if (s.closing) erase_session(session_id, "closed");
}

Value Server::op_observe(const protocol::Envelope& request) {
  Session& s = find_session(protocol::parse_session(request));
  s.episode->touch();
  return {{"observation", s.episode->observation()}, {"info", s.episode->info()}};
}

Value Server::op_close(const protocol::Envelope& request) {
  std::string id = protocol::parse_session(request);
  Session& s = find_session(id);
  Episode& ep = *s.episode;
  ep.end("closed");
  json out = {{"session", id}, {"end_reason", *ep.end_reason()}, {"steps", ep.steps()},
              {"total_reward", ep.total_reward()}};
  // The session goes once this reply is logged (record_exchange), or, with an action in flight,
  // when that action's reply lands.
  s.closing = true;
  return out;
}

void Server::erase_session(const std::string& id, const std::string& reason) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (recorder_) {
    try {
      recorder_->end(*it->second.episode, reason);
    } catch (const std::exception& e) {
      std::cerr << "d2k serve: recorder: " << e.what() << "\n";
    }
  }
  ++sessions_ended_;
  ++end_reasons_[reason];
  if (auto g = session_gpu_.find(id); g != session_gpu_.end()) {
    --gpu_load_[static_cast<std::size_t>(g->second)];
    session_gpu_.erase(g);
  }
  sessions_.erase(it);
}

void Server::reap_idle() {
  auto now = Episode::Clock::now();
  auto limit = std::chrono::duration<double>(config_.idle_timeout_s);
  std::vector<std::string> idle;
  for (auto& [id, s] : sessions_)
    if (!s.in_flight && now - s.episode->last_activity() > limit) idle.push_back(id);
  for (const auto& id : idle) {
    sessions_.at(id).episode->end("idle_timeout");
    erase_session(id, "idle_timeout");
  }
}

Value Server::op_stats() const {
  std::size_t active = 0, ended = 0;
  for (const auto& [id, s] : sessions_) (s.episode->ended() ? ended : active)++;
  double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  json gpus = json::array();
  for (std::size_t i = 0; i < gpu_queues_.size(); ++i)
    gpus.push_back({{"index", i},
                    {"queued", gpu_queues_[i]->queued()},
                    {"running", gpu_queues_[i]->running()},
                    {"sessions", gpu_load_[i]},
                    {"busy_fraction", uptime > 0 ? gpu_queues_[i]->busy_seconds() / uptime : 0.0}});
  json reasons = json::object();
  for (const auto& [k, v] : end_reasons_) reasons[k] = v;
  return {{"uptime_s", uptime},
          {"sessions",
           {{"active", active}, {"ended", ended}, {"total_opened", sessions_opened_}, {"closed", sessions_ended_},
            {"end_reasons", reasons}}},
          {"requests", requests_},
          {"errors", errors_},
          {"in_flight", deferred_in_flight_},
          {"compile",
           {{"workers", compile_pool_->workers()},
            {"queued", compile_pool_->queued()},
            {"running", compile_pool_->running()},
            {"busy_fraction", uptime > 0 ? compile_pool_->busy_seconds() / uptime / compile_pool_->workers() : 0.0},
            {"cache_hits", compiler_->cache_hits()},
            {"cache_misses", compiler_->cache_misses()}}},
          {"gpus", gpus}};
}

void Server::remember(Session& session, std::uint64_t id, std::shared_ptr<const std::string> reply) {
  session.replies.emplace_back(id, std::move(reply));
  while (session.replies.size() > config_.reply_cache_per_session) session.replies.pop_front();
}

std::shared_ptr<const std::string> Server::cached(const Session& session, std::uint64_t id) const {
  for (const auto& [rid, bytes] : session.replies)
    if (rid == id) return bytes;
  return nullptr;
}

void Server::remember_global(const std::string& key, std::shared_ptr<const std::string> reply) {
  global_lru_.emplace_front(key, std::move(reply));
  global_index_[key] = global_lru_.begin();
  while (global_lru_.size() > config_.reply_cache_global) {
    global_index_.erase(global_lru_.back().first);
    global_lru_.pop_back();
  }
}

}  // namespace d2k::env
