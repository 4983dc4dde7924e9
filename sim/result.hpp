#pragma once
// What one simulated training step predicts (docs/design.md, "Outputs"), and the timeline behind it
// that traces are written from.

#include <cstdint>
#include <vector>

#include "plan/memory_plan.hpp"
#include "plan/parallel_axes.hpp"
#include "sim/engine.hpp"

namespace strata {

// Seconds of communication by parallel axis: tp (tensor-parallel collectives), cp and ep
// (context- and expert-parallel collectives and p2p), pp (the pipeline's send/recv), dp
// (data-parallel gradient reduction and parameter gathers, the tied embedding's all-reduce, the
// gradient norm and FP8's amax reduction: reported_axis). A p2p counts with the axis along which
// its two ranks differ.
struct CommSeconds {
  double tp = 0;
  double cp = 0;
  double ep = 0;
  double dp = 0;
  double pp = 0;

  double operator[](Axis axis) const;
  double& operator[](Axis axis);
  double total() const { return tp + cp + ep + dp + pp; }
};

struct StageResult {
  int64_t stage = 0;
  double busy_s = 0;  // the compute stream runs compute tasks
  double idle_s = 0;  // step time minus busy
  // The pipeline bubble's share of the step: idle time not spent waiting on communication or on
  // the host, over the step time, so at most 1. For a uniform 1F1B or GPipe pipeline it is
  // (p-1)/(m+p-1), Narayanan et al. 2021's bubble over ideal time (p-1)/m taken over the whole
  // step (a share f of the step is their f/(1-f)).
  double bubble_fraction = 0;
  CommSeconds exposed_comm_s;     // the compute stream idles while this communication runs
  CommSeconds comm_s;             // communication runs on this stage's rank
  int64_t peak_memory_bytes = 0;  // from the simulated memory timeline
  MemoryBreakdown memory;         // at that peak
};

// When a task ran: `start_ns` when its dependencies and stream predecessor were done (a
// collective or p2p task then waits for its peers), `transfer_ns` when its data began to move
// (= start for compute and memory tasks), `finish_ns` when it ended.
struct TaskTiming {
  TimeNs start_ns = 0;
  TimeNs transfer_ns = 0;
  TimeNs finish_ns = 0;
};

// Memory in use on one rank after each change (model states included).
struct MemorySample {
  TimeNs time_ns = 0;
  int64_t bytes = 0;
};

struct SimResult {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double samples_per_s = 0;
  double model_flops_per_step = 0;     // no recompute (MFU)
  double hardware_flops_per_step = 0;  // with recompute (HFU)
  double model_tflops_per_gpu = 0;     // per second
  double hardware_tflops_per_gpu = 0;
  // Model FLOPs / (step time x GPUs x dense peak of the dtype on the cluster's device).
  double mfu = 0;
  double hfu = 0;
  double bubble_fraction = 0;  // the largest stage's
  CommSeconds exposed_comm_s;  // the largest stage's, per kind
  CommSeconds comm_s;          // the largest stage's, per kind
  int64_t peak_memory_bytes = 0;
  bool fits_in_memory = false;
  double cost_usd_per_step = 0;
  double cost_usd_per_million_tokens = 0;
  // An estimate: every GPU drawing its TDP for the whole step, as Meta's Llama 3 model card
  // estimates training energy (GPU-hours x TDP). 0 when a device's TDP is unknown.
  double energy_joules_per_step = 0;
  std::vector<StageResult> per_stage;

  // The timeline: one entry per task of the graph (by task id), and per graph rank (in the order
  // of TaskGraph::ranks()) its memory in use over time.
  std::vector<TaskTiming> tasks;
  std::vector<std::vector<MemorySample>> memory_timeline;
  EngineStats engine;
};

}  // namespace strata
