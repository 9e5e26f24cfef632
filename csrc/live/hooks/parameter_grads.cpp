#include "live/hooks/parameter_grads.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include "live/capture/held_data.h"
#include "live/capture/is_tensor.h"
#include "live/capture/tensor_entry.h"
#include "live/crossing/python_crossing.h"
#include "live/hooks/submit.h"

namespace msprobe {

namespace {

using torch::autograd::variable_list;

// Calls `f(name, tensor)` for each of `module`'s own parameters, from its `_parameters` (what
// named_parameters(recurse=False) walks), skipping those set to None. GIL required.
template <typename F>
void for_each_parameter(pybind11::handle module, F&& f) {
  const pybind11::object params =
      PythonCrossing::owned(PyObject_GetAttrString(module.ptr(), "_parameters"));
  if (!params) {
    PythonCrossing::drop_error();  // not an nn.Module after all: it has none
    return;
  }
  if (!PyDict_Check(params.ptr())) return;
  for (const auto& [key, value] : pybind11::reinterpret_borrow<pybind11::dict>(params)) {
    const char* name = PyUnicode_Check(key.ptr()) ? PyUnicode_AsUTF8(key.ptr()) : nullptr;
    if (!name) {
      PythonCrossing::drop_error();
      continue;
    }
    if (is_tensor(value)) f(std::string(name), tensor_of(value));
  }
}

// Runs after autograd accumulated the parameter's gradient: records `param.grad` as msprobe 26.x
// does (the accumulated gradient, under the parameter's name in its module's record).
class ParameterGradRecorder : public torch::autograd::FunctionPostHook {
 public:
  ParameterGradRecorder(const std::shared_ptr<Session>& session, std::string module_key,
                        std::string param_name, at::Tensor param)
      : session_(session),
        module_key_(std::move(module_key)),
        param_name_(std::move(param_name)),
        param_(std::move(param)) {}

  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    std::shared_ptr<Session> s = session_.lock();
    if (!s || !s->hooks().gate.backward()) return outputs;
    CallNumbering& numbering = s->hooks().numbering;
    const int64_t k = numbering.parameter_grad_index(module_key_, param_name_);
    StoredCall call;
    call.epoch = numbering.epoch();
    CallRecord& rec = call.record;
    rec.name = module_key_ + ".parameters_grad." + std::to_string(k);
    rec.parameter_grads = true;
    rec.has_inputs = rec.has_outputs = false;
    const EntryOptions& options = s->hooks().capture.options(rec.name);
    const at::Tensor held = held_tensor(param_.grad());
    const at::Tensor& grad = held.defined() ? held : param_.grad();
    Entry entry = grad.defined() ? tensor_entry(grad, options, options.key_stem(rec.name, param_name_))
                                 : Entry::null_entry();
    rec.parameters.emplace_back(param_name_, Entry::list({std::move(entry)}));
    submit(*s, std::move(call), LiveTensors{}, Caller::AutogradEngine);
    return outputs;
  }

  bool records(const Session* s, const std::string& module_key, const std::string& param) const {
    return module_key_ == module_key && param_name_ == param && session_.lock().get() == s;
  }

 private:
  std::weak_ptr<Session> session_;
  std::string module_key_, param_name_;
  // The node holds the parameter already (AccumulateGrad::variable): no cycle is added.
  at::Tensor param_;
};

// A parameter shared by two modules (tied embeddings) is recorded under each of them.
bool already_hooked(const torch::autograd::Node& node, const Session* s,
                    const std::string& module_key, const std::string& param) {
  for (const auto& hook : node.post_hooks()) {
    const auto* mine = dynamic_cast<const ParameterGradRecorder*>(hook.get());
    if (mine && mine->records(s, module_key, param)) return true;
  }
  return false;
}

// on_accumulated_grad's hook: it calls back while its token lives.
class AccumulatedGradCallback : public torch::autograd::FunctionPostHook {
 public:
  AccumulatedGradCallback(std::weak_ptr<void> token, at::Tensor param,
                          std::function<void(const at::Tensor&)> after)
      : token_(std::move(token)), param_(std::move(param)), after_(std::move(after)) {}

  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    if (!token_.expired()) after_(param_);
    return outputs;
  }

 private:
  std::weak_ptr<void> token_;
  at::Tensor param_;  // the node holds it already (AccumulateGrad::variable): no cycle added
  std::function<void(const at::Tensor&)> after_;
};

}  // namespace

std::shared_ptr<void> on_accumulated_grad(const at::Tensor& param,
                                          std::function<void(const at::Tensor&)> after) {
  PythonCrossing::assert_gil();
  auto node = torch::autograd::impl::grad_accumulator(param);
  if (!node) return nullptr;  // a parameter that takes no gradient
  // The token owns the node: the accumulator, and the hook on it, outlive each step's graph.
  std::shared_ptr<void> token = std::make_shared<decltype(node)>(node);
  node->add_post_hook(std::make_unique<AccumulatedGradCallback>(token, param, std::move(after)));
  return token;
}

std::vector<std::pair<std::string, Entry>> parameter_entries(Session& s,
                                                             pybind11::handle module,
                                                             const std::string& call) {
  PythonCrossing::assert_gil();
  std::vector<std::pair<std::string, Entry>> out;
  const EntryOptions& options = s.hooks().capture.options(call);
  const std::string stem = options.stem(call, "parameters");
  for_each_parameter(module, [&](const std::string& name, const at::Tensor& param) {
    out.emplace_back(name, tensor_entry(param, options, options.key_stem(stem, name)));
  });
  return out;
}

void hook_parameter_grads(const std::shared_ptr<Session>& s, pybind11::handle module,
                          const std::string& module_key) {
  PythonCrossing::assert_gil();
  for_each_parameter(module, [&](const std::string& name, const at::Tensor& param) {
    if (!param.requires_grad()) return;
    // The node this forward's graph accumulates into; a new one after each backward freed the
    // last graph, so the hook is added again then.
    auto node = torch::autograd::impl::grad_accumulator(param);  // shared or intrusive, by torch
    if (!node || already_hooked(*node, s.get(), module_key, name)) return;
    node->add_post_hook(std::make_unique<ParameterGradRecorder>(s, module_key, name, param));
  });
}

}  // namespace msprobe
