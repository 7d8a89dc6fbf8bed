// The Recorder: writes one episode log per session (env/episode_log.hpp), keeps the catalogue row
// of each episode (env/catalogue.hpp) and publishes episode events for `d2k watch` on a ZeroMQ PUB
// socket (topic = the session's watch id, never the id itself). Called only from the server loop thread. Write errors never escape.
// A record the disk refuses (full, quota, I/O error) is kept and written again, in order, before
// anything later of its session: begin/record/flush say whether the session's records are all on
// disk, so the server replies nothing as done that is not logged (PROTOCOL.md `storage_unavailable`).
// Other failures (a log dir that cannot be made) go to stderr and mark the log failed in the catalogue.
// With `on_synced` set, records are written on the loop but made durable by log-sync threads
// (env/log_sync.hpp): pending(session) says which record a reply of the session must wait for, and
// synced() is told when the file is durable up to it (the server then sends the held replies).
#pragma once

#include <filesystem>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "env/catalogue.hpp"
#include "env/episode.hpp"
#include "env/episode_log.hpp"
#include "env/gpu_backend.hpp"
#include "env/log_sync.hpp"

namespace d2k::env {

struct RecorderConfig {
  std::filesystem::path log_dir;     // one <session>.d2klog per episode; "" = no logs
  std::filesystem::path catalogue;   // sqlite file; "" = no catalogue
  std::string events_endpoint;       // "" = no PUB socket
  nlohmann::json server_info;        // versions, toolchain, gpus, config that affects results
  bool sync = true;                  // fdatasync after every record (survives power loss, not only kill -9)
  std::uint64_t log_budget_bytes = 0;  // episode logs kept in log_dir; beyond it the oldest finished go; 0 = no bound
  // When set, events go here (the server's events socket, env/events.hpp) instead of a PUB socket.
  std::function<void(const std::string& session, const nlohmann::json& event)> on_event;
  // With on_event: whether anyone may be watching. While it says no, record_observe builds no event
  // (the one record whose event is costly and worthless unheard). Unset: always.
  std::function<bool()> watched;
  // With `sync`: when set, fdatasync runs on log-sync threads (group commit, off the caller's thread),
  // which call this after each one; the owner hands it back to synced() on its own thread. Unset:
  // every record is fdatasync'ed before begin/record/flush return.
  LogSyncer::Done on_synced;
  std::size_t sync_threads = 4;  // a slow file holds one; the others sync other sessions' files
  LogSyncer::Hook sync_hook;     // tests: runs before each session's fdatasync, on its sync thread
  // With on_synced: read-only records (observes) ask for no fdatasync of their own; a session's
  // next record that does, a reply that waits (pending) or its end covers them, and so does one
  // asked for once the oldest of them is this old (a session that only observes, in groups).
  std::chrono::milliseconds read_only_sync_after{1000};
};

class Recorder {
 public:
  // Creates log_dir, opens the catalogue and binds the PUB socket. A log dir or catalogue that
  // cannot be used is reported on stderr and left off; an events endpoint that cannot be bound, or
  // that is not loopback/ipc, throws std::runtime_error (a start-up configuration error).
  explicit Recorder(RecorderConfig config);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // After a successful reset; `request`/`reply` are the decoded maps. Honors request.options.record == false.
  // False when the disk refused the log's first records: nothing of the session is kept (no file,
  // no row) and the reset must not be answered as done.
  // `tenant`: the client that opened the session (its log's turn among the log-sync threads' tenants).
  bool begin(const Episode& episode, const nlohmann::json& request, const nlohmann::json& reply, double t_request,
             double t_reply, const std::string& tenant = {});
  // Every later request/reply of that session (step, observe, close), in the order replies are sent.
  // True when it and every earlier record of the session are on disk (or the session is not logged).
  // When the disk refuses it: with `keep`, it waits (and is written before anything later of the
  // session, by the next record or flush); without, it is dropped (a reply that will not be sent).
  bool record(const Episode& episode, const nlohmann::json& request, const nlohmann::json& reply, double t_request,
              double t_reply, bool keep = true);
  // An observe answered from the server's cached reply encoding. `reply` gives the reply sent (as
  // decoded). Replies given with one `generation` (nonzero) differ only in `id` and
  // observation.budget.seconds_used: their patch from the base is computed once per generation and
  // base, and each record is that patch with the two values set (no diff, no event while nobody
  // watches). Generation 0, a watcher or no base: recorded by record(). Returns as record(), keep false.
  bool record_observe(const Episode& episode, const nlohmann::json& request, std::uint64_t generation,
                      std::uint64_t id, double seconds_used, const std::function<nlohmann::json()>& reply,
                      double t_request, double t_reply);
  // Makes record_observe's patch for `generation` now (after begin: the first observes of a new
  // session are as cheap as later ones). `reply`: an observe reply of that generation, as decoded.
  void prime_observe(const Episode& episode, std::uint64_t generation, const nlohmann::json& reply);
  // Writes the session's waiting records; true when none is left waiting (or it is not recorded).
  bool flush(const std::string& session);
  // With on_synced: the session's latest record written and not yet known durable (0 when there is
  // none): a reply of the session goes out once synced() has reported it (or a later one). Asks for
  // the fdatasync of read-only records not asked for yet (record_observe), since a reply waits now.
  std::uint64_t pending(const std::string& session);
  // A log-sync report (on_synced) on the owner's thread. False when the fdatasync failed: the
  // records after the last durable one are cut off the file and wait to be written again (as a
  // record the disk refused), so nothing held for them may be answered as done.
  bool synced(const std::string& session, std::uint64_t record, int error);
  // Runs the fdatasyncs asked for so far and stops the sync threads (before the owner stops
  // taking their reports).
  void stop_sync();
  // The session is gone (closed, idle_timeout, server_shutdown): final record + catalogue row.
  void end(const Episode& episode, const std::string& reason);
  std::string events_endpoint() const;  // the bound PUB endpoint ("" if none)

  // --- extensions ---
  // The log file of a session being recorded ("" when not recorded or unknown).
  std::filesystem::path log_path(const std::string& session) const;
  std::size_t active() const { return active_.size() - ending_; }
  // Deletes the oldest finished logs in log_dir (by modification time) until what is left fits
  // log_budget_bytes; logs of sessions still recorded are never deleted. Returns how many went.
  std::size_t enforce_log_budget();

 private:
  struct Active;
  void publish(const std::string& session, const nlohmann::json& event);
  bool events_wanted() const;  // an event published now may reach someone
  void append(Active& a, const nlohmann::json& record);
  // After a record of `a` was written: with log-sync threads, it waits for its fdatasync.
  void written(Active& a, nlohmann::json record, std::string encoded = {});
  void request_sync(Active& a);
  // After a read-only record written alone: asks for no fdatasync unless the oldest record not asked
  // for is config_.read_only_sync_after old.
  void sync_later(Active& a);
  void finish(std::map<std::string, std::unique_ptr<Active>>::iterator it);  // close the log, drop the session
  bool flush(Active& a, bool sync = true);  // sync: ask for the fdatasync of what it wrote
  void save_row(Active& a);
  void fail_log(Active& a, const std::string& why);
  // The log record of one exchange: whole, or for an observe a patch against the session's base
  // reply (once a whole reply with an observation is on disk, keep_base makes it the base).
  nlohmann::json exchange_record(Active& a, std::uint64_t n, const nlohmann::json& request,
                                 const nlohmann::json& reply, double t_request, double t_reply);
  void observe_patch(Active& a, std::uint64_t generation, const nlohmann::json& reply);
  struct ObservePatch;
  static std::string observe_record(std::uint64_t n, double t_request, double t_reply, const nlohmann::json& request,
                                    std::uint64_t base_n, const ObservePatch& patch, std::uint64_t id,
                                    double seconds_used);
  void keep_base(Active& a, std::uint64_t n, const nlohmann::json& request, const nlohmann::json& reply);
  void drop_base(Active& a);
  static constexpr std::size_t kBaseMaxBytes = 1u << 20;     // a larger reply is not kept as a base
  static constexpr std::size_t kBaseTotalBytes = 64u << 20;  // all sessions' bases together
  std::size_t base_bytes_total_ = 0;

  RecorderConfig config_;
  std::unique_ptr<Catalogue> catalogue_;
  bool logs_ok_ = false;
  zmq::context_t context_{1};
  std::unique_ptr<zmq::socket_t> pub_;
  std::string bound_events_;
  std::map<std::string, std::unique_ptr<Active>> active_;
  std::chrono::steady_clock::time_point last_budget_check_{};
  std::size_t ending_ = 0;             // sessions ended whose last records wait for their fdatasync
  std::unique_ptr<LogSyncer> syncer_;  // with config_.on_synced
};

// events endpoint = tcp port+1 of a loopback server endpoint, or "<ipc path>.events" for ipc; "" when
// the endpoint is neither (not loopback, or its port is not a number): events stay on this host.
std::string default_events_endpoint(const std::string& server_endpoint);
// ipc://, inproc:// or tcp on a loopback address (127.x, localhost, [::1]).
bool local_endpoint(const std::string& endpoint);
// How events name a session (their topic, and in place of the id in every request and reply): the
// id's first 8 hex digits. The id itself is a capability and never goes to a subscriber.
std::string watch_id(const std::string& session);

// The header's `server` block for a server: {server, version, protocol, toolchain, driver, gpus,
// config}; `config` is Config::to_json() (what affects results: budgets, reward, limits).
nlohmann::json make_server_info(const Config& config, const std::string& toolchain, const std::vector<GpuInfo>& gpus);

// Folds one exchange (request/reply maps) into a catalogue row: steps, total reward, end reason, best
// score, and for a submit the outcome, score, speedup and design properties met (of `layer_properties`).
void summarize_exchange(EpisodeRow& row, const nlohmann::json& request, const nlohmann::json& reply,
                        const std::vector<std::string>& layer_properties);
// Ids of the design properties an episode at `layer` is measured against (all of them at L0).
std::vector<std::string> layer_property_ids(const tasks::Task& task, int layer);
// The catalogue row a log describes (for indexing logs of a server that died: `d2k episodes --index`).
EpisodeRow row_from_log(const EpisodeLog& log, const std::filesystem::path& path);

// Unix time now, in seconds (what the server passes as t_request / t_reply).
double unix_now();

}  // namespace d2k::env
