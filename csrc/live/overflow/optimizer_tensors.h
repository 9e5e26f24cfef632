// The tensors of an optimizer's step as the looks around it read them (gradient_guard.py): its
// parameters, named as the started models name them, their gradients, and its state (Adam's
// exp_avg and exp_avg_sq, SGD's momentum_buffer), taken from the optimizer's Python objects in
// one crossing. A DTensor (FSDP2) is read as its local shard (reading the whole would be a
// collective); a tensor that is not floating point, or not strided, is not read.
#pragma once

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace msprobe {

class Session;

// (name, tensor): what the looks found, as the guard's judge calls take it (overflow_control.h).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class OptimizerTensors {
 public:
  // GIL required. `started`: the parameters are named as the started models name them, and
  // those they do not have are left out; else by their place ("param_groups[0].params[3]").
  OptimizerTensors(Session& session, pybind11::handle optimizer, bool started);

  // GIL required (as are the looks below). Before the step: (name, gradient) of the gradients
  // that hold NaN/inf.
  NamedTensors nonfinite_gradients() const;
  // Before the step: (key, parameter) of the state that holds NaN/inf, in the state's order.
  // All of it is read, also what the look after the last step found finite: a write through
  // `.data` bumps no version, and what it wrote would reach the parameters before a look.
  std::vector<std::pair<std::string, std::string>> nonfinite_state() const;
  // After the step: ("<parameter>" or "<key> of <parameter>", tensor) of the parameters it
  // updated (those with a gradient) and its state that hold NaN/inf.
  NamedTensors nonfinite_written() const;
  // Whether these are `optimizer`'s.
  bool of(pybind11::handle optimizer) const { return optimizer.ptr() == optimizer_.ptr(); }

 private:
  struct Parameter {
    std::string name;
    pybind11::object object;  // the parameter
  };
  struct State {
    std::string name;  // "<key> of <parameter>"
    std::string key;
    const Parameter* parameter;
    at::Tensor local;
  };
  std::vector<State> state() const;
  // Names the parameters as the started models do, leaving out those they do not have.
  void keep_started(Session& session);

  pybind11::object optimizer_;
  std::vector<Parameter> parameters_;
};

}  // namespace msprobe
