// Token and position embeddings over a vocabulary shard (kernels/cpu/embedding.cpp): rows looked
// up, shards summing to the whole table, backward against central differences, float against
// double.

#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace strata::cpu {
namespace {

using test::cast_to;
using test::check_close;
using test::kFloatTolerance;
using test::kGradientTolerance;
using test::random_values;
using test::widen;

// B = 2 sequences of T = 5 tokens, C = 8 channels; a full vocabulary of 20 and a shard of
// V = 9 rows starting at token 6.
constexpr int64_t kB = 2;
constexpr int64_t kT = 5;
constexpr int64_t kC = 8;
constexpr int64_t kFullVocab = 20;
constexpr int64_t kVocabStart = 6;
constexpr int64_t kV = 9;

// Tokens below, at the edges of, inside (7 three times, to accumulate) and above the shard.
const std::vector<int32_t> kTokens = {5, 6, 7, 14, 15, 7, 19, 0, 10, 7};

struct EmbeddingInputs {
  std::vector<double> wte = random_values(kV * kC, 51);
  std::vector<double> wpe = random_values(kT * kC, 52);
  std::vector<double> dout = random_values(kB * kT * kC, 53);  // R of L = sum(out * R)
  std::vector<double> dwte = random_values(kV * kC, 54);
  std::vector<double> dwpe = random_values(kT * kC, 55);
};

struct EmbeddingOutputs {
  std::vector<double> out, dwte, dwpe;
};

template <typename T>
EmbeddingOutputs run_embedding(const EmbeddingInputs& in) {
  const auto wte = cast_to<T>(in.wte);
  const auto wpe = cast_to<T>(in.wpe);
  const auto dout = cast_to<T>(in.dout);
  auto dwte = cast_to<T>(in.dwte);
  auto dwpe = cast_to<T>(in.dwpe);
  std::vector<T> out(kB * kT * kC, T(1e3));
  embedding_forward(out.data(), kTokens.data(), wte.data(), wpe.data(), kVocabStart, kV, kB, kT,
                    kC);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), kTokens.data(), kVocabStart, kV, kB, kT,
                     kC);
  return {widen(out), widen(dwte), widen(dwpe)};
}

TEST_CASE(
    "embedding out = wte[token - vocab_start] + wpe[t] for tokens in the shard, wpe[t] "
    "alone for the others") {
  const EmbeddingInputs in;
  const EmbeddingOutputs result = run_embedding<double>(in);
  for (int64_t i = 0; i < kB * kT; ++i) {
    const int64_t t = i % kT;
    const int64_t row = kTokens[i] - kVocabStart;
    const bool in_shard = row >= 0 && row < kV;
    for (int64_t c = 0; c < kC; ++c) {
      const double expected = (in_shard ? in.wte[row * kC + c] : 0.0) + in.wpe[t * kC + c];
      CHECK(result.out[i * kC + c] == expected);
    }
  }
}

TEST_CASE(
    "embedding over two vocabulary shards, positions added by one, sums to the embedding "
    "over the whole table") {
  // Megatron's vocabulary-parallel embedding: each token's row lives in exactly one shard.
  const std::vector<double> table = random_values(kFullVocab * kC, 56);
  const std::vector<double> wpe = random_values(kT * kC, 57);
  const int64_t split = 9;
  std::vector<double> whole(kB * kT * kC), first(kB * kT * kC), second(kB * kT * kC);
  embedding_forward(whole.data(), kTokens.data(), table.data(), wpe.data(), 0, kFullVocab, kB, kT,
                    kC);
  embedding_forward(first.data(), kTokens.data(), table.data(), wpe.data(), 0, split, kB, kT, kC);
  embedding_forward(second.data(), kTokens.data(), table.data() + split * kC,
                    static_cast<const double*>(nullptr), split, kFullVocab - split, kB, kT, kC);
  for (size_t i = 0; i < whole.size(); ++i) CHECK(first[i] + second[i] == whole[i]);
}

TEST_CASE(
    "embedding backward (float64): dwte and dwpe (accumulated) equal central differences "
    "of sum(out * R)") {
  EmbeddingInputs in;
  const EmbeddingOutputs analytic = run_embedding<double>(in);
  std::vector<double> out(kB * kT * kC);
  const auto loss = [&] {
    embedding_forward(out.data(), kTokens.data(), in.wte.data(), in.wpe.data(), kVocabStart, kV, kB,
                      kT, kC);
    return test::weighted_sum(out, in.dout);
  };
  check_close("dwte", test::minus(analytic.dwte, in.dwte), test::numeric_gradient(in.wte, loss),
              kGradientTolerance);
  check_close("dwpe", test::minus(analytic.dwpe, in.dwpe), test::numeric_gradient(in.wpe, loss),
              kGradientTolerance);
}

TEST_CASE("embedding backward with a null dwpe accumulates the same dwte") {
  const EmbeddingInputs in;
  const EmbeddingOutputs full = run_embedding<double>(in);
  auto dwte = in.dwte;
  embedding_backward(dwte.data(), static_cast<double*>(nullptr), in.dout.data(), kTokens.data(),
                     kVocabStart, kV, kB, kT, kC);
  check_close("dwte", dwte, full.dwte, 1e-15);
}

TEST_CASE("embedding float agrees with double within 1e-5 relative") {
  EmbeddingInputs in;
  for (auto* x : {&in.wte, &in.wpe, &in.dout, &in.dwte, &in.dwpe}) {
    *x = test::float_representable(*x);
  }
  const EmbeddingOutputs f = run_embedding<float>(in);
  const EmbeddingOutputs d = run_embedding<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("dwte", f.dwte, d.dwte, kFloatTolerance);
  check_close("dwpe", f.dwpe, d.dwpe, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
