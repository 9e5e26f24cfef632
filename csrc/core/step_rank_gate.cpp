#include "core/step_rank_gate.h"

#include "core/config.h"

namespace msprobe {

StepRankGate StepRankGate::of(const Config& config) {
  return StepRankGate(config.step, config.rank,
                      config.task == Task::GradProbe ? OutsideDistributed::NotFiltered
                                                     : OutsideDistributed::CountsAsRank0);
}

bool StepRankGate::rank_in(int rank) const {
  if (rank >= 0) return ranks_.contains(rank);
  return outside_ == OutsideDistributed::NotFiltered || ranks_.contains(0);
}

}  // namespace msprobe
