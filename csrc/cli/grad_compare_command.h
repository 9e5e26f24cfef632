// `msprobe-cpp grad-compare RUN1 RUN2 -o OUT [--threshold X]`: two grad_probe runs compared
// (core/grad_compare.h), and the first step where their gradients part ways said.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace msprobe {

// The summary similarity below which two runs are said to part ways.
inline constexpr double kDefaultGradThreshold = 0.9;

// `args` after "grad-compare". Exit status: 0 every rank stays at or above the threshold, 1 a
// rank falls below it, 2 bad arguments or runs that cannot be compared.
int grad_compare_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace msprobe
