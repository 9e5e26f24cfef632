// Hooks for a processor that looks at chosen modules' calls without recording them (the
// training monitor's activations, msprobe's xy_distribution): a forward pre-hook and a forward
// hook, C++ callables registered through nn.Module's own hook API as the record hooks are
// (module_hooks.h), and for the backward the same hooks on the forward's own autograd nodes
// (module_backward.h), so that no node is added to the user's graph.
#pragma once

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace msprobe {

// One value per slot, undefined where the slot holds no tensor (msprobe writes a row of nan).
using ObservedTensors = std::vector<at::Tensor>;

// What a forward's output is, for msprobe's print_struct: "tensor", "tuple" or "list", or another
// value's Python type ("<class 'dict'>"); for a tuple or list, each element's type where it is
// not a tensor ("<class 'NoneType'>"; "" for a tensor).
struct ObservedOutputKind {
  std::string kind;
  std::vector<std::string> element_types;
};

class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  // Whether this step's calls are looked at; asked at each forward. Any thread.
  virtual bool observing() const = 0;
  // A forward of a module in training mode: the tensors among its positional arguments then
  // its keyword arguments' values; its output's items (a tensor is one item; a tuple or list,
  // each element; anything else, none). GIL held.
  virtual void forward(const std::string& name, ObservedTensors inputs,
                       ObservedTensors outputs) = 0;
  // Whether forward_kind() is wanted (print_struct); asked as the hooks are made.
  virtual bool wants_output_kinds() const { return false; }
  // Before forward(), when wanted. GIL held.
  virtual void forward_kind(const std::string& /*name*/, ObservedOutputKind /*kind*/) {}
  // Where the module was first called from while observed: "<file>:<line>", the innermost frame
  // outside torch and this package. GIL held.
  virtual void called_from(const std::string& /*name*/, const std::string& /*source*/) {}
  // A pass of its backward: the gradients flowing out to each positional argument, and in from
  // each output item. On the thread that runs the backward, without the GIL.
  virtual void backward(const std::string& name, ObservedTensors input_grads,
                        ObservedTensors output_grads) = 0;
};

// (pre_hook, forward_hook) for the module `name`, registered with with_kwargs=True: `forward`
// hands its forward to `observer`, `backward` its backward.
pybind11::tuple make_observer_hooks(std::shared_ptr<ModuleObserver> observer,
                                    const std::string& name, bool forward, bool backward);

}  // namespace msprobe
