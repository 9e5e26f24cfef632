// A tensor's sizes in a record: up to six dimensions held inline, more on the heap. Nearly every
// tensor has at most six, so recording one allocates nothing for its shape: the live guard makes
// an entry for every tensor of every hooked call, and std::vector would allocate for each.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

namespace msprobe {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept : size_(o.size_), heap_(std::move(o.heap_)) {
    std::copy(o.inline_, o.inline_ + kInline, inline_);
    o.size_ = 0;
  }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    size_ = o.size_;
    std::copy(o.inline_, o.inline_ + kInline, inline_);
    heap_ = std::move(o.heap_);
    o.size_ = 0;
    return *this;
  }

  template <typename It>
  void assign(It first, It last) {
    clear();
    for (; first != last; ++first) push_back(*first);
  }
  void push_back(int64_t d) {
    if (size_ < kInline) {
      inline_[size_] = d;
    } else {
      if (size_ == kInline)
        heap_ = std::make_unique<std::vector<int64_t>>(inline_, inline_ + kInline);
      heap_->push_back(d);
    }
    ++size_;
  }
  void reserve(size_t) {}  // inline storage needs none
  void clear() {
    size_ = 0;
    heap_.reset();
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int64_t* begin() const { return size_ <= kInline ? inline_ : heap_->data(); }
  const int64_t* end() const { return begin() + size_; }
  int64_t operator[](size_t i) const { return begin()[i]; }
  std::vector<int64_t> to_vector() const { return std::vector<int64_t>(begin(), end()); }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  static constexpr uint32_t kInline = 6;
  uint32_t size_ = 0;
  int64_t inline_[kInline] = {};
  // All dimensions, once there are more than kInline; behind a pointer, so a shape is 64 bytes.
  std::unique_ptr<std::vector<int64_t>> heap_;
};

}  // namespace msprobe
