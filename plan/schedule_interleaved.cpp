#include <algorithm>

#include "common/error.hpp"
#include "plan/schedule.hpp"

namespace strata {

namespace {

// Megatron-LM's get_model_chunk_id and microbatch id for virtual micro-batch k.
PipelineWork virtual_work(int64_t k, WorkKind kind, int64_t stages, int64_t chunks) {
  const int64_t group = stages * chunks;
  int64_t chunk = (k % group) / stages;
  if (kind == WorkKind::kBackward) chunk = chunks - 1 - chunk;
  const int64_t micro_batch = (k / group) * stages + k % stages;
  return {kind, micro_batch, chunk};
}

}  // namespace

StageSchedule interleaved_schedule(int64_t stage, int64_t stages, int64_t micro_batches,
                                   int64_t chunks) {
  STRATA_ASSERT(micro_batches % stages == 0,
                "interleaved schedule needs micro-batches divisible by the pipeline size");
  const int64_t total = micro_batches * chunks;
  const int64_t warmup = micro_batches == stages
                             ? total
                             : std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  const int64_t remaining = total - warmup;
  StageSchedule order;
  order.reserve(static_cast<size_t>(2 * total));
  for (int64_t k = 0; k < warmup; ++k) {
    order.push_back(virtual_work(k, WorkKind::kForward, stages, chunks));
  }
  for (int64_t k = 0; k < remaining; ++k) {
    order.push_back(virtual_work(warmup + k, WorkKind::kForward, stages, chunks));
    order.push_back(virtual_work(k, WorkKind::kBackward, stages, chunks));
  }
  for (int64_t k = remaining; k < total; ++k) {
    order.push_back(virtual_work(k, WorkKind::kBackward, stages, chunks));
  }
  return order;
}

}  // namespace strata
