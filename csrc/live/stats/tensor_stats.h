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
Entry tensor_stats_entry(const at::Tensor& t, PendingStats* pending = nullptr);

// The same entry without Max/Min/Mean/Norm (left absent): for statistics known already.
Entry tensor_layout_entry(const at::Tensor& t);

// "torch.float32", "torch.bfloat16", ... as Python prints the dtype.
const char* dtype_name(at::ScalarType t);

}  // namespace msprobe
