// A light YAML tree built from yaml-cpp's parser events. yaml-cpp's own YAML::Node costs about
// fifty bytes of heap per byte of text (a 50,000-rule file: 467 MB and 3.5 s); this tree costs a
// few, and the items of the one big list a file holds are handed over one at a time, not kept.
#pragma once

#include <yaml-cpp/mark.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace msprobe {

struct YamlNode {
  enum class Kind { Null, Scalar, Sequence, Map };
  Kind kind = Kind::Null;
  YAML::Mark mark;
  std::string scalar;
  std::vector<YamlNode> items;  // a sequence's items; a map's keys and values, alternating

  // A map's first value under `key`, or nullptr.
  const YamlNode* find(std::string_view key) const;
};

// `item` is the `index`-th item of the streamed list.
using YamlItemSink = std::function<void(YamlNode&& item, size_t index)>;

// Parses the first document of `text`. The items of the list under the top-level key
// `streamed_key` go to `sink` as each one ends, and that list is left empty in the tree.
// Syntax errors, and aliases that would expand past a million nodes, are YAML::ParserException.
YamlNode parse_yaml(const std::string& text, const std::string& streamed_key,
                    const YamlItemSink& sink);

}  // namespace msprobe
