#include "core/dump_writer.h"

namespace msprobe {

void write_scalar(JsonWriter& w, const Scalar& s) {
  switch (s.kind) {
    case Scalar::Kind::Absent:
    case Scalar::Kind::Null:
      w.value_null();
      return;
    case Scalar::Kind::Bool:
      w.value_bool(s.boolean);
      return;
    case Scalar::Kind::Int:
      w.value_int(s.integer);
      return;
    case Scalar::Kind::Float:
      w.value_float(s.number);
      return;
    case Scalar::Kind::String:
      w.value_string(s.text());
      return;
    case Scalar::Kind::Raw:
      w.value_raw(s.text());
      return;
    case Scalar::Kind::List:
      w.begin_array();
      for (const Scalar& item : s.items()) write_scalar(w, item);
      w.end_array();
      return;
  }
}

static void write_stat(JsonWriter& w, const char* key, const Scalar& s) {
  w.key(key);
  write_scalar(w, s);
}

void write_entry(JsonWriter& w, const Entry& e) {
  switch (e.kind) {
    case Entry::Kind::Null:
    case Entry::Kind::Other:
      w.value_null();
      return;
    case Entry::Kind::List:
      w.begin_array();
      for (const Entry& item : e.items) write_entry(w, item);
      w.end_array();
      return;
    case Entry::Kind::Map:
      w.begin_object();
      for (size_t i = 0; i < e.items.size(); ++i) {
        w.key(i < e.keys.size() ? e.keys[i] : std::to_string(i));
        write_entry(w, e.items[i]);
      }
      w.end_object();
      return;
    case Entry::Kind::Object:
      break;
  }
  w.begin_object();
  w.key("type");
  w.value_string(e.type);
  if (e.is_tensor()) {
    w.key("dtype");
    w.value_string(e.dtype);
    w.key("shape");
    w.begin_array();
    for (int64_t d : e.shape) w.value_int(d);
    w.end_array();
    if (e.value.present()) {
      // 26.x's xor checksum, under its key "md5", in place of the statistics.
      write_stat(w, "md5", e.value);
    } else {
      write_stat(w, "Max", e.max);
      write_stat(w, "Min", e.min);
      write_stat(w, "Mean", e.mean);
      write_stat(w, "Norm", e.norm);
    }
    write_stat(w, "requires_grad", e.requires_grad);
    if (e.finite.max.present()) write_stat(w, "Max_except_inf_nan", e.finite.max);
    if (e.finite.min.present()) write_stat(w, "Min_except_inf_nan", e.finite.min);
    if (!e.md5.empty()) {
      w.key("md5");
      w.value_string(e.md5);
    }
    if (!e.data_name.empty()) {
      w.key("data_name");
      w.value_string(e.data_name);
    }
  } else if (e.type == "torch.ProcessGroup") {
    // {"type", "group_ranks", "group_id"}, as msprobe writes a process group.
    if (e.value.present()) write_stat(w, "group_ranks", e.value);
    if (!e.group_id.empty()) {
      w.key("group_id");
      w.value_string(e.group_id);
    }
  } else if (e.value.present()) {
    // msprobe's one exception to {"type", "value"}.
    write_stat(w, e.type == "torch.memory_format" ? "format" : "value", e.value);
  }
  w.end_object();
}

static void write_list(JsonWriter& w, const char* key, const std::vector<Entry>& entries) {
  w.key(key);
  w.begin_array();
  for (const Entry& e : entries) write_entry(w, e);
  w.end_array();
}

// A JSON object of named entries: input_kwargs, parameters.
static void write_members(JsonWriter& w, const std::vector<std::pair<std::string, Entry>>& members) {
  w.begin_object();
  for (const auto& kv : members) {
    w.key(kv.first);
    write_entry(w, kv.second);
  }
  w.end_object();
}

void write_record(JsonWriter& w, const CallRecord& rec) {
  w.key(rec.name);
  if (rec.parameter_grads) {
    write_members(w, rec.parameters);
    return;
  }
  if (rec.bare_value) {
    write_entry(w, rec.outputs.empty() ? Entry::null_entry() : rec.outputs.front());
    return;
  }
  w.begin_object();
  if (rec.has_inputs) write_list(w, inputs_key(rec.uses_input_key), rec.inputs);
  if (rec.has_inputs && !rec.uses_input_key) {
    w.key("input_kwargs");
    write_members(w, rec.kwargs);
  }
  if (rec.has_outputs) write_list(w, "output", rec.outputs);
  if (rec.has_parameters) {
    w.key("parameters");
    write_members(w, rec.parameters);
  }
  w.end_object();
}

std::string dump_json(const DumpHeader& head, const std::vector<const CallRecord*>& records,
                      std::string buffer) {
  JsonWriter w(1, std::move(buffer));
  w.begin_object();
  w.key("task");
  w.value_string(head.task);
  w.key("level");
  w.value_string(head.level);
  if (head.framework) {
    w.key("framework");
    w.value_string(*head.framework);
  }
  w.key("dump_data_dir");
  if (head.dump_data_dir) {
    w.value_string(*head.dump_data_dir);
  } else {
    w.value_null();
  }
  w.key("data");
  w.begin_object();
  for (const CallRecord* r : records) write_record(w, *r);
  w.end_object();
  w.end_object();
  return w.take();
}

}  // namespace msprobe
