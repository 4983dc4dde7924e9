// strata_bench_search: how fast `strata search` ranks a plan space, on the search issue's
// workloads (every plan event-simulated or pruned by a proven bound; no formula-only ranking):
//  (a) GPT-3 175B on 1024 H100s, global batch 1536, seq 2048: target, the whole search under 10 s
//      on the 2-core reference machine;
//  (b) Llama 3 405B on 16,384 H100s, global batch 2048, seq 8192 (Llama 3's 16M tokens per step);
//  (c) DeepSeek-V3 (without its MTP module) on 2048 H100s, global batch 4096, seq 4096, with
//      Megatron-LM's all-to-all dispatcher and grouped GEMMs, ep and etp enumerated: target < 60 s
//      on the 2-core reference machine.
// Prints the plans enumerated, refused, out of memory, skipped by the step-time bound, stopped at
// the horizon and simulated, the wall time (and the part spent compiling and simulating), plans
// compiled per second, and the best plan. Usage: strata_bench_search [a|b|c] [--jobs N]
// (default: both, every core). Figures are printed, not asserted.

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/search_report.hpp"
#include "models/model_reader.hpp"
#include "sim/search.hpp"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

// Times the batches it hands to the thread evaluator.
class TimedEvaluator : public PlanEvaluator {
 public:
  explicit TimedEvaluator(ThreadEvaluator& inner) : inner_(inner) {}
  std::vector<PlanOutcome> evaluate(std::span<const PlanOutcome> batch) override {
    const auto begin = Clock::now();
    std::vector<PlanOutcome> outcomes = inner_.evaluate(batch);
    seconds_ += since(begin);
    return outcomes;
  }
  double seconds() const { return seconds_; }

 private:
  ThreadEvaluator& inner_;
  double seconds_ = 0;
};

void run_case(const char* label, const std::string& model, int64_t gpus, int64_t global_batch,
              int64_t seq_len, int64_t jobs, const char* target,
              const ParallelPlan& stack = ParallelPlan{}) {
  SearchSpace space;
  space.stack = stack;
  space.model = load_model(model);
  space.cluster = load_cluster("dgx-h100");
  space.gpus = {gpus};
  space.global_batch = global_batch;
  space.seq_len = seq_len;
  SearchOptions options;
  options.threads = jobs;
  ThreadEvaluator threads(space, options);
  TimedEvaluator timed(threads);

  const auto begin = Clock::now();
  const SearchResult result = run_search(space, options, timed);
  const double wall_s = since(begin);

  const SearchCounts& c = result.counts;
  const int64_t compiled = c.over_memory_plan + c.stopped + c.simulated;
  fmt::print("({}) {} on {} H100s, global batch {}, seq {}, top {} by step time, {} thread(s)\n",
             label, model, gpus, global_batch, seq_len, options.top,
             jobs > 0 ? jobs : static_cast<int64_t>(std::thread::hardware_concurrency()));
  fmt::print("  enumerated        {:>8}\n", c.enumerated);
  fmt::print("  refused           {:>8}  (validate_plan)\n", c.refused);
  fmt::print(
      "  out of memory     {:>8}  ({} by the lower bound, {} by the memory plan, {} by "
      "the simulated timeline)\n",
      c.over_memory_bound + c.over_memory_plan + c.over_memory_simulated, c.over_memory_bound,
      c.over_memory_plan, c.over_memory_simulated);
  fmt::print("  skipped by bound  {:>8}  (step-time lower bound above the 10th best)\n",
             c.skipped_by_bound);
  fmt::print("  stopped           {:>8}  (simulated until past the step they had to beat)\n",
             c.stopped);
  fmt::print("  simulated         {:>8}  (to the end of the step)\n", c.simulated);
  fmt::print(
      "  wall              {:>8.2f} s  ({:.2f} s compiling and simulating batches, {:.2f} s "
      "enumerating and bounding)  target: {}\n",
      wall_s, timed.seconds(), wall_s - timed.seconds(), target);
  fmt::print("  plans per second  {:>8.1f} compiled and simulated (wall), {:.0f} enumerated\n",
             static_cast<double>(compiled) / wall_s, static_cast<double>(c.enumerated) / wall_s);
  if (!result.ranked.empty()) {
    const PlanOutcome& best = result.ranked.front();
    fmt::print("  best              {}: {:.3f} s per step, MFU {:.1f}%\n",
               cli::plan_cell(best.plan), best.figures.step_time_s, 100 * best.figures.mfu);
  }
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  std::vector<std::string> cases;
  int64_t jobs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--jobs" && i + 1 < argc) {
      jobs = std::stoll(argv[++i]);
    } else {
      cases.push_back(arg);
    }
  }
  if (cases.empty()) cases = {"a", "b", "c"};
  for (const std::string& c : cases) {
    if (c == "a") {
      strata::run_case("a", "gpt3-175b", 1024, 1536, 2048, jobs, "< 10 s on 2 cores");
    } else if (c == "b") {
      strata::run_case("b", "llama3-405b", 16384, 2048, 8192, jobs, "none (reported)");
    } else if (c == "c") {
      strata::ParallelPlan stack;
      stack.moe_dispatcher = strata::MoeDispatcher::kAllToAll;
      stack.grouped_gemm = true;
      strata::run_case(
          "c", std::string(STRATA_SOURCE_DIR) + "/scenarios/models/deepseek-v3-without-mtp.json",
          2048, 4096, 4096, jobs, "< 60 s on 2 cores", stack);
    } else {
      std::fprintf(stderr, "usage: strata_bench_search [a|b|c]... [--jobs N]\n");
      return 2;
    }
  }
  return 0;
}
