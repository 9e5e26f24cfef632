#include "core/selection.h"

#include <algorithm>

#include "core/record.h"
#include "core/risk_levels.h"

namespace msprobe {

Selection::Selection(const CollectSection& section, Level level, const std::string& section_name,
                     RiskLevel risk, bool names_only, ScopeForm scope_form,
                     const StepTickets* tickets)
    : scope_(section.scope),
      scope_form_(scope_form),
      list_(section.list),
      mode_(section.data_mode),
      risk_(risk),
      risk_left_in_construct_(level == Level::Mix),
      names_only_(names_only),
      step_(tickets),
      list_seen_(new std::atomic<bool>[section.list.size()]) {
  for (size_t i = 0; i < list_.size(); ++i) list_seen_[i] = false;
  // The four flags as written; msprobe treats an absent kind of word as "all of that kind", so
  // ["forward"] is forward inputs and outputs, ["input"] inputs of both directions.
  const bool all = mode_.forward && mode_.backward && mode_.input && mode_.output;
  any_direction_word_ = !all && (mode_.forward || mode_.backward);
  any_side_word_ = !all && (mode_.input || mode_.output);
  for (size_t i = 0; i < scope_.size(); ++i) {
    const bool module = is_module_name(scope_[i]);
    if ((level == Level::L1 && module) || (level == Level::L0 && !module)) {
      throw ConfigError(section_name + ".scope[" + std::to_string(i) + "]: expected " +
                        (level == Level::L1 ? "an API call name at level L1"
                                            : "a module call name (Module....) at level L0") +
                        ", got \"" + scope_[i] + "\"");
    }
  }
}

bool Selection::listed(const std::string& name) const {
  for (size_t i = 0; i < list_.size(); ++i) {
    if (name.find(list_[i]) != std::string::npos) {
      list_seen_[i].store(true, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

Selected Selection::parts() const {
  Selected s;
  s.inputs = !names_only_ && (!any_side_word_ || mode_.input);
  s.outputs = !names_only_ && (!any_side_word_ || mode_.output);
  return s;
}

void Selection::follow_step() {
  if (!step_.stale()) return;  // the hot path: one load, no lock
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) reset_locked();
}

Selected Selection::begin(const std::string& name, const std::string& backward_name,
                          bool inside_listed_module) {
  follow_step();
  Selected s = parts();
  const bool forward_ok = !any_direction_word_ || mode_.forward;
  const bool backward_ok = !any_direction_word_ || mode_.backward;
  bool in_scope = true;
  if (!scope_.empty() && scope_form_ == ScopeForm::Names) {
    in_scope = std::find(scope_.begin(), scope_.end(), name) != scope_.end();
  } else if (!scope_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (window_ == Window::Before && name == scope_[0]) {
      window_ = Window::Inside;
      scope_seen_[0] = true;
    }
    in_scope = window_ == Window::Inside;
  }
  // 26.x's risk_level applies only where neither scope nor list chooses.
  const bool at_risk_level = filters() || kept_at_risk_level(name, risk_);
  const bool chosen =
      at_risk_level && in_scope && (list_.empty() || inside_listed_module || listed(name));
  s.forward = forward_ok && chosen;
  s.backward = backward_ok && (chosen || (!list_.empty() && listed(backward_name)));
  if (!at_risk_level && risk_left_in_construct_) {
    // 26.x names it in construct.json all the same, forward and backward, with nothing else.
    s.forward = forward_ok;
    s.backward = backward_ok;
    s.inputs = s.outputs = false;
    s.construct_only = true;
  }
  if (chosen && is_module_name(name) && filters()) {
    // Module backward records follow the module's forwards (module_backward below).
    const size_t cut = name.rfind(".forward.");
    std::lock_guard<std::mutex> lock(mu_);
    selected_modules_.insert(name.substr(0, cut));
  }
  return s;
}

void Selection::end(const std::string& name) {
  if (scope_.empty() || scope_form_ == ScopeForm::Names) return;
  follow_step();
  std::lock_guard<std::mutex> lock(mu_);
  if (window_ == Window::Inside && name == scope_.back()) {
    window_ = Window::After;
    scope_seen_[1] = true;
  }
}

Selected Selection::module_backward(const std::string& name, const std::string& module_key) {
  follow_step();
  Selected s = parts();
  const bool backward_ok = !any_direction_word_ || mode_.backward;
  if (!backward_ok) return s;
  if (!filters()) {
    s.backward = true;
    return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.backward = selected_modules_.count(module_key) > 0 || (!list_.empty() && listed(name));
  return s;
}

void Selection::new_step() {
  std::lock_guard<std::mutex> lock(mu_);
  reset_locked();
}

void Selection::reset_locked() {
  window_ = Window::Before;
  selected_modules_.clear();
  scope_seen_[0] = scope_seen_[1] = false;
  for (size_t i = 0; i < list_.size(); ++i) list_seen_[i] = false;
}

std::vector<std::string> Selection::unmatched() const {
  std::vector<std::string> out;
  const bool none_yet = step_.stale();  // no call of this step reached the selection
  // The window's end is only looked for once it opened: an unmatched start says it all.
  for (size_t i = 0; scope_form_ == ScopeForm::Window && i < scope_.size() && i < 2; ++i) {
    if (none_yet || !scope_seen_[i]) {
      out.push_back("scope[" + std::to_string(i) + "] \"" + scope_[i] + "\"");
      break;
    }
  }
  for (size_t i = 0; i < list_.size(); ++i) {
    if (none_yet || !list_seen_[i].load(std::memory_order_relaxed)) {
      out.push_back("list[" + std::to_string(i) + "] \"" + list_[i] + "\"");
    }
  }
  return out;
}

}  // namespace msprobe
