// The sections of msprobe's in-process tasks besides the dump: "grad_probe" (and, with it,
// "free_benchmark"), read as msprobe 1.1.1's pt_config.py reads them, with this product's
// one-line errors.
#pragma once

#include <nlohmann/json.hpp>

#include "core/config_checks.h"
#include "core/free_benchmark_rules.h"
#include "core/grad_summary.h"

namespace msprobe {

// `section` is null when the file has none (every default).
GradProbeSection parse_grad_probe(const nlohmann::json* section, const config_checks::Loc& at);
FreeBenchmarkSection parse_free_benchmark(const nlohmann::json* section,
                                          const config_checks::Loc& at);

}  // namespace msprobe
