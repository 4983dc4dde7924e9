// Parameter counts of the zoo models against published figures. count_parameters derives them
// from the architecture (models/model_spec.cpp); the zoo files never store them.

#include <catch2/catch.hpp>

#include <string>

#include "models/model_reader.hpp"
#include "models/model_spec.hpp"

namespace strata {
namespace {

int64_t zoo_parameters(const std::string& name) { return count_parameters(load_model(name)).total; }

struct PublishedCount {
  const char* zoo_name;
  double parameters;
  const char* source;
};

// Published totals, each within 0.5%:
//  - Llama 3 8B / 70B / 405B: 8.03e9, 70.6e9, 405.9e9, the counts Hugging Face lists for
//    meta-llama/Meta-Llama-3-8B, Meta-Llama-3-70B and Llama-3.1-405B;
//  - GPT-3 175B: 174.6e9, Megatron-LM's Eq. 2 (Narayanan et al. 2021, stated_facts.csv) with
//    l = 96, h = 12288, V = 50257, s = 2048.
TEST_CASE("zoo parameter counts match the published totals within 0.5%", "[models]") {
  const PublishedCount counts[] = {
      {"llama3-8b", 8.03e9, "Hugging Face meta-llama/Meta-Llama-3-8B"},
      {"llama3-70b", 70.6e9, "Hugging Face meta-llama/Meta-Llama-3-70B"},
      {"llama3-405b", 405.9e9, "Hugging Face meta-llama/Llama-3.1-405B"},
      {"gpt3-175b", 174.6e9, "Megatron-LM Eq. 2, Narayanan et al. 2021"},
  };
  for (const auto& published : counts) {
    INFO(published.zoo_name << " vs " << published.source);
    CHECK(static_cast<double>(zoo_parameters(published.zoo_name)) ==
          Approx(published.parameters).epsilon(0.005));
  }
}

// Exact counts of the released Llama 3 checkpoints: model.safetensors.index.json states
// total_size 16,060,522,496 bytes (8B) and 141,107,412,992 bytes (70B) of bf16 weights, i.e.
// 8,030,261,248 and 70,553,706,496 parameters: every matrix and norm is counted, none twice.
TEST_CASE("llama3-8b and llama3-70b match the released checkpoints exactly", "[models]") {
  CHECK(zoo_parameters("llama3-8b") == 8'030'261'248);
  CHECK(zoo_parameters("llama3-70b") == 70'553'706'496);
}

// The Llama 2 checkpoints as Hugging Face lists them (meta-llama/Llama-2-{7,13,70}b-hf):
// 6,738,415,616, 13,015,864,320 and 68,976,648,192 parameters; Nemotron-4 340B's technical
// report states 341B (9.4B embedding and 331.6B non-embedding parameters).
TEST_CASE("llama2 and nemotron-340b match their published totals", "[models]") {
  CHECK(zoo_parameters("llama2-7b") == 6'738'415'616);
  CHECK(zoo_parameters("llama2-13b") == 13'015'864'320);
  CHECK(zoo_parameters("llama2-70b") == 68'976'648'192);
  CHECK(static_cast<double>(zoo_parameters("nemotron-340b")) == Approx(341e9).epsilon(0.005));
}

// GPT-2 small: Hugging Face reports 124,439,808 parameters for openai-community/gpt2 (1024
// learned positions, LM head tied to the token embedding, biases everywhere).
TEST_CASE("gpt2-124m has exactly the 124,439,808 parameters Hugging Face reports", "[models]") {
  CHECK(zoo_parameters("gpt2-124m") == 124'439'808);
}

// GPT-2 medium/large/XL: the Hugging Face model cards of gpt2-medium and gpt2-large call them
// the 355M and 774M versions; llm.c's d48 is 1558M (data/reference/llmc_gpt2.csv,
// params_million). (The GPT-2 paper's own 345M/762M/1542M undercount.)
TEST_CASE("larger GPT-2 sizes match their stated parameter counts within 0.5%", "[models]") {
  CHECK(static_cast<double>(zoo_parameters("gpt2-350m")) == Approx(355e6).epsilon(0.005));
  CHECK(static_cast<double>(zoo_parameters("gpt2-774m")) == Approx(774e6).epsilon(0.005));
  CHECK(static_cast<double>(zoo_parameters("gpt2-1.5b")) == Approx(1558e6).epsilon(0.005));
}

// tiny-gpt exists to train on a CPU in the tests and examples: a few million parameters.
TEST_CASE("tiny-gpt is small enough to train on a CPU", "[models]") {
  const int64_t parameters = zoo_parameters("tiny-gpt");
  CHECK(parameters > 1'000'000);
  CHECK(parameters < 20'000'000);
}

// The per-part counts add up to the total, and the LM head only exists when untied:
// Llama 3 8B's untied head is vocab x hidden = 128256 x 4096.
TEST_CASE("parameter parts add up and the untied LM head is vocab x hidden", "[models]") {
  const ModelSpec llama = load_model("llama3-8b");
  const ParameterCount count = count_parameters(llama);
  CHECK(count.total ==
        llama.layers * count.per_layer + count.embedding + count.final_norm + count.lm_head);
  CHECK(count.lm_head == 128256LL * 4096);
  CHECK(count_parameters(load_model("gpt2-124m")).lm_head == 0);
}

}  // namespace
}  // namespace strata
