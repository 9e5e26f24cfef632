#include "live/capture/unwritten_memory.h"

namespace msprobe {

namespace {

// Enough for the buffers a step allocates and reads before writing; past it, the oldest marks
// are no longer needed to keep the run going (a miss here only costs a false anomaly).
constexpr size_t kMaxMarks = 4096;

bool has_storage(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.storage().unsafeGetStorageImpl() != nullptr;
}

}  // namespace

void UnwrittenMemory::mark(const at::Tensor& t) {
  if (!has_storage(t)) return;
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(mu_);
  if (fresh_.size() >= kMaxMarks) prune_locked();
  if (fresh_.size() >= kMaxMarks) return;
  Fresh fresh{c10::weak_intrusive_ptr<c10::StorageImpl>(
                  c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl)),
              t._version()};
  auto it = fresh_.find(impl);
  if (it != fresh_.end()) {
    it->second = std::move(fresh);
  } else {
    fresh_.emplace(impl, std::move(fresh));
  }
  count_.store(fresh_.size(), std::memory_order_relaxed);
}

void UnwrittenMemory::forget(const at::Tensor& t) {
  if (!any() || !has_storage(t)) return;
  std::lock_guard<std::mutex> lock(mu_);
  fresh_.erase(t.storage().unsafeGetStorageImpl());
  count_.store(fresh_.size(), std::memory_order_relaxed);
}

bool UnwrittenMemory::holds(const at::Tensor& t) {
  if (!any() || !has_storage(t)) return false;
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fresh_.find(impl);
  if (it == fresh_.end()) return false;
  const bool same = it->second.storage.lock().get() == impl && t._version() == it->second.version;
  if (!same) {
    fresh_.erase(it);
    count_.store(fresh_.size(), std::memory_order_relaxed);
  }
  return same;
}

void UnwrittenMemory::prune_locked() {
  for (auto it = fresh_.begin(); it != fresh_.end();) {
    c10::intrusive_ptr<c10::StorageImpl> alive = it->second.storage.lock();
    if (!alive) {
      it = fresh_.erase(it);
    } else {
      ++it;
    }
  }
  count_.store(fresh_.size(), std::memory_order_relaxed);
}

UnwrittenMemory& unwritten_memory() {
  static UnwrittenMemory memory;
  return memory;
}

}  // namespace msprobe
