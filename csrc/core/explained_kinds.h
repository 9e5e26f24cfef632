// An explanation covers what its constant holds (docs/overflow-detection.md, "Kinds and counts"):
// the live guard lets a call's NaN/inf output pass as explained only when its explained inputs
// hold each kind of non-finite value (NaN, +inf, -inf) the output holds, and, where the output is
// as large as one of them, at least as many of each (an input broadcast over the output counts
// once per repetition: a [T, T] mask added to [B, T, T] scores holds B times its count). A
// constant given to the call explains its kinds in any number. Anything beyond is new: the call
// made it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/record.h"

namespace msprobe {

// NaN, +inf, -inf, in NonFiniteCounts' order.
struct KindCounts {
  std::array<int64_t, 3> n{0, 0, 0};
  bool counted = true;  // false: the kinds are known from the statistics, not how many
  bool any() const { return n[0] || n[1] || n[2]; }
};

// The kinds an entry holds: a tensor's counts where they were taken, else what Max/Min/Mean/Norm
// tell; a scalar's value.
KindCounts kinds_of(const Entry& e);

// Elements of a tensor entry, from its shape; -1 without one.
int64_t numel_of(const Entry& e);

class ExplainedKinds {
 public:
  // A non-finite constant passed on purpose (a scalar, a one-element ±inf tensor).
  void add_constant(const Entry& e);
  // An explained tensor (derived from a constant within the step, a constant buffer, a mask).
  void add_tensor(const Entry& e);

  // What the anomalous outputs of `rec` hold beyond the explained inputs, as one line ("NaN: 6
  // new; the explained inputs held -inf only"), or "" when they explain everything.
  std::string unexplained_in(const CallRecord& rec, const std::vector<size_t>& outputs) const;

 private:
  struct Held {
    int64_t numel;
    KindCounts kinds;
  };
  // How many of each kind the explained tensors hold over an output of `numel` elements, where
  // the count applies (one of them is that large, and each one's size divides it).
  bool bound_for(int64_t numel, std::array<int64_t, 3>& bound) const;

  std::vector<Held> held_;  // the explained tensors
  std::array<bool, 3> held_kind_{false, false, false};
  std::array<bool, 3> constant_{false, false, false};  // any number explained
};

}  // namespace msprobe
