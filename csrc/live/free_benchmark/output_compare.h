// free_benchmark's comparison of a call's output with its second run's (msprobe 1.1.1's
// result_handlers/base_handler.py and compare/single_benchmark.py), with the same ATen ops, so the
// ratios are the same numbers.
#pragma once

#include <torch/types.h>

#include "core/free_benchmark_rules.h"

namespace msprobe {

// The largest element ratio between `original` and `perturbed` (each way, values below the
// tolerance clamped to it), chunked as msprobe chunks it; -inf for an empty output; nan when the
// original cannot be cast to the perturbed output's dtype.
double output_ratio(const at::Tensor& original, const at::Tensor& perturbed_output,
                    FuzzStage stage);

// to_cpu's comparison (SingleCompare): whether `actual` agrees with the golden CPU result by
// msprobe's per-dtype absolute, relative and error-balance limits. `actual` is not changed (msprobe
// writes 1 over its non-finite values).
bool single_compare(const at::Tensor& actual, const at::Tensor& golden);

}  // namespace msprobe
