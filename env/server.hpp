// The server loop: one ZeroMQ ROUTER socket, sessions, and the scheduler. Protocol errors become
// typed error replies at exactly one place (Server::handle). Long work (compile, evaluate) runs on
// worker pools and comes back through the Mailbox, so the loop never blocks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "env/config.hpp"
#include "env/episode.hpp"
#include "env/gpu_backend.hpp"
#include "env/recorder.hpp"
#include "env/scheduler.hpp"
#include "protocol/messages.hpp"
#include "sandbox/compiler.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::env {

// The frames that address a reply: the peer's routing id, plus an empty delimiter for REQ peers.
using Route = std::vector<std::string>;

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
  // The PUB endpoint of episode events (`d2k watch`), "" when off.
  std::string events_endpoint() const { return recorder_ ? recorder_->events_endpoint() : std::string(); }
  const Config& config() const { return config_; }

 private:
  struct Session {
    std::unique_ptr<Episode> episode;
    std::deque<std::pair<std::uint64_t, std::shared_ptr<const std::string>>> replies;  // retry cache
    std::optional<std::uint64_t> in_flight;  // request id of the action running now
    std::vector<Route> waiters;              // routes of retries of the in-flight request
    bool closing = false;                    // closed while work was in flight: erase when it lands
    protocol::Value in_flight_request;       // for the episode log, written when the reply lands
    double in_flight_t = 0;                  // when it arrived (unix seconds)
  };

  void on_frames(std::vector<zmq::message_t>& frames);
  void handle(const Route& route, std::string_view payload);
  protocol::Value dispatch(const Route& route, const protocol::Envelope& request, bool& deferred);
  protocol::Value op_hello() const;
  nlohmann::json toolchain_json() const;
  protocol::Value op_list_tasks() const;
  protocol::Value op_reset(const protocol::Envelope& request);
  protocol::Value op_step(const Route& route, const protocol::Envelope& request, bool& deferred);
  protocol::Value op_observe(const protocol::Envelope& request);
  protocol::Value op_close(const protocol::Envelope& request);
  protocol::Value op_stats() const;

  protocol::Value step_reply(const Episode& episode, double reward, protocol::Value extra_info = {}) const;
  void start_compile(const std::string& session_id, const Route& route, std::uint64_t id);
  void start_evaluation(const std::string& session_id, const Route& route, std::uint64_t id, bool submit);
  // Called on the loop thread when deferred work for (session, id) produced its reply.
  void finish_deferred(const std::string& session_id, std::uint64_t id, protocol::Value reply,
                       const Route& route);
  void send(const Route& route, const std::string& bytes);
  void record_exchange(const protocol::Envelope& request, const protocol::Value& reply, double t_request);
  void remember(Session& session, std::uint64_t id, std::shared_ptr<const std::string> reply);
  void remember_global(const std::string& key, std::shared_ptr<const std::string> reply);
  std::shared_ptr<const std::string> cached(const Session& session, std::uint64_t id) const;
  Session& find_session(const std::string& id);
  void reap_idle();
  void erase_session(const std::string& id, const std::string& reason);
  std::string new_session_id();
  bool work_in_flight() const;

  Config config_;
  tasks::TaskSet tasks_;
  std::shared_ptr<GpuBackend> gpu_;
  std::vector<GpuInfo> gpu_info_;
  std::unique_ptr<sandbox::Compiler> compiler_;
  std::unique_ptr<Recorder> recorder_;
  Mailbox mailbox_;
  std::unique_ptr<WorkerPool> compile_pool_;
  std::vector<std::unique_ptr<WorkerPool>> gpu_queues_;  // one per GPU: one timed run at a time
  std::vector<std::size_t> gpu_load_;                     // sessions assigned per GPU
  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::router};
  std::string bound_endpoint_;
  int stop_fd_ = -1;  // eventfd written by request_stop
  bool stopping_ = false;

  std::unordered_map<std::string, Session> sessions_;
  std::unordered_map<std::string, int> session_gpu_;
  std::list<std::pair<std::string, std::shared_ptr<const std::string>>> global_lru_;
  std::unordered_map<std::string, decltype(global_lru_)::iterator> global_index_;
  std::mt19937_64 rng_{std::random_device{}()};

  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::uint64_t requests_ = 0, errors_ = 0, sessions_opened_ = 0, sessions_ended_ = 0;
  std::map<std::string, std::uint64_t> end_reasons_;
  std::size_t deferred_in_flight_ = 0;
};

}  // namespace d2k::env
