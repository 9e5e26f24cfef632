// Checks of single config values shared by the config reader: where a value is (Loc), the
// one-line messages, did-you-mean, and typed reads. Internal to csrc/core.
#pragma once

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config_error.h"

namespace msprobe::config_checks {

using nlohmann::json;

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

// Every bad field of a file is told at once, one line each (issue 44): a user fixes a config in
// one go, not one run per mistake. Each part of the reading is attempted on its own; a part that
// fails is told and the reading goes on.
class ErrorList {
 public:
  template <typename Part>
  void attempt(Part&& part) {
    try {
      part();
    } catch (const ConfigError& e) {
      add(e.what());
    }
  }
  void add(const std::string& error);
  bool mentions(const std::string& text) const;
  // One ConfigError holding every line, when there is any.
  void throw_if_any() const;

 private:
  std::vector<std::string> errors_;
};

// The value as JSON on one line, shortened so a huge list cannot flood the message.
std::string show(const json& value);
// ConfigError "<where>: expected <expected>, got <value>".
[[noreturn]] void fail(const Loc& at, const std::string& expected, const json& got);
// ConfigError "<where>: expected <expected>, got nothing".
[[noreturn]] void fail_missing(const Loc& at, const std::string& expected);
std::string join(const std::vector<std::string>& words, const std::string& sep = ", ");
// Rejects keys outside `known` and `ignored`, suggesting the closest known one.
void check_keys(const json& object, const Loc& at, const std::vector<std::string>& known,
                const std::vector<std::string>& ignored = {});
const json* find(const json& object, const std::string& key);
std::optional<int64_t> as_int64(const json& value);
bool parse_bool(const json& value, const Loc& at);
void require_object(const json& value, const Loc& at);
// A keyword argument's place in messages: PrecisionDebugger(<key>=...).
inline constexpr const char* kDebugger = "PrecisionDebugger";
std::string parse_nonempty_string(const json& value, const Loc& at);
std::vector<std::string> parse_string_list(const json& value, const Loc& at);
// extra_apis: names as call names spell them ("Tensor.view"), prefix and shape checked.
std::vector<std::string> parse_api_names(const json& value, const Loc& at);

// One table per enum, read by the parser and by to_string. Constant-initialized, so that a
// name can be read before any dynamic initialization.
template <typename E>
struct EnumName {
  const char* name;
  E value;
};

template <typename E, size_t N>
std::string enum_names(const EnumName<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.push_back(entry.name);
  return join(names);
}

template <typename E, size_t N>
const char* name_of(const EnumName<E> (&table)[N], E value) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

template <typename E, size_t N>
E parse_enum(const json& value, const Loc& at, const EnumName<E> (&table)[N]) {
  if (value.is_string()) {
    for (const auto& entry : table) {
      if (value.get_ref<const std::string&>() == entry.name) return entry.value;
    }
  }
  fail(at, "one of " + enum_names(table), value);
}

}  // namespace msprobe::config_checks

namespace msprobe {

struct OverflowSection;

// The overflow_check section (core/config_overflow.cpp): its keys, in the order messages list
// them (also PrecisionDebugger's keywords), and the section, each key taken from a keyword
// argument of PrecisionDebugger when one was given (`overrides`), else from the file (`section`,
// null when it has none). Rule paths from the file are resolved against its folder
// (`base_dir`), those from a keyword against the working directory. Throws ConfigError naming
// every bad key.
std::vector<std::string> overflow_key_names();
OverflowSection parse_overflow(const nlohmann::json* section, const config_checks::Loc& at,
                               const nlohmann::json& overrides, const std::string& base_dir);

}  // namespace msprobe
