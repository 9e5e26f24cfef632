// Values computed once per tensor version: an activation is one call's output and the next call's
// input (and a module's output its parent's), a weight is read by every call that uses it. The
// same tensor object at the same version, storage, offset, sizes and strides finds what was put
// for it; an in-place update (a new version), a view (another object) or anything else does not.
// Not thread-safe: its owner locks.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <unordered_map>

namespace msprobe {

// A tensor's identity at one moment. Held, it keeps the object's address from being another
// tensor's (a weak reference keeps the TensorImpl's memory).
class TensorVersion {
 public:
  explicit TensorVersion(const at::Tensor& t)
      : weak_(t.getIntrusivePtr()),
        version_(static_cast<uint32_t>(t._version())),
        storage_(t.storage().unsafeGetStorageImpl()),
        offset_(t.storage_offset()),
        sizes_(t.sizes().begin(), t.sizes().end()),
        strides_(t.strides().begin(), t.strides().end()) {}

  // Whether `t` is the tensor this was made of, unchanged since.
  bool is(const at::Tensor& t) const {
    return version_ == static_cast<uint32_t>(t._version()) &&
           storage_ == t.storage().unsafeGetStorageImpl() && offset_ == t.storage_offset() &&
           t.sizes().equals(sizes_) && t.strides().equals(strides_) &&
           weak_.lock().get() == t.unsafeGetTensorImpl();
  }

  // Tensors smaller than this are cheaper to read again than to look up. Inference tensors have
  // no version counter: never held.
  static constexpr int64_t kMinElements = 2048;
  static bool trackable(const at::Tensor& t) {
    return t.numel() >= kMinElements && t.layout() == at::kStrided && !t.is_inference() &&
           t.has_storage();
  }

 private:
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  WeakImpl weak_;
  uint32_t version_;
  const void* storage_;
  int64_t offset_;
  // Inline up to six dimensions: two allocations a held tensor fewer (issue 56).
  c10::SmallVector<int64_t, 6> sizes_, strides_;
};

template <typename Value>
class TensorVersionMap {
 public:
  // A bound on a step's memory, not a tuning knob.
  static constexpr size_t kMaxItems = 1 << 16;

  // `t` is TensorVersion::trackable (the caller asks once: it decides what an untracked tensor
  // costs it, as the statistics cache's hit and miss counts do).
  // What was put for `t` as it is now; null if nothing was.
  const Value* find(const at::Tensor& t) const {
    auto it = items_.find(t.unsafeGetTensorImpl());
    return it != items_.end() && it->second.first.is(t) ? &it->second.second : nullptr;
  }
  void put(const at::Tensor& t, Value value) {
    if (items_.size() >= kMaxItems) return;
    items_.insert_or_assign(t.unsafeGetTensorImpl(),
                            std::make_pair(TensorVersion(t), std::move(value)));
  }
  void clear() { items_.clear(); }

 private:
  std::unordered_map<const c10::TensorImpl*, std::pair<TensorVersion, Value>> items_;
};

}  // namespace msprobe
