// What an anomalous tensor holds besides its statistics: the extremes of its finite elements
// (msprobe's Max_except_inf_nan / Min_except_inf_nan) and its NaN, +inf and -inf counts, in one
// more pass that only anomalous tensors pay.
#pragma once

#include <ATen/ATen.h>

#include "core/record.h"

namespace msprobe {

// The extremes are NaN where the tensor has no finite element.
struct NonFiniteFacts {
  double max_except, min_except;
  NonFiniteCounts counts;
};

// The facts of `t` where `max` or `min` (its statistics) is not finite: one more pass over an
// anomalous tensor. For a finite one: NaN extremes and no counts, at no cost.
NonFiniteFacts nonfinite_facts(const at::Tensor& t, double max, double min);

// Sets a tensor entry's Max/Min/Mean/Norm, and where Max or Min is not finite the except fields
// and the counts.
void set_statistics(Entry& e, double max, double min, double mean, double norm,
                    const NonFiniteFacts& facts);

}  // namespace msprobe
