// Memory that torch.empty and its kin handed out and that nothing has written since. Its bytes
// are whatever the allocator left there: NaN/inf in them is no anomaly, and must not stop a run
// that reads them before it writes them (FSDP2 narrows its all-gather buffer before the
// all-gather fills it). "Written" is told by the storage's version counter, which views share
// with their base and every in-place or out= op bumps; a collective that writes a buffer is told
// by its hook (forget()), as the backends need not bump it.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace msprobe {

class UnwrittenMemory {
 public:
  void mark(const at::Tensor& t);    // t was just made by an empty-kin call
  void forget(const at::Tensor& t);  // t's memory was written
  // t lies in such memory, and its version is still the one it was made with. Cheap while no
  // memory is marked (one atomic read): the hot path asks for every tensor.
  bool holds(const at::Tensor& t);
  bool any() const { return count_.load(std::memory_order_relaxed) != 0; }

 private:
  struct Fresh {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // tells a freed and reused address
    int64_t version;
  };
  void prune_locked();  // drops what was freed or written since
  std::mutex mu_;
  std::unordered_map<const c10::StorageImpl*, Fresh> fresh_;
  std::atomic<size_t> count_{0};
};

// Process-wide: the marks are made by the empty-kin wrappers, whatever session is live.
UnwrittenMemory& unwritten_memory();

}  // namespace msprobe
