#include "plan/moe_dims.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

namespace {

// The busiest expert's tokens over the mean: the plan's imbalance, within the capacity factor.
double busiest_expert_load(const ModelSpec& model, const ParallelPlan& plan) {
  return model.capacity_factor > 0 ? std::min(plan.moe_imbalance, model.capacity_factor)
                                   : plan.moe_imbalance;
}

}  // namespace

double moe_rank_load(const ModelSpec& model, const ParallelPlan& plan) {
  const auto experts = static_cast<double>(model.experts);
  const auto local = static_cast<double>(model.experts / plan.ep);
  const double busiest = busiest_expert_load(model, plan);
  if (model.experts == 1) return 1;
  return (busiest + (local - 1) * (experts - busiest) / (experts - 1)) / local;
}

MoeDims moe_dims(const ModelSpec& model, const ParallelPlan& plan) {
  MoeDims d;
  const int64_t sb = plan.local_seq_len() * plan.micro_batch;
  d.tokens = plan.sequence_parallel ? sb / plan.tp : sb;
  d.local_experts = model.experts / plan.ep;
  const int64_t etp = plan.expert_tp();
  const auto balanced = static_cast<double>(d.tokens * etp * model.experts_per_token);
  d.expert_rows = static_cast<int64_t>(std::ceil(balanced * moe_rank_load(model, plan)));
  d.expert_ffn = model.expert_ffn_hidden / etp;
  d.expert_up = (model.gated_mlp() ? 2 : 1) * d.expert_ffn;
  d.shared_ffn = model.shared_expert_ffn_hidden / plan.tp;
  d.shared_up = (model.gated_mlp() ? 2 : 1) * d.shared_ffn;
  d.gathered_tokens = d.tokens * etp * plan.ep;
  return d;
}

std::vector<int64_t> moe_dispatch_matrix(const ModelSpec& model, const ParallelPlan& plan,
                                         int64_t row_bytes) {
  const int64_t n = plan.ep;
  const double load = moe_rank_load(model, plan);
  const auto slots = static_cast<double>(moe_dims(model, plan).tokens * model.experts_per_token);
  const double hot = slots * load / static_cast<double>(n);
  const double cold = n > 1 ? slots * (static_cast<double>(n) - load) /
                                  (static_cast<double>(n) * static_cast<double>(n - 1))
                            : 0;
  std::vector<int64_t> matrix(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double rows = j == 0 ? hot : cold;
      matrix[static_cast<size_t>(i * n + j)] =
          static_cast<int64_t>(std::llround(rows * static_cast<double>(row_bytes)));
    }
  }
  return matrix;
}

std::vector<int64_t> transposed(const std::vector<int64_t>& matrix, int64_t n) {
  std::vector<int64_t> out(matrix.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j)
      out[static_cast<size_t>(j * n + i)] = matrix[static_cast<size_t>(i * n + j)];
  }
  return out;
}

}  // namespace strata
