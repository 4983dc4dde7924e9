// Harness for topologies/device_reader.cpp: a device file as load_device reads a path (a cluster's
// "device" names one), through read_json_file.

#include "fuzz/fuzz_support.hpp"
#include "topologies/device_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return strata::fuzz::run_reader([&] {
    strata::load_device(
        strata::fuzz::scratch().write("device.json", strata::fuzz::as_text(data, size)));
  });
}
