// Dropout (kernels/cpu/dropout.cpp, Srivastava et al. 2014, as torch.nn.functional.dropout): the
// key is SplitMix64 (Steele et al. 2014) against its published outputs; the mask keeps 1 - rate
// of its elements within binomial bounds, is a function of (stream, row keys) alone, and any of
// its rows can be made alone; the backward is its closed form, and the scaled mask has mean 1.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace strata::cpu {
namespace {

using test::random_values;

// 400 rows of 500: 200,000 draws, enough to see a fraction to about 1e-3.
constexpr int64_t kRows = 400;
constexpr int64_t kCols = 500;
constexpr uint64_t kStream = 1234;

// Row keys as a caller builds them: dropout_key(layer 3, row).
std::vector<uint64_t> row_keys(int64_t first, int64_t rows) {
  std::vector<uint64_t> keys(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) keys[i] = dropout_key(3, static_cast<uint64_t>(first + i));
  return keys;
}

std::vector<double> make_mask(uint64_t stream, double rate) {
  const std::vector<uint64_t> keys = row_keys(0, kRows);
  std::vector<double> mask(kRows * kCols, -1.0);  // poisoned: every entry must be written
  dropout_mask(mask.data(), stream, keys.data(), kRows, kCols, rate);
  return mask;
}

double mean(const std::vector<double>& x) {
  return std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

TEST_CASE("dropout_key(a, b) for b = 0, 1, 2, 3 is SplitMix64's output seeded with a",
          "[dropout]") {
  // SplitMix64 seeded with 0 (Steele et al. 2014; Vigna's splitmix64.c) starts 0xe220a8397b1dcdaf,
  // 0x6e789e6aa1b965f4, 0x06c45d188009454f, 0xf88bb8a8724c81ec.
  CHECK(dropout_key(0, 0) == 0xe220a8397b1dcdafULL);
  CHECK(dropout_key(0, 1) == 0x6e789e6aa1b965f4ULL);
  CHECK(dropout_key(0, 2) == 0x06c45d188009454fULL);
  CHECK(dropout_key(0, 3) == 0xf88bb8a8724c81ecULL);
}

TEST_CASE("dropout mask keeps 1 - rate of 200,000 elements within 5 binomial deviations",
          "[dropout]") {
  // Each element is kept with probability p = 1 - rate, independently: the kept fraction of n
  // elements has mean p and standard deviation sqrt(p (1 - p) / n). Every entry is 0 or 1.
  const double rate = GENERATE(0.1, 0.5);
  const std::vector<double> mask = make_mask(kStream, rate);
  const double keep = 1.0 - rate;
  const double deviation = std::sqrt(keep * rate / static_cast<double>(mask.size()));
  INFO("rate " << rate << ", kept fraction " << mean(mask));
  CHECK(std::abs(mean(mask) - keep) < 5 * deviation);
  for (const double m : mask) REQUIRE((m == 0.0 || m == 1.0));
}

TEST_CASE("dropout mask with rate 0 keeps every element", "[dropout]") {
  // u >= 0 for every draw u in [0, 1).
  const std::vector<double> mask = make_mask(kStream, 0.0);
  for (const double m : mask) REQUIRE(m == 1.0);
}

TEST_CASE(
    "dropout mask: the same stream and row keys give the same mask; another stream an "
    "independent one",
    "[dropout]") {
  // A counter-based mask has no state: it is a function of (stream, row keys). Two independent
  // masks of rate 1/2 differ in half their elements (2 p (1 - p)), within 5 binomial deviations.
  const std::vector<double> mask = make_mask(kStream, 0.5);
  CHECK(make_mask(kStream, 0.5) == mask);
  const std::vector<double> other = make_mask(kStream + 1, 0.5);
  int64_t differing = 0;
  for (size_t i = 0; i < mask.size(); ++i) differing += mask[i] != other[i] ? 1 : 0;
  const double fraction = static_cast<double>(differing) / static_cast<double>(mask.size());
  INFO("differing fraction " << fraction);
  CHECK(std::abs(fraction - 0.5) < 5 * std::sqrt(0.25 / static_cast<double>(mask.size())));
}

TEST_CASE(
    "dropout mask: rows k to k+m made alone with their row keys equal those rows of the whole",
    "[dropout]") {
  // What lets a sequence-parallel rank make only its slice of the tokens: element (i, j) depends on
  // (stream, row_keys[i], j) only. The float mask has the same bits as the double one.
  const std::vector<double> whole = make_mask(kStream, 0.3);
  const int64_t first = 137;
  const int64_t rows = 50;
  const std::vector<uint64_t> keys = row_keys(first, rows);
  std::vector<double> slice(rows * kCols);
  std::vector<float> slice_float(rows * kCols);
  dropout_mask(slice.data(), kStream, keys.data(), rows, kCols, 0.3);
  dropout_mask(slice_float.data(), kStream, keys.data(), rows, kCols, 0.3);
  const std::vector<double> want(whole.begin() + first * kCols,
                                 whole.begin() + (first + rows) * kCols);
  CHECK(slice == want);
  CHECK(test::widen(slice_float) == want);
}

TEST_CASE("dropout backward: din = dout * mask * scale, written, also in place", "[dropout]") {
  const double rate = 0.3;
  const double scale = 1.0 / (1.0 - rate);
  const std::vector<double> mask = make_mask(kStream, rate);
  const std::vector<double> dout = random_values(kRows * kCols, 51);
  std::vector<double> din(dout.size(), 1e3);  // poisoned: every entry must be written
  apply_dropout(din.data(), dout.data(), mask.data(), scale, kRows * kCols);
  std::vector<double> in_place = dout;
  apply_dropout(in_place.data(), in_place.data(), mask.data(), scale, kRows * kCols);
  for (size_t i = 0; i < din.size(); ++i) {
    REQUIRE(din[i] == (mask[i] == 1.0 ? dout[i] * scale : 0.0));
  }
  CHECK(in_place == din);
}

TEST_CASE("dropout preserves the expectation: mask * 1/(1 - rate) has mean 1 within 5 deviations",
          "[dropout]") {
  // E[mask / (1 - rate)] = (1 - rate) / (1 - rate) = 1 (Srivastava et al. 2014's inverted
  // dropout, as PyTorch scales at training time); the mean of n such values has deviation
  // sqrt(rate / (1 - rate) / n). Through apply_dropout applied to ones: dropout of ones.
  const double rate = GENERATE(0.1, 0.3, 0.9);
  const double scale = 1.0 / (1.0 - rate);
  const std::vector<double> mask = make_mask(kStream, rate);
  std::vector<double> dropped(mask.size(), 1.0);
  apply_dropout(dropped.data(), dropped.data(), mask.data(), scale, kRows * kCols);
  const double deviation = std::sqrt(rate / (1.0 - rate) / static_cast<double>(mask.size()));
  INFO("rate " << rate << ", mean " << mean(dropped));
  CHECK(std::abs(mean(dropped) - 1.0) < 5 * deviation);
}

}  // namespace
}  // namespace strata::cpu
