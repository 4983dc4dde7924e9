#pragma once
// Reading a model: `--model` takes a zoo name (models/zoo/*.json, compiled into the binary) or a
// path to a JSON file whose format is detected:
//  - Hugging Face config.json: has "model_type" in {llama, mistral, qwen2, gpt_neox};
//  - GPT-2 config.json: "model_type": "gpt2", or has "n_embd" or "n_layer";
//  - native Strata JSON: has "layers" or "hidden" (see models/README.md for its fields).
// Every mistake is an InputError naming the file and the field.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_spec.hpp"

namespace strata {

enum class ModelFormat { kNative, kHuggingFace, kGpt2 };

// Detects the format of a parsed config; throws InputError (naming `where`) when none fits.
ModelFormat detect_model_format(const nlohmann::json& config, const std::string& where);

ModelSpec parse_native_model(const nlohmann::json& config, const std::string& where);
ModelSpec parse_hf_config(const nlohmann::json& config, const std::string& where);
ModelSpec parse_gpt2_config(const nlohmann::json& config, const std::string& where);

// Parses any supported format (detected) and validates the result.
ModelSpec parse_model(const nlohmann::json& config, const std::string& where);

// A zoo name or a file path. An unknown name lists the zoo.
ModelSpec load_model(const std::string& name_or_path);

std::vector<std::string> zoo_model_names();

}  // namespace strata
