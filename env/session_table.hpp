// The server's open sessions: each episode with its GPU slot and the state of the action in
// flight; fresh session ids; which sessions are idle; the counters `stats` reports. Owned and used
// only by the server loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "env/episode.hpp"
#include "env/route.hpp"

namespace d2k::env {

// A request of a session that waits for the session's workspace action to land (issue 22.6): the
// request's bytes as received, answered in arrival order after that action's reply.
struct HeldRequest {
  Route route;
  std::string payload;
  std::string client;  // CURVE key of the sender ("" without CURVE)
  double t = 0;        // when it arrived (unix seconds)
};

struct Session {
  std::unique_ptr<Episode> episode;
  int gpu = 0;                             // the GPU its evaluations queue on (0 without GPUs)
  std::optional<std::uint64_t> in_flight;  // request id of the action running now
  std::vector<Route> waiters;              // routes of retries of the in-flight request
  bool closing = false;                    // closed while work was in flight: erase when it lands
  nlohmann::json in_flight_request;        // for the episode log, written when the reply lands
  double in_flight_t = 0;                  // when it arrived (unix seconds)
  std::string owner;                       // CURVE public key (Z85) of the client that opened it; "" without CURVE
  // A workspace action (write_file, edit, patch) runs off the loop on a copy of the episode: until
  // it lands, every later request of the session waits in `held`, so replies keep request order.
  bool serial = false;
  std::deque<HeldRequest> held;
};

class SessionTable {
 public:
  // `gpus`: how many GPUs sessions are spread over (0: none, every session gets slot 0).
  explicit SessionTable(std::size_t gpus);

  // A fresh id: 32 lowercase hex digits (128 bits read from the kernel's CSPRNG with getrandom(2),
  // nothing derived from earlier ids, so holding ids says nothing about the next), never one that
  // is open. An id is the only capability a request shows for its session (docs/multi-tenant.md).
  // Throws std::system_error when the kernel gives no random bytes.
  std::string new_id();
  // Opens a session for `episode` (whose id is its key) on the GPU with the fewest sessions.
  Session& open(std::unique_ptr<Episode> episode);
  // The session, also while it is closing; nullptr when there is none.
  Session* find(const std::string& id);
  // The session a request from `client` (its CURVE key, "" without CURVE) may act on: throws
  // protocol::Error{unknown_session} when there is none, it is closing, or another key opened it
  // (the same error: an id alone says nothing about whose it is).
  Session& find_open(const std::string& id, const std::string& client = "");
  // Removes the session and frees its GPU slot; `reason` is counted for `stats`. False when absent.
  bool erase(const std::string& id, const std::string& reason);
  // Sessions with nothing in flight whose last activity is more than `limit` before `now`.
  std::vector<std::string> idle(Episode::Clock::time_point now, std::chrono::duration<double> limit) const;
  std::vector<std::string> ids() const;

  std::size_t size() const { return sessions_.size(); }
  std::size_t gpu_sessions(std::size_t gpu) const { return gpu_load_.at(gpu); }
  std::uint64_t opened() const { return opened_; }
  std::uint64_t ended() const { return ended_; }
  const std::map<std::string, std::uint64_t>& end_reasons() const { return end_reasons_; }
  // Sessions whose episode is still running / has ended (closing ones included).
  std::size_t count_active() const;

 private:
  std::unordered_map<std::string, Session> sessions_;
  std::vector<std::size_t> gpu_load_;  // sessions per GPU
  std::uint64_t opened_ = 0, ended_ = 0;
  std::map<std::string, std::uint64_t> end_reasons_;
};

}  // namespace d2k::env
