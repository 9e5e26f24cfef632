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
#include <mutex>
#include <set>
#include <string>

#include "core/config.h"
#include "core/function_ref.h"
#include "live/session/call_checker.h"

namespace msprobe {

class Session;
class PreheatCounter;

struct BackwardCall;

class FreeBenchmark final : public CallChecker, public std::enable_shared_from_this<FreeBenchmark> {
 public:
  FreeBenchmark(const Config& config, std::weak_ptr<Session> session);
  ~FreeBenchmark();

  // Calls the original and checks it (GIL held, the hook's reentry guard on): returns what the
  // program gets.
  pybind11::object call(const CheckedCall& call) override;

 private:
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
  std::mutex said_mu_;
  std::set<std::string> said_;
};

}  // namespace msprobe
