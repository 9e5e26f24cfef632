// What counts as an anomaly in one argument entry (docs/overflow-detection.md).
#pragma once

#include "core/record.h"

namespace msprobe {

// An object entry whose Max, Min, Mean or Norm is NaN or ±inf; outside compat mode also a
// non-tensor entry whose `value` is a non-finite number. Lists are not looked into; unwritten
// memory is never an anomaly.
inline bool is_anomalous(const Entry& e, bool compat) {
  if (e.kind != Entry::Kind::Object || e.marks.unwritten) return false;
  if (e.max.non_finite() || e.min.non_finite() || e.mean.non_finite() || e.norm.non_finite()) {
    return true;
  }
  return !compat && e.value.non_finite();
}

// Anomalous, or a list or mapping holding an anomalous entry at any depth.
inline bool holds_anomaly(const Entry& e, bool compat) {
  if (e.has_items()) {
    for (const Entry& item : e.items) {
      if (holds_anomaly(item, compat)) return true;
    }
    return false;
  }
  return is_anomalous(e, compat);
}

}  // namespace msprobe
