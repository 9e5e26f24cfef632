// config.json reader and validator (SPEC §1, §6).
//
// Messages: every rejection is one line, `<where>: expected <what is allowed>, got <value as
// JSON>`, where <where> is `config.json: overflow_check.rules[2]` for a file value and
// `PrecisionDebugger(step=...)[1]` for a keyword argument. A key that is absent reads `got
// nothing`.
//
// Accepted but ignored, so that a user's msprobe 1.1.x config.json works unchanged (these are the
// keys msprobe's own config.json and pt_config.py carry):
//   top level       is_deterministic, enable_dataloader, async_dump (booleans),
//                   framework ("pytorch" only: this is the PyTorch side of msprobe),
//                   seed (integer),
//                   free_benchmark, run_ut, grad_probe (sections of msprobe tasks this product does
//                   not run; any content, since those tasks are refused anyway).
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
namespace fs = std::filesystem;

constexpr const char* kDebugger = "PrecisionDebugger";
constexpr size_t kMaxShownChars = 80;

// Names a value in messages: a source ("config.json", "PrecisionDebugger(step=...)") and a field
// path inside it ("overflow_check.rules[2]").
class Loc {
 public:
  explicit Loc(std::string source, std::string path = "")
      : source_(std::move(source)), path_(std::move(path)) {}

  Loc child(const std::string& key) const {
    std::string name = printable_key(key);
    return Loc(source_, path_.empty() ? name : path_ + "." + name);
  }
  Loc item(size_t index) const { return Loc(source_, path_ + "[" + std::to_string(index) + "]"); }
  std::string str() const {
    if (path_.empty()) return source_;
    // A keyword argument's items read `PrecisionDebugger(step=...)[1]`.
    if (path_[0] == '[') return source_ + path_;
    return source_ + ": " + path_;
  }

 private:
  // Keys come from user files; quote odd ones so the message stays one readable line.
  static std::string printable_key(const std::string& key) {
    bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    return plain ? key : json(key).dump(-1, ' ', false, json::error_handler_t::replace);
  }

  std::string source_;
  std::string path_;
};

// The value as JSON on one line, shortened so a huge list cannot flood the message.
std::string show(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() <= kMaxShownChars) return text;
  size_t cut = kMaxShownChars - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

[[noreturn]] void fail(const Loc& at, const std::string& expected, const json& got) {
  throw ConfigError(at.str() + ": expected " + expected + ", got " + show(got));
}

[[noreturn]] void fail_missing(const Loc& at, const std::string& expected) {
  throw ConfigError(at.str() + ": expected " + expected + ", got nothing");
}

std::string join(const std::vector<std::string>& words, const std::string& sep = ", ") {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Optimal string alignment distance: a swap of two neighbours ("levle") costs one edit, the typo
// people make most.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The closest candidate when it is close enough to be the likely intent, ignoring case.
std::optional<std::string> suggest(const std::string& key, const std::vector<std::string>& names) {
  std::optional<std::string> best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& name : names) {
    size_t distance = edit_distance(lower(key), lower(name));
    size_t allowed = name.size() >= 5 ? 2 : 1;
    if (distance <= allowed && distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

// Rejects keys outside `known` and `ignored`; only `known` is listed, the ignored ones exist for
// msprobe compatibility and are not worth advertising.
void check_keys(const json& object, const Loc& at, const std::vector<std::string>& known,
                const std::vector<std::string>& ignored = {}) {
  std::vector<std::string> all = known;
  all.insert(all.end(), ignored.begin(), ignored.end());
  for (const auto& entry : object.items()) {
    const std::string& key = entry.key();
    if (std::find(all.begin(), all.end(), key) != all.end()) continue;
    std::string message = at.child(key).str() + ": unknown key; ";
    if (auto hint = suggest(key, all)) {
      message += "did you mean \"" + *hint + "\"?";
    } else {
      message += "allowed: " + join(known);
    }
    throw ConfigError(message);
  }
}

const json* find(const json& object, const std::string& key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// JSON integers only: booleans and 3.0 are not integers.
std::optional<int64_t> as_int64(const json& value) {
  if (value.is_number_unsigned()) {
    auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

bool parse_bool(const json& value, const Loc& at) {
  if (!value.is_boolean()) fail(at, "true or false", value);
  return value.get<bool>();
}

std::string parse_nonempty_string(const json& value, const Loc& at) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    fail(at, "a non-empty string", value);
  }
  return value.get<std::string>();
}

std::vector<std::string> parse_string_list(const json& value, const Loc& at) {
  if (!value.is_array()) fail(at, "a list of non-empty strings", value);
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i)
    out.push_back(parse_nonempty_string(value[i], at.item(i)));
  return out;
}

template <typename E>
using EnumTable = std::vector<std::pair<std::string, E>>;

template <typename E>
std::string enum_names(const EnumTable<E>& table) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.push_back(entry.first);
  return join(names);
}

template <typename E>
E parse_enum(const json& value, const Loc& at, const EnumTable<E>& table) {
  if (value.is_string()) {
    for (const auto& entry : table) {
      if (entry.first == value.get_ref<const std::string&>()) return entry.second;
    }
  }
  fail(at, "one of " + enum_names(table), value);
}

const EnumTable<Task> kTasks = {{"statistics", Task::Statistics},
                                {"tensor", Task::Tensor},
                                {"overflow_check", Task::OverflowCheck}};
const EnumTable<Level> kLevels = {{"L0", Level::L0}, {"L1", Level::L1}, {"mix", Level::Mix}};
const EnumTable<SummaryMode> kSummaryModes = {{"statistics", SummaryMode::Statistics},
                                              {"md5", SummaryMode::Md5}};
const EnumTable<Action> kActions = {{"raise", Action::Raise}, {"continue", Action::Continue}};
const EnumTable<Severity> kSeverities = {
    {"critical", Severity::Critical}, {"high", Severity::High}, {"medium", Severity::Medium}};

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
  if (is_one_of(value, {"free_benchmark", "run_ut", "grad_probe"})) {
    fail_unsupported(at, value, "task", enum_names(kTasks));
  }
  return parse_enum(value, at, kTasks);
}

Level parse_level(const json& value, const Loc& at) {
  if (is_one_of(value, {"L2"})) fail_unsupported(at, value, "level", enum_names(kLevels));
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

void require_object(const json& value, const Loc& at) {
  if (!value.is_object()) fail(at, "an object", value);
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
  check_keys(section, at, known, ignored);

  CollectSection out;
  if (const json* v = find(section, "scope")) out.scope = parse_scope(*v, at.child("scope"));
  if (const json* v = find(section, "list")) out.list = parse_string_list(*v, at.child("list"));
  if (const json* v = find(section, "data_mode")) {
    out.data_mode = parse_data_mode(*v, at.child("data_mode"));
  }
  if (const json* v = find(section, "summary_mode")) {
    out.summary_mode = parse_enum(*v, at.child("summary_mode"), kSummaryModes);
  }
  if (!is_statistics) check_tensor_extras(section, at);
  return out;
}

int64_t parse_overflow_nums(const json& value, const Loc& at) {
  auto number = as_int64(value);
  if (!number || (*number != -1 && *number < 1)) fail(at, "-1 or an integer >= 1", value);
  return *number;
}

double parse_threshold(const json& value, const Loc& at) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
    fail(at, "a finite number > 0", value);
  }
  return value.get<double>();
}

std::vector<std::string> parse_rules(const json& value, const Loc& at,
                                     const std::string& base_dir) {
  std::vector<std::string> rules = parse_string_list(value, at);
  if (base_dir.empty()) return rules;
  for (auto& rule : rules) {
    if (fs::path(rule).is_relative())
      rule = (fs::path(base_dir) / rule).lexically_normal().string();
  }
  return rules;
}

OverflowSection parse_overflow(const json& section, const Loc& at, const std::string& base_dir) {
  require_object(section, at);
  check_keys(section, at,
             {"overflow_nums", "action", "stop_level", "mutation_threshold", "rules", "compat"},
             {"check_mode"});

  OverflowSection out;
  if (const json* v = find(section, "overflow_nums")) {
    out.overflow_nums = parse_overflow_nums(*v, at.child("overflow_nums"));
  }
  if (const json* v = find(section, "action"))
    out.action = parse_enum(*v, at.child("action"), kActions);
  if (const json* v = find(section, "stop_level")) {
    out.stop_level = parse_enum(*v, at.child("stop_level"), kSeverities);
  }
  if (const json* v = find(section, "mutation_threshold")) {
    out.mutation_threshold = parse_threshold(*v, at.child("mutation_threshold"));
  }
  if (const json* v = find(section, "rules"))
    out.rules = parse_rules(*v, at.child("rules"), base_dir);
  if (const json* v = find(section, "compat")) out.compat = parse_bool(*v, at.child("compat"));
  if (const json* v = find(section, "check_mode")) {
    if (!v->is_string()) fail(at.child("check_mode"), "a string", *v);
  }
  return out;
}

const std::vector<std::string> kTopKeys = {"task",  "dump_path",  "rank",   "step",
                                           "level", "statistics", "tensor", "overflow_check"};
const std::vector<std::string> kIgnoredTopKeys = {
    "is_deterministic", "enable_dataloader", "async_dump", "framework", "seed", "free_benchmark",
    "run_ut",           "grad_probe"};
const std::vector<std::string> kOverrideKeys = {"task", "dump_path", "level", "step", "rank"};

void check_ignored_top_level(const json& doc, const Loc& root) {
  for (const char* key : {"is_deterministic", "enable_dataloader", "async_dump"}) {
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

// A null keyword argument is Python's None, the default of PrecisionDebugger's parameters: not
// given.
void check_override_keys(const json& overrides) {
  for (const auto& entry : overrides.items()) {
    if (std::find(kOverrideKeys.begin(), kOverrideKeys.end(), entry.key()) != kOverrideKeys.end()) {
      continue;
    }
    throw ConfigError(std::string(kDebugger) + ": unknown keyword argument " + show(entry.key()) +
                      "; allowed: " + join(kOverrideKeys));
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

bool RangeList::contains(int64_t v) const {
  if (all()) return true;
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [v](const auto& r) { return r.first <= v && v <= r.second; });
}

const char* to_string(Task t) {
  switch (t) {
    case Task::Statistics:
      return "statistics";
    case Task::Tensor:
      return "tensor";
    case Task::OverflowCheck:
      return "overflow_check";
  }
  return "unknown";
}

const char* to_string(Level l) {
  switch (l) {
    case Level::L0:
      return "L0";
    case Level::L1:
      return "L1";
    case Level::Mix:
      return "mix";
  }
  return "unknown";
}

const char* to_string(Severity s) {
  switch (s) {
    case Severity::Medium:
      return "medium";
    case Severity::High:
      return "high";
    case Severity::Critical:
      return "critical";
  }
  return "unknown";
}

Config parse_config(const nlohmann::json& doc, const std::string& source,
                    const nlohmann::json& overrides, const std::string& base_dir) {
  Loc root(source);
  if (!doc.is_object()) fail(root, "a JSON object", doc);
  check_keys(doc, root, kTopKeys, kIgnoredTopKeys);
  if (!overrides.is_null()) {
    if (!overrides.is_object()) {
      fail(Loc(kDebugger), "keyword arguments as a JSON object", overrides);
    }
    check_override_keys(overrides);
  }
  check_ignored_top_level(doc, root);

  // A keyword argument replaces the file's value before validation, so it can also repair a bad
  // one (msprobe's template config.json ships "dump_path": "").
  TopLevel top(doc, source, overrides);
  Config config;
  if (auto f = top.get("task")) config.task = parse_task(*f->value, f->at);
  if (auto f = top.get("dump_path")) {
    config.dump_path = parse_nonempty_string(*f->value, f->at);
  } else {
    fail_missing(root.child("dump_path"), "a non-empty string (required)");
  }
  if (auto f = top.get("rank")) config.rank = parse_ranges(*f->value, f->at);
  if (auto f = top.get("step")) config.step = parse_ranges(*f->value, f->at);
  if (auto f = top.get("level")) config.level = parse_level(*f->value, f->at);
  if (auto f = top.get("statistics")) config.statistics = parse_collect(*f->value, f->at, true);
  if (auto f = top.get("tensor")) config.tensor = parse_collect(*f->value, f->at, false);
  if (auto f = top.get("overflow_check")) {
    config.overflow_check = parse_overflow(*f->value, f->at, base_dir);
  }
  return config;
}

}  // namespace msprobe
