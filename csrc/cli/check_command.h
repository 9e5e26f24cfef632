// `msprobe-cpp check`: reads dump.json files and reports their overflow anomalies.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/config.h"

namespace msprobe {

struct CheckOptions {
  std::string path;
  std::vector<std::string> rule_files;
  double threshold = kDefaultMutationThreshold;
  bool compat = false;
  bool text = false;                    // --format text
  Severity fail_on = Severity::Medium;  // the lowest level that makes the exit status 1
};

// Exit status: 0 no anomaly at or above fail_on after filtering, 1 such anomalies found (or a
// live stop at that level beside a dump, overflow_report.json's first_anomaly), 2 unreadable input.
int run_check(const CheckOptions& options, std::ostream& out, std::ostream& err);

}  // namespace msprobe
