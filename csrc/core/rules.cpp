#include "core/rules.h"

#include <yaml-cpp/yaml.h>

#include "core/anomaly.h"
#include "core/text_file.h"

namespace msprobe {

namespace {

class RulesReader {
 public:
  explicit RulesReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& path, const std::string& what) {
    const YAML::Mark m = at.Mark();
    std::string where = source_;
    if (m.line >= 0) where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    throw RulesError(where + ": " + path + ": " + what);
  }

  std::string describe(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Map:
        return "a mapping";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Null:
        return "nothing";
      case YAML::NodeType::Scalar:
        return "\"" + n.Scalar() + "\"";
      default:
        return "an undefined value";
    }
  }

  std::string scalar_string(const YAML::Node& n, const std::string& path) {
    if (!n.IsScalar()) fail(n, path, "expected a string, got " + describe(n));
    return n.Scalar();
  }

  int64_t index(const YAML::Node& n, const std::string& path) {
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v) || v < 0) {
      fail(n, path, "expected an integer >= 0, got " + describe(n));
    }
    return v;
  }

  void check_keys(const YAML::Node& map, const std::string& path,
                  std::initializer_list<const char*> allowed) {
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        fail(kv.first, path, "unknown key \"" + key + "\"; allowed: " + list);
      }
    }
  }

  // input_ignore / output_ignore: a list of {index: N} and {name: S} items.
  void positions(const YAML::Node& seq, const std::string& path, bool names_allowed,
                 std::set<int64_t>& indices, std::set<std::string>* names) {
    if (seq.IsNull()) return;
    if (!seq.IsSequence()) fail(seq, path, "expected a list, got " + describe(seq));
    for (size_t i = 0; i < seq.size(); ++i) {
      const YAML::Node item = seq[i];
      const std::string ipath = path + "[" + std::to_string(i) + "]";
      if (!item.IsMap())
        fail(item, ipath, "expected a mapping with index or name, got " + describe(item));
      if (names_allowed) {
        check_keys(item, ipath, {"index", "name"});
      } else {
        check_keys(item, ipath, {"index"});
      }
      if (item["index"]) indices.insert(index(item["index"], ipath + ".index"));
      if (names_allowed && item["name"])
        names->insert(scalar_string(item["name"], ipath + ".name"));
    }
  }

  std::vector<IgnoreRule> read(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      throw RulesError(source_ + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) + ": invalid YAML: " + e.msg);
    }
    std::vector<IgnoreRule> out;
    if (root.IsNull()) return out;
    if (!root.IsMap())
      fail(root, "(top level)",
           "expected a mapping with key ignore_nan_inf, got " + describe(root));
    check_keys(root, "(top level)", {"ignore_nan_inf"});
    const YAML::Node list = root["ignore_nan_inf"];
    if (!list || list.IsNull()) return out;
    if (!list.IsSequence())
      fail(list, "ignore_nan_inf", "expected a list of rules, got " + describe(list));
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node item = list[i];
      const std::string path = "ignore_nan_inf[" + std::to_string(i) + "]";
      if (!item.IsMap()) fail(item, path, "expected a mapping, got " + describe(item));
      check_keys(item, path, {"api_name", "description", "input_ignore", "output_ignore"});
      IgnoreRule rule;
      if (item["api_name"] && !item["api_name"].IsNull()) {
        rule.api_name = scalar_string(item["api_name"], path + ".api_name");
      }
      if (item["description"] && !item["description"].IsNull()) {
        rule.description = scalar_string(item["description"], path + ".description");
      }
      if (item["input_ignore"]) {
        positions(item["input_ignore"], path + ".input_ignore", true, rule.input_indices,
                  &rule.input_names);
      }
      if (item["output_ignore"]) {
        positions(item["output_ignore"], path + ".output_ignore", false, rule.output_indices,
                  nullptr);
      }
      out.push_back(std::move(rule));
    }
    return out;
  }

 private:
  std::string source_;
};

}  // namespace

bool IgnoreRule::covers(const CallRecord& rec, bool compat) const {
  if (!input_indices.empty()) {
    for (size_t i = 0; i < rec.inputs.size(); ++i) {
      if (is_anomalous(rec.inputs[i], compat) && !input_indices.count(static_cast<int64_t>(i))) {
        return false;
      }
    }
  }
  if (!input_names.empty()) {
    for (const auto& kv : rec.kwargs) {
      if (is_anomalous(kv.second, compat) && !input_names.count(kv.first)) return false;
    }
  }
  if (!output_indices.empty()) {
    for (size_t i = 0; i < rec.outputs.size(); ++i) {
      if (is_anomalous(rec.outputs[i], compat) && !output_indices.count(static_cast<int64_t>(i))) {
        return false;
      }
    }
  }
  return true;
}

void RuleSet::add_yaml(const std::string& text, const std::string& source) {
  RulesReader reader(source);
  for (IgnoreRule& rule : reader.read(text)) {
    if (rule.api_name.empty()) continue;
    if (rule.input_indices.empty() && rule.input_names.empty() && rule.output_indices.empty()) {
      continue;
    }
    rules_.emplace(rule.api_name, std::move(rule));  // keeps the first rule of a name
  }
}

void RuleSet::add_file(const std::string& path) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const FileError& e) {
    throw RulesError(std::string(e.what()) + " (rules file)");
  }
  add_yaml(text, path);
}

RuleSet RuleSet::shipped() {
  RuleSet set;
  set.add_yaml(shipped_rules_yaml(), "rules/ignore_rules.yaml");
  return set;
}

const IgnoreRule* RuleSet::find(const std::string& api_name) const {
  auto it = rules_.find(api_name);
  return it == rules_.end() ? nullptr : &it->second;
}

}  // namespace msprobe
