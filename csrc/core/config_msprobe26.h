// The config keys, tasks and levels msprobe 26.x added, and which msprobe generation a config
// speaks (docs/config.md, "msprobe 1.1.x and 26.x configs"). Internal to csrc/core: the config
// reader (config.cpp) calls it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config_checks.h"
#include "core/msprobe26_keys.h"

namespace msprobe {

// The top-level keys of 26.x (and msprobe_generation, this product's), for the reader's list of
// known keys.
const std::vector<std::string>& msprobe26_top_keys();

// The keys a statistics or tensor section may have in 26.x besides 1.1.1's.
const std::vector<std::string>& msprobe26_section_keys(bool is_statistics);

// Reads the 26.x keys of `doc` into `keys` and decides `generation`; each bad value is added to
// `errors`.
void read_msprobe26_keys(const nlohmann::json& doc, const config_checks::Loc& root,
                         Msprobe26Keys& keys, Generation& generation,
                         config_checks::ErrorList& errors);

// The 26.x section keys this product takes only at their default (an empty tensor_list, ...):
// another value is refused with what it would ask for.
void check_msprobe26_section(const nlohmann::json& section, const config_checks::Loc& at,
                             bool is_statistics);

// A statistics or tensor section's slice and request_id.
Msprobe26Section read_msprobe26_section(const nlohmann::json& section,
                                        const config_checks::Loc& at);

// A `list` entry "name-regex(<re>)": 26.2.0's PyTorch dump checks the expression and then
// matches the entry as the literal text it is, which no call name holds, and so does this
// product; each such entry is told in `warnings`.
void warn_msprobe26_name_regex(const std::vector<std::string>& list, const config_checks::Loc& root,
                               std::vector<std::string>& warnings);

// Throws ConfigError, in one line with the reason, for a 26.x task or level that needs an NPU or
// another device (acc_check, nan_check, diff_check; L2), or that this product does not run yet.
void refuse_msprobe26_task(const nlohmann::json& value, const config_checks::Loc& at);
void refuse_msprobe26_level(const nlohmann::json& value, const config_checks::Loc& at);

}  // namespace msprobe
