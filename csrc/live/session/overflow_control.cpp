#include "live/session/overflow_control.h"

#include <limits>

#include "live/capture/call_values.h"
#include "live/crossing/python_crossing.h"
#include "live/overflow/call_arguments.h"
#include "live/stats/nonfinite_facts.h"
#include "live/stats/tensor_stats.h"

namespace msprobe {

namespace {

// One look at an optimizer step, judged with the program's line that called the step.
std::optional<OverflowEvent> judge_look(Session& session, OverflowGuard::OptimizerLook look) {
  return session.guard().judge_optimizer(std::move(look), session.hooks().codes.capture());
}

}  // namespace

std::vector<OverflowEvent> resolve_deferred(Session& session) {
  std::vector<DeferredCall> batch = session.deferred().take();
  std::vector<OverflowEvent> events;
  if (batch.empty()) return events;
  PendingStats* slots = session.hooks().capture.pending();
  if (slots) {
    PythonCrossing::WithoutGil no_gil;  // no thread waits on the GIL for a device
    slots->resolve();                   // the one host sync of the batch
  }
  bool raising = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (slots) {
      for_each_entry(batch[i].call.record, [&](Entry& e) {
        if (e.pending_stats >= 0) slots->fill(e);
      });
    }
    std::optional<OverflowEvent> event = session.add(std::move(batch[i].call), &batch[i].live);
    if (!event) continue;
    if (event->raise && !raising) {
      raising = true;
      raising_call_arguments() = std::move(batch[i].held);  // for its replay (python_side)
      const auto later = static_cast<int64_t>(batch.size() - 1 - i);
      event->facts.raised_calls_later = later;  // the report takes it when the stop is raised
    }
    events.push_back(std::move(*event));
  }
  return events;
}

std::optional<OverflowEvent> judge_loss_scale(Session& session, double after, bool skipped) {
  return session.guard().judge_loss_scale(after, skipped);
}

std::optional<OverflowEvent> judge_optimizer_settings(
    Session& session, const std::string& optimizer,
    std::vector<std::pair<std::string, double>> settings) {
  OverflowGuard::OptimizerLook look;
  look.when = OverflowGuard::OptimizerLook::When::Settings;
  look.optimizer = optimizer;
  look.settings = std::move(settings);
  return judge_look(session, std::move(look));
}

namespace {

// Enough to tell a stop's kind (one weight, every layer's, the state alone) without a page of
// lines on a model whose every parameter went NaN.
constexpr size_t kTensorsNamed = 4;

// `shown`: what the tensor is of the named parameter (".grad" for its gradient).
void look_at(const NamedTensors& bad, OverflowGuard::OptimizerLook& look, const char* shown = "") {
  for (const auto& [name, t] : bad) {
    look.bad.push_back(name);
    if (look.bad_tensors.size() == kTensorsNamed || !t.defined()) continue;
    ArgFacts a;
    a.position = name + shown;
    a.type = "torch.Tensor";
    a.dtype = dtype_name(t.scalar_type());
    a.shape = t.sizes().vec();
    if (t.is_floating_point() && t.layout() == at::kStrided) {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      const NonFiniteCounts counts = nonfinite_facts(t, nan, nan).counts;
      a.counted = counts.known();
      a.nan = counts.nan;
      a.posinf = counts.posinf;
      a.neginf = counts.neginf;
    }
    look.bad_tensors.push_back(std::move(a));
  }
}

}  // namespace

std::optional<OverflowEvent> judge_optimizer_gradients(Session& session,
                                                       const std::string& optimizer,
                                                       const NamedTensors& bad, bool reduced) {
  OverflowGuard::OptimizerLook look;
  look.optimizer = optimizer;
  look_at(bad, look, ".grad");
  look.reduced = reduced;
  return judge_look(session, std::move(look));
}

std::optional<OverflowEvent> judge_optimizer_state(Session& session, const std::string& optimizer,
                                                   const std::string& state,
                                                   const std::string& parameter, size_t more) {
  OverflowGuard::OptimizerLook look;
  look.when = OverflowGuard::OptimizerLook::When::State;
  look.optimizer = optimizer;
  look.state = state;
  look.parameter = parameter;
  look.more = more;
  return judge_look(session, std::move(look));
}

std::optional<OverflowEvent> judge_optimizer_update(Session& session, const std::string& optimizer,
                                                    const NamedTensors& bad) {
  OverflowGuard::OptimizerLook look;
  look.when = OverflowGuard::OptimizerLook::When::Update;
  look.optimizer = optimizer;
  look_at(bad, look);
  return judge_look(session, std::move(look));
}

bool may_leave_optimizer_calls(Session& session, bool runs_closure) {
  const Config& config = session.config();
  return config.watching() && config.level != Level::L0 && !runs_closure &&
         session.hooks().gate.forward();
}

bool leave_optimizer_calls(Session& session) {
  // A flagged step is written whole: its optimizer's calls are recorded, as any other.
  if (session.guard().step_flagged()) return false;
  session.hooks().gate.leave_optimizer_step(true);
  return true;
}

bool end_optimizer_step(Session& session) {
  const bool left = session.hooks().gate.leaving_optimizer_step();
  session.hooks().gate.leave_optimizer_step(false);
  return left;
}

void mark_compiled_outputs(Session& session, pybind11::handle output) {
  if (!session.config().watching() || !session.hooks().gate.forward()) return;
  for (const LiveArg& arg : live_args_of(output)) {
    if (arg.tensor.defined()) session.guard().mark_compiled_output(arg.tensor);
    for (const at::Tensor& t : arg.items) session.guard().mark_compiled_output(t);
  }
}

std::string stop_for_peer(Session& session, const PeerOverflow& peer) {
  PythonCrossing::assert_gil();
  resolve_deferred(session);
  raising_call_arguments().reset();  // kept for a replay that is not made here
  return session.stop_for_peer(peer);
}

}  // namespace msprobe
