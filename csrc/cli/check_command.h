// `msprobe-cpp check` (SPEC §7): reads dump.json files and reports their overflow anomalies.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace msprobe {

struct CheckOptions {
  std::string path;
  std::vector<std::string> rule_files;
  double threshold = 1e5;
  bool compat = false;
  bool text = false;  // --format text
};

// Exit status: 0 no anomaly after filtering, 1 anomalies found, 2 unreadable input.
int run_check(const CheckOptions& options, std::ostream& out, std::ostream& err);

}  // namespace msprobe
