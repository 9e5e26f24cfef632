// Headroom of 16-bit tensors (issue 23): how close each call site's float16/bfloat16 outputs come
// to the largest finite value of their dtype, over the last steps. A site that crosses the
// threshold is said once for the run; a stop at a site with a history shows it, with its trend.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace msprobe {

// The largest finite value of "torch.float16" / "torch.bfloat16"; 0 for any other dtype.
double largest_16bit(const std::string& dtype);

// A call site: the call's name without its counter ("Tensor.__mul__") and its Python stack (an
// interned stack's identity: the same line gives the same stack).
struct HeadroomSite {
  std::string family;
  uintptr_t stack = 0;
  bool operator<(const HeadroomSite& o) const {
    return stack != o.stack ? stack < o.stack : family < o.family;
  }
};

struct HeadroomPoint {
  int64_t step = 0;
  double fraction = 0.0;  // largest magnitude / the dtype's largest finite value
  double magnitude = 0.0;
};

// What a site has seen: its dtype and, for each of the last steps, the largest magnitude.
struct HeadroomRecord {
  std::string dtype;
  std::vector<HeadroomPoint> history;  // oldest first, at most kHeadroomSteps
  bool warned = false;
  std::string where;  // how the warning named it: "Tensor.__mul__ in blocks.2.attn (train.py:50)"
};

inline constexpr size_t kHeadroomSteps = 8;

// The history of a site before `step` and what it says: "grew steadily: x1.50 a step, a doubling
// every 1.7 steps (divergence, learning rate or loss scale)" or "jumped in one step from 9% of
// float16's range (what changed in that step: its data, the learning rate, or the update
// before it)".
struct HeadroomTrend {
  std::string dtype;
  std::vector<HeadroomPoint> history;
  std::string text;
  // It jumped from below 1/16 of the range: four doublings or more in one step. The inputs
  // changed since the last step (a learning-rate spike's weights), not the op's dtype.
  bool jumped = false;
};

class Headroom {
 public:
  // `threshold`: the fraction of the range that warns (0: off).
  explicit Headroom(double threshold) : threshold_(threshold) {}
  bool on() const { return threshold_ > 0; }

  // A 16-bit output's largest finite magnitude at `site` in `step`. Returns the site's record the
  // first time it reaches the threshold (to be said once), else nothing.
  std::optional<HeadroomRecord> observe(const HeadroomSite& site, int64_t step,
                                        const std::string& dtype, double magnitude);
  // A stop at `site` in `step`: the steps before it, and their trend; none without a history.
  std::optional<HeadroomTrend> trend(const HeadroomSite& site, int64_t step) const;
  // Every site said so far, with its record.
  std::vector<std::pair<HeadroomSite, HeadroomRecord>> warned() const;
  void set_where(const HeadroomSite& site, std::string where) {
    sites_[site].where = std::move(where);
  }

 private:
  double threshold_;
  std::map<HeadroomSite, HeadroomRecord> sites_;
};

// "Tensor.__mul__ in blocks.2.attn (train.py:50)": `module` and `source` may be empty.
std::string headroom_where(const std::string& family, const std::string& module,
                           const std::string& source);
// "msprobe_cpp: step 7: <where> reached 52% of float16's range (max 34102); it overflows if it
// doubles".
std::string headroom_warning(const std::string& where, const HeadroomRecord& r);

}  // namespace msprobe
