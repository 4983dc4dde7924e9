// Megatron-LM's --moe-layer-freq read as the dense layers before the MoE ones
// (cli/moe_layer_freq.hpp): the int 1 and the Python lists of that shape, including the examples
// of Megatron's own help; every other pattern refused naming the flag.

#include <catch2/catch.hpp>

#include "cli/moe_layer_freq.hpp"
#include "tests/input_error.hpp"

namespace strata {
namespace {

using cli::first_dense_layers_of;

TEST_CASE("the MoE layer pattern gives the dense layers before the MoE ones", "[cli][moe]") {
  // DeepSeek-V3's 61 layers, the first 3 dense (first_k_dense_replace 3).
  CHECK(first_dense_layers_of("([0]*3+[1]*58)", 61) == 3);
  // Megatron's help: "([0]+[1]*23)": 1 dense layer followed by 23 experts layers.
  CHECK(first_dense_layers_of("([0]+[1]*23)", 24) == 1);
  // The int 1 (Megatron's default): layer i is MoE when i % 1 == 0, every layer.
  CHECK(first_dense_layers_of("1", 32) == 0);
  CHECK(first_dense_layers_of("[1]*32", 32) == 0);
  // Python's other spellings of the same lists: n * list, a trailing comma, blanks, nesting.
  CHECK(first_dense_layers_of(" ( 2*[0] ) + [1, 1,] * (1+1) ", 6) == 2);
  CHECK(first_dense_layers_of("[0,0,1,1]", 4) == 2);
}

TEST_CASE("MoE layer patterns a ModelSpec cannot hold are refused", "[cli][moe]") {
  const auto problem = [](const std::string& text, int64_t layers) {
    const auto error = test::input_error_of([&] { first_dense_layers_of(text, layers); });
    REQUIRE(error);
    CHECK(error->field() == "--moe-layer-freq");
    return error->problem();
  };
  // Megatron's help: "([1]*3+[0]*2)*2": three expert layers followed by two dense, twice.
  CHECK_THAT(problem("([1]*3+[0]*2)*2", 10),
             Catch::Contains("a dense layer (3) after an MoE one (0)"));
  // Every other layer MoE from layer 0.
  CHECK_THAT(problem("2", 24), Catch::Contains("i % 2 == 0 (layers 0, 2, 4, ...)"));
  CHECK_THAT(problem("0", 24), Catch::Contains("at least 1"));
  // Megatron asserts the list's length is the number of layers.
  CHECK_THAT(problem("([0]*3+[1]*57)", 61),
             Catch::Contains("gives 60 layers, and the model has 61"));
  CHECK_THAT(problem("[0]*4", 4), Catch::Contains("no MoE layer"));
  CHECK_THAT(problem("[0,2]", 2), Catch::Contains("holds 2"));
  CHECK_THAT(problem("[1]*99999999", 4), Catch::Contains("longer than any model's"));
  // Nesting is bounded (a recursive reader would otherwise run out of stack).
  CHECK_THAT(problem(std::string(100000, '(') + "[1]", 1),
             Catch::Contains("nests parentheses deeper than 64"));
  CHECK(first_dense_layers_of(std::string(64, '(') + "[1]" + std::string(64, ')'), 1) == 0);
  // What Python would read but the reader does not: powers, comprehensions, unbalanced text.
  for (const char* text :
       {"[1]*(2**3)", "[1 for _ in range(4)]", "([0]+[1]*3", "[1]+1", "[1]*[1]", "[1]*4 junk"}) {
    INFO(text);
    CHECK_THAT(problem(text, 4), Catch::Contains("is not a list expression"));
  }
}

}  // namespace
}  // namespace strata
