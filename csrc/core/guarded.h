// A value reachable only under its mutex: the compiler, not a comment, keeps the lock.
#pragma once

#include <mutex>
#include <utility>

namespace msprobe {

template <typename T>
class Guarded {
 public:
  template <typename... Args>
  explicit Guarded(Args&&... args) : value_(std::forward<Args>(args)...) {}

  // Runs `fn(value)` with the lock held and returns what it returns. `fn` must not wait for
  // anything another thread may hold while waiting for this lock (the GIL, a device).
  template <typename Fn>
  decltype(auto) with_lock(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    return fn(value_);
  }
  template <typename Fn>
  decltype(auto) with_lock(Fn&& fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    return fn(value_);
  }

 private:
  mutable std::mutex mu_;
  T value_;
};

}  // namespace msprobe
