// free_benchmark with fuzz_stage backward: a selected call's inputs that need a gradient are
// copied at its forward; when the gradient of its output arrives, the call is run again twice on
// the copies, as is and perturbed, each with that gradient, and the two gradients of each input
// are compared (msprobe 1.1.1's GradSaver, whose second pass decides its rows). The program's own
// gradients are neither read into nor changed.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/free_benchmark_rules.h"

namespace msprobe {

// What the backward check keeps of a call from its forward to its output's gradient. Holds
// Python objects: made and used with the GIL held; its destructor takes the GIL (the autograd
// graph that owns it may go on a thread without it).
struct BackwardCall {
  pybind11::object function;  // the original API
  pybind11::tuple args;       // the inputs that need a gradient as None
  pybind11::dict kwargs;
  std::vector<size_t> positions;    // of the inputs that need a gradient
  std::vector<at::Tensor> inputs;   // their values at the call, detached copies
  std::optional<size_t> output_at;  // the output hooked: an element of a tuple, or the output
  std::string name;                 // "Torch.mul.0.backward"
  std::string api;                  // "Torch.mul"
  int64_t step = 0;
  int rank = 0;

  ~BackwardCall();
};

// The gradients of the call's inputs, unperturbed and perturbed (`mode`), for `grad_output`;
// `ran` false where the mode had nothing to change (improve_precision of float32 inputs).
struct InputGradients {
  std::vector<at::Tensor> original, perturbed;
  bool ran = false;
};
InputGradients input_gradients(const BackwardCall& call, PertMode mode,
                               const at::Tensor& grad_output);

}  // namespace msprobe
