// free_benchmark's second run's arguments: each pert_mode's perturbation (msprobe 1.1.1's
// perturbed_layers), built on copies, so that the program's tensors are never written.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/types.h>

#include <optional>
#include <string>

#include "core/free_benchmark_rules.h"

namespace msprobe {

FloatKind float_kind(at::ScalarType t);

// The positional argument msprobe perturbs: the first floating tensor, or the first list, tuple
// or dict; nullopt where there is none (the call is not checked).
std::optional<size_t> fuzzed_argument(const pybind11::tuple& args);

// A perturbed copy of `t` in one of the modes that perturb one tensor (add_noise, bit_noise,
// change_value), or nullopt with why not (msprobe's "Cancel ..." reasons).
std::optional<at::Tensor> perturb_one(PertMode mode, const at::Tensor& t, std::string& why_not);

// The second run's arguments. `rerun` false: nothing to run (improve_precision with nothing to
// upcast). `perturbed` false: run, but unperturbed (msprobe runs it anyway).
struct RerunArgs {
  pybind11::tuple args;
  pybind11::dict kwargs;
  bool rerun = true;
  bool perturbed = false;
  std::string why_not;  // a one-tensor mode that found nothing it could perturb
};

RerunArgs rerun_args(PertMode mode, const pybind11::tuple& args, const pybind11::dict& kwargs,
                     size_t fuzzed);

// Whether `obj` holds a float16 or bfloat16 tensor (through lists, tuples and dicts): what
// improve_precision has to upcast; a call without one is not run again.
bool holds_low_precision(const pybind11::handle& obj);

// A copy of every tensor in `obj` (through lists, tuples and dicts): the program's tensors that
// an in-place call writes, taken before it does.
pybind11::object copy_tensors(const pybind11::handle& obj);

}  // namespace msprobe
