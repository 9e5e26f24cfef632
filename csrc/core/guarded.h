// A value reachable only under its mutex: the compiler, not a comment, keeps the lock. Each
// Guarded has a level, and a thread that holds two takes them in the order of their levels; debug
// builds check it at each lock (LockOrderError), so that the order is code, not a comment.
#pragma once

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace msprobe {

// The order of the locks a thread may hold at once: a lock is taken only while every lock the
// thread holds is of a lower level. The session's step is written under its lock, which asks the
// guard (under the guard's) to end its step; a call is numbered (under the counters') with no
// other held; the batched-sync queue's is never held with another.
enum class LockLevel : int {
  Step = 10,
  Guard = 20,
  Numbering = 30,
  DeferredQueue = 40,
  Leaf = 100,  // held with no other (tests)
};

class LockOrderError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace lock_order {

// The levels the calling thread holds, innermost last (debug builds only).
inline std::vector<int>& held() {
  static thread_local std::vector<int> levels;
  return levels;
}

inline void taking(LockLevel level) {
  const int l = static_cast<int>(level);
  if (!held().empty() && held().back() >= l) {
    throw LockOrderError("lock order: a lock of level " + std::to_string(l) +
                         " taken while one of level " + std::to_string(held().back()) +
                         " is held (core/guarded.h, LockLevel)");
  }
  held().push_back(l);
}

inline void released() {
  held().pop_back();
}

}  // namespace lock_order

template <typename T>
class Guarded {
 public:
  template <typename... Args>
  explicit Guarded(LockLevel level, Args&&... args)
      : level_(level), value_(std::forward<Args>(args)...) {}

  // Runs `fn(value)` with the lock held and returns what it returns. `fn` must not wait for
  // anything another thread may hold while waiting for this lock (the GIL, a device), and takes
  // another Guarded only of a higher level.
  template <typename Fn>
  decltype(auto) with_lock(Fn&& fn) {
    Held held(level_);
    std::lock_guard<std::mutex> lock(mu_);
    return fn(value_);
  }
  template <typename Fn>
  decltype(auto) with_lock(Fn&& fn) const {
    Held held(level_);
    std::lock_guard<std::mutex> lock(mu_);
    return fn(value_);
  }

 private:
  // Records the level for the thread while the lock is held; nothing in release builds.
  struct Held {
#ifdef NDEBUG
    explicit Held(LockLevel) {}
#else
    explicit Held(LockLevel level) { lock_order::taking(level); }
    ~Held() { lock_order::released(); }
#endif
  };

  const LockLevel level_;
  mutable std::mutex mu_;
  T value_;
};

}  // namespace msprobe
