#include "core/rules.h"

#include <yaml-cpp/yaml.h>

#include <functional>

#include "core/anomaly.h"
#include "core/text_file.h"
#include "core/yaml_tree.h"

namespace msprobe {

namespace {

class RulesReader {
 public:
  explicit RulesReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YamlNode& at, const std::string& path, const std::string& what) {
    const YAML::Mark& m = at.mark;
    std::string where = source_;
    if (m.line >= 0) where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    throw RulesError(where + ": " + path + ": " + what);
  }

  static std::string describe(const YamlNode& n) {
    switch (n.kind) {
      case YamlNode::Kind::Map:
        return "a mapping";
      case YamlNode::Kind::Sequence:
        return "a list";
      case YamlNode::Kind::Null:
        return "nothing";
      case YamlNode::Kind::Scalar:
        break;
    }
    return "\"" + n.scalar + "\"";
  }

  std::string scalar_string(const YamlNode& n, const std::string& path) {
    if (n.kind != YamlNode::Kind::Scalar) fail(n, path, "expected a string, got " + describe(n));
    return n.scalar;
  }

  int64_t index(const YamlNode& n, const std::string& path) {
    int64_t v = 0;
    // yaml-cpp's own integer reading, so that 0x10 and 0o7 mean what they meant before.
    if (n.kind != YamlNode::Kind::Scalar ||
        !YAML::convert<int64_t>::decode(YAML::Node(n.scalar), v) || v < 0) {
      fail(n, path, "expected an integer >= 0, got " + describe(n));
    }
    return v;
  }

  void check_keys(const YamlNode& map, const std::string& path,
                  std::initializer_list<const char*> allowed) {
    for (size_t k = 0; k < map.items.size(); k += 2) {
      const YamlNode& key = map.items[k];
      bool ok = false;
      for (const char* a : allowed)
        ok = ok || (key.kind == YamlNode::Kind::Scalar && key.scalar == a);
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        fail(key, path, "unknown key \"" + key.scalar + "\"; allowed: " + list);
      }
    }
  }

  // input_ignore / output_ignore: a list of {index: N} and {name: S} items.
  void positions(const YamlNode& seq, const std::string& path, bool names_allowed,
                 std::set<int64_t>& indices, std::set<std::string>* names) {
    if (seq.kind == YamlNode::Kind::Null) return;
    if (seq.kind != YamlNode::Kind::Sequence)
      fail(seq, path, "expected a list, got " + describe(seq));
    for (size_t i = 0; i < seq.items.size(); ++i) {
      const YamlNode& item = seq.items[i];
      const std::string ipath = path + "[" + std::to_string(i) + "]";
      if (item.kind != YamlNode::Kind::Map)
        fail(item, ipath, "expected a mapping with index or name, got " + describe(item));
      if (names_allowed) {
        check_keys(item, ipath, {"index", "name"});
      } else {
        check_keys(item, ipath, {"index"});
      }
      if (const YamlNode* n = item.find("index")) indices.insert(index(*n, ipath + ".index"));
      if (const YamlNode* n = names_allowed ? item.find("name") : nullptr)
        names->insert(scalar_string(*n, ipath + ".name"));
    }
  }

  IgnoreRule rule(const YamlNode& item, size_t i) {
    const std::string path = "ignore_nan_inf[" + std::to_string(i) + "]";
    if (item.kind != YamlNode::Kind::Map)
      fail(item, path, "expected a mapping, got " + describe(item));
    check_keys(item, path, {"api_name", "description", "input_ignore", "output_ignore"});
    IgnoreRule rule;
    const YamlNode* n = item.find("api_name");
    if (n && n->kind != YamlNode::Kind::Null) rule.api_name = scalar_string(*n, path + ".api_name");
    n = item.find("description");
    if (n && n->kind != YamlNode::Kind::Null)
      rule.description = scalar_string(*n, path + ".description");
    if ((n = item.find("input_ignore"))) {
      positions(*n, path + ".input_ignore", true, rule.input_indices, &rule.input_names);
    }
    if ((n = item.find("output_ignore"))) {
      positions(*n, path + ".output_ignore", false, rule.output_indices, nullptr);
    }
    return rule;
  }

  // Rules are handed to `on_rule` as the parser ends each one, so a file of many thousands of
  // rules never exists as a whole tree.
  void read(const std::string& text, const std::function<void(IgnoreRule&&)>& on_rule) {
    YamlNode root;
    try {
      root = parse_yaml(text, "ignore_nan_inf",
                        [&](YamlNode&& item, size_t i) { on_rule(rule(item, i)); });
    } catch (const YAML::ParserException& e) {
      throw RulesError(source_ + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) + ": invalid YAML: " + e.msg);
    }
    if (root.kind == YamlNode::Kind::Null) return;
    if (root.kind != YamlNode::Kind::Map)
      fail(root, "(top level)",
           "expected a mapping with key ignore_nan_inf, got " + describe(root));
    check_keys(root, "(top level)", {"ignore_nan_inf"});
    const YamlNode* list = root.find("ignore_nan_inf");
    if (!list || list->kind == YamlNode::Kind::Null) return;
    if (list->kind != YamlNode::Kind::Sequence)
      fail(*list, "ignore_nan_inf", "expected a list of rules, got " + describe(*list));
  }

 private:
  std::string source_;
};

}  // namespace

bool IgnoreRule::covers(const CallRecord& rec, bool compat) const {
  // Every anomalous argument must be one the rule names, on each side the rule restricts.
  bool covered = true;
  for_each_arg(rec, [&](const ArgPos& pos, const Entry& e) {
    if (!covered) return;
    const auto index = static_cast<int64_t>(pos.index);
    bool named = true;
    switch (pos.side) {
      case ArgPos::Side::Input:
        named = input_indices.empty() || input_indices.count(index);
        break;
      case ArgPos::Side::Kwarg:
        named = input_names.empty() || input_names.count(*pos.key);
        break;
      case ArgPos::Side::Output:
        named = output_indices.empty() || output_indices.count(index);
        break;
    }
    if (!named && is_anomalous(e, compat)) covered = false;
  });
  return covered;
}

void RuleSet::add_yaml(const std::string& text, const std::string& source) {
  // A file's rules take effect only if the whole file is valid.
  std::unordered_map<std::string, IgnoreRule> added;
  RulesReader(source).read(text, [&](IgnoreRule&& rule) {
    if (rule.api_name.empty()) return;
    if (rule.input_indices.empty() && rule.input_names.empty() && rule.output_indices.empty()) {
      return;
    }
    if (!rules_.count(rule.api_name)) added.emplace(rule.api_name, std::move(rule));
  });
  rules_.merge(added);  // keeps the first rule of a name
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
