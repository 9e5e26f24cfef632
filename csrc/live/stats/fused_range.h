// A fused finite-and-range check for tensors on a device (issue 47): for a batch of tensors, which
// hold NaN/inf and the largest magnitude of each, in two multi-tensor passes per device and dtype
// (at::_foreach_norm with ord 1 and ord inf: CUDA's multi_tensor_apply runs each as a handful of
// kernels for the whole group) and one host copy for the batch, where the per-tensor statistics
// launch four reductions and a stack for every tensor.
//
// Why two norms: the 1-norm is NaN or inf wherever one element is (a sum propagates both, and
// no max can skip a NaN), the inf-norm is the range (headroom: how close to float16's max). A
// 1-norm can overflow on finite data (float32 sums past 3.4e38): such a tensor is looked at once
// more, alone, with isfinite.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace msprobe {

struct FiniteAndRange {
  bool finite = true;
  double max_abs = 0.0;  // NaN where the tensor holds NaN; inf where it holds ±inf
};

// Floating-point strided tensors on any device (the CPU's go through the same ops, for tests);
// one result per tensor, in order. An empty tensor is finite with max_abs 0. Counts one host sync
// per device and dtype group (count_host_sync), plus one per overflowed 1-norm.
std::vector<FiniteAndRange> fused_finite_and_range(const std::vector<at::Tensor>& tensors);

}  // namespace msprobe
