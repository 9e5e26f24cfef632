// Source lines of calls, read from the stack.json that msprobe (and msprobe_cpp) write beside
// dump.json: for each call, the first frame that is the user's code rather than torch's or the
// dump tool's.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>

namespace msprobe {

// "train.py:12: y = torch.exp(x)" from one stack.json frame,
// "File train.py, line 12, in forward, \n y = torch.exp(x)"; empty if the frame is torch's,
// msprobe's or msprobe_cpp's, or not in that form.
std::string user_source_of_frame(const std::string& frame);

// The source line of each call of `calls` that stack.json at `path` holds (streamed: only those
// calls are kept). A missing or unreadable stack.json gives none: sources are a help, not the
// verdict.
std::unordered_map<std::string, std::string> read_stack_sources(
    const std::string& path, const std::unordered_set<std::string>& calls);

}  // namespace msprobe
