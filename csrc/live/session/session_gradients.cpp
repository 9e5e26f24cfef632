// Where the session looks at the parameters' gradients: at the end of a backward pass with a
// backward op anomaly, and before an optimizer writes them (gradient_guard.py); and the stop a
// peer rank made.
#include <filesystem>

#include "live/overflow/model_tensors.h"
#include "live/session/session.h"

namespace msprobe {

std::optional<OverflowEvent> Session::end_of_backward() {
  if (!watching()) return std::nullopt;
  // The gradients are gathered under the lock and looked at (a device sync) after it.
  std::optional<std::vector<std::pair<std::string, at::Tensor>>> gradients;
  bool models_known = false;
  state_.with_lock([&](StepState& s) {
    if (!s.decisions->backward_pass_ended()) return;
    models_known = !s.models.empty();
    gradients = s.models.gradients();
  });
  if (!gradients) return std::nullopt;
  std::vector<std::string> bad = non_finite_gradients(*gradients);
  return state_.with_lock(
      [&](StepState& s) { return s.decisions->backward_verdict(models_known, std::move(bad)); });
}

std::optional<OverflowEvent> Session::judge_optimizer_gradients(const std::string& optimizer,
                                                                std::vector<std::string> bad,
                                                                bool reduced) {
  if (!watching() || bad.empty()) return std::nullopt;
  return state_.with_lock([&](StepState& s) -> std::optional<OverflowEvent> {
    if (!s.decisions) return std::nullopt;
    OverflowDecisions::GradientSource source;
    source.reduced = reduced;
    source.compiled = s.watch && s.watch->compiled_region_ran();
    return s.decisions->optimizer_gradients(std::move(bad), source, [&] {
      OverflowFacts f;
      f.finding.call = "(before " + optimizer + ".step)";
      f.step = s.step;
      f.rank = s.rank < 0 ? 0 : s.rank;
      if (s.decisions->budget_left()) f.dump_dir = dir_of(s);
      return f;
    });
  });
}

std::string Session::stop_for_peer(const PeerOverflow& peer) {
  if (!watching()) return "";
  const std::string dir = state_.with_lock([&](StepState& s) {
    s.peer_stop = peer;
    s.dirty = true;  // written even when this rank collected nothing yet
    return dir_of(s);
  });
  end_step_for_raise();
  std::error_code ec;
  return std::filesystem::exists(dir + "/dump.json", ec) ? dir : "";
}

}  // namespace msprobe
