#include "core/monitor_append.h"

#include <strings.h>

#include <cstdio>
#include <regex>

namespace msprobe {

std::optional<int64_t> monitor_time_order(const std::string& tag) {
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char month[4] = {};
  int day = 0, hour = 0, minute = 0, second = 0, used = 0;
  if (std::sscanf(tag.c_str(), "%3[A-Za-z]%2d_%2d-%2d-%2d%n", month, &day, &hour, &minute,
                  &second, &used) != 5 ||
      static_cast<size_t>(used) != tag.size()) {
    return std::nullopt;
  }
  for (int m = 0; m < 12; ++m) {
    if (strcasecmp(month, kMonths[m]) != 0) continue;
    if (day < 1 || day > 31 || hour > 23 || minute > 59 || second > 61) return std::nullopt;
    return ((((m * 31LL + day) * 24 + hour) * 60 + minute) * 60) + second;
  }
  return std::nullopt;
}

std::map<int, std::string> monitor_append_folders(const std::vector<std::string>& names,
                                                  const std::string& start,
                                                  const std::string& end) {
  static const std::regex kRunFolder(R"(([\w-]{0,20})-rank(\d{1,5})-)");
  const auto first = monitor_time_order(start), last = monitor_time_order(end);
  std::map<int, std::string> out;
  for (const std::string& name : names) {
    std::smatch m;
    if (!std::regex_search(name, m, kRunFolder, std::regex_constants::match_continuous)) continue;
    const auto time = monitor_time_order(m[1].str());
    if (!time || (first && *time < *first) || (last && *time > *last)) continue;
    out[std::stoi(m[2].str())] = name;
  }
  return out;
}

}  // namespace msprobe
