// Statistics of a tensor on any device (CUDA, an Ascend NPU, or a CPU tensor sent this way for
// testing), through ATen reductions on the tensor's own device: Max and Min in its own dtype, sum
// and norm accumulated in float32 (float64 for float64 tensors on cpu and cuda) inside the
// reductions. No float64 operation runs on other devices (NPUs lack most of them), and the extra
// device memory a call takes is bounded by a chunk, not by the tensor's size.
#pragma once

#include <ATen/ATen.h>

namespace msprobe {

struct DeviceSummary {
  double max, min, mean, norm;
};

// Launches the reductions and returns their four results (max, min, sum, norm) as one small tensor
// on `t`'s device; nothing waits for the device.
at::Tensor device_reductions(const at::Tensor& t);

// The statistics from those four results once they are on the host. When the accumulation
// overflowed on finite data (float32 sums of values near 3.4e38), `t` is reduced once more,
// scaled by its largest magnitude, so a finite tensor never gets an infinite Mean or Norm.
DeviceSummary finish_device_summary(const at::Tensor& t, const double reductions[4]);

// Both, with the one host copy between them.
DeviceSummary device_summary(const at::Tensor& t);

// Times the statistics code waited for a device (a device-to-host copy of results), in this
// process; tests read it through msprobe_cpp._C._host_syncs(). CPU tensors on the generic path
// count too, as the syncs they stand in for.
void count_host_sync();
int64_t host_syncs();

// Tests only: route CPU tensors through the reductions used on other devices (CUDA, NPU), so a
// machine without them still exercises that code.
void force_generic_statistics(bool on);
bool generic_statistics_forced();

// Max and min of `t` in its own dtype, as device scalars.
std::pair<at::Tensor, at::Tensor> max_and_min(const at::Tensor& t);

}  // namespace msprobe
