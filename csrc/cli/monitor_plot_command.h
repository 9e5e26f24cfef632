// `msprobe-cpp monitor-plot RUN -o OUT [--op OP]`: a training monitor's curves drawn as SVG
// pictures (core/monitor_plot.h), without TensorBoard.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace msprobe {

// `args` after "monitor-plot". Exit status: 0 pictures written, 2 bad arguments or a run that
// cannot be read.
int monitor_plot_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace msprobe
