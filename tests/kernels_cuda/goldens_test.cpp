// The goldens of the fp32 kernel tests (goldens.hpp) on host data alone (no [gpu] tag: they run
// everywhere). Facts checked: the samples are the documented indices; an output agrees with its
// own golden read back from a file; and a planted wrong golden (one sample, the norm, n) is a
// mismatch, so the emulated kernel tests can fail against goldens from a GPU.

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tests/kernels_cuda/goldens.hpp"
#include "tests/temp_file.hpp"

namespace strata::cuda::test {
namespace {

std::vector<double> ramp(size_t n) {
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = std::sin(0.01 * static_cast<double>(i)) + 0.5;
  return values;
}

}  // namespace

// 64 samples of n = 4096 at i * 4095 / 63 = 65 i: 0, 65, ..., 4095; n = 10 keeps every element.
TEST_CASE("goldens: the samples spread evenly from the first element to the last", "[goldens]") {
  const Golden large = summarize("t", 0, "out", ramp(4096));
  REQUIRE(large.samples.size() == 64);
  CHECK(large.samples[1].first == 65);
  CHECK(large.samples.back().first == 4095);
  CHECK(large.samples.back().second == ramp(4096)[4095]);
  const Golden small = summarize("t", 0, "out", {3.0, 4.0});
  CHECK(small.norm == 5.0);
  REQUIRE(small.samples.size() == 2);
  CHECK(small.samples[1] == std::pair<int64_t, double>{1, 4.0});
}

// A golden written to a file and read back matches its output; the same file with one sample
// off by 1e-3 of the norm (100 times the tolerance) does not, and neither does one whose norm or
// n is off.
TEST_CASE("goldens: a planted wrong golden in a goldens file is a mismatch", "[goldens]") {
  const Golden output = summarize("matmul - float", 2, "dinp", ramp(1000));
  const ::strata::test::TempFile right(goldens_json({output}, "strata_tests_kernels_emu", "test"),
                                       "golden");
  const std::vector<Golden> read = read_goldens(right.path());
  REQUIRE(read.size() == 1);
  CHECK(read[0].test == "matmul - float");
  CHECK(read[0].index == 2);
  CHECK(golden_mismatch(read[0], output, kGoldenTolerance).empty());

  Golden wrong_sample = output;
  wrong_sample.samples[7].second += 1e-3 * output.norm;
  const ::strata::test::TempFile planted(
      goldens_json({wrong_sample}, "strata_tests_kernels_emu", "test"), "golden");
  const std::string mismatch =
      golden_mismatch(read_goldens(planted.path()).at(0), output, kGoldenTolerance);
  INFO(mismatch);
  CHECK(mismatch.find("element " + std::to_string(output.samples[7].first)) != std::string::npos);

  Golden wrong_norm = output;
  wrong_norm.norm *= 1 + 1e-3;
  CHECK(!golden_mismatch(wrong_norm, output, kGoldenTolerance).empty());
  Golden wrong_n = output;
  wrong_n.n += 1;
  CHECK(!golden_mismatch(wrong_n, output, kGoldenTolerance).empty());
  // Within the tolerance: half of it on one sample is no mismatch.
  Golden close = output;
  close.samples[7].second += 0.5 * kGoldenTolerance * output.norm;
  CHECK(golden_mismatch(close, output, kGoldenTolerance).empty());
}

TEST_CASE("goldens: a goldens file that is not one names the file", "[goldens]") {
  const ::strata::test::TempFile broken(std::string("{\"outputs\": [{\"test\": 1}]}"), "golden");
  CHECK_THROWS_WITH(read_goldens(broken.path()), Catch::Contains(broken.path()));
}

}  // namespace strata::cuda::test
