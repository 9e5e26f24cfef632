// The wrapper that replaces a torch API (torch.*, torch.Tensor.*, torch.nn.functional.*, ...):
// it records the outermost call's inputs, calls the original, records its outputs, and arranges a
// backward record; the original's result is returned untouched.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace msprobe {

class ApiHook {
 public:
  ApiHook(std::string api, pybind11::object original)
      : api_(std::move(api)), original_(std::move(original)) {}

  pybind11::object call(pybind11::args args, pybind11::kwargs kwargs);
  pybind11::object call_original(const pybind11::args& args, const pybind11::kwargs& kwargs) const;
  const pybind11::object& original() const { return original_; }
  const std::string& api() const { return api_; }

 private:
  std::string api_;  // "Functional.linear"
  pybind11::object original_;
};

}  // namespace msprobe
