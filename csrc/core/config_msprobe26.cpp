// The keys msprobe 26.x added (docs/config.md, "msprobe 1.1.x and 26.x configs").
//
// A config speaks 26.x when its `msprobe_generation` says "26", or, without that key, when it has
// anything only 26.x knows: a top-level key of kTopKeys, a section of a 26.x-only task, the task
// structure, the level debug, or a section key of kSectionKeys. msprobe 26.2.0's own shipped
// config.json has `extra_info` and an `acc_check` section, so it speaks 26.x; a 1.1.1 config has
// none of them and keeps 1.1.1's files. `"msprobe_generation": "1.1"` keeps 1.1.1's files whatever
// else the config has.

#include "core/config_msprobe26.h"

#include <algorithm>

namespace msprobe {
namespace {

using nlohmann::json;
using namespace config_checks;

constexpr EnumName<Generation> kGenerations[] = {{"1.1", Generation::V1_1},
                                                 {"26", Generation::V26}};
constexpr EnumName<RiskLevel> kRiskLevels[] = {
    {"CORE", RiskLevel::Core}, {"FOCUS", RiskLevel::Focus}, {"ALL", RiskLevel::All}};
constexpr EnumName<Precision> kPrecisions[] = {{"low", Precision::Low}, {"high", Precision::High}};

// The 26.x tasks this product does not run, each with why.
struct Refused {
  const char* name;
  const char* why;
};
constexpr Refused kRefusedTasks[] = {
    {"acc_check",
     "it runs each API again on a second device and compares (msprobe 26.x's `msprobe acc_check` "
     "command does)"},
    {"nan_check", "it needs an Ascend NPU: torch_npu's operator writes its per-call flags"},
    {"diff_check",
     "it compares each call with a dump of a bench device (bench_path); msprobe_cpp does not "
     "run it yet"},
};
constexpr Refused kRefusedLevels[] = {
    {"L2", "it dumps NPU kernels through torch_npu (an Ascend NPU)"},
};

const std::vector<std::string> kTopKeys = {"msprobe_generation", "extra_info",
                                           "precision",          "risk_level",
                                           "dump_enable",        "custom_op_namespaces",
                                           "load",               "acc_check",
                                           "diff_check",         "nan_check",
                                           "structure"};
const std::vector<std::string> kSectionKeys = {"tensor_list", "slice",     "request_id",
                                               "bench_path",  "diff_nums", "summary_mode"};

bool has_any(const json& object, const std::vector<std::string>& keys) {
  return object.is_object() && std::any_of(keys.begin(), keys.end(), [&](const std::string& k) {
           return object.contains(k);
         });
}

// What only 26.x knows, besides its top-level keys.
bool speaks_26(const json& doc) {
  if (has_any(doc, kTopKeys)) return true;
  const json* task = find(doc, "task");
  if (task && task->is_string()) {
    if (*task == "structure") return true;
    for (const Refused& r : kRefusedTasks) {
      if (*task == r.name) return true;
    }
  }
  const json* level = find(doc, "level");
  if (level && *level == "debug") return true;
  for (const char* name : {"statistics", "tensor"}) {
    const json* section = find(doc, name);
    if (!section || !section->is_object()) continue;
    if (has_any(*section, {"tensor_list", "slice", "request_id", "bench_path", "diff_nums"}))
      return true;
    if (const json* mode = find(*section, "summary_mode"); mode && *mode == "xor") return true;
  }
  return false;
}

[[noreturn]] void refuse(const Loc& at, const json& value, const std::string& why) {
  throw ConfigError(at.str() + ": " + show(value) + " is an msprobe 26.x value that msprobe_cpp " +
                    "refuses: " + why);
}

// A key acted on only at its default here: another value is refused.
void default_only(const json& section, const Loc& at, const char* key, const json& allowed,
                  const char* what) {
  const json* v = find(section, key);
  if (!v || *v == allowed || v->is_null()) return;
  refuse(at.child(key), *v, std::string(what) + "; msprobe_cpp takes only " + show(allowed));
}

}  // namespace

const char* to_string(Generation g) {
  return name_of(kGenerations, g);
}

const std::vector<std::string>& msprobe26_top_keys() {
  return kTopKeys;
}

const std::vector<std::string>& msprobe26_section_keys(bool is_statistics) {
  static const std::vector<std::string> statistics = {"tensor_list", "slice", "request_id"};
  static const std::vector<std::string> tensor = {"slice", "request_id", "bench_path",
                                                  "summary_mode"};
  return is_statistics ? statistics : tensor;
}

void check_msprobe26_section(const json& section, const Loc& at, bool is_statistics) {
  default_only(section, at, "bench_path", json(nullptr), "diff_check's bench dump");
  if (!is_statistics) {
    if (const json* mode = find(section, "summary_mode"); mode && *mode == "md5")
      refuse(at.child("summary_mode"), *mode, "a tensor dump's CRC-32, not supported yet");
  }
}

Msprobe26Section read_msprobe26_section(const json& section, const Loc& at) {
  Msprobe26Section out;
  ErrorList errors;
  errors.attempt([&] {
    const json* v = find(section, "slice");
    if (!v || v->is_null()) return;
    const Loc where = at.child("slice");
    if (!v->is_array()) fail(where, "a list of {\"dim\", \"begin\", \"end\", \"size\"} objects", *v);
    for (size_t i = 0; i < v->size(); ++i) {
      const json& item = (*v)[i];
      const Loc item_at = where.item(i);
      if (!item.is_object()) fail(item_at, "an object of integers (dim, begin, end, size)", item);
      SliceItem s;
      for (const auto& kv : item.items()) {
        const std::optional<int64_t> n = kv.value().is_boolean() ? std::nullopt
                                                                  : as_int64(kv.value());
        if (!n) fail(item_at.child(kv.key()), "an integer", kv.value());
        if ((kv.key() == "dim" || kv.key() == "size") && *n < 0)
          fail(item_at.child(kv.key()), "an integer >= 0", kv.value());
        if (kv.key() == "dim") s.dim = *n;
        if (kv.key() == "begin") s.begin = *n;
        if (kv.key() == "end") s.end = *n;
        if (kv.key() == "size") s.size = *n;
      }
      out.slice.push_back(s);
    }
  });
  errors.attempt([&] {
    const json* v = find(section, "request_id");
    if (!v || v->is_null()) return;
    if (!v->is_string()) fail(at.child("request_id"), "a string", *v);
    out.request_id = v->get<std::string>();
  });
  errors.throw_if_any();
  return out;
}

void warn_msprobe26_name_regex(const std::vector<std::string>& list, const Loc& root,
                               std::vector<std::string>& warnings) {
  static const std::string kOpen = "name-regex(";
  for (const std::string& item : list) {
    if (item.size() <= kOpen.size() || item.compare(0, kOpen.size(), kOpen) != 0 ||
        item.back() != ')')
      continue;
    warnings.push_back(root.str() + ": list entry " + show(json(item)) +
                       " selects no call: msprobe 26.2.0's PyTorch dump matches it as the text "
                       "it is (its expression is for MindSpore's kernel dump), and so does "
                       "msprobe_cpp; list a part of the call names instead (\"linear\")");
  }
}

void read_msprobe26_keys(const json& doc, const Loc& root, Msprobe26Keys& keys,
                         Generation& generation, ErrorList& errors) {
  errors.attempt([&] {
    if (const json* v = find(doc, "extra_info"))
      keys.extra_info = parse_bool(*v, root.child("extra_info"));
  });
  errors.attempt([&] {
    if (const json* v = find(doc, "precision"))
      keys.precision = parse_enum(*v, root.child("precision"), kPrecisions);
  });
  errors.attempt([&] {
    // 26.2.0 reads an explicit null or "" as ALL.
    const json* v = find(doc, "risk_level");
    if (v && (v->is_null() || *v == "")) {
      keys.risk_level = RiskLevel::All;
    } else if (v) {
      keys.risk_level = parse_enum(*v, root.child("risk_level"), kRiskLevels);
    }
  });
  errors.attempt([&] {
    // Present, true or false, it makes 26.x re-read config.json while the run goes on.
    if (const json* v = find(doc, "dump_enable"); v && !v->is_null())
      keys.dump_enable = parse_bool(*v, root.child("dump_enable"));
  });
  errors.attempt([&] {
    default_only(doc, root, "custom_op_namespaces", json::array({"_C_ascend"}),
                 "torch.ops namespaces of NPU operators");
  });
  errors.attempt([&] {
    if (const json* v = find(doc, "load"); v && !v->is_null())
      refuse(root.child("load"), *v, "loading module inputs from a dump is not supported yet");
  });
  for (const char* other : {"acc_check", "diff_check", "nan_check"}) {
    // The sections of tasks not chosen are read by nobody (26.x does not read them either).
    errors.attempt([&] {
      if (const json* v = find(doc, other); v && !v->is_object())
        fail(root.child(other), "an object", *v);
    });
  }
  generation = speaks_26(doc) ? Generation::V26 : Generation::V1_1;
  errors.attempt([&] {
    if (const json* v = find(doc, "msprobe_generation"))
      generation = parse_enum(*v, root.child("msprobe_generation"), kGenerations);
  });
}

void refuse_msprobe26_task(const json& value, const Loc& at) {
  for (const Refused& r : kRefusedTasks) {
    if (value == r.name) refuse(at, value, std::string("task ") + r.name + ": " + r.why);
  }
}

void refuse_msprobe26_level(const json& value, const Loc& at) {
  for (const Refused& r : kRefusedLevels) {
    if (value == r.name) refuse(at, value, std::string("level ") + r.name + ": " + r.why);
  }
}

}  // namespace msprobe
