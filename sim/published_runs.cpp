// The reference tables as published runs (sim/published_runs.hpp).

#include "sim/published_runs.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "common/error.hpp"
#include "models/model_reader.hpp"
#include "plan/framework.hpp"

namespace strata {

namespace {

// One row being read, for values and errors that name the file, row and column.
class RowReader {
 public:
  RowReader(const CsvTable& table, const CsvRow& row, size_t index)
      : table_(table), row_(row), index_(index) {}

  const std::string& text(const std::string& column) const {
    const auto found = row_.find(column);
    if (found == row_.end()) fail(column, "is missing");
    return found->second;
  }
  bool has(const std::string& column) const {
    const auto found = row_.find(column);
    return found != row_.end() && !found->second.empty();
  }
  double number(const std::string& column) const {
    const std::string& value = text(column);
    double out = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), out);
    // from_chars also reads "nan" and "inf", which no measurement is.
    if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(out)) {
      fail(column, fmt::format("'{}' is not a number", value));
    }
    return out;
  }
  // A whole number from 1 to 2^53 (where doubles stop holding every whole number): the range is
  // checked before converting, which is undefined beyond int64_t's range (1e300).
  int64_t count(const std::string& column) const {
    const double value = number(column);
    if (!(value >= 1 && value <= 9007199254740992.0) || value != std::trunc(value)) {
      fail(column, fmt::format("'{}' is not a whole number >= 1", text(column)));
    }
    return static_cast<int64_t>(value);
  }
  std::string source(const std::string& key_column) const {
    return fmt::format("{} row '{}'", file_name(), text(key_column));
  }
  [[noreturn]] void fail(const std::string& column, const std::string& problem) const {
    throw InputError(table_.where, fmt::format("row {} column {}", index_ + 1, column), problem,
                     "restore the reference file from the repository");
  }

 private:
  std::string file_name() const {
    const size_t slash = table_.where.find_last_of('/');
    return "data/reference/" +
           (slash == std::string::npos ? table_.where : table_.where.substr(slash + 1));
  }

  const CsvTable& table_;
  const CsvRow& row_;
  size_t index_;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The unstated recompute mode of a run tuned for speed: every mode, the fastest that fits wins.
std::vector<PlanVariant> recompute_variants(const ParallelPlan& plan) {
  std::vector<PlanVariant> variants;
  for (const RecomputeKind kind :
       {RecomputeKind::kNone, RecomputeKind::kSelective, RecomputeKind::kFull}) {
    ParallelPlan variant = plan;
    variant.recompute = kind;
    variants.push_back({fmt::format("recompute {}", to_string(kind)), variant});
  }
  return variants;
}

// Korthikanti et al. 2022 (korthikanti2022.csv): GPT-3-style models (the zoo's gpt3-175b shape
// with each row's layers, hidden size and heads; the row's vocabulary and sequence) on DGX A100s.
std::vector<PublishedRun> korthikanti_runs(const CsvTable& table) {
  std::vector<PublishedRun> runs;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const RowReader row(table, table.rows[i], i);
    ModelSpec model = load_model("gpt3-175b");
    model.name = row.text("model");
    model.layers = row.count("layers");
    model.hidden = row.count("hidden_size");
    model.heads = row.count("attention_heads");
    model.kv_heads = model.heads;
    model.ffn_hidden = 4 * model.hidden;
    model.vocab = row.count("vocab_size");
    model.max_seq = row.count("seq_len");
    ParallelPlan plan = apply_framework(ParallelPlan{}, Framework::kMegatron2022);
    plan.tp = row.count("tp");
    plan.pp = row.count("pp");
    plan.dp = row.count("dp");
    plan.seq_len = row.count("seq_len");
    const bool batch_stated = row.has("global_batch_size") && row.has("micro_batch_size");
    if (batch_stated) {
      plan.micro_batch = row.count("micro_batch_size");
      plan.global_batch = row.count("global_batch_size");
    }
    // The notes of the 175B and 530B rows: interleaved schedule, 3 model chunks per stage.
    if (contains(row.text("note"), "3 model chunks per stage")) {
      plan.schedule = ScheduleKind::kInterleaved;
      plan.vpp = 3;
    }
    const std::string base = row.text("model");
    const bool full_only = contains(base, "full recompute");
    PublishedRun run;
    run.dataset = "korthikanti2022";
    run.model = model;
    run.cluster = "dgx-a100";
    run.source = row.source("model");
    run.stack = "megatron-2022";
    if (!batch_stated) run.not_modelled = "the row states no batch size";
    const auto add = [&](bool selective, MeasuredFigure figure) {
      PublishedRun mode = run;
      ParallelPlan variant = plan;
      variant.recompute = selective ? RecomputeKind::kSelective : RecomputeKind::kFull;
      variant.sequence_parallel = selective;
      mode.name = full_only ? base
                            : fmt::format("{}, {}", base,
                                          selective ? "sequence parallel + selective recompute"
                                                    : "full recompute");
      mode.variants = {{"", variant}};
      mode.measured = {figure};
      runs.push_back(std::move(mode));
    };
    if (row.has("iter_time_full_recompute_s")) {
      add(false, {RunMetric::kStepTimeS, row.number("iter_time_full_recompute_s")});
    }
    if (row.has("iter_time_sp_plus_selective_s")) {
      add(true, {RunMetric::kStepTimeS, row.number("iter_time_sp_plus_selective_s")});
    } else if (row.has("mfu_pct")) {
      add(!full_only, {RunMetric::kMfu, row.number("mfu_pct") / 100});
    }
  }
  return runs;
}

// The zoo model of a run's model name.
std::string zoo_model_of(const RowReader& row, const std::string& column,
                         std::initializer_list<std::pair<const char*, const char*>> names) {
  const std::string& model = row.text(column);
  for (const auto& [published, zoo] : names) {
    if (model == published) return zoo;
  }
  row.fail(column, fmt::format("'{}' is not a model Strata's zoo holds", model));
}

// NeMo 24.07 on DGX H100 (nemo_h100_perf.csv), with NeMo's performance settings for what the
// table does not state: the distributed optimizer (distributed_fused_adam) with overlapped
// gradient reduction and parameter gathers, sequence parallelism and Transformer Engine's TP
// communication overlap when tp > 1, FP8 hybrid GEMMs.
std::vector<PublishedRun> nemo_runs(const CsvTable& table) {
  std::vector<PublishedRun> runs;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const RowReader row(table, table.rows[i], i);
    PublishedRun run;
    run.dataset = "nemo-h100";
    run.name = fmt::format("{} on {} GPUs", row.text("model"), row.text("gpus"));
    run.model = load_model(zoo_model_of(row, "model",
                                        {{"GPT3-5B", "gpt3-5b"},
                                         {"GPT3-20B", "gpt3-20b"},
                                         {"GPT3-175B", "gpt3-175b"},
                                         {"LLAMA2-7B", "llama2-7b"},
                                         {"LLAMA2-13B", "llama2-13b"},
                                         {"LLAMA2-70B", "llama2-70b"},
                                         {"LLAMA3-8B", "llama3-8b"},
                                         {"LLAMA3-70B", "llama3-70b"},
                                         {"Nemotron-8B", "nemotron-8b"},
                                         {"Nemotron-22B", "nemotron-22b"},
                                         {"Nemotron-340B", "nemotron-340b"}}));
    run.model.dropout = false;
    run.cluster = "dgx-h100";
    run.source = fmt::format("{} on {} GPUs", row.source("model"), row.text("gpus"));
    run.stack =
        "megatron-core (NeMo: distributed optimizer, overlapped gradients and "
        "parameters, sequence parallel and TP overlap with tp > 1, FP8 hybrid)";
    run.measured = {{RunMetric::kTokensPerSPerGpu, row.number("tokens_per_s_per_gpu")}};
    ParallelPlan plan;
    plan.tp = row.count("tp");
    plan.pp = row.count("pp");
    plan.cp = row.count("cp");  // Megatron-Core's default --cp-comm-type p2p
    plan.dp = row.count("gpus") / (plan.tp * plan.pp * plan.cp);
    plan.vpp = row.count("vp");
    if (plan.vpp > 1) plan.schedule = ScheduleKind::kInterleaved;
    plan.micro_batch = row.count("micro_batch_size");
    plan.global_batch = row.count("global_batch_size");
    plan.seq_len = row.count("seq_len");
    plan.zero_stage = 1;
    plan.sequence_parallel = plan.tp > 1;
    plan.overlap.tp_comm = plan.tp > 1;
    plan.overlap.grad_reduce = true;
    plan.overlap.param_gather = true;
    if (row.text("precision") == "FP8") plan.fp8 = Fp8Format::kHybrid;
    run.variants = recompute_variants(plan);
    runs.push_back(std::move(run));
  }
  return runs;
}

// torchtitan (torchtitan_runs.csv): FSDP2 over every GPU; activation checkpointing as torchtitan
// names it: none, full, "selective op" (op-level: torchtitan's policy, selective-op recompute),
// "selective layer" (every second block in full: selective_ac_option "2"); "selective (config
// default)" is op-level, as the llama3 tomls set selective_ac_option = "op".
std::vector<PublishedRun> torchtitan_runs(const CsvTable& table) {
  std::vector<PublishedRun> runs;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const RowReader row(table, table.rows[i], i);
    PublishedRun run;
    run.dataset = "torchtitan";
    run.model = load_model(zoo_model_of(row, "model",
                                        {{"Llama 3 8B", "llama3-8b"},
                                         {"Llama 3.1 8B", "llama3-8b"},
                                         {"Llama 3 70B", "llama3-70b"},
                                         {"Llama 2 13B", "llama2-13b"},
                                         {"Llama 2 70B", "llama2-70b"}}));
    const std::string& gpu = row.text("gpu");
    run.cluster = contains(gpu, "H200") ? "dgx-h200" : "dgx-a100";
    const std::string& checkpointing = row.text("activation_checkpointing");
    const std::string& techniques = row.text("techniques");
    run.name = fmt::format("{} on {} {}, AC {}{}", row.text("model"), row.text("gpus"),
                           contains(gpu, "H200") ? "H200" : "A100", checkpointing,
                           contains(techniques, "Float8") ? ", Float8" : "");
    run.source = fmt::format("{} ({})", row.source("model"), run.name);
    run.stack = "fsdp2";
    ParallelPlan plan = apply_framework(ParallelPlan{}, Framework::kFsdp2);
    plan.dp = row.count("fsdp_shard_degree");
    plan.tp = row.count("tp");
    plan.pp = row.count("pp");
    plan.micro_batch = row.count("local_batch_size");
    plan.global_batch = row.count("global_batch_size");
    plan.seq_len = row.count("seq_len");
    if (contains(checkpointing, "selective layer")) {
      plan.recompute = RecomputeKind::kFull;
      plan.recompute_layers = run.model.layers / plan.pp / 2;
    } else if (contains(checkpointing, "selective")) {
      plan.recompute = RecomputeKind::kSelectiveOp;
    } else if (contains(checkpointing, "full")) {
      plan.recompute = RecomputeKind::kFull;
    } else if (checkpointing != "none") {
      row.fail("activation_checkpointing",
               fmt::format("'{}' is not a mode Strata knows", checkpointing));
    }
    if (contains(techniques, "compile")) plan.host_dispatch = HostDispatch::kCompiled;
    if (contains(techniques, "Float8")) {
      plan.fp8 = Fp8Format::kHybrid;
      plan.fp8_param_gather = contains(techniques, "float8 all-gather");
    }
    run.variants = {{"", plan}};
    run.measured = {{RunMetric::kTokensPerSPerGpu, row.number("tokens_per_s_per_gpu")}};
    if (row.has("peak_memory_gib")) {
      run.measured.push_back({RunMetric::kPeakMemoryGib, row.number("peak_memory_gib")});
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

// llm.c (llmc_gpt2.csv): GPT-2 without dropout, ZeRO 1 over 8 GPUs, bf16 with fp32 master weights
// and bf16 gradients reduced after the backward, cuDNN's fused attention: DeepSpeed's preset is
// that mixed precision and reduction.
std::vector<PublishedRun> llmc_runs(const CsvTable& table) {
  std::vector<PublishedRun> runs;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const RowReader row(table, table.rows[i], i);
    PublishedRun run;
    run.dataset = "llm.c";
    run.name = fmt::format("{} on {}", row.text("model"), row.text("hardware"));
    run.model = load_model(zoo_model_of(row, "model",
                                        {{"GPT-2 124M (d12)", "gpt2-124m"},
                                         {"GPT-2 350M (d24)", "gpt2-350m"},
                                         {"GPT-2 774M (d36)", "gpt2-774m"},
                                         {"GPT-2 1558M (d48)", "gpt2-1.5b"}}));
    run.model.dropout = false;
    run.cluster = contains(row.text("hardware"), "H100") ? "dgx-h100" : "dgx-a100";
    run.source = row.source("model");
    run.stack = "deepspeed (llm.c's mixed precision and ZeRO 1), native host dispatch";
    ParallelPlan plan = apply_framework(ParallelPlan{}, Framework::kDeepSpeed);
    plan.dp = row.count("gpus");
    plan.zero_stage = 1;
    plan.micro_batch = row.count("micro_batch_B");
    plan.seq_len = row.count("seq_len_T");
    plan.global_batch = row.count("tokens_per_step") / plan.seq_len;
    plan.host_dispatch = HostDispatch::kNative;
    run.variants = {{"", plan}};
    run.measured = {{RunMetric::kStepTimeS, row.number("step_time_s")}};
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace

const char* to_string(RunMetric metric) {
  switch (metric) {
    case RunMetric::kStepTimeS:
      return "step_time_s";
    case RunMetric::kTokensPerSPerGpu:
      return "tokens_per_s_per_gpu";
    case RunMetric::kMfu:
      return "mfu";
    case RunMetric::kPeakMemoryGib:
      return "peak_memory_gib";
  }
  return "?";
}

const std::vector<PublishedDataset>& published_datasets() {
  static const std::vector<PublishedDataset> kDatasets = {
      {"korthikanti2022", "korthikanti2022.csv"},
      {"nemo-h100", "nemo_h100_perf.csv"},
      {"torchtitan", "torchtitan_runs.csv"},
      {"llm.c", "llmc_gpt2.csv"}};
  return kDatasets;
}

std::vector<PublishedRun> published_runs(const PublishedDataset& dataset, const CsvTable& table) {
  if (dataset.name == "korthikanti2022") return korthikanti_runs(table);
  if (dataset.name == "nemo-h100") return nemo_runs(table);
  if (dataset.name == "torchtitan") return torchtitan_runs(table);
  if (dataset.name == "llm.c") return llmc_runs(table);
  STRATA_ASSERT(false, fmt::format("no reader for dataset {}", dataset.name));
  return {};
}

}  // namespace strata
