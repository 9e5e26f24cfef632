#include "core/report.h"

namespace msprobe {

namespace {

void write_calls(JsonWriter& w, const char* key, const std::vector<Finding>& findings,
                 Severity severity) {
  w.key(key);
  w.begin_array();
  for (const Finding& f : findings) {
    if (f.severity == severity) w.value_string(f.call);
  }
  w.end_array();
}

void write_indices(JsonWriter& w, const char* key, const std::vector<size_t>& indices) {
  w.key(key);
  w.begin_array();
  for (size_t i : indices) w.value_int(static_cast<int64_t>(i));
  w.end_array();
}

}  // namespace

void write_detail_fields(JsonWriter& w, const Finding& f) {
  w.key("api_name");
  w.value_string(f.call);
  w.key("rank");
  w.value_string(to_string(f.severity));
  w.key("scene_type");
  w.value_string(scene_name(f.scene));
  write_indices(w, "input_args_anomaly_indices", f.input_indices);
  w.key("input_kwargs_anomaly_keys");
  w.begin_array();
  for (const std::string& k : f.kwarg_keys) w.value_string(k);
  w.end_array();
  write_indices(w, "output_anomaly_indices", f.output_indices);
  if (f.scene == Scene::NumericalMutation) {
    w.key("threshold");
    w.value_float(f.threshold);
    w.key("scale_change_detected");
    w.value_bool(true);
  }
}

namespace {

void write_detail(JsonWriter& w, const Finding& f) {
  w.begin_object();
  write_detail_fields(w, f);
  w.end_object();
}

}  // namespace

void Report::write(JsonWriter& w) const {
  w.begin_object();
  write_calls(w, "critical_apis", findings, Severity::Critical);
  write_calls(w, "high_priority_apis", findings, Severity::High);
  write_calls(w, "medium_priority_apis", findings, Severity::Medium);
  w.key("anomaly_details");
  w.begin_array();
  for (const Finding& f : findings) write_detail(w, f);
  w.end_array();
  if (first_anomaly) {
    w.key("first_anomaly");
    first_anomaly->write(w);
  }
  if (peer_stop) {
    w.key("peer_stop");
    w.begin_object();
    w.key("rank");
    w.value_int(peer_stop->rank);
    w.key("step");
    w.value_int(peer_stop->step);
    w.key("call");
    w.value_string(peer_stop->call);
    w.key("origin");
    if (peer_stop->origin.empty()) {
      w.value_null();
    } else {
      w.value_string(peer_stop->origin);
    }
    w.end_object();
  }
  w.end_object();
}

std::string Report::to_json(int indent) const {
  JsonWriter w(indent);
  write(w);
  return w.take();
}

}  // namespace msprobe
