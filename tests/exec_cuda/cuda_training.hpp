#pragma once
// What the CUDA backend's training tests share: the text they train on, the options of a short
// run on device 0, and a run's losses.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "exec/cuda_backend.hpp"
#include "exec/trainer.hpp"

namespace strata::test {

// The training text: STRATA_TRAIN_TEXT where set (scripts/gpu-check points it at its bundle's
// copy, on a GPU machine without the sources), else the repository's.
inline std::string training_text() {
  const char* path = std::getenv("STRATA_TRAIN_TEXT");
  if (path != nullptr && *path != 0) return path;
  return std::string(STRATA_SOURCE_DIR) + "/scenarios/data/kjv-genesis-exodus.txt";
}

// `steps` steps with every rank on CUDA device 0 (the CPU backend where `cuda` is false), seed 7,
// AdamW at lr 3e-3 with weight decay 0.1.
inline TrainOptions training_options(int64_t steps, bool cuda = true) {
  TrainOptions options;
  options.steps = steps;
  options.data_path = training_text();
  options.seed = 7;
  options.optimizer.adamw.lr = 3e-3;
  options.optimizer.adamw.weight_decay = 0.1;
  if (cuda) options.device_backend = [](int32_t) { return make_cuda_backend(0); };
  return options;
}

inline std::vector<double> losses(const TrainResult& result) {
  std::vector<double> out;
  for (const StepReport& step : result.steps) out.push_back(step.loss);
  return out;
}

}  // namespace strata::test
