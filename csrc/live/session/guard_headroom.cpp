// Headroom warnings of 16-bit call sites (issue 23): the sites, and what the session says of them.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>

#include "live/crossing/python_crossing.h"
#include "live/log/tool_log.h"
#include "live/session/overflow_guard.h"

namespace msprobe {

HeadroomSite headroom_site(const std::string& name, const StackPtr& stack) {
  const std::optional<CallName> parsed = parse_call_name(name);  // "Tensor.__mul__"
  return HeadroomSite{parsed ? parsed->family() : name, reinterpret_cast<uintptr_t>(stack.get())};
}

namespace {

// Whether an argument carries exactly `largest` in magnitude: a fill value of finfo.min or
// finfo.max (masked_fill(mask, torch.finfo(torch.float16).min)), or a tensor that holds one.
bool carries_extreme(const Entry& e, double largest) {
  auto extreme = [largest](const Scalar& v) {
    return v.is_number() && std::fabs(v.as_double()) == largest;
  };
  if (e.is_tensor()) return extreme(e.max) || extreme(e.min);
  if (e.has_items()) {
    return std::any_of(e.items.begin(), e.items.end(),
                       [&](const Entry& x) { return carries_extreme(x, largest); });
  }
  return extreme(e.value);
}

// An output at exactly the dtype's largest magnitude, where an argument carries that value: a
// deliberate fill constant (a mask) and what it reaches, not a value that grew there.
bool fill_constant(const CallRecord& rec, double magnitude, double largest) {
  if (magnitude != largest) return false;
  auto carries = [largest](const Entry& e) { return carries_extreme(e, largest); };
  return std::any_of(rec.inputs.begin(), rec.inputs.end(), carries) ||
         std::any_of(rec.kwargs.begin(), rec.kwargs.end(),
                     [&](const auto& kv) { return carries(kv.second); });
}

}  // namespace

std::optional<HeadroomRecord> observe_headroom(Headroom& headroom, const StoredCall& call,
                                               int64_t step) {
  // API forward calls: a module's output is its last call's, and backward values are the loss
  // scaler's to keep in range.
  const std::string& name = call.record.name;
  if (is_module_name(name) || is_backward_name(name)) return std::nullopt;
  std::optional<HeadroomRecord> crossed;
  std::optional<HeadroomSite> site;
  for (const Entry& e : call.record.outputs) {
    // Memory nothing has written yet (an all-gather buffer's views) holds no value of the
    // program's: its leftover bytes say nothing of the call's range.
    if (!e.is_tensor() || e.marks.unwritten || largest_16bit(e.dtype) <= 0 || !e.max.is_number() ||
        !e.min.is_number())
      continue;
    const double magnitude = std::max(std::fabs(e.max.as_double()), std::fabs(e.min.as_double()));
    if (fill_constant(call.record, magnitude, largest_16bit(e.dtype))) continue;
    if (!site) site = headroom_site(name, call.stack);
    if (auto r = headroom.observe(*site, step, e.dtype, magnitude)) crossed = std::move(r);
  }
  return crossed;
}

void OverflowGuard::say_headroom(const HeadroomRecord& r, const StoredCall& call, int rank) {
  const HeadroomSite site = headroom_site(call.record.name, call.stack);
  std::string source;
  if (call.stack) {
    PythonCrossing::Gil gil;
    source = codes_.first_frame_outside(*call.stack, {paths_.package_dir, paths_.library_dir})
                 .value_or("");
  }
  // "Module.blocks.2.attn.CausalSelfAttention.forward.0" -> "blocks.2.attn"
  const std::string module = call.parent ? module_qualname(*call.parent) : "";
  const std::string where = headroom_where(site.family, module, source);
  state_.with_lock([&](GuardState& g) { g.headroom->set_where(site, where); });
  say(LogLevel::Warning, rank_label(rank) + headroom_warning(where, r));
}

std::vector<HeadroomRecord> OverflowGuard::headroom_warned() const {
  return state_.with_lock([](const GuardState& g) {
    std::vector<HeadroomRecord> out;
    if (g.headroom) {
      for (auto& [site, r] : g.headroom->warned()) out.push_back(std::move(r));
    }
    return out;
  });
}

}  // namespace msprobe
