#pragma once
// The four A100 configurations of Korthikanti et al. 2022 (Table 3 and 5;
// data/reference/korthikanti2022.csv) as plans, for the reference test and
// bench/reference_compare: GPT-3-style models (the zoo's gpt3-175b architecture with each row's
// layers, hidden size and heads; vocabulary 51200, sequence 2048) on DGX A100 nodes, data
// parallel size 1, in the paper's two modes: the tensor-parallel baseline with full activation
// recomputation, and sequence parallelism with selective recomputation ("present work").

#include <string>
#include <vector>

#include "models/model_reader.hpp"
#include "plan/framework.hpp"
#include "plan/parallel_plan.hpp"
#include "tests/reference_csv.hpp"

namespace strata::test {

struct KorthikantiCase {
  std::string name;
  ModelSpec model;
  ParallelPlan full_recompute;  // baseline: full activation recomputation, no SP
  ParallelPlan selective;       // sequence parallel + selective recomputation
  double measured_full_s = 0;
  double measured_selective_s = 0;
  double measured_increase_pct = 0;  // throughput increase of selective over full
};

inline std::vector<KorthikantiCase> korthikanti_cases() {
  std::vector<KorthikantiCase> cases;
  for (const CsvRow& row : read_reference_csv("korthikanti2022.csv")) {
    if (row.at("iter_time_full_recompute_s").empty() ||
        row.at("iter_time_sp_plus_selective_s").empty()) {
      continue;  // the DP=8 rows give no iteration time for both modes
    }
    KorthikantiCase c;
    c.name = row.at("model");
    c.model = load_model("gpt3-175b");
    c.model.name = c.name;
    c.model.layers = std::stoll(row.at("layers"));
    c.model.hidden = std::stoll(row.at("hidden_size"));
    c.model.heads = std::stoll(row.at("attention_heads"));
    c.model.kv_heads = c.model.heads;
    c.model.ffn_hidden = 4 * c.model.hidden;
    c.model.vocab = std::stoll(row.at("vocab_size"));
    c.model.max_seq = std::stoll(row.at("seq_len"));
    // Megatron-LM as it ran in 2022: unfused attention, no communication overlap.
    ParallelPlan plan = apply_framework(ParallelPlan{}, Framework::kMegatron2022);
    plan.tp = std::stoll(row.at("tp"));
    plan.pp = std::stoll(row.at("pp"));
    plan.dp = std::stoll(row.at("dp"));
    plan.micro_batch = std::stoll(row.at("micro_batch_size"));
    plan.global_batch = std::stoll(row.at("global_batch_size"));
    plan.seq_len = std::stoll(row.at("seq_len"));
    // The note of the 175B and 530B rows: interleaved schedule, 3 model chunks per stage.
    if (row.at("note").find("3 model chunks per stage") != std::string::npos) {
      plan.schedule = ScheduleKind::kInterleaved;
      plan.vpp = 3;
    }
    c.full_recompute = plan;
    c.full_recompute.recompute = RecomputeKind::kFull;
    c.selective = plan;
    c.selective.recompute = RecomputeKind::kSelective;
    c.selective.sequence_parallel = true;
    c.measured_full_s = std::stod(row.at("iter_time_full_recompute_s"));
    c.measured_selective_s = std::stod(row.at("iter_time_sp_plus_selective_s"));
    c.measured_increase_pct = std::stod(row.at("throughput_increase_pct"));
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace strata::test
