#include "core/byte_ranges.h"

#include <algorithm>

namespace msprobe {

void ByteRanges::add(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  // The first range that ends at or after `begin`: every range before it stays as it is.
  auto first = std::lower_bound(ranges_.begin(), ranges_.end(), begin,
                                [](const auto& r, uint64_t b) { return r.second < b; });
  auto last = first;
  while (last != ranges_.end() && last->first <= end) {
    begin = std::min(begin, last->first);
    end = std::max(end, last->second);
    ++last;
  }
  first = ranges_.erase(first, last);
  ranges_.insert(first, {begin, end});
}

bool ByteRanges::covers(uint64_t begin, uint64_t end) const {
  if (begin >= end) return true;
  // The last range that starts at or before `begin` is the only one that can hold it.
  auto after = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                                [](uint64_t b, const auto& r) { return b < r.first; });
  if (after == ranges_.begin()) return false;
  const auto& r = *std::prev(after);
  return r.first <= begin && end <= r.second;
}

}  // namespace msprobe
