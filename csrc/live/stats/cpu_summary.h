// A CPU tensor's statistics in one pass over its memory, without dispatching an op: the
// vectorized scans (scan_vectors.h) behind tensor_stats_entry for strided CPU tensors.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <utility>

namespace msprobe {

struct Summary {
  double max, min, mean, norm;
};

// Max, Min, Mean and Norm of a strided CPU tensor of a floating or integer dtype; false for
// anything else (other devices, layouts and dtypes, or the tests' forced device path).
bool cpu_fast_path(const at::Tensor& t, Summary& out);

// Max and Min (NaN left out) and the sums of the values and of their squares, each element widened
// to float64 before it is added (the training monitor's norm and mean: msprobe's float64
// reductions, to its CSVs' digits), of a dense CPU tensor of a floating dtype, in one read.
// A NaN makes sumsq NaN, and nothing else can. Nothing for other devices, layouts or dtypes.
struct WideSums {
  double max, min, sum, sumsq;
};
std::optional<WideSums> cpu_wide_sums(const at::Tensor& t);

// A CPU bool tensor's any() and all() read in place: masks are built on every step, and the two
// reductions, a stack and a copy cost more than the mask. Nothing for other devices or layouts.
std::optional<std::pair<bool, bool>> cpu_any_all(const at::Tensor& t);

}  // namespace msprobe
