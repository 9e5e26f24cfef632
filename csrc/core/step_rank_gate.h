// The config's `step` and `rank` lists as every task applies them: one rule, read by the dump's
// session and by grad_probe alike, so that a task cannot grow a rule of its own.
#pragma once

#include <cstdint>
#include <utility>

#include "core/range_list.h"

namespace msprobe {

struct Config;

// What a process outside torch.distributed (rank -1) is for the rank list. msprobe 1.1.1 differs
// by task, and users' configs rely on it (docs/config.md): its dump counts the process as rank 0;
// its grad_probe does not apply the list at all.
enum class OutsideDistributed { CountsAsRank0, NotFiltered };

class StepRankGate {
 public:
  StepRankGate(RangeList steps, RangeList ranks, OutsideDistributed outside)
      : steps_(std::move(steps)), ranks_(std::move(ranks)), outside_(outside) {}
  // The gate of the task the config selects: grad_probe's leaves a process outside
  // torch.distributed unfiltered; every other task's counts it as rank 0.
  static StepRankGate of(const Config& config);

  // `rank` -1: outside torch.distributed.
  bool rank_in(int rank) const;
  bool step_in(int64_t step) const { return steps_.contains(step); }
  // Past the last step the list names: the task has nothing more to do.
  bool past_last_step(int64_t step) const { return !steps_.all() && step > steps_.last(); }
  bool admits(int64_t step, int rank) const { return rank_in(rank) && step_in(step); }

 private:
  RangeList steps_, ranks_;
  OutsideDistributed outside_;
};

}  // namespace msprobe
