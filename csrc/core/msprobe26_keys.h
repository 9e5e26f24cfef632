// The generation of msprobe a config speaks, and the top-level keys msprobe 26.x added
// (docs/config.md, "msprobe 1.1.x and 26.x configs"): read by the config reader
// (config_msprobe26.cpp), held by Config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace msprobe {

// Which msprobe a config speaks, and so which files, names and wrap list its run gets
// (docs/config.md, "msprobe 1.1.x and 26.x configs"): 1.1.1's, or 26.2.0's.
enum class Generation { V1_1, V26 };
// msprobe 26.x's risk_level: which APIs an L1 or mix dump keeps when no scope or list is given
// (core/risk_levels.h).
enum class RiskLevel { Core, Focus, All };
// msprobe 26.x's precision: "high" writes Mean and Norm as null (26.2.0's PyTorch side does).
enum class Precision { Low, High };

// The top-level keys msprobe 26.x added, each acted on in a 26.x run.
struct Msprobe26Keys {
  bool extra_info = true;  // false: no stack.json nor construct.json
  Precision precision = Precision::Low;
  RiskLevel risk_level = RiskLevel::Focus;  // 26.2.0's default
  // Present: config.json is read again as the run goes on, and this turns the dump on and off
  // (core/config_watch.h).
  std::optional<bool> dump_enable;
};

// One item of a statistics or tensor section's `slice` (26.x): along `dim`, elements
// [begin, end) as Python slices them (negative counts from the end, a missing end is the end);
// an item whose dim a tensor lacks, or whose `size` is not that dim's size, leaves it alone.
struct SliceItem {
  int64_t dim = 0;
  int64_t begin = 0;
  std::optional<int64_t> end;
  std::optional<int64_t> size;
};

// What 26.x takes of the tensors of the calls a statistics or tensor dump records.
struct Msprobe26Section {
  std::vector<SliceItem> slice;
  // request_id: with start(scheduled_tokens={id: tokens, ...}), the rows of the batch that
  // request's tokens hold (a slice along dim 0); a step without it is not dumped.
  std::optional<std::string> request_id;
};

const char* to_string(Generation g);  // "1.1" | "26"

}  // namespace msprobe
