// Statistics of one tensor (docs/formats.md), computed on the tensor's own device: one pass over
// the data on CPU, one fused group of reductions and a single device-to-host copy elsewhere.
#pragma once

#include <ATen/ATen.h>

#include "core/record.h"

namespace msprobe {

// The dump entry of a tensor: type, dtype, shape, Max/Min/Mean/Norm, requires_grad.
// Mean and Norm are accumulated in float64 (and rescaled when even that overflows), so a tensor
// whose elements are all finite never gets an infinite Mean or Norm.
Entry describe_tensor(const at::Tensor& t);
// The same entry without Max/Min/Mean/Norm (left absent): for statistics known already.
Entry describe_tensor_layout(const at::Tensor& t);

// Tests only: route CPU tensors through the reductions used on other devices (CUDA, NPU), so a
// machine without them still exercises that code.
void force_generic_statistics(bool on);

// "torch.float32", "torch.bfloat16", ... as Python prints the dtype.
const char* dtype_name(at::ScalarType t);

}  // namespace msprobe
