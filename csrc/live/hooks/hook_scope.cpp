#include "live/hooks/hook_scope.h"

#include <algorithm>
#include <utility>

#include "live/crossing/python_crossing.h"
#include "live/crossing/python_frames.h"

namespace msprobe {

std::vector<OpenModuleCall>& open_module_calls() {
  thread_local std::vector<OpenModuleCall> calls;
  return calls;
}

namespace {

void drop_last(std::vector<OpenModuleCall>& calls) {
  PythonCrossing::let_go(calls.back().frame);
  calls.pop_back();
}

// Whether `frame` is on this thread's Python stack. An open call's frame is a few frames up from
// any call made inside it, so the walk is short unless the call is stale.
bool on_stack(pybind11::handle frame) {
  pybind11::object f = PythonCrossing::shared(PythonFrames::current());
  bool found = false;
  for (int depth = 0; f && !found && depth < 256; ++depth) {
    found = f.is(frame);
    f = PythonFrames::caller(f);
  }
  return found;
}

// Calls whose forward raised are still open, their frames gone: they end here.
void prune_stale() {
  auto& calls = open_module_calls();
  while (!calls.empty() && calls.back().frame && !on_stack(calls.back().frame)) drop_last(calls);
}

}  // namespace

void push_module_call(OpenModuleCall&& call) {
  PythonCrossing::assert_gil();
  call.frame = PythonCrossing::keep(PythonFrames::current());
  open_module_calls().push_back(std::move(call));
}

bool pop_module_call(pybind11::handle module, OpenModuleCall& out) {
  PythonCrossing::assert_gil();
  auto& calls = open_module_calls();
  auto mine = std::find_if(calls.rbegin(), calls.rend(),
                           [&](const OpenModuleCall& c) { return c.module.is(module); });
  if (mine == calls.rend()) return false;
  while (calls.size() > static_cast<size_t>(calls.rend() - mine)) drop_last(calls);
  out = std::move(calls.back());
  PythonCrossing::let_go(std::exchange(out.frame, pybind11::handle()));
  calls.pop_back();
  return true;
}

void clear_module_calls() {
  PythonCrossing::assert_gil();
  auto& calls = open_module_calls();
  while (!calls.empty()) drop_last(calls);
  leave_region();
}

namespace {
std::optional<std::string>& current_region() {
  thread_local std::optional<std::string> region;
  return region;
}
}  // namespace

void enter_region(std::string name) { current_region() = std::move(name); }

void leave_region() { current_region().reset(); }

std::optional<std::string> construct_parent() {
  std::optional<std::string> module = enclosing_module();
  return module ? module : current_region();
}

std::optional<std::string> enclosing_module() {
  prune_stale();
  const auto& calls = open_module_calls();
  if (calls.empty()) return std::nullopt;
  return calls.back().name;
}

std::vector<StartedModelCall>& started_model_calls() {
  thread_local std::vector<StartedModelCall> calls;
  return calls;
}

std::optional<std::string> started_model_forward() {
  const auto& models = started_model_calls();
  if (models.empty() || enclosing_module()) return std::nullopt;
  return "the started model " + models.back().class_name + "'s own forward";
}

std::vector<LiveTensors::Enclosing> enclosing_calls() {
  std::vector<LiveTensors::Enclosing> out;
  prune_stale();
  const auto& calls = open_module_calls();
  out.reserve(calls.size() + 1);
  for (auto c = calls.rbegin(); c != calls.rend(); ++c) {
    LiveTensors::Enclosing level;
    level.maker = c->name;
    for (const std::vector<LiveArg>* side : {&c->live.inputs, &c->live.kwargs}) {
      for (const LiveArg& a : *side) {
        if (a.tensor.defined()) level.args.push_back(a.tensor);
        level.args.insert(level.args.end(), a.items.begin(), a.items.end());
      }
    }
    out.push_back(std::move(level));
  }
  const auto& models = started_model_calls();
  if (!models.empty()) {
    out.push_back({"the started model " + models.back().class_name, models.back().args, true});
  }
  return out;
}

bool inside_listed_module() {
  prune_stale();
  for (const OpenModuleCall& c : open_module_calls()) {
    if (c.listed) return true;
  }
  return false;
}

}  // namespace msprobe
