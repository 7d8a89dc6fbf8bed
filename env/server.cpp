#include "env/server.hpp"

#include "env/log.hpp"
#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "env/version.hpp"
#include "protocol/detail/utf8.hpp"
#include "sandbox/jail.hpp"
#ifdef D2K_HAVE_EVAL
#include "sandbox/eval/properties.hpp"
#include "sandbox/tools/disassemble.hpp"
#endif

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

// What a finished compile means for the step: the one mapping of compiler results onto outcomes.
sandbox::Outcome compile_outcome(const sandbox::CompileOutcome& c) {
  if (c.ok) return sandbox::Outcome::ok;
  if (c.sandbox_violation) return sandbox::Outcome::sandbox_violation;
  return c.timed_out ? sandbox::Outcome::timeout : sandbox::Outcome::compile_error;
}

std::string compile_failure_message(const sandbox::CompileOutcome& c) {
  switch (compile_outcome(c)) {
    case sandbox::Outcome::sandbox_violation: return "the compiler was stopped by the sandbox: " + c.violation;
    case sandbox::Outcome::timeout: return "the compile ran past its deadline";
    default: return "the compile failed; see compile.diagnostics";
  }
}

// `last.error` of a step that failed with `outcome`: the outcome's wire name is the code.
json outcome_error_json(sandbox::Outcome outcome, const std::string& message) {
  return {{"code", sandbox::to_string(outcome)}, {"message", message}};
}

constexpr std::size_t kHardCapFactor = 16;  // ZeroMQ's frame cap, in units of max_message_bytes

json error_json(const Error& e) { return {{"code", protocol::to_string(e.code)}, {"message", e.what()}}; }

Error storage_error() {
  return Error(ErrorCode::storage_unavailable,
               "the server cannot write its records (its disk is full); resend this request with the same id "
               "later: a step that ran is held, not lost, and is answered once it is logged");
}

// A compile needs room for sources, nvcc's temporaries and the artifact: below this much free space
// on the state filesystem, a failed compile is the server's problem, not the agent's.
constexpr std::uint64_t kCompileMinFreeBytes = 16ull << 20;

// Requests of one session that may wait behind its workspace action (their bytes are held in
// memory until it lands); more are handled at once, as while a compile runs (handle).
constexpr std::size_t kMaxHeldRequests = 8;

bool says_disk_full(const std::string& text) {
  return text.find("No space left on device") != std::string::npos ||
         text.find("Disk quota exceeded") != std::string::npos;
}

}  // namespace

json toolchain_json(std::string_view banner) {
  // Compiler::toolchain_version(): nvcc's whole `--version` banner, then the host compiler's first line.
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at <= banner.size();) {
    const std::size_t nl = std::min(banner.find('\n', at), banner.size());
    if (nl > at) lines.push_back(banner.substr(at, nl - at));
    at = nl + 1;
  }
  auto version_token = [](std::string_view s) -> std::string_view {  // the last word that starts with a digit
    std::string_view best;
    for (std::size_t at = 0; at < s.size();) {
      const std::size_t end = std::min(s.find(' ', at), s.size());
      if (end > at && std::isdigit(static_cast<unsigned char>(s[at]))) best = s.substr(at, end - at);
      at = end + 1;
    }
    return best;
  };
  // nvcc: "Cuda compilation tools, release 13.0, V13.0.88" → "13.0.88" (the release when no V…).
  std::string nvcc;
  for (std::string_view l : lines)
    if (l.find("Cuda compilation tools") != std::string_view::npos) {
      if (auto v = l.find(", V"); v != std::string_view::npos) {
        nvcc = std::string(l.substr(v + 3, l.find_first_of(", ", v + 3) - (v + 3)));
      } else if (auto r = l.find("release "); r != std::string_view::npos) {
        nvcc = std::string(l.substr(r + 8, l.find_first_of(", ", r + 8) - (r + 8)));
      } else {
        nvcc = std::string(l);
      }
    }
  // The host compiler: the line after nvcc's banner, "g++ (Debian 12.2.0-14+deb12u1) 12.2.0" →
  // "g++ 12.2.0"; "Debian clang version 14.0.6" → "clang 14.0.6".
  std::string host;
  const bool nvcc_banner_last = !lines.empty() && (lines.back().rfind("Build cuda", 0) == 0 ||
                                                  lines.back().find("Cuda compilation tools") != std::string_view::npos);
  if (!lines.empty() && !nvcc_banner_last) {
    std::string_view l = lines.back();
    std::string_view name = l.substr(0, l.find(' '));
    if (l.find("clang version") != std::string_view::npos) name = "clang";
    const std::string_view version = version_token(l);
    host = version.empty() || name == l ? std::string(l) : std::string(name) + " " + std::string(version);
  }
  return {{"nvcc", clean(nvcc)}, {"host_compiler", clean(host)}};
}

Server::Server(Config config, tasks::TaskSet tasks, std::shared_ptr<GpuBackend> gpu)
    : config_(std::move(config)),
      tasks_(std::move(tasks)),
      gpu_(std::move(gpu)),
      gpu_info_(gpu_ ? gpu_->gpus() : std::vector<GpuInfo>{}),
      sessions_(gpu_info_.size()),
      replies_(config_.reply_cache_per_session, config_.reply_cache_global, config_.reply_cache_session_bytes,
               config_.reply_cache_bytes) {
  if (!config_.finalized()) throw std::logic_error("Server: the Config was not finalized (Config::finalize)");
  // Each open episode holds its log file; many sessions need more than the usual 1024 descriptors.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 1u << 16);
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  {
    unsigned char raw[8];
    if (::getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw))
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    static const char* hex = "0123456789abcdef";
    for (unsigned char b : raw) {
      instance_ += hex[b >> 4];
      instance_ += hex[b & 15];
    }
  }
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));

  sandbox::CompilerConfig cc;
  cc.cache_dir = config_.state_dir / "compile-cache";
  cc.scratch_dir = config_.state_dir / "scratch";
  cc.hidden_paths = config_.hidden_paths();
  cc.deadline = std::chrono::milliseconds(static_cast<long long>(config_.compile_deadline_s * 1000));
  cc.jail_memory_bytes = config_.compile_jail_memory_bytes;
  cc.max_processes = config_.compile_jail_pids;
  cc.memory_budget_bytes = config_.compile_memory_bytes;
  cc.cache_max_bytes = config_.compile_cache_bytes;
  cc.cgroup = config_.compile_cgroup;
  compiler_ = std::make_unique<sandbox::Compiler>(cc);
  log_info(compiler_->limits().describe());
#ifdef D2K_HAVE_EVAL
  cuobjdump_ = runner::find_cuobjdump(cc.nvcc);
#endif

  auto on_worker_error = [](const std::string& what) { log_error("worker error: " + what); };
  compile_pool_ = std::make_unique<WorkerPool>("compile", config_.compile_workers, on_worker_error);
  // Workspace actions are milliseconds each: two workers keep a client's 256 KiB patches off the
  // loop without taking the cores from the loop and the compiles.
  step_pool_ = std::make_unique<WorkerPool>("steps", 2, on_worker_error);
  // The CPU half of evaluations (GpuBackend::evaluate_gpu's finish): mostly cuobjdump, one process
  // each; one worker per GPU keeps pace with the GPUs' queues, two at least.
  finish_pool_ = std::make_unique<WorkerPool>("finish", std::max<std::size_t>(2, gpu_info_.size()), on_worker_error);
  for (std::size_t i = 0; i < gpu_info_.size(); ++i) {
    gpu_queues_.push_back(std::make_unique<WorkerPool>("gpu" + std::to_string(i), 1, on_worker_error));
    gpu_counters_.push_back(std::make_unique<GpuCounters>());
  }
  if (gpu_ && !gpu_info_.empty() && config_.prepare) {
    std::vector<const tasks::Task*> order;
    for (const auto& t : tasks_.tasks) order.push_back(&t);
    preparation_ = std::make_unique<Preparation>(gpu_, std::move(order), gpu_info_.size(),
                                                 [](const std::string& line) { log_info(line); });
    // Demand first: tasks nobody waits for are prepared only while the GPU's queue is idle.
    preparation_->set_busy([this](int index) {
      const WorkerPool& q = *gpu_queues_.at(static_cast<std::size_t>(index));
      return q.queued() + q.running() > 0;
    });
  }
}

Server::~Server() {
  if (recorder_) recorder_->stop_sync();  // its threads post to the mailbox
  preparation_.reset();  // its parked continuations submit to the GPU queues
  compile_pool_.reset();
  step_pool_.reset();
  gpu_queues_.clear();
  finish_pool_.reset();
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

namespace {

constexpr const char* kZapDomain = "d2k";

// What to do about a bind beyond this host without keys (issue 19.1).
std::string no_keys_message(const std::string& endpoint) {
  return "refusing to serve on " + endpoint +
         " without authentication: beyond loopback and ipc the server needs ZeroMQ CURVE keys.\n"
         "  d2k keys server ~/.d2k            # the server's key pair: ~/.d2k/server.key, server.pub\n"
         "  d2k keys client ~/.d2k --name me  # one per client: me.key stays with the client\n"
         "  cat ~/.d2k/me.pub >> ~/.d2k/allowed_keys\n"
         "  d2k serve --endpoint " + endpoint + " --server-key ~/.d2k/server.key --allowed-keys ~/.d2k/allowed_keys\n"
         "Clients set D2K_SERVER_KEY=server.pub and D2K_CLIENT_KEY=me.key (docs/multi-tenant.md).";
}

}  // namespace

void Server::setup_curve() {
  if (config_.server_key.empty() || config_.allowed_keys.empty())
    throw std::runtime_error("CURVE needs both --server-key (the server's .key file) and --allowed-keys (the "
                             "client public keys that may connect); got only one");
  if (!curve::available())
    throw std::runtime_error("this libzmq was built without CURVE (zmq_has(\"curve\") is false): cannot authenticate clients");
  try {
    server_key_ = curve::read_key_pair(config_.server_key);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("--server-key: ") + e.what());
  }
  reload_allowlist(true);
  // The ZAP handler must be bound before any CURVE socket of this context takes a connection.
  zap_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::rep);
  zap_->set(zmq::sockopt::linger, 0);
  zap_->bind("inproc://zeromq.zap.01");
  socket_.set(zmq::sockopt::curve_server, 1);
  socket_.set(zmq::sockopt::curve_secretkey, server_key_->secret_key);
  socket_.set(zmq::sockopt::zap_domain, std::string(kZapDomain));
}

void Server::reload_allowlist(bool force) {
  struct stat st {};
  std::string stamp;
  if (::stat(config_.allowed_keys.c_str(), &st) == 0)
    stamp = std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
            std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ino);
  if (!force && stamp == allowlist_stamp_) return;
  try {
    curve::Allowlist fresh = curve::read_allowlist(config_.allowed_keys);
    allowed_ = std::move(fresh);
    allowlist_stamp_ = stamp;
    log_info("allowed client keys: " + std::to_string(allowed_.size()) + " (" + config_.allowed_keys.string() + ")");
  } catch (const std::invalid_argument& e) {
    if (force) throw std::runtime_error(std::string("--allowed-keys: ") + e.what());
    allowlist_stamp_ = stamp;  // report a bad file once, keep the keys read before
    log_error(std::string("allowed keys not reloaded, the previous list stays: ") + e.what());
  }
}

void Server::on_zap() {
  for (;;) {
    std::vector<zmq::message_t> frames;
    std::optional<std::size_t> got;
    try {
      got = zmq::recv_multipart(*zap_, std::back_inserter(frames), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      log_warn(std::string("zap: ") + e.what());
      return;
    }
    if (!got) return;
    // RFC 27: version, request id, domain, address, routing id, mechanism, credentials...
    const auto text = [&](std::size_t i) { return i < frames.size() ? frames[i].to_string() : std::string(); };
    std::string user, status = "400", why = "no such key";
    if (text(2) != kZapDomain || text(5) != "CURVE" || frames.size() < 7) {
      why = "CURVE only";
    } else {
      const std::string key = curve::z85_of_raw(frames[6].to_string_view());
      if (allowed_.count(key)) {
        status = "200";
        why = "OK";
        user = key;
      } else {
        // A refused client reconnects on its own: say so once a minute per key, not at every attempt.
        const auto now = std::chrono::steady_clock::now();
        if (refused_logged_.size() > 1024) refused_logged_.clear();
        auto [at, fresh] = refused_logged_.try_emplace(key, now);
        if (fresh || now - at->second > std::chrono::minutes(1)) {
          at->second = now;
          log_info("refused a connection from " + text(3) + ": its key " + key + " is not in the allowed keys");
        }
      }
    }
    const std::string reply[] = {"1.0", text(1), status, why, user, ""};
    std::vector<zmq::const_buffer> parts;
    for (const auto& f : reply) parts.emplace_back(zmq::buffer(f));
    try {
      zmq::send_multipart(*zap_, parts);
    } catch (const zmq::error_t& e) {
      log_warn(std::string("zap: ") + e.what());
    }
  }
}

void Server::bind() {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::router_mandatory, 0);
  // A client that reconnects with its routing id (PROTOCOL.md section 6) takes the route over, also
  // while the old connection is still up (a client that timed out and made a new socket).
  socket_.set(zmq::sockopt::router_handover, 1);
  // A hard cap well above our own limit: frames up to it get a typed too_large reply, frames above
  // it make ZeroMQ drop the peer's connection (it never reaches us). 16 × the limit (128 MiB at the
  // default) answers the usual mistake, a file of tens of MB, instead of leaving its client to
  // resend until its deadline.
  socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(config_.limits.max_message_bytes * kHardCapFactor));
  if (!config_.server_key.empty() || !config_.allowed_keys.empty())
    setup_curve();
  else if (!local_endpoint(config_.endpoint))
    throw std::runtime_error(no_keys_message(config_.endpoint));
  try {
    socket_.bind(config_.endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("cannot bind " + config_.endpoint + ": " + e.what());
  }
  bound_endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  if (server_key_)
    log_info("CURVE on: clients need this server's public key " + server_key_->public_key + " and a listed key");
  // Events: loopback or ipc by default; beyond this host only with CURVE (each subscriber then sees
  // only the sessions its key opened); without CURVE they carry no agent source (env/events.hpp).
  std::string events_at = config_.events_endpoint == "none"  ? std::string()
                          : config_.events_endpoint.empty() ? default_events_endpoint(bound_endpoint_)
                                                            : config_.events_endpoint;
  if (config_.events_endpoint.empty() && events_at.empty() && config_.events_endpoint != "none")
    log_info("no live episode events: by default they stay on loopback or ipc (--events ENDPOINT)");
  if (!events_at.empty() && !server_key_ && !local_endpoint(events_at))
    throw std::runtime_error("the episode events endpoint " + events_at +
                             " is not loopback or ipc: beyond this host events need CURVE (--server-key, "
                             "--allowed-keys)");
  if (!events_at.empty()) {
    try {
      events_ = std::make_unique<Events>(context_, events_at, server_key_, kZapDomain, config_.events_source);
    } catch (const std::exception& e) {
      // A derived events endpoint (port + 1) may be taken by someone else: serve without live
      // events rather than not at all. An endpoint the user asked for stays an error.
      if (!config_.events_endpoint.empty()) throw;
      log_warn(std::string("no live events (") + e.what() + "); use --events to pick an endpoint");
    }
  }
  if (config_.record || events_) {
    RecorderConfig rc;
    if (config_.record) {
      rc.log_dir = config_.log_dir;
      rc.catalogue = config_.catalogue;
      rc.log_budget_bytes = config_.log_budget_bytes;
    }
    rc.server_info = make_server_info(config_, compiler_->toolchain_version(), gpu_info_);
    // fdatasync off the loop (issue 22.6): log-sync threads report here, through the mailbox.
    rc.on_synced = [this](const std::string& session, std::uint64_t record, int error) {
      mailbox_.post([this, session, record, error] { on_synced(session, record, error); });
    };
    rc.sync_hook = [this](const std::string& session) {
      if (sync_hook_) sync_hook_(session);
    };
    rc.on_event = [this](const std::string& session, const json& event) {
      if (!events_) return;
      const Session* s = sessions_.find(session);
      if (!s && server_key_) return;  // no owner known: nobody is entitled to it
      events_->publish(session, s ? s->owner : std::string(), event);
    };
    rc.watched = [this] { return events_ && events_->watched(); };
    recorder_ = std::make_unique<Recorder>(rc);
  }
}

void Server::request_stop() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
}

void Server::run() {
  using clock = std::chrono::steady_clock;
  std::optional<clock::time_point> stop_deadline;
  bool cancelled = false;
  auto last_reap = clock::now();
  if (preparation_) {
    log_info("preparing " + std::to_string(tasks_.tasks.size()) + " task(s) on " + std::to_string(gpu_info_.size()) +
             " GPU(s) in the background; evaluations of a task wait until it is ready");
    preparation_->start();
  }
  for (;;) {
    // The ZAP handler and the events socket's subscriptions, where they exist, after the three.
    zmq::pollitem_t items[5] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, mailbox_.fd(), ZMQ_POLLIN, 0},
                                {nullptr, stop_fd_, ZMQ_POLLIN, 0}};
    std::size_t n_items = 3, zap_at = 0, events_at = 0;
    if (zap_) items[zap_at = n_items++] = {zap_->handle(), 0, ZMQ_POLLIN, 0};
    if (events_) items[events_at = n_items++] = {events_->handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(items, n_items, std::chrono::milliseconds(stopping_ ? 100 : 500));
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
        log_info("stopping; " + std::to_string(deferred_in_flight_) + " action(s) in flight");
        if (preparation_) preparation_->release();  // parked evaluations go on without it
      }
    }
    if (zap_at && (items[zap_at].revents & ZMQ_POLLIN)) on_zap();
    if (events_at && (items[events_at].revents & ZMQ_POLLIN)) events_->on_subscriptions();
    if (items[1].revents & ZMQ_POLLIN) mailbox_.drain();
    // Take a bounded batch of requests per turn so completions are never starved.
    for (int i = 0; i < 256; ++i) {
      std::vector<zmq::message_t> frames;
      auto got = zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait);
      if (!got) break;
      on_frames(frames);
    }
    if (stopping_) {
      // Replies held for their log's fdatasync go out first (past the grace period, no longer waited for).
      const bool late = clock::now() > *stop_deadline;
      if (deferred_in_flight_ == 0 && (outbox_.empty() || late)) break;
      if (!cancelled && late && deferred_in_flight_ > 0) {
        log_warn("grace period over; cancelling work in flight");
        sandbox::cancel_all_jails();
        if (gpu_) gpu_->cancel_all();
        cancelled = true;
      }
    } else if (clock::now() - last_reap > std::chrono::seconds(1)) {
      reap_idle();
      if (server_key_) reload_allowlist(false);
      last_reap = clock::now();
    }
  }
  for (const auto& id : sessions_.ids()) {
    sessions_.find(id)->episode->end("server_shutdown");
    erase_session(id, "server_shutdown");
  }
  if (preparation_) {
    if (!preparation_->done()) log_info("waiting for the task being prepared to finish");
    preparation_->stop();
  }
  compile_pool_->stop();
  step_pool_->stop();
  for (auto& q : gpu_queues_) q->stop();
  finish_pool_->stop();  // after the GPU queues: a run that ended hands its finish over first
  if (recorder_) recorder_->stop_sync();  // the end records made durable; their reports are not needed
}

void Server::on_frames(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) return;  // ROUTER always prefixes the routing id; nothing to answer
  Route route;
  for (std::size_t i = 0; i + 1 < frames.size(); ++i) route.emplace_back(frames[i].to_string());
  auto& payload = frames.back();
  std::string client;  // with CURVE, the key the ZAP handler let in (every message of the connection carries it)
  if (server_key_) {
    const char* user = nullptr;
    try {
      user = payload.gets("User-Id");
    } catch (const zmq::error_t&) {
    }
    if (!user || !*user) return;  // cannot happen through the ZAP handler; answer nothing rather than guess
    client = user;
  }
  handle(route, std::string_view(static_cast<const char*>(payload.data()), payload.size()), client);
}

void Server::send(const Route& route, const std::string& bytes) {
  std::vector<zmq::const_buffer> parts;
  for (const auto& f : route) parts.emplace_back(zmq::buffer(f));
  parts.emplace_back(zmq::buffer(bytes));
  try {
    zmq::send_multipart(socket_, parts, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    // A peer that went away or stopped reading: its reply is dropped, the server carries on.
    log_warn(std::string("reply dropped: ") + e.what());
  }
}

void Server::handle(const Route& route, std::string_view payload, const std::string& client,
                    std::optional<double> held_t) {
  if (!held_t) ++requests_;
  Request request;
  request.t = held_t ? *held_t : unix_now();
  request.client = client;
  request.tenant = client.empty() ? "id:" + (route.empty() ? std::string() : route.front()) : "key:" + client;
  std::optional<std::uint64_t> id;
  bool parsed = false;
  Value reply;
  try {
    Value decoded = protocol::decode(payload, config_.limits);
    if (decoded.is_object()) {
      auto it = decoded.find("id");
      if (it != decoded.end() && it->is_number_unsigned()) id = it->get<std::uint64_t>();
    }
    request.envelope = protocol::parse_envelope(decoded);
    parsed = true;
    const protocol::Envelope& envelope = request.envelope;
    if (stopping_) throw Error(ErrorCode::shutting_down, "the server is shutting down");
    if (envelope.op == "step" || envelope.op == "observe" || envelope.op == "close")
      request.session = protocol::parse_session(envelope);
    // Its session's workspace action runs on a worker: this request waits for that reply, so
    // that it sees the action's effect and its reply goes out after that one (PROTOCOL.md). Past
    // the limit it is handled now, as while a compile runs: a step gets busy, an observe the state
    // before the action, a close closes the session once the action lands.
    if (!request.session.empty())
      if (Session* s = sessions_.find(request.session); s && s->serial && s->held.size() < kMaxHeldRequests) {
        s->held.push_back({route, std::string(payload), client, request.t});
        return;
      }
    // Retries of ops without a session are answered from the global cache.
    std::string global_key;
    // With CURVE the client is its key, not its connection: a retry from a new socket (or address)
    // with the same key gets the cached reply, and a retry from another key never does.
    if (envelope.op == "reset")
      global_key = ReplyCache::reset_key(client.empty() ? route : Route{"curve:" + client}, envelope.id);
    if (envelope.op == "close")
      global_key = ReplyCache::close_key(client.empty() ? request.session : request.session + "/" + client, envelope.id);
    if (!global_key.empty())
      if (ReplyBytes hit = replies_.find_global(global_key)) {
        if (envelope.op == "close" && recorder_) {  // a close whose record waited for the disk
          if (!recorder_->flush(request.session)) throw storage_error();
          if (Session* s = sessions_.find(request.session); s && s->closing && !s->in_flight)
            erase_session(request.session, "closed");
        }
        // Like the first answer, it goes out once its session's log is durable.
        std::string session = request.session;
        if (envelope.op == "reset" && recorder_) try {
            protocol::Limits all;
            all.max_message_bytes = all.max_string_bytes = hit->size();
            all.max_array_items = all.max_map_entries = all.max_total_items = hit->size();
            all.max_depth = 64;
            session = protocol::decode(*hit, all).value("session", "");
          } catch (const std::exception&) {
          }
        send_logged(session, {route}, *hit, id);
        return;
      }
    Answer answer = dispatch(route, request);
    if (answer.cached) {  // a retry of a step that completed, or an observe (logged in op_observe)
      send_logged(request.session, {route}, *answer.cached, id,
                  envelope.op == "observe" ? Durability::none : Durability::wait);
      return;
    }
    if (answer.deferred) return;  // the reply goes out when the work lands
    reply = std::move(answer.reply);
    if (!global_key.empty()) {
      auto bytes = std::make_shared<const std::string>(protocol::encode(reply));
      if (envelope.op == "reset") {
        if (!record_exchange(request, reply)) {  // logged before it is sent (as below); else undone
          sessions_.erase(reply.value("session", ""), "storage_unavailable");
          throw storage_error();
        }
        replies_.remember_global(global_key, bytes);
      } else {  // close: done, and its reply waits for the log when the disk refuses it now
        replies_.remember_global(global_key, bytes);
        if (!record_exchange(request, reply)) throw storage_error();
      }
      // Sent once its record is durable (the loop goes on meanwhile: the fdatasync is a log-sync thread's).
      send_logged(envelope.op == "reset" ? reply.value("session", "") : request.session, {route}, *bytes, id);
      return;
    }
  } catch (const Error& e) {
    ++errors_;
    // Over a decoding limit, the id was not read yet: find it in the frame, so the client can tell
    // which request failed (and stop resending it).
    if (!id && e.code == ErrorCode::too_large) id = protocol::peek_request_id(payload);
    reply = error_reply(id, e);
  } catch (const std::exception& e) {
    ++errors_;
    log_error(std::string("internal error: ") + e.what());
    reply = protocol::make_error_reply(id, Error(ErrorCode::internal, std::string("internal error: ") + e.what()));
  }
  // Recorded before it is sent: a client holding a reply can rely on its exchange being in the log
  // (a kill -9 right after the send used to lose the last exchange). A reply the disk refused to
  // log does not go out: the client gets storage_unavailable (the one reply that is never logged).
  // The record is written here and made durable by a log-sync thread. Only a step that ran changes
  // its session here (reset and close went above): send_logged holds its reply (and the session's
  // later ones) until its record is durable, while the loop serves everyone else. The rest changed
  // nothing (hello, list_tasks, stats, observe, and every error): each goes out once its record is
  // written, behind the session's held replies, and becomes durable with the session's next
  // fdatasync (docs/episode-log.md).
  if (parsed && !record_exchange(request, reply)) {
    reply = error_reply(id, storage_error());
  }
  const bool changed = parsed && request.envelope.op == "step" && reply.value("ok", false);
  send_logged(request.session, {route}, protocol::encode(reply), id, changed ? Durability::wait : Durability::none);
}

void Server::send_logged(const std::string& session, std::vector<Route> routes, const std::string& bytes,
                         std::optional<std::uint64_t> id, Durability durability) {
  // A reply that changed nothing waits for no fdatasync of its own: only for the replies of its
  // session still held before it (which it may reveal: an observe shows the step before it).
  std::uint64_t after =
      recorder_ && !session.empty() && durability == Durability::wait ? recorder_->pending(session) : 0;
  auto held = outbox_.find(session);
  if (after == 0 && (held == outbox_.end() || held->second.empty())) {
    for (const auto& r : routes) send(r, bytes);
    return;
  }
  std::deque<Outgoing>& queue = held != outbox_.end() ? held->second : outbox_[session];
  if (!queue.empty()) after = std::max(after, queue.back().after);  // never ahead of an earlier reply
  queue.push_back({after, std::move(routes), bytes, id});
}

void Server::on_synced(const std::string& session, std::uint64_t record, int error) {
  const bool durable = recorder_->synced(session, record, error);
  auto held = outbox_.find(session);
  if (held == outbox_.end()) return;
  std::deque<Outgoing>& queue = held->second;
  if (!durable) {  // cut off the log again: nothing held is answered as done (the client retries)
    for (const Outgoing& o : queue) {
      const std::string bytes = protocol::encode(error_reply(o.id, storage_error()));
      for (const auto& r : o.routes) send(r, bytes);
    }
    queue.clear();
  }
  while (!queue.empty() && queue.front().after <= record) {
    for (const auto& r : queue.front().routes) send(r, queue.front().bytes);
    queue.pop_front();
  }
  if (queue.empty()) outbox_.erase(held);
}

bool Server::record_exchange(const Request& request, const Value& reply) try {
  const protocol::Envelope& envelope = request.envelope;
  if (envelope.op == "reset") {
    if (!recorder_ || !reply.value("ok", false)) return true;
    if (Session* s = sessions_.find(reply.value("session", ""))) {
      if (!recorder_->begin(*s->episode, envelope.body, reply, request.t, unix_now(), request.tenant)) return false;
      // The session's first observes are as cheap as later ones: their log patch is made now.
      if (auto o = observations_.find(s->episode->id()); o != observations_.end())
        recorder_->prime_observe(*s->episode, o->second.generation,
                                 decode_reply(observe_reply(o->second, envelope.id, o->second.info)));
    }
    return true;
  }
  if (request.session.empty()) return true;  // not a session's op, or its session field was invalid
  Session* s = sessions_.find(request.session);
  if (!s) return true;
  // A step or close that ran waits for the disk (its reply is cached for the retry); anything else
  // had no effect and is simply not answered as it was.
  const bool keep = reply.value("ok", false) && (envelope.op == "step" || envelope.op == "close");
  if (recorder_ && !recorder_->record(*s->episode, envelope.body, reply, request.t, unix_now(), keep)) return false;
  // A close answered here ends the session once nothing is in flight.
  if (envelope.op == "close" && s->closing && !s->in_flight) erase_session(request.session, "closed");
  return true;
} catch (const std::exception& e) {
  log_error(std::string("recording failed: ") + e.what());  // never the server's end
  return true;
}

bool Server::low_on_disk() const {
  struct statvfs fs {};
  if (::statvfs(config_.state_dir.c_str(), &fs) != 0) return false;
  return static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize < kCompileMinFreeBytes;
}

std::string Server::scrub_paths(std::string s) const {
  const std::pair<std::string, const char*> paths[] = {{config_.log_dir.string(), "<log_dir>"},
                                                       {config_.catalogue.string(), "<catalogue>"},
                                                       {config_.state_dir.string(), "<state_dir>"},
                                                       {config_.tasks_dir.string(), "<tasks>"}};
  for (const auto& [path, name] : paths) {
    if (path.size() < 2) continue;
    for (std::size_t at = s.find(path); at != std::string::npos; at = s.find(path, at + std::strlen(name)))
      s.replace(at, path.size(), name);
  }
  return s;
}

Server::Answer Server::dispatch(const Route& route, const Request& request) {
  const std::string& op = request.envelope.op;
  const std::uint64_t id = request.envelope.id;
  if (op == "hello") return {protocol::make_ok_reply(id, op_hello())};
  if (op == "list_tasks") return {protocol::make_ok_reply(id, op_list_tasks())};
  if (op == "reset") return {protocol::make_ok_reply(id, op_reset(request))};
  if (op == "step") return op_step(route, request);
  if (op == "observe") return {{}, op_observe(request)};  // logged already: sent as it is
  if (op == "close") return {protocol::make_ok_reply(id, op_close(request))};
  if (op == "stats") return {protocol::make_ok_reply(id, op_stats())};
  throw Error(ErrorCode::unknown_op, "unknown op '" + op + "'", "op");
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
          {"toolchain", toolchain_json(compiler_->toolchain_version())},
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
          {"instance", instance_},
          {"config", public_config()}};
}

Value Server::error_reply(std::optional<std::uint64_t> id, const Error& e) const {
  Value reply = protocol::make_error_reply(id, e);
  reply["error"]["instance"] = instance_;
  return reply;
}

json Server::public_config() const {
  // What a client may know of the configuration: no paths of this host (issue 22.10).
  json c = config_.to_json();
  for (const char* key : {"tasks_dir", "state_dir", "log_dir", "catalogue", "server_key", "allowed_keys"}) c.erase(key);
  for (const char* key : {"endpoint", "events_endpoint"})
    if (c.contains(key) && c[key].is_string() && c[key].get<std::string>().rfind("ipc://", 0) == 0) c[key] = "ipc";
  return c;
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

Value Server::op_reset(const Request& request) {
  protocol::ResetRequest r = protocol::parse_reset(request.envelope, config_.limits);
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
  std::string id = sessions_.new_id();
  Session& session = sessions_.open(std::make_unique<Episode>(id, *task, r.layer, seed, b, r.label, wl));
  session.owner = request.client;  // with CURVE, only this key may act on the session or watch it
  json observation = session.episode->observation();
  json info = session.episode->info();
  // observe starts from this one (op_observe) instead of building it again: a few KB (the starter
  // files), and the first observe of each of many sessions stays cheap.
  ObserveBytes bytes = observe_bytes(observation, info);
  keep_observation(id, bytes);
  return {{"session", id}, {"instance", instance_}, {"observation", std::move(observation)}, {"info", std::move(info)}};
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

Server::Answer Server::op_step(const Route& route, const Request& request) {
  const std::uint64_t id = request.envelope.id;
  const protocol::Action action = protocol::parse_step(request.envelope, config_.limits).action;
  Session& s = sessions_.find_open(request.session, request.client);
  forget_observation(request.session);  // whatever the step does, the next observe rebuilds
  // Nothing of the session goes out, cached or new, while an earlier record waits for the disk.
  if (recorder_ && !recorder_->flush(request.session)) throw storage_error();
  if (ReplyBytes hit = replies_.find(request.session, id)) return {{}, hit};
  if (s.in_flight) {
    if (*s.in_flight == id) {  // a retry of the request in flight: answered when it lands
      s.waiters.push_back(route);
      return {{}, nullptr, true};
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
    Value reply = protocol::make_ok_reply(id, step_reply(ep, reward));
    replies_.remember(request.session, id, std::make_shared<const std::string>(protocol::encode(reply)));
    return Answer{std::move(reply)};
  };
  if (ep.wall_time_exceeded()) {
    ep.end("wall_time");
    return finish(0.0);
  }
  json last = {{"action", std::string(protocol::action_name(action))}, {"ok", true}};
  double reward = config_.step_reward.ok_step;
  auto fail = [&](const Error& e, double r_fail) {
    last["ok"] = false;
    last["error"] = error_json(e);
    reward = r_fail;
  };
  auto out_of_budget = [&](const std::string& message) {
    fail(Error(ErrorCode::budget_exhausted, message), config_.step_reward.invalid_action);
    ep.record_step(last, reward);
    return finish(reward);
  };

  if (protocol::is_tool(action)) {
    const bool gpu_tool = !std::holds_alternative<protocol::Disassemble>(action);
    if (gpu_tool && (!gpu_ || gpu_info_.empty()))
      throw Error(ErrorCode::no_gpu, std::string(protocol::action_name(action)) +
                                         " needs a GPU and this server has none; disassemble works without one");
    const std::uint32_t cost = tool_cost(action);
    if (ep.steps_left() < cost)
      return out_of_budget(std::string(protocol::action_name(action)) + " costs " + std::to_string(cost) +
                           " steps and " + std::to_string(ep.steps_left()) + " are left");
    start_work(s, request, route, Work::tool, action);
    return {{}, nullptr, true};
  }
  if (std::holds_alternative<protocol::Compile>(action)) {
    if (!ep.compiles_left())
      return out_of_budget("no compiles left (" + std::to_string(ep.budget().max_compiles) + " used)");
    ep.count_compile();
    start_work(s, request, route, Work::compile);
    return {{}, nullptr, true};
  }
  if (std::holds_alternative<protocol::Evaluate>(action) || std::holds_alternative<protocol::Submit>(action)) {
    const bool submit = std::holds_alternative<protocol::Submit>(action);
    if (!gpu_ || gpu_info_.empty())
      throw Error(ErrorCode::no_gpu,
                  std::string(submit ? "submit" : "evaluate") +
                      " needs a GPU and this server has none; compile works without one");
    if (!submit && !ep.evaluations_left())
      return out_of_budget("no evaluations left (" + std::to_string(ep.budget().max_evaluations) + " used)");
    if (!submit) ep.count_evaluation();
    start_work(s, request, route, submit ? Work::submit : Work::evaluate);
    return {{}, nullptr, true};
  }
  start_workspace_step(s, request, route, action);  // write_file, edit, patch
  return {{}, nullptr, true};
}

void Server::start_workspace_step(Session& s, const Request& request, const Route& route, protocol::Action action) {
  const std::uint64_t id = request.envelope.id;
  s.in_flight = id;
  s.in_flight_request = request.envelope.body;  // for the episode log, when the reply lands
  s.in_flight_t = request.t;
  s.serial = true;
  ++deferred_in_flight_;
  // The worker's own copy: the session's requests wait until it lands, so nothing else changes
  // the episode meanwhile (an idle reap skips sessions in flight).
  auto copy = std::make_shared<Episode>(*s.episode);
  step_pool_->submit([this, copy, action = std::move(action), session_id = request.session, route, id]() mutable {
    Value reply;
    ReplyBytes bytes;
    bool stepped = false;
    try {
      if (step_hook_) step_hook_(session_id);
      Episode& ep = *copy;
      json last = {{"action", std::string(protocol::action_name(action))}, {"ok", true}};
      double reward = config_.step_reward.ok_step;
      try {
        if (auto* w = std::get_if<protocol::WriteFile>(&action)) {
          ep.workspace().write(w->path, w->content);
        } else if (auto* e = std::get_if<protocol::Edit>(&action)) {
          ep.workspace().edit(e->path, e->old_text, e->new_text);
        } else if (auto* p = std::get_if<protocol::Patch>(&action)) {
          ep.workspace().patch(p->diff);
        }
      } catch (const Error& e) {
        last["ok"] = false;
        last["error"] = error_json(e);
        reward = config_.step_reward.invalid_action;
      }
      ep.record_step(std::move(last), reward);
      reply = protocol::make_ok_reply(id, step_reply(ep, reward));
      bytes = std::make_shared<const std::string>(protocol::encode(reply));
      stepped = true;
    } catch (const std::exception& e) {  // out of memory, say: no step, the episode as it was
      reply = error_reply(id, Error(ErrorCode::internal, std::string("internal error: ") + e.what()));
      bytes = nullptr;
    }
    mailbox_.post([this, copy, stepped, reply = std::move(reply), bytes, session_id, route, id]() mutable {
      forget_observation(session_id);
      Session* session = sessions_.find(session_id);
      if (!session) {
        --deferred_in_flight_;
        return;
      }
      if (stepped) {
        *session->episode = std::move(*copy);
        session->episode->touch();
        if (session->closing) session->episode->end("closed");  // a close not held (past the limit)
      }
      session->serial = false;
      std::deque<HeldRequest> held = std::move(session->held);
      session->held.clear();
      finish_deferred(session_id, id, std::move(reply), route, bytes);
      release_held(session_id, std::move(held));
    });
  }, request.tenant);
}

void Server::release_held(const std::string& session_id, std::deque<HeldRequest> held) {
  while (!held.empty()) {
    HeldRequest h = std::move(held.front());
    held.pop_front();
    handle(h.route, h.payload, h.client, h.t);
    // Another workspace action of the session went out to the workers: the rest waits for it.
    if (Session* s = sessions_.find(session_id); s && s->serial) {
      for (auto& r : s->held) held.push_back(std::move(r));
      s->held = std::move(held);
      return;
    }
  }
}

std::uint32_t Server::tool_cost(const protocol::Action& action) const {
  if (std::holds_alternative<protocol::Profile>(action)) return config_.tools.profile_steps;
  if (std::holds_alternative<protocol::Sanitize>(action)) return config_.tools.sanitize_steps;
  return config_.tools.disassemble_steps;
}

void Server::start_work(Session& s, const Request& request, const Route& route, Work work,
                        std::optional<protocol::Action> tool) {
  const std::uint64_t id = request.envelope.id;
  s.in_flight = id;
  s.in_flight_request = request.envelope.body;  // for the episode log, when the reply lands
  s.in_flight_t = request.t;
  ++deferred_in_flight_;
  sandbox::CompileRequest req;
  req.files = s.episode->workspace().files();
  req.main_file = s.episode->task().main_file;
  req.flags = s.episode->task().compile_flags;
  EvaluationJob job;
  if (work != Work::compile && work != Work::tool) {
    job.task = &s.episode->task();
    job.include_hidden = work == Work::submit;
    job.layer = s.episode->layer();
    job.gpu = s.gpu;
    job.seed = s.episode->seed() ^ (id * 0x9e3779b97f4a7c15ull);
  }
  ToolJob tool_job;
  tool_job.task = &s.episode->task();
  tool_job.gpu = s.gpu;
  tool_job.max_items = config_.tools.max_items;
  tool_job.deadline_s = config_.tools.deadline_s;
  const std::uint32_t cost = tool ? tool_cost(*tool) : 1;
  // Compile on the CPU pool; for evaluate and submit, then queue the timed run on the session's GPU.
  compile_pool_->submit([this, req = std::move(req), job, work, session_id = request.session, route, id, tool,
                         tool_job, cost, tenant = request.tenant]() mutable {
    sandbox::CompileOutcome outcome;
    bool threw = false;
    try {
      outcome = compiler_->compile(req);
    } catch (const std::exception& e) {
      threw = true;
      outcome.ok = false;
      outcome.log = scrub_paths(std::string("internal error running the compiler: ") + e.what());
    }
    // A compile the server's full disk broke is not the agent's compile_error: nothing is charged
    // and the client is told to retry (storage_unavailable).
    const bool disk_full = says_disk_full(outcome.log) || ((threw || !outcome.timed_out) && low_on_disk());
    if (!outcome.ok && !outcome.sandbox_violation && disk_full) {
      Landed done;
      done.storage = true;
      land(session_id, id, route, std::move(done));
      return;
    }
    if (work == Work::compile) {
      Landed done;
      done.last = {{"action", "compile"}, {"ok", outcome.ok}, {"compile", compile_to_json(outcome)}};
      if (!outcome.ok)
        done.last["error"] = outcome_error_json(compile_outcome(outcome), compile_failure_message(outcome));
      done.reward = outcome.ok ? config_.step_reward.ok_step : config_.reward.compile_error;
      land(session_id, id, route, std::move(done));
      return;
    }
    if (work == Work::tool) {
      run_tool(*tool, std::move(outcome), std::move(tool_job), cost, session_id, route, id, tenant);
      return;
    }
    const bool submit = work == Work::submit;
    const std::string type = submit ? "submit" : "evaluate";
    if (!outcome.ok) {
      Landed done;
      done.last = {{"action", type},
                   {"ok", false},
                   {"compile", compile_to_json(outcome)},
                   {"error", outcome_error_json(sandbox::Outcome::compile_error, "the kernel did not compile")}};
      done.reward = config_.reward.compile_error;
      done.submit = submit;
      land(session_id, id, route, std::move(done));
      return;
    }
    job.kernel_so = outcome.artifact;
    if (gpu_) gpu_->prefetch(job);  // the property checks' cuobjdump, beside the queue wait and the GPU part
    json compile_json = compile_to_json(outcome);
    // The timed run waits for its task's preparation on this GPU (parked in preparation_, not
    // failed), then queues on the GPU.
    auto enqueue = [this, job, type, submit, compile_json, session_id, route, id, tenant](double waited_s) {
      gpu_queues_.at(static_cast<std::size_t>(job.gpu))
          ->submit([this, job, type, submit, compile_json, session_id, route, id, waited_s, tenant]() {
          Landed done;
          done.submit = submit;
          done.prepare_wait_s = waited_s;
          done.last = {{"action", type}, {"compile", compile_json}};
          auto failed = [](Landed& d, const std::exception& e) {
            d.last["ok"] = false;
            d.last["error"] = error_json(Error(ErrorCode::internal, std::string("evaluation failed: ") + e.what()));
          };
          GpuStage stage;
          try {
            stage = gpu_->evaluate_gpu(job);
            GpuCounters& counters = *gpu_counters_.at(static_cast<std::size_t>(job.gpu));
            ++counters.evaluations;
            counters.phase_ns += static_cast<std::uint64_t>(std::max(0.0, stage.gpu_phase_s) * 1e9);
            counters.timed_ns += static_cast<std::uint64_t>(std::max(0.0, stage.timed_s) * 1e9);
          } catch (const std::exception& e) {
            failed(done, e);
            land(session_id, id, route, std::move(done));
            return;
          }
          // The rest is CPU work (property checks, reward): off this queue, so its next timed run
          // starts now (issue 15 item 6).
          auto finish = [this, stage = std::move(stage), done = std::move(done), failed, session_id, route, id]() mutable {
            EvaluationReport report;
            try {
              report = stage.finish();
              done.last["ok"] = report.outcome == sandbox::Outcome::ok;
              done.last["evaluation"] = report.evaluation;
              if (report.outcome != sandbox::Outcome::ok)
                done.last["error"] = outcome_error_json(
                    report.outcome, report.message.empty() ? "the evaluation failed" : report.message);
            } catch (const std::exception& e) {
              failed(done, e);
            }
            done.reward = report.reward;
            done.breakdown = report.breakdown;
            land(session_id, id, route, std::move(done));
          };
          finish_pool_->submit(std::move(finish), tenant);
        }, tenant);
    };
    if (preparation_) preparation_->when_ready(job.gpu, *job.task, session_id, std::move(enqueue));
    else enqueue(0.0);
  }, request.tenant);
}

// A tool step after its compile: disassemble here (the compile pool), profile and sanitize on the
// session's GPU queue like an evaluation.
void Server::run_tool(const protocol::Action& action, sandbox::CompileOutcome outcome, ToolJob tool_job,
                      std::uint32_t cost, const std::string& session_id, const Route& route, std::uint64_t id,
                      const std::string& tenant) {
  const std::string type(protocol::action_name(action));
  Landed done;
  done.cost = cost;
  done.last = {{"action", type}, {"compile", compile_to_json(outcome)}};
  if (!outcome.ok) {
    done.last["ok"] = false;
    done.last["error"] = outcome_error_json(sandbox::Outcome::compile_error, "the kernel did not compile");
    done.reward = config_.reward.compile_error;
    land(session_id, id, route, std::move(done));
    return;
  }
  done.reward = config_.step_reward.ok_step;
  if (const auto* d = std::get_if<protocol::Disassemble>(&action)) {
#ifdef D2K_HAVE_EVAL
    tools::DisassembleRequest dr;
    dr.kernel = d->kernel;
    dr.sass = d->sass;
    dr.ptx = d->ptx;
    dr.max_bytes = std::min<std::size_t>(d->max_bytes.value_or(config_.tools.disassemble_max_bytes),
                                         config_.tools.disassemble_max_bytes);
    try {
      done.last["disassembly"] = tools::disassemble(cuobjdump_, outcome.artifact, dr);
      done.last["ok"] = true;
    } catch (const std::exception& e) {
      done.last["ok"] = false;
      done.last["error"] = error_json(Error(ErrorCode::internal, std::string("disassemble failed: ") + e.what()));
    }
#else
    (void)d;
    done.last["ok"] = false;
    done.last["error"] = {{"code", "tool_unavailable"}, {"message", "this build has no disassembler"}, {"retryable", false}};
#endif
    land(session_id, id, route, std::move(done));
    return;
  }
  tool_job.kernel_so = outcome.artifact;
  if (const auto* p = std::get_if<protocol::Profile>(&action)) {
    tool_job.kind = ToolJob::Kind::profile;
    tool_job.workload = p->workload;
    tool_job.sections = p->sections;
  } else if (const auto* z = std::get_if<protocol::Sanitize>(&action)) {
    tool_job.kind = ToolJob::Kind::sanitize;
    tool_job.workload = z->workload;
    tool_job.sanitizer_tool = z->tool;
  }
  const std::string key = tool_job.kind == ToolJob::Kind::profile ? "profile" : "sanitize";
  gpu_queues_.at(static_cast<std::size_t>(tool_job.gpu))
      ->submit([this, tool_job, key, done = std::move(done), session_id, route, id]() mutable {
        try {
          const ToolReport rep = gpu_->run_tool(tool_job);
          done.last["ok"] = rep.outcome == sandbox::Outcome::ok && !rep.unavailable;
          if (!rep.result.is_null()) done.last[key] = rep.result;
          if (rep.unavailable)
            done.last["error"] = {{"code", "tool_unavailable"}, {"message", scrub_paths(rep.message)}, {"retryable", false}};
          else if (rep.outcome != sandbox::Outcome::ok)
            done.last["error"] = outcome_error_json(rep.outcome, scrub_paths(rep.message.empty() ? key + " failed" : rep.message));
        } catch (const std::exception& e) {
          done.last["ok"] = false;
          done.last["error"] = error_json(Error(ErrorCode::internal, key + " failed: " + std::string(e.what())));
        }
        land(session_id, id, route, std::move(done));
      }, tenant);
}

void Server::land(const std::string& session_id, std::uint64_t id, const Route& route, Landed landed) {
  mailbox_.post([this, landed = std::move(landed), session_id, route, id]() {
    forget_observation(session_id);
    Session* s = sessions_.find(session_id);
    if (!s) {
      --deferred_in_flight_;
      return;
    }
    Episode& ep = *s->episode;
    if (landed.storage) {  // not a step: undo what starting it counted, answer with a retryable error
      --deferred_in_flight_;
      const std::string action = s->in_flight_request.is_object()
                                     ? s->in_flight_request.value("action", json::object()).value("type", "")
                                     : std::string();
      if (action == "compile") ep.refund_compile();
      if (action == "evaluate") ep.refund_evaluation();
      s->in_flight.reset();
      s->in_flight_request = nullptr;
      std::vector<Route> to{route};
      to.insert(to.end(), s->waiters.begin(), s->waiters.end());
      s->waiters.clear();
      send_logged(session_id, std::move(to), protocol::encode(error_reply(id, storage_error())), id);
      if (s->closing) erase_session(session_id, "closed");
      return;
    }
    ep.record_step(landed.last, landed.reward, landed.cost);
    if (landed.submit) ep.end("submitted");
    json extra = json::object();
    if (!landed.breakdown.is_null()) extra["reward"] = landed.breakdown;
    if (landed.prepare_wait_s > 0)
      extra["queue"] = {{"state", "ran_after_preparation"}, {"waited_for_preparation_s", landed.prepare_wait_s}};
    finish_deferred(session_id, id, protocol::make_ok_reply(id, step_reply(ep, landed.reward, extra)), route);
  });
}

void Server::finish_deferred(const std::string& session_id, std::uint64_t id, Value reply, const Route& route,
                             ReplyBytes encoded) {
  --deferred_in_flight_;
  ReplyBytes bytes = encoded ? std::move(encoded) : std::make_shared<const std::string>(protocol::encode(reply));
  Session* s = sessions_.find(session_id);
  if (!s) return;
  s->in_flight.reset();
  replies_.remember(session_id, id, bytes);
  bool logged = true;  // in the log before any client has the reply; else held for the retry
  if (recorder_ && !s->in_flight_request.is_null())
    logged = recorder_->record(*s->episode, s->in_flight_request, reply, s->in_flight_t, unix_now());
  s->in_flight_request = nullptr;
  std::vector<Route> to{route};
  to.insert(to.end(), s->waiters.begin(), s->waiters.end());
  s->waiters.clear();
  send_logged(session_id, std::move(to), logged ? *bytes : protocol::encode(error_reply(id, storage_error())), id);
  if (s->closing) erase_session(session_id, "closed");
}

ReplyBytes Server::op_observe(const Request& request) {
  Session& s = sessions_.find_open(request.session, request.client);  // the key that opened it (CURVE)
  // Nothing of the session goes out while an earlier record waits for the disk.
  if (recorder_ && !recorder_->flush(request.session)) throw storage_error();
  s.episode->touch();
  ObserveBytes unkept;  // when observations_ is full: this reply's alone
  ObserveBytes* kept = nullptr;
  if (auto it = observations_.find(request.session); it != observations_.end()) kept = &it->second;
  if (!kept) {
    unkept = observe_bytes(s.episode->observation(), s.episode->info());
    kept = keep_observation(request.session, unkept);
  }
  ObserveBytes& cached = kept ? *kept : unkept;
  const double clock = s.episode->seconds_used();
  std::uint64_t generation = cached.generation;  // 0: this reply is not the cached one bar id and clock
  ReplyBytes reply;
  // The one field time changes, written over its 9 bytes in the cached encoding.
  if (!protocol::overwrite_float64(cached.observation, cached.clock_at, clock)) {
    forget_observation(request.session);  // cannot happen (seconds_used is always a double); never a stale clock
    generation = 0;
    reply = std::make_shared<const std::string>(protocol::encode(protocol::make_ok_reply(
        request.envelope.id, {{"observation", s.episode->observation()}, {"info", s.episode->info()}})));
  } else {
    std::string queued_info;  // info with its queue entry, while an evaluation waits for its task
    if (s.in_flight && preparation_)
      if (auto waiting = preparation_->waiting(request.session)) {
        json info = s.episode->info();
        info["queue"] = std::move(*waiting);
        queued_info = protocol::encode(info);
        generation = 0;
      }
    reply = std::make_shared<const std::string>(
        observe_reply(cached, request.envelope.id, queued_info.empty() ? cached.info : queued_info));
  }
  // Logged before it is sent (handle), as every reply: the recorder sets the reply's id and clock in
  // the patch it made once for this generation, or logs the reply as sent (decoded) otherwise.
  if (recorder_ && !recorder_->record_observe(*s.episode, request.envelope.body, generation, request.envelope.id,
                                              clock, [&] { return decode_reply(*reply); }, request.t, unix_now()))
    throw storage_error();
  return reply;
}

std::string Server::observe_reply(const ObserveBytes& cached, std::uint64_t id, const std::string& info) {
  // The reply map {observation, info, v, id, ok} written around the cached encodings: what
  // protocol::encode(make_ok_reply(...)) gives, in another key order (a map's order carries
  // nothing, PROTOCOL.md section 3).
  static const std::string head = [] {
    std::string h(1, static_cast<char>(0x85));  // fixmap of 5 entries
    return h + protocol::encode("v") + protocol::encode(protocol::kVersion) + protocol::encode("ok") +
           protocol::encode(true) + protocol::encode("id");
  }();
  static const std::string observation_key = protocol::encode("observation"), info_key = protocol::encode("info");
  const std::string id_bytes = protocol::encode(id);
  std::string bytes;
  bytes.reserve(head.size() + id_bytes.size() + observation_key.size() + cached.observation.size() +
                info_key.size() + info.size());
  bytes.append(head).append(id_bytes).append(observation_key).append(cached.observation).append(info_key).append(info);
  return bytes;
}

json Server::decode_reply(const std::string& bytes) {
  protocol::Limits all;  // the server's own reply: no request limit applies
  all.max_message_bytes = all.max_string_bytes = bytes.size();
  all.max_array_items = all.max_map_entries = all.max_total_items = bytes.size();
  all.max_depth = 64;
  return protocol::decode(bytes, all);
}

Server::ObserveBytes* Server::keep_observation(const std::string& session, ObserveBytes& bytes) {
  forget_observation(session);
  const std::size_t size = bytes.observation.size() + bytes.info.size();
  if (observations_bytes_ + size > observations_max_bytes_) return nullptr;
  observations_bytes_ += size;
  return &(observations_[session] = std::move(bytes));
}

void Server::forget_observation(const std::string& session) {
  auto it = observations_.find(session);
  if (it == observations_.end()) return;
  observations_bytes_ -= it->second.observation.size() + it->second.info.size();
  observations_.erase(it);
}

Server::ObserveBytes Server::observe_bytes(const json& observation, const json& info) {
  ObserveBytes out;
  const json* clock = nullptr;
  if (auto b = observation.find("budget"); b != observation.end() && b->is_object())
    if (auto c = b->find("seconds_used"); c != b->end() && c->is_number_float()) clock = &*c;
  protocol::Marked m = protocol::encode_marked(observation, clock);
  out.observation = std::move(m.bytes);
  out.clock_at = m.at;
  out.info = protocol::encode(info);
  out.generation = ++observe_generation_;
  return out;
}

Value Server::op_close(const Request& request) {
  Session& s = sessions_.find_open(request.session, request.client);
  forget_observation(request.session);
  Episode& ep = *s.episode;
  ep.end("closed");
  json out = {{"session", request.session}, {"end_reason", *ep.end_reason()}, {"steps", ep.steps()},
              {"total_reward", ep.total_reward()}};
  // The session goes once this reply is logged (record_exchange), or, with an action in flight,
  // when that action's reply lands.
  s.closing = true;
  return out;
}

void Server::erase_session(const std::string& id, const std::string& reason) {
  forget_observation(id);
  Session* s = sessions_.find(id);
  if (!s) return;
  if (recorder_) {
    try {
      recorder_->end(*s->episode, reason);
    } catch (const std::exception& e) {
      log_error(std::string("recorder: ") + e.what());
    }
  }
  const std::size_t before = replies_.bytes();
  replies_.forget_session(id);
  sessions_.erase(id, reason);
  // Give freed cache memory back to the system, not only to malloc's free lists (issue 22.3:
  // the resident size stayed high after many sessions closed).
  freed_since_trim_ += before - replies_.bytes();
  if (freed_since_trim_ > (32u << 20)) {
    ::malloc_trim(0);
    freed_since_trim_ = 0;
  }
}

void Server::reap_idle() {
  for (const auto& id : sessions_.idle(Episode::Clock::now(), std::chrono::duration<double>(config_.idle_timeout_s))) {
    sessions_.find(id)->episode->end("idle_timeout");
    erase_session(id, "idle_timeout");
  }
}

Value Server::op_stats() const {
  const std::size_t active = sessions_.count_active(), ended = sessions_.size() - active;
  double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  json gpus = json::array();
  for (std::size_t i = 0; i < gpu_queues_.size(); ++i) {
    const GpuCounters& c = *gpu_counters_[i];
    const std::size_t parked = preparation_ ? preparation_->parked(static_cast<int>(i)) : 0;
    auto fraction = [&](double seconds) { return uptime > 0 ? std::min(1.0, seconds / uptime) : 0.0; };
    gpus.push_back({{"index", i},
                    {"queued", gpu_queues_[i]->queued()},
                    {"waiting_for_preparation", parked},
                    {"queue_depth", gpu_queues_[i]->queued() + gpu_queues_[i]->running() + parked},
                    {"running", gpu_queues_[i]->running()},
                    {"sessions", sessions_.gpu_sessions(i)},
                    {"evaluations", c.evaluations.load()},
                    // Real GPU use: time in runner jobs on the GPU, and of it the timed sample loops.
                    {"busy_fraction", fraction(static_cast<double>(c.phase_ns.load()) * 1e-9)},
                    {"timed_fraction", fraction(static_cast<double>(c.timed_ns.load()) * 1e-9)},
                    {"busy_s", static_cast<double>(c.phase_ns.load()) * 1e-9},
                    {"timed_s", static_cast<double>(c.timed_ns.load()) * 1e-9},
                    // How long the GPU's queue held an evaluation (what busy_fraction was before issue 15).
                    {"queue_occupancy", fraction(gpu_queues_[i]->busy_seconds())},
                    {"preparation", preparation_ ? preparation_->progress(static_cast<int>(i)) : json(nullptr)}});
  }
  json reasons = json::object();
  for (const auto& [k, v] : sessions_.end_reasons()) reasons[k] = v;
  return {{"uptime_s", uptime},
          {"sessions",
           {{"active", active}, {"ended", ended}, {"total_opened", sessions_.opened()}, {"closed", sessions_.ended()},
            {"end_reasons", reasons}}},
          {"requests", requests_},
          {"errors", errors_},
          {"in_flight", deferred_in_flight_},
          {"reply_cache_bytes", replies_.bytes()},
          {"compile",
           {{"workers", compile_pool_->workers()},
            {"queued", compile_pool_->queued()},
            {"running", compile_pool_->running()},
            {"busy_fraction", uptime > 0 ? compile_pool_->busy_seconds() / uptime / compile_pool_->workers() : 0.0},
            {"cache_hits", compiler_->cache_hits()},
            {"cache_misses", compiler_->cache_misses()}}},
          // Evaluations whose GPU part is done, being finished off the GPU queues (properties, reward).
          {"finishing", {{"workers", finish_pool_->workers()}, {"queued", finish_pool_->queued()}, {"running", finish_pool_->running()}}},
          {"gpus", gpus}};
}

}  // namespace d2k::env
