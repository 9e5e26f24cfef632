// The training monitor's statistics of one tensor (issue 55): msprobe 26.2.0's ops
// (pytorch/monitor/module_metric.py over features.py; docs/monitor-reference.md §4) computed as
// it computes them, so that the values, and the CSVs made of them (core/monitor_csv.h), are its
// own: min and max in the tensor's dtype, norm and mean in float64, zeros as the share of
// |x| < eps, nans counted, id for a 0-d tensor alone, shape and dtype as Python prints them. An
// op that fails on the tensor (min of an empty one) gives nan, as msprobe's.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "core/monitor_config.h"
#include "core/monitor_csv.h"

namespace msprobe {

// What a row's values are: the ops, `eps` (the zeros threshold), and how norm and mean are summed.
// exact_sums: torch's own float64 reductions, msprobe's bits to the last one, where something
// prints them unrounded (the alert rules' messages in anomaly.json, a CSV of more than 12
// digits); else a dense CPU tensor's float64 sums from one read (cpu_wide_sums: up to 9x faster
// on a large tensor), which may differ from torch's in the last bits (1e-13 tested).
struct MonitorMetrics {
  std::vector<MonitorOp> ops;
  double eps = 1e-8;
  bool exact_sums = true;
};
MonitorMetrics monitor_metrics(const MonitorConfig& config);

std::vector<MonitorValue> monitor_values(const at::Tensor& x, const MonitorMetrics& metrics);

// str() of the tensor's dtype: "torch.float32".
std::string monitor_dtype_text(const at::Tensor& x);

}  // namespace msprobe
