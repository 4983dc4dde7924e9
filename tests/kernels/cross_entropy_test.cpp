// Vocabulary-parallel softmax cross-entropy (kernels/cpu/cross_entropy.cpp): the composition
// row_max -> partials -> losses on one shard and on two shards with the reductions done by hand,
// backward against central differences, float against double.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
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

// B*T = 2*5 rows over a vocabulary of V = 11; the two-shard split is [0,5) and [5,11).
constexpr int64_t kN = 10;
constexpr int64_t kV = 11;
constexpr int64_t kSplit = 5;
// Targets in both shards and at their edges.
const std::vector<int32_t> kTargets = {0, 10, 3, 5, 4, 7, 2, 9, 5, 1};
// The weight of each row's loss: the mean over B*T.
constexpr double kScale = 1.0 / kN;

struct CrossEntropyOutputs {
  std::vector<double> losses, dlogits;
};

// One shard holding the whole vocabulary: the reductions are identities.
template <typename T>
CrossEntropyOutputs run_cross_entropy(const std::vector<double>& logits_in) {
  const auto logits = cast_to<T>(logits_in);
  std::vector<T> maxes(kN), sums(kN), targets_logit(kN), losses(kN);
  std::vector<T> dlogits(kN * kV, T(1e3));
  row_max(maxes.data(), logits.data(), kN, kV);
  cross_entropy_partials(sums.data(), targets_logit.data(), logits.data(), maxes.data(),
                         kTargets.data(), 0, kN, kV);
  cross_entropy_losses(losses.data(), sums.data(), maxes.data(), targets_logit.data(), kN);
  cross_entropy_backward(dlogits.data(), logits.data(), maxes.data(), sums.data(), kTargets.data(),
                         0, static_cast<T>(kScale), kN, kV);
  return {widen(losses), widen(dlogits)};
}

// Two shards of columns [0, kSplit) and [kSplit, kV), with the all-reduces (max, then two sums)
// emulated here; dlogits is reassembled into (N,V).
CrossEntropyOutputs run_two_shards(const std::vector<double>& logits) {
  const int64_t widths[2] = {kSplit, kV - kSplit};
  const int64_t starts[2] = {0, kSplit};
  std::vector<double> shard[2];
  for (int s = 0; s < 2; ++s) {
    for (int64_t i = 0; i < kN; ++i) {
      for (int64_t j = 0; j < widths[s]; ++j) shard[s].push_back(logits[i * kV + starts[s] + j]);
    }
  }
  std::vector<double> shard_maxes[2] = {std::vector<double>(kN), std::vector<double>(kN)};
  for (int s = 0; s < 2; ++s) row_max(shard_maxes[s].data(), shard[s].data(), kN, widths[s]);
  std::vector<double> maxes(kN);
  for (int64_t i = 0; i < kN; ++i) maxes[i] = std::max(shard_maxes[0][i], shard_maxes[1][i]);
  std::vector<double> sums(kN, 0.0), targets_logit(kN, 0.0);
  for (int s = 0; s < 2; ++s) {
    std::vector<double> shard_sums(kN), shard_targets_logit(kN);
    cross_entropy_partials(shard_sums.data(), shard_targets_logit.data(), shard[s].data(),
                           maxes.data(), kTargets.data(), starts[s], kN, widths[s]);
    for (int64_t i = 0; i < kN; ++i) {
      sums[i] += shard_sums[i];
      targets_logit[i] += shard_targets_logit[i];
    }
  }
  CrossEntropyOutputs result{std::vector<double>(kN), std::vector<double>(kN * kV)};
  cross_entropy_losses(result.losses.data(), sums.data(), maxes.data(), targets_logit.data(), kN);
  for (int s = 0; s < 2; ++s) {
    std::vector<double> dshard(kN * widths[s]);
    cross_entropy_backward(dshard.data(), shard[s].data(), maxes.data(), sums.data(),
                           kTargets.data(), starts[s], kScale, kN, widths[s]);
    for (int64_t i = 0; i < kN; ++i) {
      for (int64_t j = 0; j < widths[s]; ++j) {
        result.dlogits[i * kV + starts[s] + j] = dshard[i * widths[s] + j];
      }
    }
  }
  return result;
}

TEST_CASE("cross-entropy of uniform logits is ln(V), and dlogits = scale * (1/V - onehot)") {
  const std::vector<double> logits(kN * kV, 0.7);
  const CrossEntropyOutputs result = run_cross_entropy<double>(logits);
  for (int64_t i = 0; i < kN; ++i) {
    CHECK(result.losses[i] == Approx(std::log(static_cast<double>(kV))).epsilon(1e-15));
    for (int64_t j = 0; j < kV; ++j) {
      const double onehot = j == kTargets[i] ? 1.0 : 0.0;
      CHECK(result.dlogits[i * kV + j] == Approx(kScale * (1.0 / kV - onehot)).epsilon(1e-14));
    }
  }
}

TEST_CASE(
    "cross-entropy loss = log(sum_j exp(logit_j)) - logit_target, and dlogits rows sum to "
    "0 (softmax rows sum to 1)") {
  const std::vector<double> logits = random_values(kN * kV, 61, -3.0, 3.0);
  const CrossEntropyOutputs result = run_cross_entropy<double>(logits);
  for (int64_t i = 0; i < kN; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < kV; ++j) sum += std::exp(logits[i * kV + j]);
    CHECK(result.losses[i] == Approx(std::log(sum) - logits[i * kV + kTargets[i]]).epsilon(1e-14));
    double row_sum = 0;
    for (int64_t j = 0; j < kV; ++j) row_sum += result.dlogits[i * kV + j];
    CHECK(std::abs(row_sum) < 1e-15);
  }
}

TEST_CASE(
    "cross-entropy subtracts the row max: logits shifted by +1000 (exp overflows double) "
    "give the same losses and dlogits") {
  const std::vector<double> logits = random_values(kN * kV, 62, -3.0, 3.0);
  std::vector<double> shifted = logits;
  for (double& x : shifted) x += 1000.0;
  const CrossEntropyOutputs plain = run_cross_entropy<double>(logits);
  const CrossEntropyOutputs big = run_cross_entropy<double>(shifted);
  check_close("losses", big.losses, plain.losses, 1e-12);
  check_close("dlogits", big.dlogits, plain.dlogits, 1e-12);
}

TEST_CASE(
    "cross-entropy over two vocabulary shards (max, then sums reduced by hand) gives the "
    "one-shard losses and dlogits") {
  // Each target lies in one shard; the other contributes 0 to targets_logit and no onehot term.
  const std::vector<double> logits = random_values(kN * kV, 63, -3.0, 3.0);
  const CrossEntropyOutputs one = run_cross_entropy<double>(logits);
  const CrossEntropyOutputs two = run_two_shards(logits);
  check_close("losses", two.losses, one.losses, 1e-14);
  check_close("dlogits", two.dlogits, one.dlogits, 1e-14);
}

TEST_CASE(
    "cross-entropy backward (float64) equals central differences of scale * sum(losses) "
    "through row_max -> partials -> losses, on one shard and on two") {
  // The backward has one weight for every row (scale), so the objective is scale * sum(losses).
  std::vector<double> logits = random_values(kN * kV, 64, -3.0, 3.0);
  const CrossEntropyOutputs one = run_cross_entropy<double>(logits);
  const CrossEntropyOutputs two = run_two_shards(logits);
  const auto loss = [&] {
    const CrossEntropyOutputs result = run_cross_entropy<double>(logits);
    double sum = 0;
    for (double l : result.losses) sum += l;
    return kScale * sum;
  };
  const std::vector<double> numeric = test::numeric_gradient(logits, loss);
  check_close("dlogits (one shard)", one.dlogits, numeric, kGradientTolerance);
  check_close("dlogits (two shards)", two.dlogits, numeric, kGradientTolerance);
}

TEST_CASE("cross-entropy float agrees with double within 1e-5 relative") {
  const std::vector<double> logits =
      test::float_representable(random_values(kN * kV, 65, -3.0, 3.0));
  const CrossEntropyOutputs f = run_cross_entropy<float>(logits);
  const CrossEntropyOutputs d = run_cross_entropy<double>(logits);
  check_close("losses", f.losses, d.losses, kFloatTolerance);
  check_close("dlogits", f.dlogits, d.dlogits, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
