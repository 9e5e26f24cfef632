// The training monitor's rows of one family between writes, as msprobe keeps them in a dict:
// by tag, in the order each tag first came, a tag put again keeping its place with the new
// values. A tag is msprobe's, before its "/rank<R>/<family>" part: "0:fc1.weight" (model chunk,
// parameter) or "0:fc1.input:0" (model chunk, module slot, micro step).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/monitor_csv.h"

namespace msprobe {

class MonitorRowTable {
 public:
  void put(const std::string& tag, std::vector<MonitorValue> values);
  // The rows for step `step`: the tag split on ':' as msprobe splits it (chunk, name, then the
  // columns after the step).
  std::vector<MonitorRow> rows(int64_t step) const;
  const std::vector<std::string>& tags() const { return tags_; }  // in rows()'s order
  bool empty() const { return tags_.empty(); }
  size_t size() const { return tags_.size(); }
  void clear();

 private:
  std::vector<std::string> tags_;
  // Hashed: a step puts a row per tag, and the tags of one model share long prefixes
  // ("0:model.layers.0.self_attn..."), which an ordered map compares again at every level.
  std::unordered_map<std::string, std::vector<MonitorValue>> values_;
};

}  // namespace msprobe
