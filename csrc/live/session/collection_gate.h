// Whether the hooks record now: the one switch that start(), stop(), step(), pause() and
// module_dump() turn and every hook reads first. Lock-free: one atomic, read on the hot path with
// relaxed order (a call racing a switch is recorded or not, never half).
#pragma once

#include <atomic>
#include <cstdint>

namespace msprobe {

class CollectionGate {
 public:
  void open(bool collect) {
    leave_optimizer_step(false);
    state_ = collect ? State::On : State::Off;
  }
  void close() {
    leave_optimizer_step(false);
    state_ = State::Off;
  }
  // Task overflow_check: the calls of an optimizer's step are left to one look at what the step
  // wrote (python_side.h, begin_optimizer_step); no forward hook of the thread that runs the step
  // records or judges them meanwhile. Another thread's forward goes on being judged.
  void leave_optimizer_step(bool on) {
    bool& mine = optimizer_step();
    if (mine == on) return;
    mine = on;
    threads_leaving().fetch_add(on ? 1 : -1, std::memory_order_relaxed);
  }
  // The count first: every hooked call asks, and a thread-local read in a loaded library is a
  // call (__tls_get_addr) that a step outside any optimizer need not pay.
  bool leaving_optimizer_step() const {
    return threads_leaving().load(std::memory_order_relaxed) != 0 && optimizer_step();
  }
  // forward_backward_dump_end: the backward of the calls recorded so far is still collected, new
  // forward calls are not.
  void pause() {
    State on = State::On;
    state_.compare_exchange_strong(on, State::BackwardOnly);
  }
  // module_dump(): only the dumped module's own hooks record (its forward and backward).
  void set_module_dump(bool on) {
    State from = on ? State::On : State::ModuleDump;
    state_.compare_exchange_strong(from, on ? State::ModuleDump : State::On);
  }

  bool forward() const { return load() == State::On && !leaving_optimizer_step(); }
  bool module_dump() const {
    const State s = load();
    return s == State::On || s == State::ModuleDump;
  }
  // Backward hooks of calls already recorded: also after pause().
  bool backward() const { return load() != State::Off; }

 private:
  enum class State : uint8_t { Off, On, BackwardOnly, ModuleDump };
  State load() const { return state_.load(std::memory_order_relaxed); }
  std::atomic<State> state_{State::Off};
  // Per thread, and one session is current at a time: static, with the count of threads that
  // have it set, kept together by leave_optimizer_step().
  static bool& optimizer_step() {
    static thread_local bool inside = false;
    return inside;
  }
  static std::atomic<int>& threads_leaving() {
    static std::atomic<int> count{0};
    return count;
  }
};

}  // namespace msprobe
