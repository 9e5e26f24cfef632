// Which calls a session collects and which parts of them (docs/config.md: scope, list, data_mode),
// decided from the call's name before any statistics are computed.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/config.h"
#include "core/step_ticket.h"

namespace msprobe {

// What to record of one call.
struct Selected {
  bool forward = false;   // the forward record
  bool backward = false;  // the backward record, when the call has one
  bool inputs = true;     // input_args / input_kwargs (backward: `input`)
  bool outputs = true;    // output
  // Left out by 26.x's risk_level at level mix: named in construct.json only (no entries).
  bool construct_only = false;
  bool any() const { return forward || backward; }
};

// What a `scope` list means: the dump's is a window, from the call its first item names to the
// one its last names; free_benchmark's is the exact names of the calls checked.
enum class ScopeForm { Window, Names };

// Thread-safe: its own mutex guards the scope window and the selected modules.
class Selection {
 public:
  // Throws ConfigError when the scope's names do not fit the level (API names at L1, module
  // names at L0; either at mix). `source` names the config in messages.
  // `risk`: with neither scope nor list, the API calls kept (core/risk_levels.h). `names_only`:
  // no call's values are recorded (26.x's task structure).
  Selection(const CollectSection& section, Level level, const std::string& section_name,
            RiskLevel risk = RiskLevel::All, bool names_only = false,
            ScopeForm scope_form = ScopeForm::Window, const StepTickets* tickets = nullptr);

  // A forward call (API or module) begins. `backward_name` is the name its backward record
  // would have. `inside_listed_module` is true at mix while a module named in `list` runs.
  Selected begin(const std::string& name, const std::string& backward_name,
                 bool inside_listed_module);
  // The forward call `name` ended: closes the scope window after its last call.
  void end(const std::string& name);

  // A module backward record, which has no forward decision to inherit: `module_key` is
  // "Module.<qualname>.<Class>", selected when a forward of that module was.
  Selected module_backward(const std::string& name, const std::string& module_key);

  // `name` matches a `list` item: the item is the full name or a part of it ("relu").
  bool listed(const std::string& name) const;
  bool filters() const { return !scope_.empty() || !list_.empty(); }
  bool has_list() const { return !list_.empty(); }

  // A new step: the window closed again, nothing matched yet. With `tickets`, done by itself at
  // the first call of each step.
  void new_step();

  // The scope and list entries that matched no call in the step, each as
  // `scope[1] "name"` / `list[0] "name"`, in config order.
  std::vector<std::string> unmatched() const;

 private:
  enum class Window { Before, Inside, After };

  Selected parts() const;  // the sides data_mode keeps, no call chosen yet
  void follow_step();      // clears the last step's window and matches once the step moved on
  void reset_locked();     // mu_ held

  std::vector<std::string> scope_;
  ScopeForm scope_form_;
  std::vector<std::string> list_;
  DataMode mode_;
  RiskLevel risk_;
  bool risk_left_in_construct_;  // level mix: construct.json names what risk_level leaves out
  bool names_only_;
  bool any_direction_word_;
  bool any_side_word_;

  std::mutex mu_;  // the window and the selected modules change as calls run
  StepLocal step_;
  Window window_ = Window::Before;
  std::unordered_set<std::string> selected_modules_;
  bool scope_seen_[2] = {false, false};
  // One flag per list item; set from any thread without the lock.
  std::unique_ptr<std::atomic<bool>[]> list_seen_;
};

}  // namespace msprobe
