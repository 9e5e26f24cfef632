// The generation of msprobe a config speaks, and the top-level keys msprobe 26.x added
// (docs/config.md, "msprobe 1.1.x and 26.x configs"): read by the config reader
// (config_msprobe26.cpp), held by Config.
#pragma once

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
};

const char* to_string(Generation g);  // "1.1" | "26"

}  // namespace msprobe
