#pragma once
// Pipeline schedules as builders: for one pipeline stage, the ordered forward and backward work
// items of every micro-batch (and model chunk, for the interleaved schedule). The lowering turns
// each item into the tasks of that chunk's layers. Schedules know nothing about tasks or time.

#include <cstdint>
#include <vector>

#include "plan/parallel_plan.hpp"

namespace strata {

enum class WorkKind : uint8_t { kForward, kBackward };

struct PipelineWork {
  WorkKind kind = WorkKind::kForward;
  int64_t micro_batch = 0;
  int64_t chunk = 0;  // model chunk on this stage, 0..vpp-1

  bool operator==(const PipelineWork&) const = default;
};

using StageSchedule = std::vector<PipelineWork>;

// GPipe (Huang et al. 2019): every forward, then every backward. Holds all m micro-batches'
// activations at once.
StageSchedule gpipe_schedule(int64_t micro_batches);

// 1F1B / PipeDream-Flush (Narayanan et al. 2021, Sec. 2.2.1): stage s of p runs
// min(p - s - 1, m) warm-up forwards, then alternates one forward and one backward, then drains
// the remaining backwards. At most p - s micro-batches are in flight on stage s.
StageSchedule one_f_one_b_schedule(int64_t stage, int64_t stages, int64_t micro_batches);

// Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2) in Megatron-LM's order
// (forward_backward_pipelining_with_interleaving): virtual micro-batch k of m * v runs model chunk
// (k mod p v) / p (reversed for backward) on micro-batch (k / p v) p + k mod p; stage s warms up
// with (p - s - 1) * 2 + (v - 1) * p forwards, or all of them when m == p.
StageSchedule interleaved_schedule(int64_t stage, int64_t stages, int64_t micro_batches,
                                   int64_t chunks);

// The schedule the plan names, for one stage.
StageSchedule build_schedule(const ParallelPlan& plan, int64_t stage);

}  // namespace strata
