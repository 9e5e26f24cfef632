// The training monitor's names (issue 55): which parameters and modules msprobe 26.2.0's
// TrainerMon watches and what it calls them (module_hook.py _is_target_param,
// _is_target_module, _register_chunk; module_metric.py squash_param_name). A name is tagged
// "<model chunk>:<name>"; with squash_name it keeps only its part from the last ".layers." (or
// ".embeddings.", ".final", ".output", ".norm"), unless another parameter already took that
// name.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace msprobe {

// msprobe's squash_param_name(name, True).
std::string monitor_squash_name(const std::string& name);

class MonitorNames {
 public:
  // `targets`: the config's (empty: everything); `all_xy`: every module.
  MonitorNames(std::vector<std::string> targets, bool squash, bool all_xy);

  // A parameter of model chunk `vpp`: its tag if a target, as written, is a prefix of its name,
  // its tag or its squashed tag; else none. Called once per parameter, in the model's order.
  std::optional<std::string> parameter(int vpp, const std::string& name);
  // A module of model chunk `vpp`: its tag if a target names it (exactly), or with all_xy.
  std::optional<std::string> module(int vpp, const std::string& name) const;

 private:
  std::string target_of(int vpp, const std::string& target) const;

  std::vector<std::string> targets_;
  bool squash_;
  bool all_xy_;
  std::set<std::string> taken_;  // parameter tags given so far
};

}  // namespace msprobe
