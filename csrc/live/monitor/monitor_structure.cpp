#include "live/monitor/monitor_structure.h"

#include "live/monitor/monitor_stats.h"

namespace msprobe {
namespace {

// f"size={tuple(x.shape)}, dtype={x.dtype}": "size=(16, 4), dtype=torch.float32", "(8,)", "()".
std::string tensor_text(const at::Tensor& x) {
  std::string shape = "(";
  for (int64_t d = 0; d < x.dim(); ++d) shape += (d ? ", " : "") + std::to_string(x.size(d));
  shape += x.dim() == 1 ? ",)" : ")";
  return "size=" + shape + ", dtype=" + monitor_dtype_text(x);
}

// get_param_struct of a sequence: its config, then each element by position.
nlohmann::ordered_json sequence(const std::string& kind, const ObservedTensors& items,
                                const std::vector<std::string>& types) {
  nlohmann::ordered_json out = {{"config", kind + "[" + std::to_string(items.size()) + "]"}};
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string type = i < types.size() && !types[i].empty() ? types[i]
                                                                   : "<class 'NoneType'>";
    out[std::to_string(i)] = items[i].defined() ? tensor_text(items[i]) : type;
  }
  return out;
}

}  // namespace

void MonitorStructure::forward_kind(const std::string& name, ObservedOutputKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  kinds_[name] = std::move(kind);
}

void MonitorStructure::forward(const std::string& name, const ObservedTensors& inputs,
                               const ObservedTensors& outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::ordered_json& module = modules_[name];
  if (module.contains("input")) return;  // msprobe keeps the first call's
  const ObservedOutputKind& kind = kinds_[name];
  module["input"] = sequence("list", inputs, {});
  if (kind.kind == "tensor" && outputs.size() == 1) {
    module["output"] = {{"config", "tensor"}, {"tensor", tensor_text(outputs[0])}};
  } else if (kind.kind == "tuple" || kind.kind == "list") {
    module["output"] = sequence(kind.kind, outputs, kind.element_types);
  } else {
    module["output"] = {{"config", kind.kind}};
  }
}

void MonitorStructure::backward(const std::string& name, const ObservedTensors& input_grads,
                                const ObservedTensors& output_grads) {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::ordered_json& module = modules_[name];
  if (module.contains("input_grad")) return;
  module["input_grad"] = sequence("tuple", input_grads, {});
  module["output_grad"] = sequence("tuple", output_grads, {});
}

std::string MonitorStructure::take_file() {
  std::lock_guard<std::mutex> lock(mu_);
  if (taken_ || modules_.empty()) return "";
  taken_ = true;
  return modules_.dump(2, ' ', true);
}

}  // namespace msprobe
