#include "env/session_table.hpp"

#include <sys/random.h>

#include <cerrno>
#include <system_error>

#include "protocol/codec.hpp"

namespace d2k::env {

SessionTable::SessionTable(std::size_t gpus) : gpu_load_(gpus, 0) {}

namespace {

// 16 bytes from the kernel's CSPRNG. getrandom(2) with no flags blocks only until the pool is
// first initialised (early boot) and never returns short reads for 16 bytes.
void os_random(unsigned char (&out)[16]) {
  std::size_t got = 0;
  while (got < sizeof out) {
    const ssize_t n = ::getrandom(out + got, sizeof out - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::string SessionTable::new_id() {
  static const char* hex = "0123456789abcdef";
  for (;;) {
    unsigned char bytes[16];
    os_random(bytes);
    std::string id;
    id.reserve(32);
    for (unsigned char b : bytes) {
      id += hex[b >> 4];
      id += hex[b & 15];
    }
    if (!sessions_.count(id)) return id;
  }
}

Session& SessionTable::open(std::unique_ptr<Episode> episode) {
  Session s;
  if (!gpu_load_.empty()) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < gpu_load_.size(); ++i)
      if (gpu_load_[i] < gpu_load_[best]) best = i;
    ++gpu_load_[best];
    s.gpu = static_cast<int>(best);
  }
  std::string id = episode->id();
  s.episode = std::move(episode);
  ++opened_;
  return sessions_.insert_or_assign(std::move(id), std::move(s)).first->second;
}

Session* SessionTable::find(const std::string& id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

Session& SessionTable::find_open(const std::string& id, const std::string& client) {
  Session* s = find(id);
  if (!s || s->closing || s->owner != client)
    throw protocol::Error(protocol::ErrorCode::unknown_session,
                          "no session '" + id.substr(0, 64) + "' (closed, reaped or never opened)", "session");
  return *s;
}

bool SessionTable::erase(const std::string& id, const std::string& reason) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return false;
  ++ended_;
  ++end_reasons_[reason];
  if (!gpu_load_.empty()) --gpu_load_[static_cast<std::size_t>(it->second.gpu)];
  sessions_.erase(it);
  return true;
}

std::vector<std::string> SessionTable::idle(Episode::Clock::time_point now,
                                            std::chrono::duration<double> limit) const {
  std::vector<std::string> out;
  for (const auto& [id, s] : sessions_)
    if (!s.in_flight && now - s.episode->last_activity() > limit) out.push_back(id);
  return out;
}

std::vector<std::string> SessionTable::ids() const {
  std::vector<std::string> out;
  out.reserve(sessions_.size());
  for (const auto& [id, s] : sessions_) out.push_back(id);
  return out;
}

std::size_t SessionTable::count_active() const {
  std::size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s.episode->ended() ? 0 : 1;
  return n;
}

}  // namespace d2k::env
