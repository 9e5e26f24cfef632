#include "core/headroom.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace msprobe {

namespace {

std::string short_dtype(const std::string& dtype) {
  return dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", fraction * 100.0);
  return buf;
}

}  // namespace

double largest_16bit(const std::string& dtype) {
  // Asked of every output of every hooked call: "torch.float32" and the like end in "32" or "64".
  if (dtype.size() < 2 || dtype.back() != '6') return 0.0;
  if (dtype == "torch.float16") return 65504.0;
  if (dtype == "torch.bfloat16") return 3.3895313892515355e38;
  return 0.0;
}

std::optional<HeadroomRecord> Headroom::observe(const HeadroomSite& site, int64_t step,
                                                const std::string& dtype, double magnitude) {
  const double largest = largest_16bit(dtype);
  if (!on() || largest <= 0 || !std::isfinite(magnitude)) return std::nullopt;
  HeadroomRecord& r = sites_[site];
  r.dtype = dtype;
  const double fraction = magnitude / largest;
  if (!r.history.empty() && r.history.back().step == step) {
    HeadroomPoint& p = r.history.back();
    if (magnitude > p.magnitude) p = {step, fraction, magnitude};
  } else {
    if (r.history.size() == kHeadroomSteps) r.history.erase(r.history.begin());
    r.history.push_back({step, fraction, magnitude});
  }
  if (r.warned || fraction < threshold_) return std::nullopt;
  r.warned = true;
  return r;
}

std::optional<HeadroomTrend> Headroom::trend(const HeadroomSite& site, int64_t step) const {
  auto it = sites_.find(site);
  if (it == sites_.end()) return std::nullopt;
  HeadroomTrend t;
  t.dtype = it->second.dtype;
  for (const HeadroomPoint& p : it->second.history) {
    if (p.step < step && p.magnitude > 0) t.history.push_back(p);
  }
  if (t.history.empty()) return std::nullopt;
  const std::string range = short_dtype(t.dtype) + "'s range";
  const HeadroomPoint& last = t.history.back();
  bool steady = t.history.size() >= 2;
  for (size_t i = 1; i < t.history.size() && steady; ++i) {
    steady = t.history[i].magnitude >= 1.05 * t.history[i - 1].magnitude;
  }
  char buf[256];
  if (steady) {
    const HeadroomPoint& first = t.history.front();
    const double steps = static_cast<double>(last.step - first.step);
    const double per_step = std::pow(last.magnitude / first.magnitude, 1.0 / std::max(steps, 1.0));
    // Had it kept growing so, the overflow was due about now; far sooner means a jump on top.
    const double needed = std::log(1.0 / last.fraction) / std::log(per_step);
    if (needed <= 2.0 * static_cast<double>(step - last.step) + 1.0) {
      std::snprintf(buf, sizeof buf,
                    "grew steadily: x%.2f a step, a doubling every %.1f steps, to %s of %s "
                    "(divergence, learning rate or loss scale)",
                    per_step, std::log(2.0) / std::log(per_step), percent(last.fraction).c_str(),
                    range.c_str());
      t.text = buf;
      return t;
    }
  }
  std::snprintf(buf, sizeof buf,
                "jumped in one step: from %s of %s at step %lld to overflow (what changed in "
                "that step: its data, the learning rate, or the update before it)",
                percent(last.fraction).c_str(), range.c_str(), static_cast<long long>(last.step));
  t.text = buf;
  t.jumped = last.fraction < 1.0 / 16;
  return t;
}

std::vector<std::pair<HeadroomSite, HeadroomRecord>> Headroom::warned() const {
  std::vector<std::pair<HeadroomSite, HeadroomRecord>> out;
  for (const auto& [site, r] : sites_) {
    if (r.warned) out.emplace_back(site, r);
  }
  return out;
}

std::string headroom_where(const std::string& family, const std::string& module,
                           const std::string& source) {
  std::string where = family;
  if (!module.empty()) where += " in " + module;
  if (!source.empty()) where += " (" + source + ")";
  return where;
}

std::string headroom_warning(const std::string& where, const HeadroomRecord& r) {
  const HeadroomPoint& p = r.history.back();
  char buf[96];
  std::snprintf(buf, sizeof buf, " (max %.6g); it overflows if it ", p.magnitude);
  const double doublings = std::log2(1.0 / p.fraction);
  const std::string grows =
      doublings <= 1.0
          ? "doubles"
          : "grows " + std::to_string(static_cast<int>(std::floor(1.0 / p.fraction))) + "x";
  return "msprobe_cpp: step " + std::to_string(p.step) + ": " + where + " reached " +
         percent(p.fraction) + " of " + short_dtype(r.dtype) + "'s range" + buf + grows;
}

}  // namespace msprobe
