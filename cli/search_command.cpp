#include "cli/search_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "cli/number_flags.hpp"
#include "cli/plan_options.hpp"
#include "cli/search_report.hpp"
#include "cli/search_workers.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/parallel_for.hpp"
#include "models/model_reader.hpp"
#include "plan/framework.hpp"
#include "plan/plan_json.hpp"
#include "sim/trace.hpp"

namespace strata::cli {

namespace {

constexpr const char* kCommandLine = "command line";

struct SearchCommandOptions {
  std::string scenario;
  std::string model;
  std::string cluster;
  std::vector<int64_t> gpus;
  std::optional<int64_t> global_batch, seq_len;
  std::optional<std::string> dtype;
  bool allow_cross_node_tp = false;
  std::optional<int64_t> max_cp;  // --max-cp
  PlanFlags stack;                // --framework, --attention, overlaps, --fp8, --host-dispatch, ...
  int64_t top = 10;
  std::string objective = "time";
  bool pareto = false;
  std::optional<std::string> train_tokens;
  std::optional<std::string> price;
  std::string calibration_path;
  bool include_oom = false;
  bool exhaustive = false;
  int64_t jobs = 0;
  std::string csv_path;
  std::string json_path;
  std::string trace_path;
};

InputError missing(const char* flag, const char* what) {
  return InputError(kCommandLine, flag, fmt::format("no {} given", what),
                    fmt::format("give {} (or --scenario FILE, which names it)", flag));
}

// Model, cluster, GPU counts, batch, sequence and dtype: a scenario's, overridden by the flags.
SearchSpace search_space(const SearchCommandOptions& o) {
  SearchSpace space;
  std::optional<PlanInputs> scenario;
  if (!o.scenario.empty()) {
    PlanFlags flags = o.stack;
    flags.scenario = o.scenario;
    scenario = resolve_plan_inputs(flags);
    space.stack = scenario->plan;
  } else {
    if (o.stack.framework) {
      space.stack = apply_framework(
          space.stack, parse_framework(*o.stack.framework, kCommandLine, "--framework"));
    }
    apply_stack_flags(o.stack, space.stack);
  }
  if (!o.model.empty()) {
    space.model = load_model(o.model);
  } else if (scenario) {
    space.model = scenario->model;
  } else {
    throw missing("--model", "model");
  }
  if (!o.cluster.empty()) {
    space.cluster = load_cluster(o.cluster);
  } else if (scenario) {
    space.cluster = scenario->cluster;
  } else {
    throw missing("--cluster", "cluster");
  }
  space.gpus = o.gpus;
  if (space.gpus.empty() && scenario) space.gpus = {scenario->plan.gpus()};
  if (space.gpus.empty()) throw missing("--gpus", "GPU count");
  std::set<int64_t> seen;
  for (const int64_t gpus : space.gpus) {
    if (gpus < 1 || gpus > kMaxRanks || !seen.insert(gpus).second) {
      throw InputError(
          kCommandLine, "--gpus",
          fmt::format("{} is {}", gpus,
                      gpus < 1 || gpus > kMaxRanks ? "not a GPU count" : "given twice"),
          fmt::format("give distinct GPU counts from 1 to {}, e.g. --gpus "
                      "512,1024,2048",
                      kMaxRanks));
    }
    if (space.cluster.max_nodes > 0 && space.cluster.nodes_for(gpus) > space.cluster.max_nodes) {
      throw InputError(
          kCommandLine, "--gpus",
          fmt::format("{} GPUs need {} nodes; {} has {}", gpus, space.cluster.nodes_for(gpus),
                      space.cluster.name, space.cluster.max_nodes),
          "ask for fewer GPUs or use a larger cluster");
    }
  }
  const auto batch = o.global_batch
                         ? o.global_batch
                         : (scenario ? std::optional(scenario->plan.global_batch) : std::nullopt);
  const auto seq =
      o.seq_len ? o.seq_len : (scenario ? std::optional(scenario->plan.seq_len) : std::nullopt);
  if (!batch) throw missing("--global-batch", "global batch");
  if (!seq) throw missing("--seq-len", "sequence length");
  const bool batch_bad = *batch < 1 || *batch > kMaxSequences;
  if (batch_bad || *seq < 1 || *seq > kMaxSeqLen) {
    const int64_t high = batch_bad ? kMaxSequences : kMaxSeqLen;
    throw InputError(kCommandLine, batch_bad ? "--global-batch" : "--seq-len",
                     fmt::format("must be in [1, {}], found {}", high, batch_bad ? *batch : *seq),
                     fmt::format("give a whole number from 1 to {}", high));
  }
  space.global_batch = *batch;
  space.seq_len = *seq;
  space.dtype = o.dtype ? parse_dtype(*o.dtype, kCommandLine, "--dtype")
                        : (scenario ? scenario->plan.dtype : DType::kBf16);
  space.allow_cross_node_tp = o.allow_cross_node_tp;
  if (o.max_cp) {
    if (*o.max_cp < 1 || *o.max_cp > kMaxRanks) {
      throw InputError(kCommandLine, "--max-cp",
                       fmt::format("must be in [1, {}], found {}", kMaxRanks, *o.max_cp),
                       "give the largest context-parallel size to try, e.g. 8");
    }
    space.stack.cp = *o.max_cp;
  }
  // What the stack needs of the device (FP8) holds for every plan or none: one error, exit 2.
  validate_plan_on_device(space.stack, space.cluster.device,
                          o.scenario.empty() ? kCommandLine : o.scenario);
  return space;
}

Objective parse_objective(const std::string& text) {
  if (text == "time") return Objective::kTime;
  if (text == "cost") return Objective::kCost;
  if (text == "tokens-per-dollar") return Objective::kTokensPerDollar;
  throw InputError(kCommandLine, "--objective", fmt::format("unknown objective '{}'", text),
                   "use time, cost or tokens-per-dollar");
}

// "15T", "300B", "2.5e12": a token count > 0 (K, M, B, T: 1e3, 1e6, 1e9, 1e12).
double parse_token_count(const std::string& text) {
  double scale = 1;
  std::string number = text;
  if (!number.empty()) {
    const char suffix = number.back();
    const std::string suffixes = "KMBT";
    const size_t at = suffixes.find(suffix);
    if (at != std::string::npos) {
      scale = std::pow(1e3, static_cast<double>(at + 1));
      number.pop_back();
    }
  }
  const std::optional<double> value = parse_number(number);
  if (!value || *value <= 0) {
    throw InputError(kCommandLine, "--train-tokens",
                     fmt::format("'{}' is not a token count > 0", text),
                     "give a number of tokens, e.g. 15T, 300B or 2.5e12");
  }
  return *value * scale;
}

SearchOptions search_options(const SearchCommandOptions& o) {
  SearchOptions options;
  options.objective = parse_objective(o.objective);
  if (o.top < 1) {
    throw InputError(kCommandLine, "--top", fmt::format("{} plans cannot be shown", o.top),
                     "give --top 1 or more");
  }
  options.top = o.top;
  options.include_oom = o.include_oom;
  options.exhaustive = o.exhaustive;
  if (o.price) options.sim.price_usd_per_gpu_hour = parse_price(*o.price);
  if (!o.calibration_path.empty()) options.sim.calibration = load_calibration(o.calibration_path);
  if (o.jobs < 0) {
    throw InputError(kCommandLine, "--jobs", fmt::format("{} threads", o.jobs),
                     "give a thread count >= 1, or 0 for every core");
  }
  options.threads = o.jobs;
  return options;
}

// A one-line progress bar on stderr, redrawn after each plan; only when stderr is a terminal.
// The search's progress on a terminal's stderr: plans decided of the candidates (simulated, or
// skipped by the bound), the time so far and an estimate of the time left; cleared before the
// report prints.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  ~ProgressBar() { clear(); }
  void plan_done() { draw(++decided_, candidates_); }
  void batch_done(int64_t decided, int64_t candidates) {
    decided_ = decided;
    candidates_ = candidates;
    draw(decided_, candidates_);
  }
  void clear() {
    if (drawn_) std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }

 private:
  void draw(int64_t done, int64_t total) {
    if (!enabled_ || total == 0) return;
    done = std::min(done, total);
    constexpr int kWidth = 30;
    const auto filled = static_cast<int>(kWidth * done / total);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const std::string left =
        done > 0 ? fmt::format(", about {:.0f} s left", elapsed / static_cast<double>(done) *
                                                            static_cast<double>(total - done))
                 : "";
    fmt::print(stderr, "\r\033[Ksearch [{:=<{}}{:<{}}] {}/{} plans decided, {:.0f} s{}", "", filled,
               "", kWidth - filled, done, total, elapsed, left);
    std::fflush(stderr);
    drawn_ = true;
  }

  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool drawn_ = false;
  int64_t decided_ = 0;
  int64_t candidates_ = 0;
  Clock::time_point start_ = Clock::now();
};

// Compiles the shown plans again with the graph validator (the search skips it) and asserts they
// pass; the best plan is simulated again for its trace, which must give the same figures.
std::string checked_best_trace(const SearchSpace& space, const SearchOptions& options,
                               const SearchResult& result, bool want_trace) {
  const size_t shown = std::min(result.ranked.size(), static_cast<size_t>(options.top));
  std::string trace;
  parallel_for(shown, std::thread::hardware_concurrency(), [&](size_t i) {
    const PlanOutcome& outcome = result.ranked[i];
    const CompiledPlan compiled =
        compile_plan(space.model, space.cluster, outcome.plan, GraphMode::kFolded);
    STRATA_ASSERT(
        compiled.validation.ok(),
        "a plan the search ranked breaks the task graph's invariants: " + plan_cell(outcome.plan));
    if (i != 0 || !want_trace) return;
    const SimResult again = simulate(compiled, options.sim);
    STRATA_ASSERT(again.step_time_s == outcome.figures.step_time_s,
                  "simulating the best plan again gave another step time");
    trace = trace_json(compiled, again);
  });
  return trace;
}

int run_search_command(const SearchCommandOptions& o) {
  const SearchSpace space = search_space(o);
  const SearchOptions options = search_options(o);
  std::optional<double> train_tokens;
  if (o.train_tokens) train_tokens = parse_token_count(*o.train_tokens);

  SearchWorkers workers(space, options);
  ProgressBar progress(workers.is_root() && isatty(STDERR_FILENO) != 0);
  workers.set_on_plan_done([&progress] { progress.plan_done(); });
  const SearchResult result =
      run_search(space, options, workers.evaluator(),
                 [&progress](int64_t done, int64_t total) { progress.batch_done(done, total); });
  if (!workers.is_root()) return 0;
  progress.clear();

  const SearchReportInputs report{space, options, train_tokens, o.pareto};
  if (result.ranked.empty()) {
    // No answer: the counts say why on stdout, the error line what to change; no output file.
    std::fputs(search_summary(report, result).c_str(), stdout);
    std::fflush(stdout);
    refuse_empty_search(result);
  }
  const std::string trace = checked_best_trace(space, options, result, !o.trace_path.empty());
  std::vector<OutputFile> outputs;
  if (!o.csv_path.empty()) outputs.push_back({o.csv_path, search_csv(report, result)});
  if (!o.json_path.empty())
    outputs.push_back({o.json_path, search_json(report, result).dump(2) + "\n"});
  if (!o.trace_path.empty() && !trace.empty()) outputs.push_back({o.trace_path, trace});
  write_files_atomically(outputs);
  std::string summary = search_summary(report, result);
  const size_t shown = std::min(result.ranked.size(), static_cast<size_t>(options.top));
  if (shown > 0) {
    summary += fmt::format("checked  the {} plan(s) shown pass the task graph validator{}\n", shown,
                           o.trace_path.empty() ? "" : "; #1's trace: " + o.trace_path);
  }
  std::fputs(summary.c_str(), stdout);
  return 0;
}

}  // namespace

void add_search_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<SearchCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "search",
      "Rank every DP x TP x PP x ZeRO plan of a model on N GPUs by its simulated step: "
      "step time, cost, MFU, memory");
  command
      ->add_option("--scenario", o->scenario,
                   "Take the model, cluster, GPUs, global batch, sequence and dtype from a "
                   "scenario file (flags override)")
      ->type_name("FILE");
  command->add_option("--model", o->model, "Model: a zoo name or a JSON file")->type_name("NAME");
  command->add_option("--cluster", o->cluster, "Cluster: a zoo name or a JSON file")
      ->type_name("NAME");
  command
      ->add_option("--gpus", o->gpus,
                   "GPU count, or several to compare cluster sizes: 512,1024,2048")
      ->delimiter(',')
      ->type_name("N[,N...]");
  command->add_option("--global-batch", o->global_batch, "Sequences per step")->type_name("N");
  command->add_option("--seq-len", o->seq_len, "Tokens per sequence")->type_name("N");
  command->add_option("--dtype", o->dtype, "Training dtype (default bf16)")
      ->type_name("bf16|fp16|fp32");
  add_stack_flags(*command, o->stack);
  command->footer(zoo_help());
  command->add_flag("--allow-cross-node-tp", o->allow_cross_node_tp,
                    "Let TP span nodes (by default tp is at most the GPUs per node)");
  command
      ->add_option("--max-cp", o->max_cp,
                   "Context parallelism to try: every cp dividing N (default 1, or the "
                   "scenario's cp); --cp-comm-type picks the KV exchange")
      ->type_name("N");
  command->add_option("--top", o->top, "Plans to show (default 10)")->type_name("K");
  command
      ->add_option("--objective", o->objective,
                   "Rank by step time (default), cost per token, or tokens per dollar")
      ->type_name("time|cost|tokens-per-dollar");
  command->add_flag("--pareto", o->pareto,
                    "Print the Pareto front of step time against cost (and GPUs)");
  command
      ->add_option("--train-tokens", o->train_tokens,
                   "Add the days, GPU-hours and dollars to train this many tokens, e.g. 15T")
      ->type_name("T");
  command->add_option("--price", o->price, "US dollars per GPU-hour (default: the cluster's)")
      ->type_name("USD_PER_GPU_HOUR");
  command
      ->add_option("--calibration", o->calibration_path,
                   "Measured efficiency tables (JSON, as strata calibrate writes them)")
      ->type_name("FILE");
  command->add_flag("--include-oom", o->include_oom,
                    "Simulate and rank plans that do not fit in memory too");
  command->add_flag("--exhaustive", o->exhaustive,
                    "Simulate every plan that fits (no step-time lower bound)");
  command->add_option("--jobs", o->jobs, "Threads per process (default 0: every core)")
      ->type_name("N");
  command->add_option("--csv", o->csv_path, "Write every simulated plan as CSV")->type_name("FILE");
  command->add_option("--json", o->json_path, "Write every simulated plan as JSON")
      ->type_name("FILE");
  command
      ->add_option("--trace", o->trace_path,
                   "Write the best plan's step as a Chrome trace (ui.perfetto.dev)")
      ->type_name("FILE");
  command->callback([o, &run] { run = [o] { return run_search_command(*o); }; });
}

}  // namespace strata::cli
