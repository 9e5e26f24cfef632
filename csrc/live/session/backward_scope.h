// The module backward calls in progress, for construct.json. msprobe 1.1.1 on PyTorch 2.x opens a
// module's backward in its full backward pre-hook (the gradients of its outputs are there) and
// closes it in its full backward hook, on one stack: a backward record made in between has the
// innermost open one as its parent, and a module's backward is numbered when it opens. On 1.x
// (no backward pre-hooks) its API backward records have no parent, and a module's backward
// record has the backward of the module call that enclosed its forward.
#pragma once

#include <torch/version.h>

#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/step_ticket.h"

namespace msprobe {

inline constexpr bool kBackwardScopes = TORCH_VERSION_MAJOR >= 2;

// Autograd threads open and close, without the GIL: a lock of its own, taken last. One stack per
// thread (msprobe has one for the process): backward passes that run at once in several threads
// do not become each other's parents.
class BackwardScope {
 public:
  // With `tickets`, the calls the last step left open are let go at the first use in the next
  // (msprobe resets its stack at step()).
  explicit BackwardScope(const StepTickets* tickets = nullptr) : step_(tickets) {}

  // Opens `name`; returns the innermost call open before it (its parent).
  std::optional<std::string> open(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    if (step_.moved_on()) open_.clear();
    std::vector<std::string>& open = open_[std::this_thread::get_id()];
    std::optional<std::string> parent;
    if (!open.empty()) parent = open.back();
    open.push_back(name);
    return parent;
  }
  // Closes the innermost open call, as msprobe's hook pops its stack (whichever module it is).
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    if (step_.moved_on()) open_.clear();
    auto it = open_.find(std::this_thread::get_id());
    if (it == open_.end()) return;
    it->second.pop_back();
    if (it->second.empty()) open_.erase(it);
  }
  std::optional<std::string> innermost() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (step_.stale()) return std::nullopt;  // what is open is the last step's
    auto it = open_.find(std::this_thread::get_id());
    if (it == open_.end()) return std::nullopt;
    return it->second.back();
  }

 private:
  mutable std::mutex mu_;
  StepLocal step_;
  std::unordered_map<std::thread::id, std::vector<std::string>> open_;  // none empty
};

}  // namespace msprobe
