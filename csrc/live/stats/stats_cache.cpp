#include "live/stats/stats_cache.h"

namespace msprobe {

bool StatsCache::cacheable(const at::Tensor& t) {
  return TensorVersion::trackable(t);
}

std::optional<DataStats> StatsCache::find(const at::Tensor& t) {
  if (!cacheable(t)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) items_.clear();
  const DataStats* stats = items_.find(t);
  if (!stats) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  return *stats;
}

void StatsCache::put(const at::Tensor& t, const DataStats& stats) {
  if (!cacheable(t)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) items_.clear();
  items_.put(t, stats);
}

void StatsCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  items_.clear();
}

}  // namespace msprobe
