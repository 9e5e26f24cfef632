// The check command's text report of one dump file (docs/check.md, "The text format"), written as
// findings arrive: each finding's line goes to a temporary file; at the end the header (which
// counts them) is written, then the lines in record order with the source lines of stack.json,
// looked up a batch of findings at a time, so memory holds one batch however many there are.
#pragma once

#include <array>
#include <optional>
#include <ostream>
#include <string>

#include "core/detector.h"
#include "core/report.h"
#include "core/spill_file.h"

namespace msprobe {

class TextReport {
 public:
  explicit TextReport(std::string dump_file) : file_(std::move(dump_file)) {}

  void add(const Finding& f);
  bool fails(Severity fail_on) const { return counts_.fails(fail_on); }
  void write(std::ostream& out);

 private:
  void write_batch(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& batch,
                   const std::string* origin, std::string& origin_source);

  std::string file_;
  SpillFile lines_;  // "<call>\t<line>\n" per finding
  SeverityCounts counts_;
  std::optional<std::string> first_critical_, first_high_;
};

}  // namespace msprobe
