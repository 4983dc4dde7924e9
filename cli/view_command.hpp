#pragma once
// `strata view TRACE.json [SECOND.json]`: the timeline viewer (viewer/), in a window, or headless
// with --screenshot PNG (EGL on Mesa's surfaceless platform; no display server needed).

#include <functional>

#include <CLI/CLI.hpp>

namespace strata::cli {

void add_view_command(CLI::App& app, std::function<int()>& run);

}  // namespace strata::cli
