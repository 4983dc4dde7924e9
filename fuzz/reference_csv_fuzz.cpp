// Harness for common/csv.hpp and sim/published_runs.hpp: a reference table as
// `strata validate --reference DIR` reads it (parse_csv), then as the published runs of each
// dataset, since the file could be any of the four tables (korthikanti2022.csv,
// nemo_h100_perf.csv, torchtitan_runs.csv, llmc_gpt2.csv).

#include "common/csv.hpp"
#include "fuzz/fuzz_support.hpp"
#include "sim/published_runs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = strata::fuzz::as_text(data, size);
  for (const strata::PublishedDataset& dataset : strata::published_datasets()) {
    strata::fuzz::run_reader([&] {
      strata::published_runs(dataset, strata::parse_csv(text, "reference/" + dataset.file));
    });
  }
  return 0;
}
