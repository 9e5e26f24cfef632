#include "core/monitor_row_table.h"

#include <algorithm>
#include <atomic>
#include <utility>

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

uint32_t MonitorRowTable::place_of(const std::string& tag) {
  const auto known = tags_->index.find(std::string_view(tag));
  if (known != tags_->index.end()) return known->second;
  if (tags_.use_count() > 1) {
    // A copy (on the write thread) reads these: append to a copy of our own. A count that the
    // copy's owner is lowering as we read it only makes this copy unneeded, never unsafe.
    auto own = std::make_shared<Tags>();
    own->names = tags_->names;
    for (size_t place = 0; place < own->names.size(); ++place) {
      own->index.emplace(own->names[place], static_cast<uint32_t>(place));
    }
    tags_ = std::move(own);
  } else {
    // The last copy's reads of these tags, on the write thread, happen before our append: its
    // release of the count, seen by our relaxed read of it, then acquired here.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  const auto place = static_cast<uint32_t>(tags_->names.size());
  tags_->names.push_back(tag);
  tags_->index.emplace(tags_->names.back(), place);
  slots_.emplace_back();
  return place;
}

void MonitorRowTable::put(const std::string& tag, std::vector<MonitorValue> values) {
  const uint32_t place = place_of(tag);
  Slot& slot = slots_[place];
  if (slot.round != round_) {
    slot.round = round_;
    order_.push_back(place);
  }
  if (slot.width != values.size()) {  // its first values, or another count of them
    slot.offset = static_cast<uint32_t>(cells_.size());
    slot.width = static_cast<uint32_t>(values.size());
    cells_.resize(cells_.size() + values.size());
  }
  std::move(values.begin(), values.end(), cells_.begin() + slot.offset);
}

std::vector<MonitorRow> MonitorRowTable::rows(int64_t step) const {
  std::vector<MonitorRow> out;
  out.reserve(order_.size());
  for (const uint32_t place : order_) {
    const Slot& slot = slots_[place];
    const auto first = cells_.begin() + slot.offset;
    out.push_back(row_of(tags_->names[place], step,
                         std::vector<MonitorValue>(first, first + slot.width)));
  }
  return out;
}

const std::string& MonitorRowTable::tag(size_t i) const { return tags_->names[order_.at(i)]; }

void MonitorRowTable::clear() {
  order_.clear();
  ++round_;
}

}  // namespace msprobe
