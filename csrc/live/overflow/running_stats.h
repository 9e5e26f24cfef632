// Helpers of the running-statistics check shared with the rest of the overflow watch.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>

#include "core/explained_kinds.h"

namespace msprobe {

// "layer1.0.bn1.running_var" -> "running_var of layer1.0.bn1".
std::string running_stat_text(const std::string& name);
// "NaN", "+inf", "NaN and -inf".
std::string kinds_text(const KindCounts& k);
// How many NaN, +inf, -inf a tensor holds now, or nothing when it is all finite.
std::optional<KindCounts> nonfinite_now(const at::Tensor& t);
// Where the running statistics are among a norm call's arguments (running_mean, running_var):
// F.batch_norm / F.instance_norm (1, 2), torch.batch_norm / torch.instance_norm (3, 4).
std::optional<std::pair<size_t, size_t>> running_stat_positions(const std::string& call);

}  // namespace msprobe
