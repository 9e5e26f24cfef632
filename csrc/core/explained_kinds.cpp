#include "core/explained_kinds.h"

#include <algorithm>
#include <cmath>

namespace msprobe {

namespace {

constexpr const char* kKindNames[3] = {"NaN", "+inf", "-inf"};

void add_value(KindCounts& k, double v) {
  if (std::isnan(v)) {
    k.n[0] = 1;
  } else if (std::isinf(v)) {
    k.n[v > 0 ? 1 : 2] = 1;
  }
}

// "-inf", "NaN and -inf", "NaN, +inf and -inf".
std::string kind_list(const std::array<bool, 3>& kinds) {
  std::vector<const char*> names;
  for (int k = 0; k < 3; ++k) {
    if (kinds[k]) names.push_back(kKindNames[k]);
  }
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
  }
  return s;
}

bool is_softmax(const std::string& call) {
  return torch_api_name(call).find("softmax") != std::string::npos;
}

}  // namespace

KindCounts kinds_of(const Entry& e) {
  KindCounts k;
  if (e.kind != Entry::Kind::Object) return k;
  if (e.nonfinite.known()) {
    k.n = {e.nonfinite.nan, e.nonfinite.posinf, e.nonfinite.neginf};
    return k;
  }
  k.counted = false;
  if (!e.is_tensor()) {
    if (e.value.kind == Scalar::Kind::Float) add_value(k, e.value.number);
    return k;
  }
  // Max/Min are NaN when any element is; a Mean of NaN beside finite extremes is +inf with -inf.
  for (const Scalar* s : {&e.max, &e.min}) {
    if (s->kind == Scalar::Kind::Float) add_value(k, s->number);
  }
  return k;
}

int64_t numel_of(const Entry& e) {
  if (!e.has_shape) return -1;
  int64_t n = 1;
  for (int64_t d : e.shape) n *= d;
  return n;
}

void ExplainedKinds::add_constant(const Entry& e) {
  const KindCounts k = kinds_of(e);
  for (int i = 0; i < 3; ++i) constant_[i] = constant_[i] || k.n[i] > 0;
}

void ExplainedKinds::add_tensor(const Entry& e) {
  const KindCounts k = kinds_of(e);
  for (int i = 0; i < 3; ++i) held_kind_[i] = held_kind_[i] || k.n[i] > 0;
  held_.push_back(Held{numel_of(e), k});
}

bool ExplainedKinds::bound_for(int64_t numel, std::array<int64_t, 3>& bound) const {
  if (numel <= 0) return false;
  bool same_size = false;
  bound = {0, 0, 0};
  for (const Held& h : held_) {
    if (!h.kinds.counted || h.numel <= 0 || numel % h.numel != 0) return false;
    same_size = same_size || h.numel == numel;
    for (int i = 0; i < 3; ++i) bound[i] += h.kinds.n[i] * (numel / h.numel);
  }
  return same_size;
}

std::string ExplainedKinds::unexplained_in(const CallRecord& rec,
                                           const std::vector<size_t>& outputs) const {
  std::array<int64_t, 3> fresh{0, 0, 0};  // kinds no explained input holds
  std::array<int64_t, 3> more{0, 0, 0};   // beyond the explained inputs' count
  std::array<int64_t, 3> bound{0, 0, 0};  // ... which was this
  std::array<bool, 3> uncounted{false, false, false};
  auto check = [&](const Entry& e, auto&& self) -> void {
    if (e.has_items()) {
      for (const Entry& item : e.items) self(item, self);
      return;
    }
    if (!e.is_tensor()) return;  // a non-finite scalar result passes on what it was given
    const KindCounts k = kinds_of(e);
    if (!k.any()) return;
    std::array<int64_t, 3> b;
    const bool counts_apply = k.counted && bound_for(numel_of(e), b);
    for (int i = 0; i < 3; ++i) {
      if (k.n[i] == 0 || constant_[i]) continue;
      if (!held_kind_[i]) {
        fresh[i] += k.n[i];
        uncounted[i] = uncounted[i] || !k.counted;
      } else if (counts_apply && k.n[i] - b[i] > more[i]) {
        more[i] = k.n[i] - b[i];
        bound[i] = b[i];
      }
    }
  };
  for (size_t i : outputs) {
    if (i < rec.outputs.size()) check(rec.outputs[i], check);
  }
  std::string s;
  for (int i = 0; i < 3; ++i) {
    if (fresh[i]) {
      s += (s.empty() ? "" : "; ") + std::string(kKindNames[i]) + ": " +
           (uncounted[i] ? std::string("new") : std::to_string(fresh[i]) + " new");
    } else if (more[i]) {
      s += (s.empty() ? "" : "; ") + std::string(kKindNames[i]) + ": " + std::to_string(more[i]) +
           " more than the explained inputs held (" + std::to_string(bound[i]) + ")";
    }
  }
  if (s.empty()) return s;
  std::array<bool, 3> held_kinds;
  for (int i = 0; i < 3; ++i) held_kinds[i] = held_kind_[i] || constant_[i];
  const std::string held = kind_list(held_kinds);
  s += held.empty() ? "; the explained inputs held no NaN/inf"
                    : "; the explained inputs held " + held +
                          (fresh[0] || fresh[1] || fresh[2] ? " only" : "");
  if (fresh[0] && held_kinds[2] && is_softmax(rec.name)) {
    s += "; a row where every element is -inf (fully masked) gives NaN";
  }
  return s;
}

}  // namespace msprobe
