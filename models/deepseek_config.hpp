#pragma once
// DeepSeek-V2 and DeepSeek-V3 config.json ("model_type" deepseek_v2, deepseek_v3): multi-head
// latent attention and DeepSeekMoE, read into a ModelSpec for parse_hf_config.

#include "common/json_input.hpp"
#include "models/model_spec.hpp"

namespace strata {

// Reads the rest of a DeepSeek config into `model`, which parse_hf_config has given the layers,
// width, heads, vocabulary, rope_theta and dropout; the keys read and ignored are listed in
// deepseek_config.cpp. Throws InputError naming the config's key.
ModelSpec parse_deepseek_config(const JsonFields& fields, ModelSpec model);

}  // namespace strata
