// Harness for sim/calibration_json.cpp: a calibration file as `strata simulate --calibration FILE`
// reads it (load_calibration, through read_json_file): efficiency tables per device and the
// measured host as a cluster object.

#include "fuzz/fuzz_support.hpp"
#include "sim/compute_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return strata::fuzz::run_reader([&] {
    strata::load_calibration(
        strata::fuzz::scratch().write("calibration.json", strata::fuzz::as_text(data, size)));
  });
}
