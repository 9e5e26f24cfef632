// A line chart as an SVG file: grad-compare's picture of each parameter's similarity over the
// steps (msprobe draws PNGs with matplotlib, which this product does not depend on).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace msprobe {

// y is drawn from 0 to 1 (a similarity), or to the largest value when that is larger. The points
// whose x is in `marked` get a red ring (a monitor's alert at that step).
std::string line_chart_svg(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<int64_t>& xs,
                           const std::vector<double>& ys, const std::vector<int64_t>& marked = {});

}  // namespace msprobe
