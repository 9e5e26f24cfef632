// Statistics of one tensor (docs/formats.md), computed on the tensor's own device: one pass over
// the data on CPU, a few reductions elsewhere (device_stats.h), read back at once or in batches.
#pragma once

#include <ATen/ATen.h>

#include "core/record.h"

namespace msprobe {

class PendingStats;

// The dump entry of a tensor: type, dtype, shape, Max/Min/Mean/Norm, requires_grad. A tensor
// whose elements are all finite never gets an infinite Mean or Norm. With `pending`, statistics
// that come from the device are left there: the entry gets a slot (pending_stats) instead.
Entry describe_tensor(const at::Tensor& t, PendingStats* pending = nullptr);

// What an anomalous tensor holds besides its statistics: the extremes of its finite elements
// (NaN when there is none; msprobe's Max_except_inf_nan / Min_except_inf_nan) and how many
// elements are NaN, +inf and -inf.
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
// The same entry without Max/Min/Mean/Norm (left absent): for statistics known already.
Entry describe_tensor_layout(const at::Tensor& t);

// Tests only: route CPU tensors through the reductions used on other devices (CUDA, NPU), so a
// machine without them still exercises that code.
void force_generic_statistics(bool on);
bool generic_statistics_forced();

// "torch.float32", "torch.bfloat16", ... as Python prints the dtype.
const char* dtype_name(at::ScalarType t);

}  // namespace msprobe
