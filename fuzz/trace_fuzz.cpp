// Harness for viewer/trace_model.hpp: a Chrome trace as `strata view TRACE` reads it (parse_trace,
// the text that load_trace reads from the file), then the summary the viewer computes for every
// trace it opens (viewer/trace_summary.hpp: busy, exposed communication and bubble time per rank
// and stage).

#include "fuzz/fuzz_support.hpp"
#include "viewer/trace_model.hpp"
#include "viewer/trace_summary.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return strata::fuzz::run_reader([&] {
    const strata::viewer::Trace trace =
        strata::viewer::parse_trace(strata::fuzz::as_text(data, size), "trace.json");
    strata::viewer::summarize(trace);
  });
}
