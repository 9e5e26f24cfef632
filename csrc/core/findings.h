// The findings of one report, in record order and counted by level: the one model that both
// renderers read, the JSON one (report.h: check's JSON and overflow_report.json) and the text one
// (cli/text_report.h). A live step's few findings are held in memory. check's are spilled to a
// temporary file as they are found, so memory holds one finding however many a dump file has.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/detector.h"
#include "core/spill_file.h"

namespace msprobe {

// Findings counted by level: what a report's summary says and what check's --fail-on decides.
struct SeverityCounts {
  std::array<size_t, 3> by_level = {0, 0, 0};  // by Severity

  void add(Severity s) { ++by_level[static_cast<int>(s)]; }
  size_t total() const { return by_level[0] + by_level[1] + by_level[2]; }
  // A finding at or above `fail_on`.
  bool fails(Severity fail_on) const;
};

class Findings {
 public:
  Findings() = default;  // in memory
  explicit Findings(const std::vector<Finding>& in_memory);
  // Throws std::runtime_error when no temporary file can be made.
  static Findings spilled();

  void add(const Finding& f);
  // Each finding in record order. A spilled one is read back from its file, one at a time.
  void for_each(const std::function<void(const Finding&)>& fn) const;

  const SeverityCounts& counts() const { return counts_; }
  bool empty() const { return counts_.total() == 0; }
  // The first call at `level`, if any.
  const std::optional<std::string>& first(Severity level) const;

 private:
  std::vector<Finding> memory_;
  // Reading it back moves only its file position: for_each stays const.
  std::unique_ptr<SpillFile> spill_;
  SeverityCounts counts_;
  std::array<std::optional<std::string>, 3> first_;  // by Severity
};

}  // namespace msprobe
