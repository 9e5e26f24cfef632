#include "core/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

#include <map>
#include <sstream>

namespace msprobe {

const YamlNode* YamlNode::find(std::string_view key) const {
  if (kind != Kind::Map) return nullptr;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i].kind == Kind::Scalar && items[i].scalar == key) return &items[i + 1];
  }
  return nullptr;
}

namespace {

size_t count_nodes(const YamlNode& n) {
  size_t total = 1;
  for (const YamlNode& c : n.items) total += count_nodes(c);
  return total;
}

class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(const std::string& streamed_key, const YamlItemSink& sink)
      : streamed_key_(streamed_key), sink_(sink) {}

  YamlNode take_root() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    YamlNode n;
    n.mark = mark;
    finish(std::move(n), anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) throw YAML::ParserException(mark, "unknown alias");
    // Copies are counted: a few nested aliases can otherwise ask for billions of nodes.
    expanded_ += count_nodes(it->second);
    if (expanded_ > kMaxExpandedNodes) {
      throw YAML::ParserException(mark, "aliases expand to more than a million nodes");
    }
    finish(YamlNode(it->second), YAML::NullAnchor);
  }

  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string& value) override {
    YamlNode n;
    n.kind = YamlNode::Kind::Scalar;
    n.mark = mark;
    n.scalar = value;
    finish(std::move(n), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(YamlNode::Kind::Sequence, mark, anchor);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(YamlNode::Kind::Map, mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YamlNode node;
    YAML::anchor_t anchor;
    bool streamed;
    size_t handed = 0;
  };

  void open(YamlNode::Kind kind, const YAML::Mark& mark, YAML::anchor_t anchor) {
    YamlNode n;
    n.kind = kind;
    n.mark = mark;
    open_.push_back(
        Open{std::move(n), anchor, kind == YamlNode::Kind::Sequence && at_streamed_key()});
  }

  void close() {
    Open top = std::move(open_.back());
    open_.pop_back();
    finish(std::move(top.node), top.anchor);
  }

  // The list being opened is the value of the top-level map's key `streamed_key_`.
  bool at_streamed_key() const {
    if (open_.size() != 1 || open_[0].node.kind != YamlNode::Kind::Map) return false;
    const std::vector<YamlNode>& items = open_[0].node.items;
    return items.size() % 2 == 1 && items.back().kind == YamlNode::Kind::Scalar &&
           items.back().scalar == streamed_key_;
  }

  void finish(YamlNode&& n, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) anchors_[anchor] = n;
    if (open_.empty()) {
      root_ = std::move(n);
      return;
    }
    Open& parent = open_.back();
    if (parent.streamed) {
      sink_(std::move(n), parent.handed++);
    } else {
      parent.node.items.push_back(std::move(n));
    }
  }

  static constexpr size_t kMaxExpandedNodes = 1000000;
  const std::string& streamed_key_;
  const YamlItemSink& sink_;
  std::vector<Open> open_;
  std::map<YAML::anchor_t, YamlNode> anchors_;
  size_t expanded_ = 0;
  YamlNode root_;
};

}  // namespace

YamlNode parse_yaml(const std::string& text, const std::string& streamed_key,
                    const YamlItemSink& sink) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  TreeBuilder builder(streamed_key, sink);
  parser.HandleNextDocument(builder);
  return builder.take_root();
}

}  // namespace msprobe
