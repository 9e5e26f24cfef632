#include "torch/hook_scope.h"

namespace msprobe {

std::vector<OpenModuleCall>& open_module_calls() {
  thread_local std::vector<OpenModuleCall> calls;
  return calls;
}

std::optional<std::string> enclosing_module() {
  const auto& calls = open_module_calls();
  if (calls.empty()) return std::nullopt;
  return calls.back().name;
}

bool inside_listed_module() {
  for (const OpenModuleCall& c : open_module_calls()) {
    if (c.listed) return true;
  }
  return false;
}

}  // namespace msprobe
