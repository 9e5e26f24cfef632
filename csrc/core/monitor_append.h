// append_output (issue 55): msprobe 26.2.0's way of going on writing into the run folders of an
// earlier distributed run (core/monitor/utils.py get_target_output_dir). Its two time tags
// ("Dec03_21-34-40", as run folders are named) bound the folders taken; each rank writes into
// the one named after it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace msprobe {

// The order of a time tag "%b%d_%H-%M-%S" (no year, as msprobe reads it), or none when `tag` is
// not one.
std::optional<int64_t> monitor_time_order(const std::string& tag);

// Of the folder names `names` (an output root's), those named "<time>-rank<R>-..." whose time
// lies in [start, end], by rank (a later name for the same rank wins, as in msprobe's dict).
std::map<int, std::string> monitor_append_folders(const std::vector<std::string>& names,
                                                  const std::string& start,
                                                  const std::string& end);

}  // namespace msprobe
