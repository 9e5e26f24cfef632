#include "core/range_list.h"

#include <algorithm>
#include <iterator>

namespace msprobe {

RangeList::RangeList(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  for (const auto& r : ranges) {
    // Overlapping or adjacent; written so that a range ending at INT64_MAX does not overflow.
    if (!ranges_.empty() &&
        (r.first <= ranges_.back().second || r.first - 1 == ranges_.back().second))
      ranges_.back().second = std::max(ranges_.back().second, r.second);
    else
      ranges_.push_back(r);
  }
}

bool RangeList::contains(int64_t v) const {
  if (all()) return true;
  // The first range starting after v; the one before it is the only one that can hold v.
  auto after = std::upper_bound(ranges_.begin(), ranges_.end(), v,
                                [](int64_t x, const auto& r) { return x < r.first; });
  return after != ranges_.begin() && v <= std::prev(after)->second;
}

}  // namespace msprobe
