#include "cli/simulate_command.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/number_flags.hpp"
#include "cli/plan_options.hpp"
#include "cli/simulate_report.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "sim/compute_model.hpp"
#include "sim/simulate.hpp"
#include "sim/trace.hpp"
#include "topologies/device_spec.hpp"

namespace strata::cli {

namespace {

constexpr const char* kCommandLine = "command line";

struct SimulateCommandOptions {
  PlanFlags flags;
  std::optional<std::string> graph_mode;  // default: folded, or full for stragglers and mixes
  std::vector<std::string> slow_ranks;    // RANK:FACTOR
  std::vector<std::string> rank_devices;  // FIRST-LAST:DEVICE
  std::optional<std::string> price;       // USD per GPU-hour
  std::string calibration_path;
  std::string json_path;
  std::string trace_path;
  bool no_fast_forward = false;
};

InputError rank_out_of_range(const std::string& flag, const std::string& value, int64_t rank,
                             int64_t gpus) {
  return InputError(kCommandLine, flag,
                    fmt::format("'{}': rank {} is outside the plan's {} GPUs", value, rank, gpus),
                    fmt::format("use ranks from 0 to {}", gpus - 1));
}

// "3:1.5": rank 3 computes 1.5 times slower.
SlowRank parse_slow_rank(const std::string& text, int64_t gpus) {
  const auto fail = [&text](const std::string& problem) {
    return InputError(kCommandLine, "--slow-rank", fmt::format("'{}': {}", text, problem),
                      "write RANK:FACTOR, e.g. 3:1.5 (rank 3 computes 1.5 times slower)");
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw fail("no ':' between RANK and FACTOR");
  const std::optional<int64_t> rank = parse_int(std::string_view(text).substr(0, colon));
  if (!rank || *rank < 0) throw fail("RANK must be a whole number >= 0");
  const std::optional<double> factor = parse_number(std::string_view(text).substr(colon + 1));
  // A slowdown beyond 1000x describes no real straggler, and would overflow the engine's clock.
  if (!factor || !(*factor >= 1 && *factor <= 1000)) throw fail("FACTOR must be from 1 to 1000");
  if (*rank >= gpus) throw rank_out_of_range("--slow-rank", text, *rank, gpus);
  return {*rank, *factor};
}

// A device zoo name or a path to a device JSON file; an unknown name is refused naming the flag.
DeviceSpec rank_device_spec(const std::string& text, const std::string& name) {
  const std::vector<std::string> zoo = zoo_device_names();
  std::error_code error;
  if (std::find(zoo.begin(), zoo.end(), name) == zoo.end() &&
      !std::filesystem::is_regular_file(name, error)) {
    throw InputError(kCommandLine, "--rank-device",
                     fmt::format("'{}': unknown device '{}': it is not in the zoo and no file "
                                 "exists at that path; the zoo has: {}",
                                 text, name, fmt::join(zoo, ", ")),
                     "use one of the zoo names or a path to a device JSON file");
  }
  return load_device(name);
}

// "0-3:h100-sxm" (ranks 0 to 3) or "5:b200" (rank 5 alone).
RankDevice parse_rank_device(const std::string& text, int64_t gpus) {
  const auto fail = [&text](const std::string& problem) {
    return InputError(kCommandLine, "--rank-device", fmt::format("'{}': {}", text, problem),
                      "write FIRST-LAST:DEVICE with a device zoo name or file, e.g. "
                      "0-7:h100-sxm");
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon + 1 == text.size())
    throw fail("no ':' between the ranks and the DEVICE");
  const std::string_view ranks = std::string_view(text).substr(0, colon);
  const size_t dash = ranks.find('-');
  const std::optional<int64_t> first = parse_int(ranks.substr(0, dash));
  const std::optional<int64_t> last =
      dash == std::string_view::npos ? first : parse_int(ranks.substr(dash + 1));
  if (!first || !last || *first < 0 || *last < *first)
    throw fail("FIRST-LAST must be whole numbers with 0 <= FIRST <= LAST");
  if (*last >= gpus) throw rank_out_of_range("--rank-device", text, *last, gpus);
  return {*first, *last, rank_device_spec(text, text.substr(colon + 1))};
}

// Everything but the calibration and the price: what the flags ask of the simulator.
SimOptions parse_rank_options(const SimulateCommandOptions& options, int64_t gpus) {
  SimOptions sim;
  for (const std::string& text : options.slow_ranks) {
    const SlowRank slow = parse_slow_rank(text, gpus);
    for (const SlowRank& earlier : sim.slow_ranks) {
      if (earlier.rank == slow.rank) {
        throw InputError(kCommandLine, "--slow-rank",
                         fmt::format("'{}': rank {} is given twice", text, slow.rank),
                         "give each rank once");
      }
    }
    sim.slow_ranks.push_back(slow);
  }
  for (const std::string& text : options.rank_devices) {
    RankDevice range = parse_rank_device(text, gpus);
    for (const RankDevice& earlier : sim.rank_devices) {
      if (range.first <= earlier.last && earlier.first <= range.last) {
        throw InputError(kCommandLine, "--rank-device",
                         fmt::format("'{}': ranks {}-{} overlap ranks {}-{} given before", text,
                                     range.first, range.last, earlier.first, earlier.last),
                         "give each rank one device");
      }
    }
    sim.rank_devices.push_back(std::move(range));
  }
  return sim;
}

// --graph, defaulting to full when stragglers or mixed devices need every rank.
GraphMode graph_mode(const SimulateCommandOptions& options) {
  const bool needs_full = !options.slow_ranks.empty() || !options.rank_devices.empty();
  if (!options.graph_mode) return needs_full ? GraphMode::kFull : GraphMode::kFolded;
  if (*options.graph_mode == "full") return GraphMode::kFull;
  if (*options.graph_mode != "folded") {
    throw InputError(kCommandLine, "--graph",
                     fmt::format("unknown graph mode '{}'", *options.graph_mode),
                     "use folded (one rank per pipeline stage, the default) or full (every rank)");
  }
  if (needs_full) {
    const char* flag = options.slow_ranks.empty() ? "--rank-device" : "--slow-rank";
    throw InputError(kCommandLine, flag,
                     "needs the full task graph (every rank), but --graph folded simulates one "
                     "rank per pipeline stage",
                     fmt::format("drop --graph folded ({} selects the full graph) or write "
                                 "--graph full",
                                 flag));
  }
  return GraphMode::kFolded;
}

int run_simulate(const SimulateCommandOptions& options) {
  const GraphMode mode = graph_mode(options);
  std::optional<Calibration> calibration;
  if (!options.calibration_path.empty()) calibration = load_calibration(options.calibration_path);
  const PlanInputs inputs =
      resolve_plan_inputs(options.flags, calibration ? calibration->cluster : std::nullopt);
  SimOptions sim = parse_rank_options(options, inputs.plan.gpus());
  if (options.price) sim.price_usd_per_gpu_hour = parse_price(*options.price);
  sim.calibration = std::move(calibration);
  sim.fast_forward = !options.no_fast_forward;

  const CompiledPlan compiled = compile_plan(inputs.model, inputs.cluster, inputs.plan, mode);
  if (!compiled.validation.ok()) {
    std::string errors;
    for (const auto& error : compiled.validation.errors) errors += "\n  " + error;
    STRATA_ASSERT(false, "the compiled task graph breaks its invariants:" + errors);
  }
  const SimResult result = simulate(compiled, sim);

  // Render every output, then write them all or none, then report.
  std::vector<OutputFile> outputs;
  if (!options.json_path.empty()) {
    outputs.push_back(
        {options.json_path, simulate_report_json(compiled, sim, result).dump(2) + "\n"});
  }
  if (!options.trace_path.empty())
    outputs.push_back({options.trace_path, trace_json(compiled, result)});
  write_files_atomically(outputs);
  std::fputs(simulate_summary(compiled, sim, result).c_str(), stdout);
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, std::function<int()>& run) {
  auto options = std::make_shared<SimulateCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate",
      "Simulate one training step of a plan on a model of the cluster: step time, throughput, "
      "MFU, bubbles, communication, memory and cost");
  add_plan_flags(*command, options->flags);
  command
      ->add_option("--graph", options->graph_mode,
                   "Task graph: folded (one rank per stage, the default) or full (every rank; "
                   "the default with --slow-rank or --rank-device)")
      ->type_name("folded|full");
  command
      ->add_option("--slow-rank", options->slow_ranks,
                   "RANK's compute runs FACTOR (>= 1) times slower, e.g. 3:1.5 (repeatable; "
                   "full graph)")
      ->type_name("RANK:FACTOR");
  command
      ->add_option("--rank-device", options->rank_devices,
                   "Ranks FIRST to LAST run on DEVICE (a device zoo name or JSON file), e.g. "
                   "0-7:a100-80gb (repeatable; full graph)")
      ->type_name("FIRST-LAST:DEVICE");
  command
      ->add_option("--price", options->price,
                   "US dollars per GPU-hour for the cost (default: the cluster's)")
      ->type_name("USD_PER_GPU_HOUR");
  command
      ->add_option("--calibration", options->calibration_path,
                   "Measured efficiency tables (JSON, as strata calibrate writes them); a file "
                   "that describes its host (strata calibrate --backend cpu) also serves as the "
                   "cluster when --cluster is not given")
      ->type_name("FILE");
  command->add_option("--json", options->json_path, "Write the report as JSON")->type_name("FILE");
  command
      ->add_option("--trace", options->trace_path,
                   "Write the step as a Chrome trace (open it in ui.perfetto.dev)")
      ->type_name("FILE");
  command->add_flag("--no-fast-forward", options->no_fast_forward,
                    "Simulate every micro-batch of the steady state instead of copying the "
                    "periods that repeat exactly (the same step either way; for checking)");
  command->callback([options, &run] { run = [options] { return run_simulate(*options); }; });
}

}  // namespace strata::cli
