// Harness for models/model_reader.hpp: a model file as `--model PATH` reads it, in any of its
// formats (native Strata JSON, Hugging Face config.json, GPT-2 config.json): the JSON parse
// helper (common/json_input.hpp: nesting and number limits), then parse_model, which detects the
// format, parses and validates.

#include "common/json_input.hpp"
#include "fuzz/fuzz_support.hpp"
#include "models/model_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return strata::fuzz::run_reader([&] {
    const std::string where = "model.json";
    strata::parse_model(strata::parse_json_text(strata::fuzz::as_text(data, size), where), where);
  });
}
