// Task free_benchmark (msprobe 1.1.1's FreeBenchmarkCheck): each selected API call is run a second
// time on perturbed inputs, and the two outputs compared; an inconsistent one is a row of
// <dump_path>/free_benchmark.csv. The second run never changes the training: it makes no autograd
// graph, runs on copies of what an in-place call writes, leaves the random number generators as
// they were, and its result is dropped (handler_type check). handler_type fix puts the upcast or
// CPU result in place of the original's, on purpose.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>

#include "core/config.h"
#include "core/function_ref.h"
#include "live/session/call_checker.h"
#include "live/session/task_processor.h"

namespace msprobe {

class Session;
class PreheatCounter;

struct BackwardCall;

// The task's processor (registered in task_registry.cpp): its checker is itself. Which calls it
// checks is the session's Selection (free_benchmark's scope and list: exact names, parts of
// names), and its lines said once are the session's.
class FreeBenchmark final : public TaskProcessor,
                            public CallChecker,
                            public std::enable_shared_from_this<FreeBenchmark> {
 public:
  explicit FreeBenchmark(const TaskParts& parts);
  ~FreeBenchmark();

  CallChecker* call_checker() override { return this; }

  // Calls the original and checks it (GIL held, the hook's reentry guard on): returns what the
  // program gets.
  pybind11::object call(const CheckedCall& call) override;

 private:
  // The session's selection checks the call (scope: exact names; list: parts of names).
  bool selects(const std::string& name) const;
  // Why the call is not run again, or "".
  std::string skip_reason_of(const CheckedCall& call) const;
  // fuzz_stage backward: keeps what the check needs and hooks the output's gradient.
  pybind11::object call_backward(const CheckedCall& call);
  // On the autograd thread, without the GIL: the output's gradient arrived.
  void check_gradients(const BackwardCall& call, const at::Tensor& grad);
  pybind11::object rerun(const CheckedCall& call, const pybind11::tuple& args, PertMode mode,
                         size_t fuzzed, bool& ran);
  // The call run on the CPU in float32 (preheat's samples).
  using CpuRun = std::function<pybind11::object()>;
  void compare(const CheckedCall& call, const pybind11::object& original,
               const pybind11::object& perturbed, const CpuRun& cpu_run);
  pybind11::object fix(const CheckedCall& call, const pybind11::object& original,
                       const pybind11::object& perturbed);
  void say_once(const std::string& key, const std::string& text, bool warning = false);
  void write_row(const UnequalRow& row);

  const FreeBenchmarkSection section_;
  const std::string csv_path_;
  std::weak_ptr<Session> session_;
  std::unique_ptr<PreheatCounter> preheat_;
};

}  // namespace msprobe
