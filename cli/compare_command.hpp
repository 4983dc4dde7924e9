#pragma once
// `strata compare PREDICTED MEASURED`: a predicted step against a measured one, part by part, so
// that a total that agrees by cancellation shows. Both are Chrome trace-event JSON (`strata
// simulate --trace`, `strata train --trace`), read as `strata view` reads them and summarized with
// the simulator's definitions (viewer/trace_summary.hpp). It prints, for the whole step and for
// each pipeline stage, the compute time by phase (forward, backward, recompute, optimizer), busy
// and bubble time and the exposed communication per axis (tp, pp, dp), predicted and measured,
// and the error predicted / measured - 1, as `strata validate` states it; --json FILE writes the
// same rows.

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

void add_compare_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
