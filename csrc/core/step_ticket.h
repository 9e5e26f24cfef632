// The step a session is in, as one value that one owner publishes and every other part reads.
//
// A step's identity was kept in four places (the session's, the guard's, the numbering's and the
// API hooks' copies), each moved on by hand at a step's end under its own lock. Now the session's
// call numbering publishes a StepTicket (StepTickets::publish, under the session's step lock), and
// a part whose state belongs to one step (a cache, the names given out, the selection's window)
// keeps no copy of it: a StepLocal says, under the part's own lock, when the ticket it last saw is
// no longer the current one, and the part clears itself then. The end of a step, a stop's
// included, so takes no part's lock; each pays for its reset at its next use.
#pragma once

#include <atomic>
#include <cstdint>

namespace msprobe {

struct StepTicket {
  int64_t step = 0;
  int rank = -1;       // -1: torch.distributed not initialized
  uint64_t epoch = 0;  // unique among all sessions' steps (a rank's change keeps it)
};

// The current ticket, read without a lock. A sequence lock: a reader that overlapped a publish
// reads again, so a ticket read is one that was published, never a mix of two. One publisher at
// a time (the session publishes under its step lock).
class StepTickets {
 public:
  explicit StepTickets(const StepTicket& first) { publish(first); }
  StepTickets(const StepTickets&) = delete;
  StepTickets& operator=(const StepTickets&) = delete;

  void publish(const StepTicket& t) {
    const uint64_t seq = seq_.load(std::memory_order_relaxed);
    seq_.store(seq + 1, std::memory_order_relaxed);  // odd: a publish in progress
    std::atomic_thread_fence(std::memory_order_release);
    step_.store(t.step, std::memory_order_relaxed);
    rank_.store(t.rank, std::memory_order_relaxed);
    epoch_.store(t.epoch, std::memory_order_relaxed);
    seq_.store(seq + 2, std::memory_order_release);
  }

  StepTicket current() const {
    for (;;) {
      const uint64_t before = seq_.load(std::memory_order_acquire);
      StepTicket t;
      t.step = step_.load(std::memory_order_relaxed);
      t.rank = rank_.load(std::memory_order_relaxed);
      t.epoch = epoch_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if ((before & 1) == 0 && seq_.load(std::memory_order_relaxed) == before) return t;
    }
  }

  // The current ticket's epoch alone: what a StepLocal compares (one load).
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> step_{0};
  std::atomic<int> rank_{-1};
  std::atomic<uint64_t> epoch_{0};
};

// A part's look at the step its state belongs to. moved_on() is called under the part's own lock;
// stale() may be read without it (a fast check before taking the lock). Without tickets (a part
// made on its own, in tests) the step never moves on by itself.
class StepLocal {
 public:
  explicit StepLocal(const StepTickets* tickets = nullptr)
      : tickets_(tickets), seen_(tickets ? tickets->epoch() : 0) {}

  // True once per new step: the part clears its state of the last one before it goes on.
  bool moved_on() {
    if (!tickets_) return false;
    const uint64_t now = tickets_->epoch();
    if (now == seen_.load(std::memory_order_relaxed)) return false;
    seen_.store(now, std::memory_order_relaxed);
    return true;
  }
  // Whether the state is of an earlier step: a const reader takes it as cleared.
  bool stale() const {
    return tickets_ && tickets_->epoch() != seen_.load(std::memory_order_relaxed);
  }

 private:
  const StepTickets* tickets_;
  std::atomic<uint64_t> seen_;
};

}  // namespace msprobe
