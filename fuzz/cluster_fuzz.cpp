// Harness for topologies/cluster_reader.cpp: a cluster file as `--cluster PATH` reads it
// (load_cluster, through read_json_file), its device a zoo name or an inline device object.

#include "fuzz/fuzz_support.hpp"
#include "topologies/cluster_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return strata::fuzz::run_reader([&] {
    strata::load_cluster(
        strata::fuzz::scratch().write("cluster.json", strata::fuzz::as_text(data, size)));
  });
}
