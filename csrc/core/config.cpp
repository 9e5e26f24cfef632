// config.json reader and validator (docs/config.md).
//
// Messages: every rejection is one line, `<where>: expected <what is allowed>, got <value as
// JSON>`, where <where> is `config.json: overflow_check.rules[2]` for a file value and
// `PrecisionDebugger(step=...)[1]` for a keyword argument. A key that is absent reads `got
// nothing`.
//
// Accepted but ignored, so that a user's msprobe 1.1.x config.json works unchanged (these are the
// keys msprobe's own config.json and pt_config.py carry):
//   top level       is_deterministic, enable_dataloader (booleans),
//                   framework ("pytorch" only: this is the PyTorch side of msprobe),
//                   seed (integer),
//                   run_ut (the section of the one msprobe task this product does not run; any
//                   content, since the task is refused anyway).
//   tensor          file_format ("npy" or "bin"),
//                   online_run_ut (false only: true would silently skip a requested feature),
//                   nfs_path, host, port, tls_path, online_run_ut_recompute (any content: they only
//                   matter with online_run_ut).
//   overflow_check  check_mode (a string; msprobe's shipped config.json carries "all").
//
// data_mode flags are exactly the words listed (["all"] sets all four). msprobe dumps a
// (direction, side) pair when either word is listed, so ["forward"] means forward inputs and
// outputs, ["input"] means inputs in both directions.

#include "core/config.h"
#include "core/config_checks.h"
#include "core/config_msprobe26.h"
#include "core/task_sections.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

namespace msprobe {
namespace {

using nlohmann::json;
using namespace config_checks;
namespace fs = std::filesystem;


constexpr EnumName<Task> kTasks[] = {{"statistics", Task::Statistics},
                                     {"tensor", Task::Tensor},
                                     {"overflow_check", Task::OverflowCheck},
                                     {"grad_probe", Task::GradProbe},
                                     {"free_benchmark", Task::FreeBenchmark},
                                     {"structure", Task::Structure}};
constexpr EnumName<Level> kLevels[] = {
    {"L0", Level::L0}, {"L1", Level::L1}, {"mix", Level::Mix}, {"debug", Level::Debug}};
constexpr EnumName<SummaryMode> kSummaryModes[] = {{"statistics", SummaryMode::Statistics},
                                                   {"md5", SummaryMode::Md5},
                                                   {"xor", SummaryMode::Xor}};

// msprobe values this product deliberately lacks get their own message, so a user does not take
// them for typos.
[[noreturn]] void fail_unsupported(const Loc& at, const json& value, const std::string& what,
                                   const std::string& supported) {
  throw ConfigError(at.str() + ": " + show(value) + " is an msprobe " + what +
                    " that msprobe_cpp does not support; supported: " + supported);
}

bool is_one_of(const json& value, const std::vector<std::string>& words) {
  return value.is_string() &&
         std::find(words.begin(), words.end(), value.get_ref<const std::string&>()) != words.end();
}

Task parse_task(const json& value, const Loc& at) {
  if (is_one_of(value, {"run_ut"})) {
    fail_unsupported(at, value, "task", enum_names(kTasks));
  }
  refuse_msprobe26_task(value, at);
  return parse_enum(value, at, kTasks);
}

Level parse_level(const json& value, const Loc& at) {
  refuse_msprobe26_level(value, at);  // L2 and debug, each with why
  return parse_enum(value, at, kLevels);
}

// Plain decimal digits; 18 of them at most so the value always fits in int64_t.
std::optional<int64_t> parse_digits(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(text);
}

std::optional<std::pair<int64_t, int64_t>> parse_range_text(const std::string& text) {
  size_t dash = text.find('-');
  if (dash == std::string::npos) return std::nullopt;
  auto first = parse_digits(text.substr(0, dash));
  auto last = parse_digits(text.substr(dash + 1));
  if (!first || !last || *first > *last) return std::nullopt;
  return std::make_pair(*first, *last);
}

std::pair<int64_t, int64_t> parse_range_item(const json& value, const Loc& at) {
  if (auto number = as_int64(value)) {
    if (*number >= 0) return {*number, *number};
  } else if (value.is_string()) {
    if (auto range = parse_range_text(value.get<std::string>())) return *range;
  }
  fail(at, "an integer >= 0 or a range \"a-b\" with a <= b", value);
}

RangeList parse_ranges(const json& value, const Loc& at) {
  if (!value.is_array()) fail(at, "a list of integers >= 0 and \"a-b\" ranges", value);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t i = 0; i < value.size(); ++i)
    ranges.push_back(parse_range_item(value[i], at.item(i)));
  return RangeList(std::move(ranges));
}

std::vector<std::string> parse_scope(const json& value, const Loc& at) {
  if (!value.is_array() || (value.size() != 0 && value.size() != 2)) {
    fail(at, "[] or two call names", value);
  }
  return parse_string_list(value, at);
}

DataMode parse_data_mode(const json& value, const Loc& at) {
  const std::string expected = "[\"all\"] or a non-empty list of forward, backward, input, output";
  if (!value.is_array() || value.empty()) fail(at, expected, value);
  if (value.size() == 1 && value[0] == "all") return DataMode{};

  DataMode mode{false, false, false, false};
  std::set<std::string> seen;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& word = value[i];
    if (!is_one_of(word, {"all", "forward", "backward", "input", "output"})) {
      fail(at.item(i), "one of all, forward, backward, input, output", word);
    }
    if (word == "all") fail(at, expected, value);  // "all" mixed with other words
    if (!seen.insert(word.get<std::string>()).second)
      fail(at.item(i), "a mode not already listed", word);
    mode.forward |= word == "forward";
    mode.backward |= word == "backward";
    mode.input |= word == "input";
    mode.output |= word == "output";
  }
  return mode;
}

// msprobe's online run_ut keys: harmless when the feature is off, refused when it is asked for.
void check_tensor_extras(const json& section, const Loc& at) {
  if (const json* format = find(section, "file_format")) {
    if (!is_one_of(*format, {"npy", "bin"}))
      fail(at.child("file_format"), "one of npy, bin", *format);
  }
  if (const json* online = find(section, "online_run_ut")) {
    Loc where = at.child("online_run_ut");
    if (online->is_boolean() && online->get<bool>()) {
      throw ConfigError(where.str() +
                        ": online run_ut is an msprobe feature that msprobe_cpp does not support; "
                        "expected false, got true");
    }
    parse_bool(*online, where);
  }
}

CollectSection parse_collect(const json& section, const Loc& at, bool is_statistics) {
  require_object(section, at);
  std::vector<std::string> known = {"scope", "list", "data_mode"};
  std::vector<std::string> ignored;
  if (is_statistics) {
    known.push_back("summary_mode");
  } else {
    ignored = {"file_format", "online_run_ut",          "nfs_path", "host", "port",
               "tls_path",    "online_run_ut_recompute"};
  }
  for (const std::string& key : msprobe26_section_keys(is_statistics)) {
    if (std::find(known.begin(), known.end(), key) == known.end()) known.push_back(key);
  }
  ErrorList errors;
  errors.attempt([&] { check_keys(section, at, known, ignored); });
  errors.attempt([&] { check_msprobe26_section(section, at, is_statistics); });

  CollectSection out;
  errors.attempt([&] {
    if (const json* v = find(section, "scope")) out.scope = parse_scope(*v, at.child("scope"));
  });
  errors.attempt([&] {
    if (const json* v = find(section, "list")) out.list = parse_string_list(*v, at.child("list"));
  });
  errors.attempt([&] {
    if (const json* v = find(section, "data_mode")) {
      out.data_mode = parse_data_mode(*v, at.child("data_mode"));
    }
  });
  errors.attempt([&] {
    if (const json* v = find(section, "summary_mode")) {
      out.summary_mode = parse_enum(*v, at.child("summary_mode"), kSummaryModes);
    }
  });
  if (is_statistics) {
    errors.attempt([&] {
      if (const json* v = find(section, "tensor_list"); v && !v->is_null())
        out.tensor_list = parse_string_list(*v, at.child("tensor_list"));
    });
  }
  errors.attempt([&] { out.msprobe26 = read_msprobe26_section(section, at); });
  if (!is_statistics) errors.attempt([&] { check_tensor_extras(section, at); });
  errors.throw_if_any();
  return out;
}

std::string parse_dump_path(const json& value, const Loc& at) {
  std::string path = parse_nonempty_string(value, at);
  // The OS stops a path at its first NUL: "d\0/../x" would write to "d".
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20) {
      fail(at, "a path without NUL or control characters", value);
    }
  }
  return path;
}

void check_ignored_top_level(const json& doc, const Loc& root) {
  for (const char* key : {"is_deterministic", "enable_dataloader"}) {
    if (const json* v = find(doc, key)) parse_bool(*v, root.child(key));
  }
  if (const json* v = find(doc, "framework")) {
    if (*v != "pytorch") {
      fail(root.child("framework"), "\"pytorch\" (msprobe_cpp is the PyTorch side of msprobe)", *v);
    }
  }
  if (const json* v = find(doc, "seed")) {
    if (!as_int64(*v)) fail(root.child("seed"), "an integer", *v);
  }
}

// The level, as each task takes it: grad_probe has none of its own (grad_probe.grad_level is its,
// and msprobe's four pass); free_benchmark checks API calls (L1).
Level parse_task_level(Task task, const json& v, const Loc& at) {
  if (task == Task::GradProbe) {
    if (!is_one_of(v, {"L0", "L1", "L2", "mix"})) fail(at, "one of L0, L1, L2, mix", v);
    return Level::L1;
  }
  if (task == Task::FreeBenchmark && !is_one_of(v, {"L1"}))
    fail(at, "\"L1\" with task free_benchmark (it checks API calls)", v);
  return parse_level(v, at);
}

// 26.x's task structure: its scope, list and data_mode come from its own section, and it names
// module calls: level L1 is taken as mix, as 26.x takes it.
void read_structure_task(const json& doc, const Loc& root, Config& config,
                         std::vector<std::string>& warnings) {
  if (const json* v = find(doc, "structure"))
    config.statistics = parse_collect(*v, root.child("structure"), true);
  if (config.level == Level::L1) {
    config.level = Level::Mix;
    warnings.push_back(root.str() + ": task structure names module calls: level L1 is taken as "
                                    "mix (as msprobe 26.x takes it)");
  }
}

void read_task_sections(const json& doc, const Loc& root, Config& config) {
  ErrorList errors;
  errors.attempt([&] {
    config.grad_probe = parse_grad_probe(find(doc, "grad_probe"), root.child("grad_probe"));
  });
  errors.attempt([&] {
    config.free_benchmark =
        parse_free_benchmark(find(doc, "free_benchmark"), root.child("free_benchmark"));
  });
  errors.throw_if_any();
}

// The top level's keys, each with its reader: the one list that the key check allows,
// PrecisionDebugger's keywords name (`keyword`), and parse_config() reads, in this order (a task's
// level is read after its task). A section read on its own (its keys are its own table's) has no
// reader here.
struct TopKey {
  const char* key;
  bool keyword;
  void (*read)(const json& v, const Loc& at, Config& out);
  const char* required = nullptr;  // what is expected when it is absent; nullptr: optional
};
const TopKey kTopLevelKeys[] = {
    {"task", true, [](const json& v, const Loc& at, Config& out) { out.task = parse_task(v, at); }},
    {"dump_path", true,
     [](const json& v, const Loc& at, Config& out) { out.dump_path = parse_dump_path(v, at); },
     "a non-empty string (required)"},
    {"rank", true,
     [](const json& v, const Loc& at, Config& out) { out.rank = parse_ranges(v, at); }},
    {"step", true,
     [](const json& v, const Loc& at, Config& out) { out.step = parse_ranges(v, at); }},
    {"level", true,
     [](const json& v, const Loc& at, Config& out) {
       out.level = parse_task_level(out.task, v, at);
     }},
    {"statistics", false,
     [](const json& v, const Loc& at, Config& out) {
       out.statistics = parse_collect(v, at, true);
     }},
    {"tensor", false,
     [](const json& v, const Loc& at, Config& out) { out.tensor = parse_collect(v, at, false); }},
    {"overflow_check", false, nullptr},  // parse_overflow, which also takes its keys as keywords
    {"extra_apis", true,
     [](const json& v, const Loc& at, Config& out) { out.extra_apis = parse_api_names(v, at); }},
    {"grad_probe", false, nullptr},      // read_task_sections
    {"free_benchmark", false, nullptr},  // read_task_sections
    // msprobe's top-level key, also a keyword argument.
    {"async_dump", true,
     [](const json& v, const Loc& at, Config& out) { out.async_dump = parse_bool(v, at); }},
};

std::vector<std::string> top_key_names(bool keywords_only) {
  std::vector<std::string> out;
  for (const TopKey& k : kTopLevelKeys) {
    if (k.keyword || !keywords_only) out.push_back(k.key);
  }
  return out;
}

const std::vector<std::string> kIgnoredTopKeys = {"is_deterministic", "enable_dataloader",
                                                  "framework", "seed", "run_ut"};

bool is_override_key(const std::string& key) {
  auto in = [&](const std::vector<std::string>& keys) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  return in(top_key_names(true)) || in(overflow_key_names());
}

// A null keyword argument is Python's None, the default of PrecisionDebugger's parameters: not
// given.
void check_override_keys(const json& overrides) {
  for (const auto& entry : overrides.items()) {
    if (is_override_key(entry.key())) continue;
    // The Python-only keywords (taken by PrecisionDebugger itself) are listed too: the message
    // names every keyword a user can pass.
    throw ConfigError(std::string(kDebugger) + ": unknown keyword argument " + show(entry.key()) +
                      "; allowed: config_path, " + join(top_key_names(true)) +
                      ", model, on_overflow, and the overflow_check keys " +
                      join(overflow_key_names()));
  }
}

// A top-level value and where it came from: a keyword argument wins over the file.
struct Field {
  const json* value;
  Loc at;
};

class TopLevel {
 public:
  TopLevel(const json& doc, const std::string& source, const json& overrides)
      : doc_(doc), source_(source), overrides_(overrides) {}

  std::optional<Field> get(const std::string& key) const {
    if (overrides_.is_object()) {
      if (const json* v = find(overrides_, key); v && !v->is_null()) {
        return Field{v, Loc(std::string(kDebugger) + "(" + key + "=...)")};
      }
    }
    if (const json* v = find(doc_, key)) return Field{v, root().child(key)};
    return std::nullopt;
  }
  Loc root() const { return Loc(source_); }

 private:
  const json& doc_;
  const std::string& source_;
  const json& overrides_;
};

}  // namespace

const char* to_string(Task t) {
  if (t == Task::Monitor) return "monitor";  // TrainerMon's, never a config.json's
  return name_of(kTasks, t);
}

const char* to_string(Level l) {
  return name_of(kLevels, l);
}

Config parse_config(const nlohmann::json& doc, const std::string& source,
                    const nlohmann::json& overrides, const std::string& base_dir) {
  Loc root(source);
  if (!doc.is_object()) fail(root, "a JSON object", doc);
  ErrorList errors;
  errors.attempt([&] {
    std::vector<std::string> known = top_key_names(false);
    known.insert(known.end(), msprobe26_top_keys().begin(), msprobe26_top_keys().end());
    check_keys(doc, root, known, kIgnoredTopKeys);
  });
  if (!overrides.is_null()) {
    if (!overrides.is_object()) {
      fail(Loc(kDebugger), "keyword arguments as a JSON object", overrides);
    }
    errors.attempt([&] { check_override_keys(overrides); });
  }
  errors.attempt([&] { check_ignored_top_level(doc, root); });
  std::vector<std::string> warnings;
  if (const json* v = find(doc, "enable_dataloader"); v && *v == true) {
    warnings.push_back(root.child("enable_dataloader").str() +
                       ": true is deprecated (msprobe 1.1.1) and ignored: call start(), stop() and "
                       "step() around each training step");
  }

  // A keyword argument replaces the file's value before validation, so it can also repair a bad
  // one (msprobe's template config.json ships "dump_path": "").
  TopLevel top(doc, source, overrides);
  Config config;
  // Each field on its own, so that every bad one is told.
  for (const TopKey& key : kTopLevelKeys) {
    if (key.read == nullptr) continue;
    errors.attempt([&] {
      if (auto f = top.get(key.key)) {
        key.read(*f->value, f->at, config);
      } else if (key.required &&
                 !errors.mentions("did you mean \"" + std::string(key.key) + "\"")) {
        // A misspelt key was told already, with the right name.
        fail_missing(root.child(key.key), key.required);
      }
    });
  }
  if (!top.get("async_dump")) {
    config.async_dump = config.task == Task::Statistics || config.task == Task::Tensor;
  }
  if (config.task == Task::Structure) {
    errors.attempt([&] { read_structure_task(doc, root, config, warnings); });
  }
  errors.attempt([&] {
    const json* section = find(doc, "overflow_check");
    config.overflow_check =
        parse_overflow(section, root.child("overflow_check"), overrides, base_dir);
  });
  errors.attempt([&] { read_task_sections(doc, root, config); });
  read_msprobe26_keys(doc, root, config.msprobe26, config.generation, errors);
  errors.throw_if_any();
  warn_msprobe26_name_regex(config.collect().list, root, warnings);
  config.warnings = std::move(warnings);
  return config;
}

std::string on_line(const Config& c, size_t apis, size_t modules) {
  std::string hooked;
  if (apis) hooked = std::to_string(apis) + " torch APIs";
  if (modules) hooked += (hooked.empty() ? "" : " and ") + std::to_string(modules) + " modules";
  const std::string dump = std::filesystem::absolute(c.dump_path).lexically_normal().string();
  const std::string where =
      c.task == Task::FreeBenchmark
          ? "inconsistent calls are written to " + free_benchmark_csv(dump)
          : (c.watching() ? "flagged steps are dumped under " : "steps are dumped under ") + dump;
  return "msprobe_cpp: on: task " + std::string(to_string(c.task)) + ", level " +
         to_string(c.level) + "; " + (hooked.empty() ? "nothing" : hooked) + " hooked; " + where;
}

}  // namespace msprobe
