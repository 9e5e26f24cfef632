// Ignore rules (docs/ignore-rules.md): known false positives, in msprobe 1.1.1's YAML format.
//
//   ignore_nan_inf:
//     - api_name: "torch.empty"
//       description: "uninitialized memory"
//       input_ignore: [{index: 0}, {name: tensor}]
//       output_ignore: [{index: 0}]
#pragma once

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/record.h"

namespace msprobe {

// A rules file that cannot be used: "rules.yaml:4:7: ignore_nan_inf[0].output_ignore: ...".
// One line always: yaml-cpp's own messages can hold newlines, which are made spaces here.
class RulesError : public std::runtime_error {
 public:
  explicit RulesError(const std::string& message) : std::runtime_error(one_line(message)) {}

 private:
  static std::string one_line(std::string s) {
    for (char& c : s) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return s;
  }
};

struct IgnoreRule {
  std::string api_name;  // seed torch API name, e.g. "tensor.masked_fill_"
  std::string description;
  std::set<int64_t> input_indices;
  std::set<std::string> input_names;
  std::set<int64_t> output_indices;

  // msprobe 1.1.1's Rule.match: every anomalous argument of each listed category is at an ignored
  // position. `compat` decides whether non-finite scalar values count as anomalous.
  bool covers(const CallRecord& rec, bool compat) const;
};

class RuleSet {
 public:
  // Adds the rules of a YAML document. As in msprobe 1.1.1, a rule with an empty api_name or with
  // no index or name at all is skipped, and so is a second rule for an api_name already present.
  void add_yaml(const std::string& text, const std::string& source);
  void add_file(const std::string& path);

  // rules/ignore_rules.yaml as compiled into the binary.
  static RuleSet shipped();

  const IgnoreRule* find(const std::string& api_name) const;
  size_t size() const { return rules_.size(); }

 private:
  std::unordered_map<std::string, IgnoreRule> rules_;
};

const char* shipped_rules_yaml();

}  // namespace msprobe
