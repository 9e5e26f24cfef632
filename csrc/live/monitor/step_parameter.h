// A watched parameter at an optimizer step, as TrainerMon's step wrapper forwards it
// (python/msprobe_cpp/monitor_optimizers.py finds each tensor where its optimizer keeps it).
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace msprobe {

struct StepParameter {
  std::string name;  // "0:fc1.weight": the model chunk (msprobe's vpp stage), then the name
  at::Tensor param;
  at::Tensor grad;        // undefined: the parameter has none
  bool in_state = false;  // the optimizer keeps state for it
  at::Tensor exp_avg;     // undefined where the state has none
  at::Tensor exp_avg_sq;
};

}  // namespace msprobe
