// The training monitor's format "tensorboard" (issue 55): each written value as a TensorBoard
// scalar, as msprobe's SummaryWriterWithAD adds it (26.2.0's data_writers.py; 1.1.1's default
// format): tag "<msprobe's internal tag>_<op>" ("0:fc1.input:0/rank0/actv_norm",
// "0:fc1.weight/rank0/acc_grad_max"), global step the monitor's step. shape and dtype are not
// numbers and are left out; a missing value is nan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/monitor_config.h"
#include "core/monitor_row_table.h"

namespace msprobe {

// msprobe's name of a family's rows in its internal tags: "acc_grad" for grad_unreduced,
// "post_grad" for grad_reduced, the file's prefix for the others.
std::string monitor_family_tag(const std::string& prefix);

// The records of one written table: `tag_tail` is "/rank<R>/<family tag>".
std::string monitor_event_records(const MonitorRowTable& table, const std::string& tag_tail,
                                  const std::vector<MonitorOp>& ops, int64_t step,
                                  double wall_time);

}  // namespace msprobe
