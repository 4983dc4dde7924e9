#include "tests/kernels_cuda/goldens.hpp"

#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace strata::cuda::test {

Golden summarize(std::string test, int64_t index, std::string what,
                 const std::vector<double>& values) {
  Golden golden;
  golden.test = std::move(test);
  golden.index = index;
  golden.what = std::move(what);
  golden.n = static_cast<int64_t>(values.size());
  double sum2 = 0;
  for (const double value : values) sum2 += value * value;
  golden.norm = std::sqrt(sum2);
  const int64_t count = std::min(golden.n, kGoldenSamples);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t at = count == 1 ? 0 : i * (golden.n - 1) / (count - 1);
    golden.samples.emplace_back(at, values[static_cast<size_t>(at)]);
  }
  return golden;
}

std::string golden_mismatch(const Golden& golden, const Golden& output, double tolerance) {
  std::ostringstream out;
  out << "golden " << golden.test << " #" << golden.index << " (" << golden.what << "): ";
  if (output.what != golden.what || output.n != golden.n) {
    out << "the golden is of " << golden.what << " with n " << golden.n << ", this output of "
        << output.what << " with n " << output.n << " (goldens of another version of the test?)";
    return out.str();
  }
  const double allowed = tolerance * golden.norm;
  // Written as !(difference <= allowed) so that a NaN fails.
  if (!(std::abs(output.norm - golden.norm) <= allowed)) {
    out << "norm " << output.norm << ", golden " << golden.norm << " (allowed difference "
        << allowed << ")";
    return out.str();
  }
  if (output.samples.size() != golden.samples.size()) {
    out << output.samples.size() << " samples, golden " << golden.samples.size();
    return out.str();
  }
  for (size_t i = 0; i < golden.samples.size(); ++i) {
    const auto [at, expected] = golden.samples[i];
    const double value = output.samples[i].second;
    if (output.samples[i].first != at || !(std::abs(value - expected) <= allowed)) {
      out << "element " << at << " is " << value << ", golden " << expected
          << " (allowed difference " << allowed << ")";
      return out.str();
    }
  }
  return "";
}

nlohmann::json goldens_json(const std::vector<Golden>& goldens, const std::string& binary,
                            const std::string& device) {
  nlohmann::json outputs = nlohmann::json::array();
  for (const Golden& golden : goldens) {
    outputs.push_back({{"test", golden.test},
                       {"index", golden.index},
                       {"what", golden.what},
                       {"n", golden.n},
                       {"norm", golden.norm},
                       {"samples", golden.samples}});
  }
  return {{"binary", binary}, {"device", device}, {"outputs", outputs}};
}

std::vector<Golden> read_goldens(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("goldens file " + path + " cannot be read");
  try {
    const nlohmann::json document = nlohmann::json::parse(file);
    std::vector<Golden> goldens;
    for (const nlohmann::json& output : document.at("outputs")) {
      goldens.push_back({output.at("test").get<std::string>(), output.at("index").get<int64_t>(),
                         output.at("what").get<std::string>(), output.at("n").get<int64_t>(),
                         output.at("norm").get<double>(),
                         output.at("samples").get<std::vector<std::pair<int64_t, double>>>()});
    }
    return goldens;
  } catch (const nlohmann::json::exception& error) {
    throw std::runtime_error("goldens file " + path + ": " + error.what() +
                             " (the format is in tests/kernels_cuda/goldens.hpp)");
  }
}

namespace {

using GoldenKey = std::pair<std::string, int64_t>;  // (test, index)

// What the environment asked for, read once per process; the saved outputs are written as the
// process exits.
class GoldenRun {
 public:
  GoldenRun() {
    if (const char* dir = std::getenv("STRATA_GOLDEN_SAVE"); dir != nullptr && *dir != 0) {
      save_dir_ = dir;
    }
    const char* files = std::getenv("STRATA_GOLDENS");
    std::istringstream paths(files != nullptr ? files : "");
    for (std::string path; std::getline(paths, path, ':');) {
      if (path.empty()) continue;
      std::map<GoldenKey, Golden>& by_key = goldens_[path];
      try {
        for (Golden& golden : read_goldens(path)) {
          GoldenKey key{golden.test, golden.index};
          by_key.emplace(std::move(key), std::move(golden));
        }
      } catch (const std::runtime_error& error) {
        problems_ += std::string(error.what()) + "\n";
      }
    }
  }
  ~GoldenRun() {
    if (save_dir_.empty() || saved_.empty()) return;
    std::error_code error;
    const std::filesystem::path binary =
        std::filesystem::read_symlink("/proc/self/exe", error).filename();
    const std::filesystem::path path =
        std::filesystem::path(save_dir_) / (error ? "goldens.json" : binary.string() + ".json");
    std::filesystem::create_directories(save_dir_, error);
    std::ofstream file(path);
    file << goldens_json(saved_, binary.string(), device_).dump(1) << "\n";
    if (!file) std::fprintf(stderr, "goldens: could not write %s\n", path.c_str());
  }
  GoldenRun(const GoldenRun&) = delete;
  GoldenRun& operator=(const GoldenRun&) = delete;

  std::string check(const std::string& what, const std::vector<double>& values, bool matched) {
    const std::string test = Catch::getResultCapture().getCurrentTestName();
    const Golden output = summarize(test, next_index_[test]++, what, values);
    if (!save_dir_.empty() && matched) {
      if (device_.empty()) device_ = device_name();  // now: CUDA may be gone at exit
      saved_.push_back(output);
    }
    std::string mismatches = problems_;
    for (const auto& [path, by_key] : goldens_) {
      const auto found = by_key.find({output.test, output.index});
      if (found == by_key.end()) continue;
      const std::string mismatch = golden_mismatch(found->second, output, kGoldenTolerance);
      if (!mismatch.empty()) mismatches += path + ": " + mismatch + "\n";
    }
    return mismatches;
  }

 private:
  static std::string device_name() {
    cudaDeviceProp properties{};
    return cudaGetDeviceProperties(&properties, 0) == cudaSuccess ? properties.name : "unknown";
  }

  std::string save_dir_;
  std::string device_;
  std::vector<Golden> saved_;
  std::map<std::string, std::map<GoldenKey, Golden>> goldens_;  // by file
  std::string problems_;                                        // files that could not be read
  std::map<std::string, int64_t> next_index_;                   // by test case
};

}  // namespace

std::string check_golden(const std::string& what, const std::vector<double>& values, bool matched) {
  static GoldenRun run;
  return run.check(what, values, matched);
}

}  // namespace strata::cuda::test
