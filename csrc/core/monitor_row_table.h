// The training monitor's rows of one family between writes, as msprobe keeps them in a dict:
// by tag, in the order each tag first came, a tag put again keeping its place with the new
// values. A tag is msprobe's, before its "/rank<R>/<family>" part: "0:fc1.weight" (model chunk,
// parameter) or "0:fc1.input:0" (model chunk, module slot, micro step).
//
// Made for a table filled again every step with the same tags and handed, a copy a step, to the
// write thread: the tags are kept once, across clear(), and shared by the copies, so that a step
// that puts the tags it put before allocates nothing for them, and a copy is three allocations
// whatever its rows (issue 55: the monitor's allocations on the training thread, freed on the
// write thread, were a third of its cost on a tiny model).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
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
  const std::string& tag(size_t i) const;  // of the i-th row, in rows()'s order
  bool empty() const { return order_.empty(); }
  size_t size() const { return order_.size(); }
  // No rows; the tags stay known.
  void clear();

 private:
  // Every tag ever put, each at the place it first came. Only appended to; shared by the copies,
  // and copied before an append while another copy holds it (the write thread reads its own).
  struct Tags {
    std::deque<std::string> names;  // appended to only: the index's views stay valid
    std::unordered_map<std::string_view, uint32_t> index;
  };
  struct Slot {
    uint32_t offset = 0, width = 0;  // the values in cells_
    uint64_t round = 0;              // the clear() it was last put after
  };
  uint32_t place_of(const std::string& tag);

  std::shared_ptr<Tags> tags_ = std::make_shared<Tags>();
  std::vector<Slot> slots_;     // by place in tags_
  std::vector<uint32_t> order_;  // this round's places, in the order they first came
  std::vector<MonitorValue> cells_;
  uint64_t round_ = 1;
};

}  // namespace msprobe
