#include "live/capture/tensor_slices.h"

#include <limits>

namespace msprobe {

namespace {

at::Tensor slice_one(const at::Tensor& t, const SliceItem& item) {
  if (item.dim >= t.dim()) return t;
  if (item.size && t.size(item.dim) != *item.size) return t;
  return t.slice(item.dim, item.begin, item.end.value_or(std::numeric_limits<int64_t>::max()));
}

}  // namespace

at::Tensor TensorSlices::apply(const at::Tensor& t) const {
  at::Tensor x = t;
  for (const SliceItem& item : items_) x = slice_one(x, item);
  const int64_t end = request_end_.load(std::memory_order_acquire);
  if (end > 0) {
    SliceItem rows;
    rows.begin = request_begin_.load(std::memory_order_relaxed);
    rows.end = end;
    rows.size = request_total_.load(std::memory_order_relaxed);
    x = slice_one(x, rows);
  }
  return x;
}

void TensorSlices::set_request(int64_t begin, int64_t end, int64_t total) {
  request_begin_.store(begin, std::memory_order_relaxed);
  request_total_.store(total, std::memory_order_relaxed);
  request_end_.store(end, std::memory_order_release);
}

}  // namespace msprobe
