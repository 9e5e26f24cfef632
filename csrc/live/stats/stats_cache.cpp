#include "live/stats/stats_cache.h"

namespace msprobe {

// Inference tensors have no version counter: never cached.
bool StatsCache::cacheable(const at::Tensor& t) {
  return t.numel() >= kMinElements && t.layout() == at::kStrided && !t.is_inference() &&
         t.has_storage();
}

bool StatsCache::same_layout(const Item& item, const at::Tensor& t) {
  return item.version == static_cast<uint32_t>(t._version()) &&
         item.storage == t.storage().unsafeGetStorageImpl() && item.offset == t.storage_offset() &&
         t.sizes().equals(item.sizes) && t.strides().equals(item.strides);
}

std::optional<DataStats> StatsCache::find(const at::Tensor& t) {
  if (!cacheable(t)) return std::nullopt;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) items_.clear();
  auto it = items_.find(impl);
  if (it == items_.end() || it->second.weak.lock().get() != impl || !same_layout(it->second, t)) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  return it->second.stats;
}

void StatsCache::put(const at::Tensor& t, const DataStats& stats) {
  if (!cacheable(t)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) items_.clear();
  if (items_.size() >= kMaxItems) return;
  Item item{WeakImpl(t.getIntrusivePtr()),
            static_cast<uint32_t>(t._version()),
            t.storage().unsafeGetStorageImpl(),
            t.storage_offset(),
            {t.sizes().begin(), t.sizes().end()},
            {t.strides().begin(), t.strides().end()},
            stats};
  items_.insert_or_assign(t.unsafeGetTensorImpl(), std::move(item));
}

void StatsCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  items_.clear();
}

}  // namespace msprobe
