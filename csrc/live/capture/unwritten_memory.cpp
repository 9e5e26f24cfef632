#include "live/capture/unwritten_memory.h"

namespace msprobe {

namespace {

// Enough for the buffers a step allocates and reads before writing; past it, the oldest marks
// are no longer needed to keep the run going (a miss here only costs a false anomaly).
constexpr size_t kMaxMarks = 4096;

bool has_storage(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.storage().unsafeGetStorageImpl() != nullptr;
}

// The bytes of its storage that t's elements lie in (first to one past the last).
std::pair<uint64_t, uint64_t> byte_span(const at::Tensor& t) {
  const int64_t item = static_cast<int64_t>(t.element_size());
  const int64_t begin = t.storage_offset() * item;
  if (t.numel() == 0) return {static_cast<uint64_t>(begin), static_cast<uint64_t>(begin)};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {static_cast<uint64_t>(begin), static_cast<uint64_t>(begin + (last + 1) * item)};
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
              t._version(), ByteRanges{}};
  auto it = fresh_.find(impl);
  if (it != fresh_.end()) {
    it->second = std::move(fresh);
  } else {
    fresh_.emplace(impl, std::move(fresh));
  }
  count_.store(fresh_.size(), std::memory_order_relaxed);
}

void UnwrittenMemory::written(const at::Tensor& t) {
  if (!any() || !has_storage(t)) return;
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fresh_.find(impl);
  if (it == fresh_.end()) return;
  const auto [begin, end] = byte_span(t);
  it->second.written.add(begin, end);
  it->second.version = t._version();
  if (it->second.written.covers(0, impl->nbytes())) {
    fresh_.erase(it);
    count_.store(fresh_.size(), std::memory_order_relaxed);
  }
}

bool UnwrittenMemory::holds(const at::Tensor& t) {
  if (!any() || !has_storage(t)) return false;
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fresh_.find(impl);
  if (it == fresh_.end()) return false;
  Fresh& fresh = it->second;
  if (fresh.storage.lock().get() == impl) {
    const auto [begin, end] = byte_span(t);
    if (fresh.written.covers(begin, end)) return false;
    // Else the counter moved past the last write accounted for: a write no hook saw (or t is a
    // `.data` alias, whose counter is its own). What was not accounted for counts as written.
    if (t._version() == fresh.version) return true;
  }
  fresh_.erase(it);
  count_.store(fresh_.size(), std::memory_order_relaxed);
  return false;
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
