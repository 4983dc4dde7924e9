#pragma once
// ModelSpec as JSON for outputs (the "model" key of `strata plan --json`): the native format,
// so that the output can be read back with --model. Stable keys.

#include <nlohmann/json.hpp>

#include "models/model_spec.hpp"

namespace strata {

nlohmann::json model_to_json(const ModelSpec& model);

}  // namespace strata
