// The overflow report (SPEC §4): the check command's JSON and overflow_report.json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/detector.h"
#include "core/json_writer.h"

namespace msprobe {

struct Report {
  std::vector<Finding> findings;  // in record order
  // overflow_report.json only: the finding that flagged the step, whatever its level, so the
  // call where NaN or inf entered is named even when it came in with the data.
  std::optional<Finding> first_anomaly;

  bool empty() const { return findings.empty(); }
  void write(JsonWriter& w) const;
  std::string to_json(int indent = 1) const;
};

}  // namespace msprobe
