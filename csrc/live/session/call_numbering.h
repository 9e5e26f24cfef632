// How a step numbers its calls: "<name>.<n>", n counted per name within the step; and the step
// itself, published as one StepTicket (core/step_ticket.h: step, rank, epoch) that every other part
// of the session reads and none copies. The counters are this class's own, under its lock; they
// start again at a step's first call, when the ticket's epoch is no longer theirs. The ticket is
// read without a lock.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/guarded.h"
#include "core/step_ticket.h"

namespace msprobe {

class CallNumbering {
 public:
  explicit CallNumbering(const StepTicket& first)
      : tickets_(first), counters_(LockLevel::Numbering, &tickets_) {}

  int64_t next_index(const std::string& key) {  // n of `key` within the step
    return counters_.with_lock([&](Counters& c) { return c.of_this_step().calls[key]++; });
  }
  // k of msprobe 26.x's "<module>.parameters_grad.<k>" when the gradient of `module`'s parameter
  // `param` arrives: the backward passes through the module within the step, a pass being over
  // when the parameter whose gradient came first comes again (as 26.x counts them).
  int64_t parameter_grad_index(const std::string& module, const std::string& param) {
    return counters_.with_lock([&](Counters& c) {
      auto [it, first] = c.of_this_step().grads.try_emplace(module, 0, param);
      if (!first && it->second.second == param) ++it->second.first;
      return it->second.first;
    });
  }

  // The step: its number, rank and epoch (a call carries the epoch it was numbered in).
  StepTicket ticket() const { return tickets_.current(); }
  uint64_t epoch() const { return tickets_.epoch(); }
  const StepTickets& tickets() const { return tickets_; }
  // The session's step moved on (a new epoch) or its rank became known (the same epoch). One
  // publisher: the session, under its step lock.
  void publish(const StepTicket& t) { tickets_.publish(t); }

 private:
  struct Counters {
    explicit Counters(const StepTickets* tickets) : step(tickets) {}
    Counters& of_this_step() {
      if (step.moved_on()) {
        calls.clear();
        grads.clear();
      }
      return *this;
    }
    StepLocal step;
    std::unordered_map<std::string, int64_t> calls;
    // module -> (k, the parameter whose gradient came first)
    std::unordered_map<std::string, std::pair<int64_t, std::string>> grads;
  };
  StepTickets tickets_;
  Guarded<Counters> counters_;
};

}  // namespace msprobe
