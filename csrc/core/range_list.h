// The "step" and "rank" lists of config.json: inclusive integer ranges.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace msprobe {

// Inclusive integer ranges from `[1, "4-6"]`; empty means "all".
class RangeList {
 public:
  RangeList() = default;
  // Sorted and merged here: a config may list every step it wants ("step": [0, 1, ..., 99999]),
  // and contains() runs at every step.
  explicit RangeList(std::vector<std::pair<int64_t, int64_t>> ranges);
  bool all() const { return ranges_.empty(); }
  bool contains(int64_t v) const;
  int64_t last() const { return ranges_.empty() ? 0 : ranges_.back().second; }
  const std::vector<std::pair<int64_t, int64_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;
};

}  // namespace msprobe
