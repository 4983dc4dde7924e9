#pragma once
// Goldens of the fp32 kernel tests: what each compared output was on a GPU, so that the CPU
// emulation of CUDA (kernels/emu) is checked against a real device, not only against the CPU
// references. STRATA_REQUIRE_CLOSE (device_buffers.hpp) hands every fp32 output it compares to
// check_golden, which does what the environment asks:
//  - STRATA_GOLDEN_SAVE=DIR (scripts/gpu-check sets it on a GPU): each output that matched its
//    reference is kept, and written as the process exits to DIR/<binary>.json, e.g.
//    DIR/strata_tests_kernels_cuda.json;
//  - STRATA_GOLDENS=FILE[:FILE...] (CTest sets it for the emulated kernel tests when
//    tests/kernels_cuda/goldens/*.json exist): each output is checked against its golden in each
//    file, and a mismatch fails the test. An output with no golden (a test newer than the file)
//    is not checked.
//
// The format, one object per file (bench/README.md, "GPU checks"):
//   {"binary": "strata_tests_kernels_cuda", "device": "NVIDIA H200",
//    "outputs": [{"test": "matmul_forward matches the CPU reference - float", "index": 0,
//                 "what": "out", "n": 4096, "norm": 18.25,
//                 "samples": [[0, 0.125], [65, -0.5], ..., [4095, 0.75]]}, ...]}
// "test" is Catch's test case; "index" counts the fp32 outputs compared in that test case, from 0
// in the order compared; "what" is the comparison's label; "norm" the output's L2 norm; "samples"
// at most kGoldenSamples (index, value) pairs spread evenly from the first element to the last.
// An output agrees with its golden when "what" and n are the same and the norm and every sample
// lie within kGoldenTolerance (1e-5, the fp32 tolerance of the kernel tests) times the golden's
// norm.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::cuda::test {

constexpr int64_t kGoldenSamples = 64;
constexpr double kGoldenTolerance = 1e-5;  // the kernel tests' fp32 tolerance

// One compared output as a golden holds it.
struct Golden {
  std::string test;
  int64_t index = 0;
  std::string what;
  int64_t n = 0;
  double norm = 0;
  std::vector<std::pair<int64_t, double>> samples;  // (element index, value)
};

// The golden of values: n, the L2 norm and min(n, kGoldenSamples) samples at indices
// i * (n - 1) / (count - 1), e.g. 0, 1, ..., 9 for n = 10 and 0, 65, ..., 4095 for n = 4096.
Golden summarize(std::string test, int64_t index, std::string what,
                 const std::vector<double>& values);

// What differs between an output and its golden, one line; empty when they agree within
// tolerance * the golden's norm.
std::string golden_mismatch(const Golden& golden, const Golden& output, double tolerance);

nlohmann::json goldens_json(const std::vector<Golden>& goldens, const std::string& binary,
                            const std::string& device);
// The outputs of a goldens file; throws std::runtime_error naming the file and what is wrong.
std::vector<Golden> read_goldens(const std::string& path);

// STRATA_REQUIRE_CLOSE's hook for an fp32 output of the current test case, `matched` whether it
// matched its reference: saves it (STRATA_GOLDEN_SAVE) and checks it (STRATA_GOLDENS). Returns
// the mismatches with the goldens, one per line; empty when none (or no goldens are given).
std::string check_golden(const std::string& what, const std::vector<double>& values, bool matched);

}  // namespace strata::cuda::test
