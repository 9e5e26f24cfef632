#include "live/monitor/hook_rows.h"

#include <cmath>
#include <utility>

#include "live/monitor/monitor_stats.h"

namespace msprobe {

MonitorHookRows::MonitorHookRows(MonitorMetrics metrics, bool per_micro_step, bool structure)
    : metrics_(std::move(metrics)),
      per_micro_step_(per_micro_step),
      structure_(structure ? std::make_unique<MonitorStructure>() : nullptr) {}

void MonitorHookRows::forward_kind(const std::string& name, ObservedOutputKind kind) {
  if (structure_) structure_->forward_kind(name, std::move(kind));
}

int64_t MonitorHookRows::next_micro(std::unordered_map<std::string, int64_t>& counters,
                                    const std::string& name) {
  int64_t& counter = counters[name];
  const int64_t micro = counter;
  counter = (counter + 1) % micro_steps_;
  return micro;
}

void MonitorHookRows::put_slots(MonitorRowTable& table, const std::string& family,
                                const std::string& name, const char* side, int64_t micro,
                                const ObservedTensors& slots) {
  // Built in key_, whose capacity stays: a step makes no string of its own for its rows' tags.
  std::string& key = key_;
  for (size_t i = 0; i < slots.size(); ++i) {
    key.assign(name).append(".").append(side);
    if (slots.size() > 1) key.append("_").append(std::to_string(i));
    key.append(":").append(std::to_string(micro));
    const size_t tag_size = key.size();
    key.append("/").append(family);
    register_call_locked(key);
    key.resize(tag_size);
    // msprobe fills a slot without a tensor with nan, shape and dtype too.
    table.put(key, slots[i].defined()
                       ? values_locked(slots[i])
                       : std::vector<MonitorValue>(metrics_.ops.size(),
                                                   MonitorValue::of_real(std::nan(""))));
  }
}

std::vector<MonitorValue> MonitorHookRows::values_locked(const at::Tensor& t) {
  if (!TensorVersion::trackable(t) || !reuse_reads_.load(std::memory_order_relaxed)) {
    return monitor_values(t, metrics_);
  }
  if (const std::vector<MonitorValue>* known = read_.find(t)) return *known;
  std::vector<MonitorValue> values = monitor_values(t, metrics_);
  read_.put(t, values);
  return values;
}

std::vector<MonitorValue> MonitorHookRows::values(const at::Tensor& t) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_locked(t);
}

void MonitorHookRows::forward(const std::string& name, ObservedTensors inputs,
                              ObservedTensors outputs) {
  if (structure_) return structure_->forward(name, inputs, outputs);  // no statistics then
  std::lock_guard<std::mutex> lock(mu_);
  auto [table, added] = actv_.try_emplace(name);
  if (added) module_order_.push_back(name);
  const int64_t micro = next_micro(forward_micro_, name);
  put_slots(table->second, "actv", name, "input", micro, inputs);
  put_slots(table->second, "actv", name, "output", micro, outputs);
}

void MonitorHookRows::backward(const std::string& name, ObservedTensors input_grads,
                               ObservedTensors output_grads) {
  if (structure_) return structure_->backward(name, input_grads, output_grads);
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t micro = next_micro(backward_micro_, name);
  put_slots(actv_grad_, "actv_grad", name, "input", micro, input_grads);
  put_slots(actv_grad_, "actv_grad", name, "output", micro, output_grads);
}

void MonitorHookRows::accumulated(const std::string& tag, const at::Tensor& grad) {
  if (!observing()) return;
  std::vector<MonitorValue> values = monitor_values(grad, metrics_);
  std::lock_guard<std::mutex> lock(mu_);
  if (TensorVersion::trackable(grad) && reuse_reads_.load(std::memory_order_relaxed)) {
    read_.put(grad, values);
  }
  std::string& key = key_;
  key.assign(tag);
  // monitor_mbs_grad: each micro step's gradient as it stands then, "<tag>:<micro>".
  if (per_micro_step_) key.append(":").append(std::to_string(next_micro(accumulated_micro_, tag)));
  const size_t tag_size = key.size();
  register_call_locked(key.append("/acc_grad"));
  key.resize(tag_size);
  unreduced_.put(key, std::move(values));
}

void MonitorHookRows::called_from(const std::string& name, const std::string& source) {
  std::lock_guard<std::mutex> lock(mu_);
  sources_[name] = source;
}

void MonitorHookRows::register_call_locked(const std::string& key) {
  call_ids_.try_emplace(key).first->second = {next_call_id_++, calls_round_};  // a key known: no copy
}

void MonitorHookRows::register_call(const std::string& name, const char* family) {
  std::lock_guard<std::mutex> lock(mu_);
  register_call_locked(key_.assign(name).append(family));
}

int64_t MonitorHookRows::call_id(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = call_ids_.find(key);
  return it == call_ids_.end() || it->second.round != calls_round_ ? -1 : it->second.id;
}

void MonitorHookRows::reset_calls() {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_round_;
  next_call_id_ = 0;
}

std::string MonitorHookRows::source_of(const std::string& module) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sources_.find(module);
  return it == sources_.end() ? "" : it->second;
}

}  // namespace msprobe
