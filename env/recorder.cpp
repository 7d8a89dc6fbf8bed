#include "env/recorder.hpp"

#include "env/log.hpp"
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <fstream>
#include <sstream>
#include <system_error>

#include "env/version.hpp"
#include "protocol/codec.hpp"

namespace d2k::env {

using nlohmann::json;

// record_observe: the patch from the base (base_n) to the observe replies of `generation`, less its
// two changing values: its ops, each encoded (MessagePack), in order.
struct Recorder::ObservePatch {
  std::uint64_t generation = 0, base_n = 0;
  std::size_t count = 0;
  std::string ops;
  bool made = false;
};

struct Recorder::Active {
  struct Waiting {
    json record, event;  // the log record, and the event published once it is written
    std::string encoded;  // instead of `record`: the record as encode_log_record gives it
  };
  EpisodeRow row;
  std::unique_ptr<EpisodeLogWriter> writer;  // null when not recording or after a failure
  std::uint64_t next_n = 0;
  std::vector<std::string> layer_properties;  // ids of the design properties for this layer
  std::deque<Waiting> waiting;                // records the disk refused, oldest first
  // With log-sync threads: records written and not yet known durable, oldest first, each with its
  // number (seq) and the file's length after it; `durable` is the length known durable.
  struct Unsynced {
    std::uint64_t seq;
    std::uint64_t end;
    json record;
    std::string encoded;
  };
  std::deque<Unsynced> unsynced;
  std::uint64_t seq = 0;
  std::uint64_t durable = kLogPreambleBytes;
  // The latest record whose fdatasync was asked for; those after it are read-only records
  // (record_observe's) written since, the oldest of them at `unasked_since` (Recorder::sync_later).
  std::uint64_t requested = 0;
  std::chrono::steady_clock::time_point unasked_since{};
  std::string tenant;  // who opened the session (LogSyncer's round-robin)
  bool ended = false;  // end() ran; the log closes once its last records are durable
  bool refused = false;                       // the last write was refused (logged once per spell)
  // The reply observe replies are logged against (docs/episode-log.md, "Compact observe records"):
  // the latest reply with an observation that was logged whole, its exchange number and size.
  json base_reply;
  std::uint64_t base_n = 0;
  std::size_t base_bytes = 0;
  ObservePatch observe;  // record_observe's, for the latest generation observed
};

namespace {

const json* path_of(const json& j, std::initializer_list<const char*> keys) {
  const json* at = &j;
  for (const char* k : keys) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(k);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::optional<double> number_at(const json& j, std::initializer_list<const char*> keys) {
  const json* v = path_of(j, keys);
  if (v && v->is_number()) return v->get<double>();
  return std::nullopt;
}

// How many of `wanted` the evaluation says the kernel implements; nullopt when it measured none.
std::optional<int> properties_met(const json& evaluation, const std::vector<std::string>& wanted) {
  const json* props = path_of(evaluation, {"properties"});
  if (!props || wanted.empty()) return std::nullopt;
  auto met = [&](const std::string& id) -> std::optional<bool> {
    const json* v = nullptr;
    if (props->is_object()) {
      auto it = props->find(id);
      if (it != props->end()) v = &*it;
    } else if (props->is_array()) {
      for (const json& p : *props)
        if (p.is_object() && p.value("id", "") == id) {
          for (const char* k : {"met", "ok", "pass", "value"})
            if (p.contains(k)) v = &p[k];
        }
    }
    if (v && v->is_boolean()) return v->get<bool>();
    if (v && v->is_object() && v->contains("met") && (*v)["met"].is_boolean()) return (*v)["met"].get<bool>();
    return std::nullopt;
  };
  int count = 0;
  bool any = false;
  for (const auto& id : wanted) {
    auto m = met(id);
    if (m) any = true;
    if (m.value_or(false)) ++count;
  }
  if (!any) return std::nullopt;
  return count;
}

// Errors that mean "the disk has no room (now)": worth trying again later.
bool refused_by_disk(const std::system_error& e) {
  const int v = e.code().value();
  return e.code().category() == std::generic_category() || e.code().category() == std::system_category()
             ? (v == ENOSPC || v == EDQUOT || v == EIO || v == EFBIG)
             : false;
}

}  // namespace

// Updates a catalogue row from one exchange (shared with rebuilding rows from logs).
void summarize_exchange(EpisodeRow& row, const json& request, const json& reply,
                        const std::vector<std::string>& layer_properties) {
  if (!reply.is_object() || !reply.value("ok", false)) return;
  if (auto s = number_at(reply, {"observation", "step"})) row.steps = static_cast<std::uint32_t>(*s);
  if (auto r = number_at(reply, {"info", "total_reward"})) row.total_reward = *r;
  if (const json* reason = path_of(reply, {"info", "end_reason"}); reason && reason->is_string())
    row.end_reason = reason->get<std::string>();
  if (request.value("op", "") != "step") return;
  const json* breakdown = path_of(reply, {"info", "reward"});
  bool correct = breakdown && breakdown->is_object() && breakdown->value("correct", false);
  std::optional<double> score = breakdown ? number_at(*breakdown, {"score"}) : std::nullopt;
  if (correct && score) row.best_score = std::max(row.best_score.value_or(*score), *score);
  const json* type = path_of(request, {"action", "type"});
  if (!type || !type->is_string() || type->get<std::string>() != "submit") return;
  const json* last = path_of(reply, {"observation", "last"});
  bool ok = last && last->is_object() && last->value("ok", false) && correct;
  row.outcome = ok ? "correct" : "incorrect";
  row.submit_score = ok ? score : std::nullopt;
  row.submit_speedup = ok && breakdown ? number_at(*breakdown, {"speedup_vs_baseline"}) : std::nullopt;
  row.properties_met.reset();
  row.properties_total.reset();
  if (last && last->is_object() && last->contains("evaluation")) {
    if (auto met = properties_met((*last)["evaluation"], layer_properties)) {
      row.properties_met = *met;
      row.properties_total = static_cast<int>(layer_properties.size());
    }
  }
}

std::vector<std::string> layer_property_ids(const tasks::Task& task, int layer) {
  std::vector<std::string> ids;
  for (const auto& p : task.properties)
    if (layer == 0 || p.layer <= layer) ids.push_back(p.id);  // L0's target is the full (L3) expert
  return ids;
}

EpisodeRow row_from_log(const EpisodeLog& log, const std::filesystem::path& path) {
  const json& h = log.header;
  EpisodeRow row;
  row.session = h.value("session", "");
  if (const json* t = path_of(h, {"task"}); t && t->is_object()) {
    row.task = t->value("id", "");
    row.task_hash = t->value("content_hash", "");
  }
  row.layer = h.value("layer", 0);
  row.label = h.value("label", "");
  row.seed = h.value("seed", std::uint64_t{0});
  row.started_at = h.value("started_at", 0.0);
  row.log_path = path.string();
  if (const json* s = path_of(h, {"server", "version"}); s && s->is_string()) row.server_version = s->get<std::string>();
  std::vector<std::string> props;
  if (const json* p = path_of(h, {"properties"}); p && p->is_array())
    for (const json& id : *p)
      if (id.is_string()) props.push_back(id.get<std::string>());
  for (const LogExchange& x : log.exchanges) summarize_exchange(row, x.request, x.reply, props);
  double last_t = log.exchanges.empty() ? row.started_at : log.exchanges.back().t_reply;
  if (log.end) {
    row.ended_at = log.end->value("t", last_t);
    row.end_reason = log.end->value("end_reason", row.end_reason);
    if (row.outcome == "running") row.outcome = "unsubmitted";
  } else {
    // The server died before the session ended: what the log holds is all there is.
    row.ended_at = last_t;
    if (row.end_reason.empty()) row.end_reason = "server_died";
    if (row.outcome == "running") row.outcome = "unsubmitted";
    row.log_status = log.torn_tail ? "torn: " + log.torn_tail->reason : "unfinished";
  }
  row.wall_s = *row.ended_at - row.started_at;
  return row;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool local_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  const std::string host = endpoint.substr(6, endpoint.rfind(':') > 6 ? endpoint.rfind(':') - 6 : std::string::npos);
  return host == "localhost" || host == "[::1]" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string watch_id(const std::string& session) { return session.substr(0, 8); }

std::string default_events_endpoint(const std::string& server_endpoint) {
  if (server_endpoint.rfind("ipc://", 0) == 0) return server_endpoint + ".events";
  if (!local_endpoint(server_endpoint)) return "";  // events carry agent source: never beyond this host by default
  if (server_endpoint.rfind("tcp://", 0) == 0) {
    auto colon = server_endpoint.rfind(':');
    if (colon == std::string::npos || colon < 6) return "";
    std::string port = server_endpoint.substr(colon + 1);
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return "";
    int p = std::stoi(port);
    if (p <= 0 || p >= 65535) return "";
    return server_endpoint.substr(0, colon + 1) + std::to_string(p + 1);
  }
  return "";
}

json make_server_info(const Config& config, const std::string& toolchain, const std::vector<GpuInfo>& gpus) {
  json g = json::array();
  for (const auto& x : gpus) g.push_back({{"index", x.index}, {"name", x.name}, {"memory_mib", x.memory_mib}});
  std::string driver;
  if (std::ifstream in("/proc/driver/nvidia/version"); in) std::getline(in, driver);
  return {{"server", "d2k-gym"},
          {"version", kVersionString},
          {"protocol", protocol::kVersion},
          {"toolchain", toolchain},
          {"driver", driver},
          {"gpus", g},
          {"config", config.to_json()}};
}

Recorder::Recorder(RecorderConfig config) : config_(std::move(config)) {
  if (!config_.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config_.log_dir, ec);
    if (ec)
      log_warn("episode logs off: cannot create \"" + config_.log_dir.string() + "\": " + ec.message());
    else
      logs_ok_ = true;
  }
  if (!config_.catalogue.empty()) {
    try {
      catalogue_ = std::make_unique<Catalogue>(config_.catalogue);
    } catch (const std::exception& e) {
      log_warn(std::string("episode catalogue off: ") + e.what());
    }
  }
  if (!config_.events_endpoint.empty()) {
    if (!local_endpoint(config_.events_endpoint))
      throw std::runtime_error("the episode events endpoint " + config_.events_endpoint +
                               " is not loopback or ipc: events carry agent source and anyone who can connect "
                               "may subscribe (there is no authentication yet); use tcp://127.0.0.1:PORT or ipc://");
    pub_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::pub);
    pub_->set(zmq::sockopt::linger, 0);
    pub_->set(zmq::sockopt::sndhwm, 10000);
    try {
      pub_->bind(config_.events_endpoint);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("cannot bind the episode events endpoint " + config_.events_endpoint + ": " +
                               e.what());
    }
    bound_events_ = pub_->get(zmq::sockopt::last_endpoint);
  }
  if (config_.sync && config_.on_synced && logs_ok_)
    syncer_ = std::make_unique<LogSyncer>(config_.sync_threads, config_.on_synced, config_.sync_hook);
}

Recorder::~Recorder() { stop_sync(); }

void Recorder::stop_sync() {
  if (syncer_) syncer_->stop();
}

std::string Recorder::events_endpoint() const { return bound_events_; }

std::filesystem::path Recorder::log_path(const std::string& session) const {
  auto it = active_.find(session);
  if (it == active_.end() || !it->second->writer) return {};
  return it->second->writer->path();
}

namespace {

// Every string equal to `secret` (the session id, wherever a request or reply names it) → `shown`.
void redact(json& j, const std::string& secret, const std::string& shown) {
  if (j.is_string()) {
    if (j.get_ref<const std::string&>() == secret) j = shown;
  } else if (j.is_structured()) {
    for (auto& item : j) redact(item, secret, shown);
  }
}

}  // namespace

bool Recorder::events_wanted() const {
  if (config_.on_event) return !config_.watched || config_.watched();
  return pub_ != nullptr;
}

void Recorder::publish(const std::string& session, const json& event) {
  if (config_.on_event) return config_.on_event(session, event);
  if (!pub_) return;
  try {
    // Subscribers are not authenticated: the session id (the capability to act on a session) never
    // goes out; events name a session by its watch id, the id's first 8 hex digits.
    const std::string topic = watch_id(session);
    json shown = event;
    redact(shown, session, topic);
    std::vector<std::uint8_t> bytes = json::to_msgpack(shown);
    pub_->send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub_->send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait);
  } catch (const std::exception& e) {
    log_warn(std::string("episode event dropped: ") + e.what());
  }
}

void Recorder::fail_log(Active& a, const std::string& why) {
  log_error("episode log of session " + a.row.session + " failed: " + why);
  if (a.writer) request_sync(a);  // what was written and not asked for yet: its report still comes
  a.writer.reset();
  a.row.log_status = "failed: " + why;
  save_row(a);
}

void Recorder::append(Active& a, const json& record) {
  if (!a.writer) return;
  try {
    a.writer->append(record);
    written(a, record);
    request_sync(a);
  } catch (const std::exception& e) {
    fail_log(a, e.what());
  }
}

void Recorder::written(Active& a, json record, std::string encoded) {
  if (!syncer_) return;  // fdatasync'ed by the writer already
  a.unsynced.push_back({++a.seq, a.writer->bytes(), std::move(record), std::move(encoded)});
}

void Recorder::request_sync(Active& a) {
  if (syncer_ && a.writer && a.writer->file() && !a.unsynced.empty() && a.unsynced.back().seq > a.requested) {
    a.requested = a.unsynced.back().seq;
    syncer_->request(a.row.session, a.writer->file(), a.requested, a.tenant);
  }
}

void Recorder::sync_later(Active& a) {
  if (!syncer_ || !a.writer || a.unsynced.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (a.requested + 1 == a.unsynced.back().seq)  // the first record not asked for
    a.unasked_since = now;
  else if (now - a.unasked_since >= config_.read_only_sync_after)
    request_sync(a);
}

std::uint64_t Recorder::pending(const std::string& session) {
  auto it = active_.find(session);
  if (it == active_.end() || it->second->unsynced.empty()) return 0;
  Active& a = *it->second;
  if (a.requested < a.unsynced.back().seq) request_sync(a);  // a reply waits for read-only records now
  return a.unsynced.back().seq;
}

bool Recorder::synced(const std::string& session, std::uint64_t record, int error) {
  auto it = active_.find(session);
  if (it == active_.end()) return error == 0;
  Active& a = *it->second;
  if (error == 0) {
    while (!a.unsynced.empty() && a.unsynced.front().seq <= record) {
      a.durable = a.unsynced.front().end;
      a.unsynced.pop_front();
    }
    if (a.ended && a.unsynced.empty() && a.waiting.empty()) finish(it);
    return true;
  }
  const std::string why = std::error_code(error, std::generic_category()).message();
  // A report about records already cut off and written again: nothing newly lost.
  if (a.unsynced.empty() || record < a.unsynced.front().seq) return true;
  if (!a.writer) {
    a.unsynced.clear();
    if (a.ended) finish(it);
    return false;
  }
  // What the file holds after its last durable record is unknown now (the kernel may have dropped
  // the pages that failed): cut it off, and write those records again before anything later.
  try {
    a.writer->truncate(a.durable);
  } catch (const std::exception& e) {
    fail_log(a, std::string("fdatasync failed (") + why + ") and " + e.what());
    a.unsynced.clear();
    if (a.ended) finish(it);
    return false;
  }
  if (!a.refused)
    log_error("episode log of session " + a.row.session + ": cannot sync episode log (" + why +
              "); holding replies until it can be written");
  a.refused = true;
  for (auto r = a.unsynced.rbegin(); r != a.unsynced.rend(); ++r)
    a.waiting.push_front({std::move(r->record), json(), std::move(r->encoded)});
  a.unsynced.clear();
  return false;
}

void Recorder::finish(std::map<std::string, std::unique_ptr<Active>>::iterator it) {
  Active& a = *it->second;
  if (a.writer) {
    try {
      a.writer->close();
    } catch (const std::exception& e) {
      fail_log(a, e.what());
    }
  }
  if (a.ended) --ending_;
  drop_base(a);
  active_.erase(it);
}

bool Recorder::flush(Active& a, bool sync) {
  bool wrote = false;
  while (!a.waiting.empty()) {
    if (!a.writer) {  // not recorded, or the log was given up: nothing to wait for
      for (const auto& w : a.waiting)
        if (!w.event.is_null()) publish(a.row.session, w.event);
      a.waiting.clear();
      return true;
    }
    try {
      if (a.waiting.front().encoded.empty())
        a.writer->append(a.waiting.front().record);
      else
        a.writer->append_encoded(a.waiting.front().encoded);
    } catch (const std::exception& e) {
      if (a.writer->broken()) {  // the file ends in a torn record: no later record can follow it
        fail_log(a, e.what());
        a.waiting.clear();
        return true;
      }
      if (!a.refused) log_error("episode log of session " + a.row.session + ": " + e.what() + "; holding replies until it can be written");
      a.refused = true;
      request_sync(a);
      return false;
    }
    if (a.refused) log_info("episode log of session " + a.row.session + " is written again");
    a.refused = false;
    if (!a.waiting.front().event.is_null()) publish(a.row.session, a.waiting.front().event);
    written(a, std::move(a.waiting.front().record), std::move(a.waiting.front().encoded));
    a.waiting.pop_front();
    wrote = true;
  }
  if (sync && wrote) request_sync(a);  // (read-only records written earlier are not asked for here)
  return true;
}

bool Recorder::flush(const std::string& session) {
  auto it = active_.find(session);
  return it == active_.end() || flush(*it->second);
}

void Recorder::save_row(Active& a) {
  if (!catalogue_) return;
  try {
    catalogue_->upsert(a.row);
  } catch (const std::exception& e) {
    log_error("catalogue update of session " + a.row.session + " failed: " + e.what());
  }
}

std::size_t Recorder::enforce_log_budget() {
  if (!logs_ok_ || config_.log_budget_bytes == 0) return 0;
  struct File {
    std::filesystem::file_time_type mtime;
    std::uint64_t bytes;
    std::filesystem::path path;
  };
  std::vector<File> finished;
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(config_.log_dir, ec)) {
    if (entry.path().extension() != ".d2klog") continue;
    std::error_code e2;
    const std::uint64_t bytes = entry.file_size(e2);
    if (e2) continue;
    total += bytes;
    if (!active_.count(entry.path().stem().string())) finished.push_back({entry.last_write_time(e2), bytes, entry.path()});
  }
  std::sort(finished.begin(), finished.end(), [](const File& a, const File& b) { return a.mtime < b.mtime; });
  std::size_t removed = 0;
  for (const File& f : finished) {
    if (total <= config_.log_budget_bytes) break;
    if (std::filesystem::remove(f.path, ec)) {
      total -= f.bytes;
      ++removed;
    }
  }
  if (removed) log_info("episode logs over their budget: removed the " + std::to_string(removed) + " oldest");
  return removed;
}

bool Recorder::begin(const Episode& episode, const json& request, const json& reply, double t_request,
                     double t_reply, const std::string& tenant) {
  // Disk use is bounded: before a new log starts, the oldest finished ones go when over the budget.
  // (The scan is of one folder, at most once per reset.)
  if (const auto now = std::chrono::steady_clock::now(); now - last_budget_check_ > std::chrono::seconds(5)) {
    last_budget_check_ = now;
    enforce_log_budget();
  }
  try {
    auto a = std::make_unique<Active>();
    a->tenant = tenant;
    EpisodeRow& row = a->row;
    row.session = episode.id();
    row.task = episode.task().id;
    row.task_hash = episode.task().content_hash;
    row.layer = episode.layer();
    row.label = episode.label();
    row.seed = episode.seed();
    row.started_at = t_request;
    row.server_version = kVersionString;
    a->layer_properties = layer_property_ids(episode.task(), episode.layer());
    const json* record = path_of(request, {"options", "record"});
    bool wanted = !(record && record->is_boolean() && !record->get<bool>());
    const Budget& b = episode.budget();
    json header = {{"k", "header"},
                   {"format", kLogFormatVersion},
                   {"protocol", protocol::kVersion},
                   {"session", episode.id()},
                   {"task", {{"id", episode.task().id}, {"content_hash", episode.task().content_hash},
                             {"title", episode.task().title}}},
                   {"layer", episode.layer()},
                   {"seed", episode.seed()},
                   {"label", episode.label()},
                   {"budget", {{"max_steps", b.max_steps}, {"max_compiles", b.max_compiles},
                               {"max_evaluations", b.max_evaluations}, {"wall_seconds", b.wall_seconds}}},
                   {"properties", a->layer_properties},
                   {"started_at", t_request},
                   {"server", config_.server_info}};
    if (!wanted) {
      row.log_status = "disabled";
    } else if (!logs_ok_) {
      row.log_status = config_.log_dir.empty() ? "disabled" : "failed: log directory unusable";
    } else {
      std::filesystem::path path = config_.log_dir / (episode.id() + ".d2klog");
      row.log_path = path.string();
      try {
        // With log-sync threads the writer only writes: they fdatasync (off this thread).
        a->writer = std::make_unique<EpisodeLogWriter>(path, config_.sync && !syncer_);
      } catch (const std::system_error& e) {
        if (refused_by_disk(e)) {
          log_error("episode log of session " + row.session + ": " + e.what() + "; reset refused");
          return false;
        }
        row.log_status = std::string("failed: ") + e.what();
        log_error("episode log of session " + row.session + " failed: " + e.what());
      } catch (const std::exception& e) {
        row.log_status = std::string("failed: ") + e.what();
        log_error("episode log of session " + row.session + " failed: " + e.what());
      }
    }
    a->waiting.push_back({header, json()});
    a->waiting.push_back({exchange_record(*a, a->next_n++, request, reply, t_request, t_reply),
                          {{"kind", "begin"}, {"session", row.session}, {"header", header}, {"n", 0},
                           {"t_request", t_request}, {"t_reply", t_reply}, {"request", request}, {"reply", reply}}});
    if (!flush(*a)) {  // the disk is full: no half log, the reset is not done
      std::filesystem::path path = a->writer->path();
      a->writer.reset();
      std::error_code ec;
      std::filesystem::remove(path, ec);
      return false;
    }
    summarize_exchange(row, request, reply, a->layer_properties);
    save_row(*a);
    keep_base(*a, 0, request, reply);
    active_[row.session] = std::move(a);
  } catch (const std::exception& e) {
    log_error("recorder: begin of session " + episode.id() + " failed: " + e.what());
  }
  return true;
}

void Recorder::drop_base(Active& a) {
  base_bytes_total_ -= a.base_bytes;
  a.base_reply = json();
  a.base_bytes = 0;
}

json Recorder::exchange_record(Active& a, std::uint64_t n, const json& request, const json& reply, double t_request,
                               double t_reply) {
  json record = {{"k", "exchange"}, {"n", n}, {"t_request", t_request}, {"t_reply", t_reply}, {"request", request}};
  const std::string op = request.is_object() ? request.value("op", "") : std::string();
  // A step reply with an observation repeats the base's task, guidance and unchanged files (a
  // compile or evaluate changes no file): logged as a patch too, and it becomes the next base.
  const bool compact = op == "observe" || (op == "step" && reply.is_object() && reply.contains("observation"));
  if (compact && !a.base_reply.is_null()) {
    // An observe reply repeats the latest observation but for a few fields (seconds_used, the
    // request id): logged as the RFC 6902 patch that turns the base reply into it.
    record["reply_base"] = a.base_n;
    record["reply_patch"] = json::diff(a.base_reply, reply);
    return record;
  }
  record["reply"] = reply;
  return record;
}

void Recorder::keep_base(Active& a, std::uint64_t n, const json& request, const json& reply) {
  // Called once the exchange is on disk. A whole reply with an observation becomes the base, within
  // the per-session and global bounds of the memory bases hold (beyond them observes are logged whole).
  const bool observe = request.is_object() && request.value("op", "") == "observe";
  if (!a.writer || (observe && !a.base_reply.is_null()) || !reply.is_object() || !reply.contains("observation"))
    return;
  drop_base(a);
  const std::size_t bytes = json::to_msgpack(reply).size();
  if (bytes <= kBaseMaxBytes && base_bytes_total_ + bytes <= kBaseTotalBytes) {
    a.base_reply = reply;
    a.base_n = n;
    a.base_bytes = bytes;
    base_bytes_total_ += bytes;
  }
}

bool Recorder::record(const Episode& episode, const json& request, const json& reply, double t_request,
                      double t_reply, bool keep) {
  try {
    auto it = active_.find(episode.id());
    if (it == active_.end()) return true;
    Active& a = *it->second;
    std::uint64_t n = a.next_n++;
    a.waiting.push_back({exchange_record(a, n, request, reply, t_request, t_reply),
                         {{"kind", "exchange"}, {"session", a.row.session}, {"n", n}, {"t_request", t_request},
                          {"t_reply", t_reply}, {"request", request}, {"reply", reply}}});
    if (!flush(a)) {
      if (!keep) {  // dropped: its reply is not sent either
        a.waiting.pop_back();
        --a.next_n;
      }
      return false;
    }
    keep_base(a, n, request, reply);
    std::string before = a.row.outcome;
    summarize_exchange(a.row, request, reply, a.layer_properties);
    if (a.row.outcome != before) save_row(a);
  } catch (const std::exception& e) {
    log_error("recorder: record for session " + episode.id() + " failed: " + e.what());
  }
  return true;
}

namespace {
// The two values that differ between observe replies of one generation (Recorder::record_observe).
constexpr const char* kObserveIdPath = "/id";
constexpr const char* kObserveClockPath = "/observation/budget/seconds_used";

std::string msgpack_array_header(std::size_t n) {
  std::string h;
  if (n < 16) {
    h.push_back(static_cast<char>(0x90 | n));
  } else if (n <= 0xffff) {
    h.push_back(static_cast<char>(0xdc));
    for (int shift = 8; shift >= 0; shift -= 8) h.push_back(static_cast<char>((n >> shift) & 0xff));
  } else {
    h.push_back(static_cast<char>(0xdd));
    for (int shift = 24; shift >= 0; shift -= 8) h.push_back(static_cast<char>((n >> shift) & 0xff));
  }
  return h;
}

}  // namespace

// The payload of an observe's compact record, {k, n, t_request, t_reply, request, reply_base,
// reply_patch}, written as MessagePack around the patch's ops encoded once: what
// json::to_msgpack of that record gives, bar the encoding's choices (the reader sees the same map).
std::string Recorder::observe_record(std::uint64_t n, double t_request, double t_reply, const json& request,
                                     std::uint64_t base_n, const ObservePatch& patch, std::uint64_t id,
                                     double seconds_used) {
  using protocol::encode;
  static const std::string head = std::string(1, static_cast<char>(0x87)) + encode("k") + encode("exchange") + encode("n");
  static const std::string t_request_key = encode("t_request"), t_reply_key = encode("t_reply"),
                           request_key = encode("request"), base_key = encode("reply_base"),
                           patch_key = encode("reply_patch");
  auto replace_op = [](const char* path) {  // {op: replace, path, value: ...} up to the value
    return std::string(1, static_cast<char>(0x83)) + encode("op") + encode("replace") + encode("path") + encode(path) +
           encode("value");
  };
  static const std::string id_op = replace_op(kObserveIdPath), clock_op = replace_op(kObserveClockPath);
  std::string out = head;
  out.reserve(head.size() + 128 + patch.ops.size());
  out += encode(n);
  out += t_request_key;
  out += encode(t_request);
  out += t_reply_key;
  out += encode(t_reply);
  out += request_key;
  out += encode(request);
  out += base_key;
  out += encode(base_n);
  out += patch_key;
  out += msgpack_array_header(patch.count + 2);
  out += patch.ops;
  out += id_op;
  out += encode(id);
  out += clock_op;
  out += encode(seconds_used);
  return out;
}

void Recorder::observe_patch(Active& a, std::uint64_t generation, const json& reply) {
  // What json::diff gives for the whole reply (as record() logs it), less the replace ops of the two
  // changing values, which every record then sets itself (a replace is valid: both exist in every
  // reply with an observation, so in the base too).
  ObservePatch made{generation, a.base_n, 0, {}, true};
  for (const json& op : json::diff(a.base_reply, reply)) {
    const std::string& path = op.at("path").get_ref<const std::string&>();
    if (op.at("op") == "replace" && (path == kObserveIdPath || path == kObserveClockPath)) continue;
    made.ops += protocol::encode(op);
    ++made.count;
  }
  a.observe = std::move(made);
}

void Recorder::prime_observe(const Episode& episode, std::uint64_t generation, const json& reply) {
  try {
    auto it = active_.find(episode.id());
    if (it == active_.end() || generation == 0 || !it->second->writer || it->second->base_reply.is_null()) return;
    observe_patch(*it->second, generation, reply);
  } catch (const std::exception& e) {
    log_error("recorder: observe patch for session " + episode.id() + " failed: " + e.what());
  }
}

bool Recorder::record_observe(const Episode& episode, const json& request, std::uint64_t generation, std::uint64_t id,
                              double seconds_used, const std::function<json()>& reply, double t_request,
                              double t_reply) {
  try {
    auto it = active_.find(episode.id());
    if (it == active_.end()) return true;
    Active& a = *it->second;
    if (generation == 0 || !a.writer || a.base_reply.is_null() || events_wanted())
      return record(episode, request, reply(), t_request, t_reply, false);
    if (a.observe.generation != generation || a.observe.base_n != a.base_n || !a.observe.made) {
      const json whole = reply();
      observe_patch(a, generation, whole);
      summarize_exchange(a.row, request, whole, a.layer_properties);  // reads nothing of the two values
    }
    const std::uint64_t n = a.next_n++;
    // A read-only record: no fdatasync of its own (docs/episode-log.md), unless records that wait
    // for one are written with it.
    const bool alone = a.waiting.empty();
    a.waiting.push_back({json(), json(),
                         encode_log_payload(observe_record(n, t_request, t_reply, request, a.base_n, a.observe, id,
                                                          seconds_used))});
    if (!flush(a, !alone)) {  // dropped: its reply is not sent either
      a.waiting.pop_back();
      --a.next_n;
      return false;
    }
    if (alone) sync_later(a);
  } catch (const std::exception& e) {
    log_error("recorder: record for session " + episode.id() + " failed: " + e.what());
  }
  return true;
}

void Recorder::end(const Episode& episode, const std::string& reason) {
  try {
    auto it = active_.find(episode.id());
    if (it == active_.end()) return;
    Active& a = *it->second;
    double now = unix_now();
    a.row.ended_at = now;
    a.row.wall_s = now - a.row.started_at;
    a.row.steps = episode.steps();
    a.row.total_reward = episode.total_reward();
    a.row.end_reason = episode.end_reason().value_or(reason);
    if (a.row.outcome == "running") a.row.outcome = "unsubmitted";
    flush(a);  // best effort: a session that goes while the disk is full loses what still waits
    json record = {{"k", "end"}, {"reason", reason}, {"end_reason", a.row.end_reason}, {"steps", a.row.steps},
                   {"total_reward", a.row.total_reward}, {"outcome", a.row.outcome}, {"t", now}};
    append(a, record);
    save_row(a);
    json event = record;
    event.erase("k");
    event["kind"] = "end";
    event["session"] = a.row.session;
    publish(a.row.session, event);
    a.waiting.clear();  // what the full disk still refused is lost with the session (as before)
    if (a.writer && !a.unsynced.empty()) {  // closed once its last records are durable (synced)
      a.ended = true;
      ++ending_;
      return;
    }
    finish(it);
  } catch (const std::exception& e) {
    log_error("recorder: end of session " + episode.id() + " failed: " + e.what());
  }
}

}  // namespace d2k::env
