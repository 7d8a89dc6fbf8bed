// The server loop: one ZeroMQ ROUTER socket, the session table, the reply cache and the step
// pipeline. Protocol errors become typed error replies at exactly one place (Server::handle), and
// replies leave through one place too (Server::send). Long work (compile, evaluate) runs on worker
// pools and comes back through the Mailbox, so the loop never blocks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "env/config.hpp"
#include "env/episode.hpp"
#include "env/events.hpp"
#include "env/gpu_backend.hpp"
#include "env/prepare.hpp"
#include "env/recorder.hpp"
#include "env/reply_cache.hpp"
#include "env/route.hpp"
#include "env/scheduler.hpp"
#include "env/session_table.hpp"
#include "protocol/curve.hpp"
#include "protocol/messages.hpp"
#include "sandbox/compiler.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::env {

// hello.toolchain from Compiler::toolchain_version() (nvcc's `--version` banner, then the host
// compiler's first line): {nvcc: "13.0.88", host_compiler: "g++ 12.2.0"}; a field whose banner
// line is missing is "".
nlohmann::json toolchain_json(std::string_view banner);

class Server {
 public:
  Server(Config config, tasks::TaskSet tasks, std::shared_ptr<GpuBackend> gpu = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the endpoint (throws std::runtime_error with the reason when it cannot).
  void bind();
  // Runs until request_stop(); then finishes or cancels work in flight and returns.
  void run();
  // Async-signal-safe: may be called from a signal handler or another thread.
  void request_stop();
  const std::string& endpoint() const { return bound_endpoint_; }
  // The endpoint of episode events (`d2k watch`), "" when off.
  std::string events_endpoint() const { return events_ ? events_->endpoint() : std::string(); }
  // The server's CURVE public key (Z85), "" when it serves without CURVE.
  std::string public_key() const { return server_key_ ? server_key_->public_key : std::string(); }
  const Config& config() const { return config_; }
  // This run of the server: 16 hex digits from getrandom(2), new at every start. hello and reset
  // replies carry it, and every error reply (error.instance), so a client that gets
  // unknown_session for a session it opened under another instance knows the server restarted.
  const std::string& instance() const { return instance_; }
  // For tests: runs on a step worker before each workspace action (write_file, edit, patch) of
  // `session`; a hook that blocks holds that action (and its session) while others go on. Set
  // before run().
  void set_step_hook(std::function<void(const std::string& session)> hook) { step_hook_ = std::move(hook); }
  // For tests: runs on a log-sync thread before each fdatasync of `session`'s episode log; a hook
  // that blocks makes that session's log slow (its replies wait; no other session's do). Set before run().
  void set_sync_hook(std::function<void(const std::string& session)> hook) { sync_hook_ = std::move(hook); }
  // For tests: the bound of the sessions' cached observe replies (set before run()), and the bytes
  // they hold now (any thread).
  void set_observations_max_bytes(std::size_t bytes) { observations_max_bytes_ = bytes; }
  std::size_t observations_bytes() const { return observations_bytes_.load(std::memory_order_relaxed); }

 private:
  // A request as the parser typed it, and when it arrived.
  struct Request {
    protocol::Envelope envelope;
    std::string session;  // step, observe, close: the session it names (parse_session); else ""
    double t = 0;         // unix seconds
    std::string client;   // the sender's CURVE public key (Z85; the ZAP handler's User-Id); "" without CURVE
    // Whose work it is, for the pools' round-robin (WorkerPool): "key:" + the CURVE key, else
    // "id:" + the connection's ZeroMQ routing id.
    std::string tenant;
  };
  // What an op answers now: a reply, the cached bytes of an earlier one (a retry), or nothing
  // yet (deferred: the reply goes out when the work lands).
  struct Answer {
    protocol::Value reply;
    ReplyBytes cached;
    bool deferred = false;
  };
  // The work a step hands to the pools: compile only, or compile then a timed run on the GPU, or
  // compile then one of the agent's tools (disassemble on the compile pool, profile and sanitize on
  // the GPU queue).
  enum class Work { compile, evaluate, submit, tool };
  // A finished step's outcome, carried back to the loop thread.
  struct Landed {
    nlohmann::json last;       // observation.last
    double reward = 0;
    nlohmann::json breakdown;  // info.reward (evaluations only)
    bool submit = false;       // ends the episode
    bool storage = false;      // the server's disk refused the work: not a step, nothing charged
    std::uint32_t cost = 1;    // steps it uses (tools: config tools.*_steps)
    double prepare_wait_s = 0; // time the evaluation waited for its task's preparation
  };
  // What each GPU's evaluations cost it (stats): written by that GPU's queue thread.
  struct GpuCounters {
    std::atomic<std::uint64_t> evaluations{0};
    std::atomic<std::uint64_t> phase_ns{0};  // runner jobs on the GPU (EvaluationReport::gpu_phase_s)
    std::atomic<std::uint64_t> timed_ns{0};  // timed sample loops (EvaluationReport::timed_s)
  };

  void on_frames(std::vector<zmq::message_t>& frames);
  // `held_t`: the arrival time of a request that waited for its session's workspace action (set
  // when release_held answers it; the request was already counted).
  void handle(const Route& route, std::string_view payload, const std::string& client,
              std::optional<double> held_t = std::nullopt);
  // CURVE: loads the key pair and the allowlist and binds the ZAP handler (before any CURVE socket).
  void setup_curve();
  // Re-reads the allowlist when its file changed (size, mtime or inode); a bad file keeps the old list.
  void reload_allowlist(bool force);
  // Answers the ZAP requests waiting (RFC 27): a CURVE client whose key is listed is let in, its key
  // becoming the User-Id of its messages; any other is refused.
  void on_zap();
  Answer dispatch(const Route& route, const Request& request);
  protocol::Value op_hello() const;
  nlohmann::json public_config() const;  // hello.config: Config::to_json without host paths
  protocol::Value error_reply(std::optional<std::uint64_t> id, const protocol::Error& e) const;  // with error.instance
  protocol::Value op_list_tasks() const;
  protocol::Value op_reset(const Request& request);
  Answer op_step(const Route& route, const Request& request);
  // observe: the reply's bytes spliced from the session's cached observation (rebuilt only after
  // the session changed; its clock field refreshed each time), logged (with a recorder) before it goes.
  ReplyBytes op_observe(const Request& request);
  void forget_observation(const std::string& session);
  protocol::Value op_close(const Request& request);
  protocol::Value op_stats() const;

  // The step pipeline: start_work hands the workspace to the compile pool (and, for evaluate
  // and submit, the artifact to the session's GPU queue); land brings the outcome back to the
  // loop thread; finish_deferred caches, records and sends the reply.
  protocol::Value step_reply(const Episode& episode, double reward, protocol::Value extra_info = {}) const;
  void start_work(Session& session, const Request& request, const Route& route, Work work,
                  std::optional<protocol::Action> tool = std::nullopt);
  // What a tool action costs in steps (config tools.*_steps), and its run after the compile.
  std::uint32_t tool_cost(const protocol::Action& action) const;
  void run_tool(const protocol::Action& action, sandbox::CompileOutcome outcome, ToolJob tool_job, std::uint32_t cost,
                const std::string& session_id, const Route& route, std::uint64_t id, const std::string& tenant);
  void land(const std::string& session_id, std::uint64_t id, const Route& route, Landed landed);
  // `encoded`: the reply's bytes when a worker encoded them already (else encoded here).
  void finish_deferred(const std::string& session_id, std::uint64_t id, protocol::Value reply,
                       const Route& route, ReplyBytes encoded = nullptr);
  // write_file, edit and patch (issue 22.6): the action, its step reply and the reply's encoding
  // run on the step pool on a copy of the episode; the loop installs the copy, logs and sends the
  // reply, then answers the session's requests that arrived meanwhile (release_held), in order.
  void start_workspace_step(Session& s, const Request& request, const Route& route, protocol::Action action);
  void release_held(const std::string& session_id, std::deque<HeldRequest> held);

  void send(const Route& route, const std::string& bytes);
  // Whether a reply waits for its session's log to be durable: `wait` for a reply that changed the
  // episode (a reset, a step that ran, a close), `none` for one that changed nothing (observe,
  // hello, stats, list_tasks, errors): its record is written before it goes out and made durable
  // by the session's next fdatasync.
  enum class Durability { wait, none };
  // A reply of `session` (to `routes`), after the session's replies held before it: with `wait`,
  // once every record of the session written so far is durable (Recorder::pending); at once when
  // nothing waits. `id`: the request's, for the storage_unavailable error that replaces it if the
  // sync fails.
  void send_logged(const std::string& session, std::vector<Route> routes, const std::string& bytes,
                   std::optional<std::uint64_t> id, Durability durability = Durability::wait);
  // A log-sync report, on the loop: sends the session's replies whose records are durable now, or,
  // when the fdatasync failed, answers each held reply with storage_unavailable instead.
  void on_synced(const std::string& session, std::uint64_t record, int error);
  // Logs the exchange; false when the disk refused it, so its reply must not go out as done (a
  // storage_unavailable error goes out instead; a state-changing reply waits for its retry).
  bool record_exchange(const Request& request, const protocol::Value& reply);
  // True when the server's state filesystem has less room than a compile needs.
  bool low_on_disk() const;
  // `s` with the server's own paths (state dir, logs, tasks) replaced by placeholders: for text a client sees.
  std::string scrub_paths(std::string s) const;
  void reap_idle();
  void erase_session(const std::string& id, const std::string& reason);

  Config config_;
  tasks::TaskSet tasks_;
  std::shared_ptr<GpuBackend> gpu_;
  std::vector<GpuInfo> gpu_info_;
  std::unique_ptr<sandbox::Compiler> compiler_;
  std::optional<std::filesystem::path> cuobjdump_;  // disassemble (beside nvcc, else PATH)
  std::unique_ptr<Recorder> recorder_;
  Mailbox mailbox_;
  std::unique_ptr<WorkerPool> compile_pool_;
  std::unique_ptr<WorkerPool> step_pool_;  // workspace actions and their replies (start_workspace_step)
  std::function<void(const std::string&)> step_hook_;
  std::function<void(const std::string&)> sync_hook_;
  // Replies waiting for their session's episode log to be durable (send_logged), per session, in order.
  struct Outgoing {
    std::uint64_t after = 0;  // the record that must be durable first
    std::vector<Route> routes;
    std::string bytes;
    std::optional<std::uint64_t> id;
  };
  std::unordered_map<std::string, std::deque<Outgoing>> outbox_;
  std::vector<std::unique_ptr<WorkerPool>> gpu_queues_;  // one per GPU: one timed run at a time
  std::unique_ptr<WorkerPool> finish_pool_;  // evaluations' CPU half (GpuStage::finish), off the GPU queues
  std::vector<std::unique_ptr<GpuCounters>> gpu_counters_;
  std::unique_ptr<Preparation> preparation_;  // with a GPU backend: every task readied on every GPU
  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::router};
  std::optional<curve::KeyPair> server_key_;
  curve::Allowlist allowed_;
  std::string allowlist_stamp_;  // size, mtime and inode of the allowlist file as last read
  std::unique_ptr<zmq::socket_t> zap_;
  std::map<std::string, std::chrono::steady_clock::time_point> refused_logged_;  // unknown key → last logged
  std::unique_ptr<Events> events_;
  std::string bound_endpoint_;
  int stop_fd_ = -1;  // eventfd written by request_stop
  bool stopping_ = false;

  SessionTable sessions_;
  // Each session's observe reply as last built (issue 15 item 5): dropped whenever the server
  // changes the session (step, a landed action, close, erase).
  struct ObserveBytes {
    std::string observation;  // encoded; its budget.seconds_used (a float64) at clock_at
    std::size_t clock_at = std::string::npos;
    std::string info;  // encoded, without the queue entry (built per call while an action waits)
    std::uint64_t generation = 0;  // unique per build: the recorder's patch for it is computed once
  };
  ObserveBytes observe_bytes(const nlohmann::json& observation, const nlohmann::json& info);
  // The observe reply's bytes: `cached` and `info` (encoded) spliced into the reply map with `id`.
  static std::string observe_reply(const ObserveBytes& cached, std::uint64_t id, const std::string& info);
  static nlohmann::json decode_reply(const std::string& bytes);  // a reply of this server, as decoded
  std::uint64_t observe_generation_ = 0;
  std::unordered_map<std::string, ObserveBytes> observations_;
  // All of observations_ stays under this (each is up to a workspace, 2 MiB, and every open session
  // may have one): past it a session's observe reply is encoded per call and not kept.
  std::size_t observations_max_bytes_ = 256u << 20;
  std::atomic<std::size_t> observations_bytes_{0};  // written by the loop only
  // Moves `bytes` into observations_ as `session`'s observe reply when it fits: the kept one; else
  // null, `bytes` untouched.
  ObserveBytes* keep_observation(const std::string& session, ObserveBytes& bytes);
  ReplyCache replies_;
  std::mt19937_64 rng_{std::random_device{}()};  // episode seeds not given by the client

  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::uint64_t requests_ = 0, errors_ = 0;
  std::size_t deferred_in_flight_ = 0;
  std::size_t freed_since_trim_ = 0;
  std::string instance_;  // reply-cache bytes freed since the last malloc_trim
};

}  // namespace d2k::env
