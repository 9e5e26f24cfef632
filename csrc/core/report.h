// The overflow report (SPEC §4): the check command's JSON and overflow_report.json.
#pragma once

#include <string>
#include <vector>

#include "core/detector.h"
#include "core/json_writer.h"

namespace msprobe {

struct Report {
  std::vector<Finding> findings;  // in record order

  bool empty() const { return findings.empty(); }
  void write(JsonWriter& w) const;
  std::string to_json(int indent = 1) const;
};

}  // namespace msprobe
