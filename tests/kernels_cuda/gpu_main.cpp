// The main of the CUDA kernel tests. Tests tagged [gpu] need a device: without a usable one, a
// run that selects any of them exits 77 at once, which CTest's SKIP_RETURN_CODE reports as
// "Skipped". The other tests (the check macros' messages) run everywhere, and listing the tests
// never touches CUDA, so CTest discovers them on a machine without a GPU.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>

namespace {

bool selects_gpu_tests(Catch::Session& session) {
  const Catch::IConfig& config = session.config();
  const std::vector<Catch::TestCase> selected =
      Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
  return std::any_of(selected.begin(), selected.end(), [](const Catch::TestCase& test) {
    return std::find(test.lcaseTags.begin(), test.lcaseTags.end(), "gpu") != test.lcaseTags.end();
  });
}

}  // namespace

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
  const Catch::ConfigData& data = session.configData();
  const bool listing = data.listTests || data.listTestNamesOnly || data.listTags ||
                       data.listReporters || data.showHelp;
  if (!listing && selects_gpu_tests(session)) {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
      std::printf("skipped: no CUDA device (%s)\n",
                  status != cudaSuccess ? cudaGetErrorString(status) : "none found");
      return 77;
    }
  }
  return session.run();
}
