// A set of half-open byte ranges [begin, end) of one buffer: the parts of an uninitialised
// allocation that have been written since (DeepSpeed copies each gradient into its own slice of
// one torch.empty partition, so "written" is a property of a range, not of the whole buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace msprobe {

class ByteRanges {
 public:
  // Adds [begin, end); touching and overlapping ranges merge, so the set stays as small as the
  // number of separate runs written.
  void add(uint64_t begin, uint64_t end);
  // Whether every byte of [begin, end) is in the set (an empty range always is).
  bool covers(uint64_t begin, uint64_t end) const;
  size_t size() const { return ranges_.size(); }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;  // sorted, disjoint, not touching
};

}  // namespace msprobe
