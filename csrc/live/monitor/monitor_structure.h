// The training monitor's print_struct (issue 55): msprobe 26.2.0 hooks every module, records the
// structure of each one's inputs, outputs and their gradients at its first call
// (pytorch/monitor/utils.py get_param_struct), writes <root>/module_struct/rank<R>/
// module_struct.json at the first optimizer step and stops the run with an exception there.
// The hooks (on any thread) put; the step's wrapper asks for the file.
#pragma once

#include <ATen/ATen.h>

#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "live/hooks/module_observer.h"

namespace msprobe {

class MonitorStructure {
 public:
  void forward_kind(const std::string& name, ObservedOutputKind kind);
  void forward(const std::string& name, const ObservedTensors& inputs,
               const ObservedTensors& outputs);
  void backward(const std::string& name, const ObservedTensors& input_grads,
                const ObservedTensors& output_grads);
  // msprobe's file (json.dump(indent=2)) the first time a module has been seen; else "".
  std::string take_file();

 private:
  std::mutex mu_;
  nlohmann::ordered_json modules_ = nlohmann::ordered_json::object();  // guarded by mu_
  std::map<std::string, ObservedOutputKind> kinds_;                     // guarded by mu_
  bool taken_ = false;
};

}  // namespace msprobe
