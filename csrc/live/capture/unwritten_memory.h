// Memory that torch.empty and its kin handed out and that nothing has written since. Its bytes
// are whatever the allocator left there: NaN/inf in them is no anomaly, and must not stop a run
// that reads them before it writes them (FSDP2 narrows its all-gather buffer before the
// all-gather fills it; DeepSpeed's ZeRO copies each gradient into its slice of one torch.empty
// partition and narrows the next slice before writing it). "Written" is kept per byte range:
// each hooked call that writes a tensor of such memory (an in-place method, a collective's
// buffer) adds that tensor's range. A write no hook saw is told by the version counter that
// views share with their base: once it moved past the last write accounted for, the memory
// that was not accounted for counts as written (its NaN/inf as data, the safe side).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include "core/byte_ranges.h"

#include <atomic>
#include <cstdint>
#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace msprobe {

class UnwrittenMemory {
 public:
  void mark(const at::Tensor& t);     // t was just made by an empty-kin call
  void written(const at::Tensor& t);  // a hooked call wrote t's elements
  // Some of t's bytes lie in such memory and were never written. Cheap while no memory is marked
  // (one atomic read): the hot path asks for every tensor.
  bool holds(const at::Tensor& t);
  bool any() const { return count_.load(std::memory_order_relaxed) != 0; }

 private:
  struct Fresh {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // tells a freed and reused address
    int64_t version;                                     // after the last write accounted for
    ByteRanges written;
  };
  void prune_locked();  // drops what was freed or written since
  std::mutex mu_;
  std::unordered_map<const c10::StorageImpl*, Fresh> fresh_;
  std::atomic<size_t> count_{0};
};

// Process-wide: the marks are made by the empty-kin wrappers, whatever session is live.
UnwrittenMemory& unwritten_memory();

}  // namespace msprobe
