#include "live/stats/stats_cache.h"

namespace msprobe {
namespace {

const void* storage_of(const at::Tensor& t) {
  return t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

}  // namespace

bool StatsCache::cacheable(const at::Tensor& t) {
  return TensorVersion::trackable(t);
}

std::optional<DataStats> StatsCache::find(const at::Tensor& t) {
  if (!cacheable(t)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) clear_locked();
  const DataStats* stats =
      unversioned_.empty() || !unversioned_.count(storage_of(t)) ? items_.find(t) : nullptr;
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
  if (step_.moved_on()) clear_locked();
  if (!unversioned_.empty() && unversioned_.count(storage_of(t))) return;
  items_.put(t, stats);
}

void StatsCache::written_without_version(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) clear_locked();
  unversioned_.insert(storage_of(t));
}

void StatsCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  clear_locked();
}

void StatsCache::clear_locked() {
  items_.clear();
  unversioned_.clear();
}

}  // namespace msprobe
