#pragma once
// The published training runs of the reference data (data/reference/) as Strata inputs, for
// `strata validate`: the model, cluster and plan as published; what a publication leaves unstated
// as variants a tuned run would choose among (validation.hpp simulates each and keeps the fastest
// that fits, as the authors' tuning would have); and the measured figures to compare with.
//
// Datasets and what is taken from each row:
//  - korthikanti2022 (korthikanti2022.csv): GPT-3-style models on DGX A100s under Megatron-LM
//    2022, each configuration in its two published modes, full recompute without sequence
//    parallelism and sequence parallelism with selective recompute; the iteration time, or the
//    MFU where only that is given;
//  - nemo-h100 (nemo_h100_perf.csv): NeMo 24.07 FP8 pre-training on DGX H100s (Megatron-Core with
//    Transformer Engine, NeMo's performance settings: distributed optimizer, sequence parallel and
//    TP communication overlap with tp > 1, gradient and parameter overlap); tokens/s per GPU.
//    Unstated: the recompute mode. Runs with context parallelism are listed as not modelled;
//  - torchtitan (torchtitan_runs.csv): FSDP2 on 64 A100s and Float8 FSDP2 on 32 and 64 H200s;
//    tokens/s per GPU, and the peak memory where measured;
//  - llm.c (llmc_gpt2.csv): GPT-2 on 8 A100s or H100s with ZeRO 1; the step time.

#include <cstdint>
#include <string>
#include <vector>

#include "common/csv.hpp"
#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

enum class RunMetric : uint8_t { kStepTimeS, kTokensPerSPerGpu, kMfu, kPeakMemoryGib };
const char* to_string(RunMetric metric);

// One plan a tuned run could have used; `choice` names what was chosen ("recompute selective"),
// empty when the publication states everything.
struct PlanVariant {
  std::string choice;
  ParallelPlan plan;
};

struct MeasuredFigure {
  RunMetric metric = RunMetric::kStepTimeS;
  double value = 0;
};

struct PublishedRun {
  std::string dataset;  // "korthikanti2022", "nemo-h100", "torchtitan", "llm.c"
  std::string name;     // e.g. "175B (GPT-3), sequence parallel + selective recompute"
  ModelSpec model;
  std::string cluster;                   // a zoo cluster
  std::vector<PlanVariant> variants;     // at least one
  std::vector<MeasuredFigure> measured;  // at least one
  std::string source;                    // the file and row
  std::string stack;                     // how the run's software is modelled
  std::string not_modelled;              // non-empty: why it cannot be run as published
};

struct PublishedDataset {
  std::string name;
  std::string file;  // in data/reference/
};
const std::vector<PublishedDataset>& published_datasets();

// The runs of `dataset` from its reference table. Throws InputError naming the file and row for
// a value it cannot read.
std::vector<PublishedRun> published_runs(const PublishedDataset& dataset, const CsvTable& table);

}  // namespace strata
