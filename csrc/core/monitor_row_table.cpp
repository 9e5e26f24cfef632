#include "core/monitor_row_table.h"

#include <algorithm>

namespace msprobe {
namespace {

MonitorRow row_of(const std::string& tag, int64_t step, std::vector<MonitorValue> values) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t colon = tag.find(':'); colon != std::string::npos; colon = tag.find(':', from)) {
    parts.push_back(tag.substr(from, colon - from));
    from = colon + 1;
  }
  parts.push_back(tag.substr(from));
  MonitorRow r;
  r.vpp_stage = parts[0];
  if (parts.size() > 1) r.name = parts[1];
  r.after.assign(parts.begin() + std::min<size_t>(2, parts.size()), parts.end());
  r.step = step;
  r.values = std::move(values);
  return r;
}

}  // namespace

void MonitorRowTable::put(const std::string& tag, std::vector<MonitorValue> values) {
  auto [it, added] = values_.insert_or_assign(tag, std::move(values));
  if (added) tags_.push_back(tag);
}

std::vector<MonitorRow> MonitorRowTable::rows(int64_t step) const {
  std::vector<MonitorRow> out;
  out.reserve(tags_.size());
  for (const std::string& tag : tags_) out.push_back(row_of(tag, step, values_.at(tag)));
  return out;
}

void MonitorRowTable::clear() {
  tags_.clear();
  values_.clear();
}

}  // namespace msprobe
