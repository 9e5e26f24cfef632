// cc_distribution's aggregate (issue 55): one statistic of a collective over the calls of a
// written step, as msprobe 26.2.0 folds them (wrap_distributed.py op_aggregate, on the 0-d
// tensors each call gave): the min of minima and max of maxima as Python's min() and max() pick
// them, the sum of norms and of nan counts, the mean of means (float64) and of zero shares
// (float32, as msprobe's tensors are), nan for the others.
#pragma once

#include <vector>

#include "core/monitor_config.h"
#include "core/monitor_csv.h"

namespace msprobe {

MonitorValue monitor_aggregate(MonitorOp op, const std::vector<MonitorValue>& values);

}  // namespace msprobe
