#include "core/config_checks.h"

namespace msprobe::config_checks {

namespace {

constexpr size_t kMaxShownChars = 80;

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

}  // namespace

// The value as JSON on one line, shortened so a huge list cannot flood the message.
namespace {

// The JSON text of `value`, nesting cut at a fixed depth: a config may hold a list 100 000 deep,
// and the message about it must not recurse that deep (nlohmann's dump() would).
constexpr int kMaxShownDepth = 16;

void show_into(const json& value, int depth, std::string& out) {
  if (out.size() > kMaxShownChars) return;
  if (value.is_array() || value.is_object()) {
    if (depth >= kMaxShownDepth) {
      out += value.is_array() ? "[...]" : "{...}";
      return;
    }
    out += value.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= kMaxShownChars; ++it) {
      if (!first) out += ",";
      first = false;
      if (value.is_object()) {
        out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ":";
      }
      show_into(*it, depth + 1, out);
    }
    out += value.is_array() ? ']' : '}';
    return;
  }
  out += value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string show(const json& value) {
  std::string text;
  show_into(value, 0, text);
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

std::string join(const std::vector<std::string>& words, const std::string& sep) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

void ErrorList::add(const std::string& error) {
  // A field read by two parts (async_dump) is told once.
  if (std::find(errors_.begin(), errors_.end(), error) == errors_.end()) errors_.push_back(error);
}

bool ErrorList::mentions(const std::string& text) const {
  return std::any_of(errors_.begin(), errors_.end(),
                     [&](const std::string& e) { return e.find(text) != std::string::npos; });
}

void ErrorList::throw_if_any() const {
  if (errors_.empty()) return;
  throw ConfigError(join(errors_, "\n"));
}

// Rejects keys outside `known` and `ignored`; only `known` is listed, the ignored ones exist for
// msprobe compatibility and are not worth advertising.
void check_keys(const json& object, const Loc& at, const std::vector<std::string>& known,
                const std::vector<std::string>& ignored) {
  std::vector<std::string> all = known;
  all.insert(all.end(), ignored.begin(), ignored.end());
  ErrorList unknown;
  for (const auto& entry : object.items()) {
    const std::string& key = entry.key();
    if (std::find(all.begin(), all.end(), key) != all.end()) continue;
    std::string message = at.child(key).str() + ": unknown key; ";
    if (auto hint = suggest(key, all)) {
      message += "did you mean \"" + *hint + "\"?";
    } else {
      message += "allowed: " + join(known);
    }
    unknown.add(message);
  }
  unknown.throw_if_any();
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

void require_object(const json& value, const Loc& at) {
  if (!value.is_object()) fail(at, "an object", value);
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

// "Tensor.view", "Torch.linalg.norm": an API as call names spell it. Whether the running torch has
// it is checked where torch is (the debugger), with a did-you-mean.
std::vector<std::string> parse_api_names(const json& value, const Loc& at) {
  std::vector<std::string> names = parse_string_list(value, at);
  static const std::vector<std::string> kPrefixes = {"Functional", "Tensor", "Torch", "Distributed",
                                                     "VF"};
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    const size_t dot = n.find('.');
    const bool prefixed =
        dot != std::string::npos &&
        std::find(kPrefixes.begin(), kPrefixes.end(), n.substr(0, dot)) != kPrefixes.end();
    const std::string api = prefixed ? n.substr(dot + 1) : "";
    const bool plain = !api.empty() && api.front() != '.' && api.back() != '.' &&
                       api.find("..") == std::string::npos &&
                       std::all_of(api.begin(), api.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
                       });
    if (!plain) {
      fail(at.item(i),
           "an API named as in call names: " + join(kPrefixes, ".x, ") + ".x (\"Tensor.view\")", n);
    }
  }
  return names;
}

}  // namespace msprobe::config_checks
