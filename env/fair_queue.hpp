// Items queued per tenant (the client that asked for them) and taken round-robin between tenants,
// each tenant's in order of arrival (issue 22.6): a tenant with a hundred items queued delays
// another's by at most one item per other tenant waiting, not by its hundred. Not synchronised:
// its owner holds its own lock (env/scheduler.hpp WorkerPool, env/log_sync.hpp LogSyncer).
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>

namespace d2k::env {

template <class T>
class FairQueue {
 public:
  void push(const std::string& tenant, T item) {
    auto& queue = items_[tenant];
    if (queue.empty()) turns_.push_back(tenant);  // a tenant with nothing queued joins at the back
    queue.push_back(std::move(item));
    ++size_;
  }
  // The oldest item of the tenant whose turn it is; that tenant goes to the back if it has more.
  // Precondition: !empty().
  T pop() {
    std::string tenant = std::move(turns_.front());
    turns_.pop_front();
    auto it = items_.find(tenant);
    T item = std::move(it->second.front());
    it->second.pop_front();
    --size_;
    if (it->second.empty()) items_.erase(it);
    else turns_.push_back(std::move(tenant));
    return item;
  }
  bool empty() const { return turns_.empty(); }
  std::size_t size() const { return size_; }
  void clear() {
    items_.clear();
    turns_.clear();
    size_ = 0;
  }

 private:
  std::unordered_map<std::string, std::deque<T>> items_;  // per tenant, oldest first
  std::deque<std::string> turns_;                          // tenants with items, the next served first
  std::size_t size_ = 0;
};

}  // namespace d2k::env
