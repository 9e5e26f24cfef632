// msprobe 26.x's risk_level (docs/config.md): at L1 and mix, when neither scope nor list is given,
// an API call is dumped only if its risk reaches the level: CORE keeps the core APIs (matmuls,
// convolutions, norms, attention, collectives), FOCUS (26.x's default) all but the low-risk ones
// (reshapes, casts, concatenations, ...), ALL every call. Module calls are always kept.
#pragma once

#include <string_view>

#include "core/config.h"

namespace msprobe {

enum class ApiRisk { Core, Focus, Low };

// The risk of the API a call name ("Functional.linear.0.forward") names.
ApiRisk api_risk(std::string_view call_name);

// The level a session filters at: the config's risk_level for a 26.x statistics or tensor dump at
// L1 or mix, else ALL. The overflow guard (this product's task) judges every call whatever the
// config says: a cast that overflows (half()) is as much an origin as a matmul.
RiskLevel effective_risk_level(const Config& c);

// Whether a call of that name is dumped at `level`.
bool kept_at_risk_level(std::string_view call_name, RiskLevel level);

}  // namespace msprobe
