// The check command's JSON report of one dump file, written as its findings arrive: the call
// names of each level and the details are rendered at once into temporary files and copied into
// the output at the end, in the report's order (docs/check.md), so memory holds one rendered
// finding and one chunk however many findings there are. The bytes are Report::write's.
#pragma once

#include <functional>
#include <string>

#include "core/detector.h"
#include "core/json_writer.h"
#include "core/report.h"
#include "core/spill_file.h"

namespace msprobe {

class SpilledReport {
 public:
  // `depth`: how many containers enclose the report object in the document (0: it is the
  // document).
  SpilledReport(int indent, size_t depth) : indent_(indent), depth_(depth) {}

  void add(const Finding& f);
  bool fails(Severity fail_on) const { return counts_.fails(fail_on); }
  // Writes the report object where `w` stands, handing `w`'s text to `sink` chunk by chunk.
  void write(JsonWriter& w, const std::function<void(const std::string&)>& sink);

 private:
  int indent_;
  size_t depth_;
  SpillFile names_[3];  // by Severity
  SeverityCounts counts_;
  SpillFile details_;
};

}  // namespace msprobe
