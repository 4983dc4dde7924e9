// Step metrics from the simulated timeline (sim/step_metrics.hpp).

#include "sim/step_metrics.hpp"

#include <algorithm>
#include <array>

#include "common/intervals.hpp"
#include "common/units.hpp"

namespace strata {

namespace {

double seconds(TimeNs ns) { return static_cast<double>(ns) / static_cast<double>(kNsPerSecond); }

// The order in which an instant of exposed communication is counted once: TP, CP, EP, PP, DP.
constexpr std::array<Axis, kNamedAxes.size()> kExposureOrder = {Axis::kTp, Axis::kCp, Axis::kEp,
                                                                Axis::kPp, Axis::kDp};

// One graph rank's share of the step.
struct RankTimeline {
  std::vector<Interval> busy;                          // compute stream
  std::array<std::vector<Interval>, kAxisCount> comm;  // by Axis
  std::vector<Interval> host;  // host threads: dispatch, Horovod's cycle, an offloaded step
  std::vector<std::pair<TimeNs, TaskId>> memory_events;
};

struct RankMemory {
  std::vector<MemorySample> samples;
  int64_t peak_bytes = 0;
  MemoryBreakdown at_peak;
};

// Replays the rank's memory tasks in time order (task order within one instant, as the memory
// plan replays them) on top of its model states.
RankMemory replay_memory(const TaskGraph& graph, const StageMemory& stage,
                         std::vector<std::pair<TimeNs, TaskId>> events) {
  std::sort(events.begin(), events.end());
  MemoryBreakdown live;
  live.params = stage.at_peak.params;
  live.grads = stage.at_peak.grads;
  live.optimizer = stage.at_peak.optimizer;
  RankMemory memory;
  memory.samples.push_back({0, live.total()});
  memory.peak_bytes = live.total();
  memory.at_peak = live;
  for (const auto& [time, id] : events) {
    const Task& task = graph.task(id);
    const int64_t delta = task.memory == MemoryAction::kAlloc ? task.bytes : -task.bytes;
    (counts_as_activations(task.buffer) ? live.activations : live.buffers) += delta;
    if (memory.samples.back().time_ns == time) {
      memory.samples.back().bytes = live.total();
    } else {
      memory.samples.push_back({time, live.total()});
    }
    if (live.total() > memory.peak_bytes) {
      memory.peak_bytes = live.total();
      memory.at_peak = live;
    }
  }
  return memory;
}

}  // namespace

double CommSeconds::operator[](Axis axis) const { return along(*this, axis); }

double& CommSeconds::operator[](Axis axis) { return along(*this, axis); }

SimResult summarize_step(const CompiledPlan& compiled, StepTimeline timeline,
                         double price_usd_per_gpu_hour) {
  const TaskGraph& graph = compiled.graph;
  const ParallelPlan& plan = compiled.plan;
  SimResult result;
  TimeNs step_ns = 0;
  for (const TaskTiming& t : timeline.tasks) step_ns = std::max(step_ns, t.finish_ns);

  std::vector<int32_t> rank_index(static_cast<size_t>(plan.gpus()), -1);
  for (size_t i = 0; i < graph.ranks().size(); ++i) {
    rank_index[static_cast<size_t>(graph.ranks()[i].rank)] = static_cast<int32_t>(i);
  }
  std::vector<RankTimeline> ranks(graph.ranks().size());
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& task = graph.task(id);
    const TaskTiming& t = timeline.tasks[static_cast<size_t>(id)];
    RankTimeline& rank = ranks[static_cast<size_t>(rank_index[static_cast<size_t>(task.rank)])];
    switch (task.kind) {
      case TaskKind::kCompute:
        if (task.stream == Stream::kHost || task.role == TaskRole::kHostDispatch)
          rank.host.push_back({t.start_ns, t.finish_ns});
        if (task.stream != Stream::kCompute) break;
        rank.busy.push_back({t.start_ns, t.finish_ns});
        break;
      case TaskKind::kMemory:
        rank.memory_events.emplace_back(t.finish_ns, id);
        break;
      case TaskKind::kCollective:
      case TaskKind::kP2p:
      case TaskKind::kCopy:
        rank.comm[static_cast<size_t>(comm_axis(graph, task))].push_back(
            {t.transfer_ns, t.finish_ns});
        break;
    }
  }

  // Per stage, the rank whose compute is busiest stands for it (all ranks of a stage alike on a
  // uniform cluster; the straggler's on a mixed one).
  result.per_stage.resize(static_cast<size_t>(plan.pp));
  std::vector<TimeNs> stage_busy(static_cast<size_t>(plan.pp), -1);
  result.fits_in_memory = true;
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankTimeline& rank = ranks[r];
    const auto stage = static_cast<size_t>(graph.ranks()[r].stage);
    const std::vector<Interval> busy = merged(std::move(rank.busy));
    // Exposed: communication while the compute stream idles, each instant counted once (in
    // kExposureOrder).
    CommSeconds exposed;
    CommSeconds total;
    TimeNs exposed_ns = 0;
    std::vector<Interval> covered = busy;
    for (const Axis axis : kExposureOrder) {
      const std::vector<Interval> comm = merged(std::move(rank.comm[static_cast<size_t>(axis)]));
      const TimeNs outside = length_outside(comm, covered);
      exposed[axis] = seconds(outside);
      total[axis] = seconds(length(comm));
      exposed_ns += outside;
      covered = combined(covered, comm);
    }
    const TimeNs busy_ns = length(busy);
    RankMemory memory = replay_memory(graph, compiled.memory.stages[stage], rank.memory_events);
    if (memory.peak_bytes > timeline.rank_devices[r].hbm_bytes) result.fits_in_memory = false;

    StageResult& out = result.per_stage[stage];
    if (memory.peak_bytes > out.peak_memory_bytes) {
      out.peak_memory_bytes = memory.peak_bytes;
      out.memory = memory.at_peak;
    }
    result.memory_timeline.push_back(std::move(memory.samples));
    if (busy_ns <= stage_busy[stage]) continue;
    stage_busy[stage] = busy_ns;
    out.stage = static_cast<int64_t>(stage);
    out.busy_s = seconds(busy_ns);
    out.idle_s = seconds(step_ns - busy_ns);
    out.exposed_comm_s = exposed;
    out.comm_s = total;
    // The host holding the GPU back (dispatch, an offloaded optimizer step) is not bubble.
    const TimeNs exposed_host = length_outside(merged(std::move(rank.host)), covered);
    const TimeNs bubble_ns = std::max<TimeNs>(0, step_ns - busy_ns - exposed_ns - exposed_host);
    out.bubble_fraction =
        step_ns > 0 ? static_cast<double>(bubble_ns) / static_cast<double>(step_ns) : 0.0;
  }

  const double step_s = seconds(step_ns);
  const auto gpus = static_cast<double>(plan.gpus());
  const auto tokens = static_cast<double>(plan.tokens_per_step());
  result.step_time_s = step_s;
  result.tokens_per_s = tokens / step_s;
  result.samples_per_s = static_cast<double>(plan.global_batch) / step_s;
  result.model_flops_per_step = compiled.flops.model;
  result.hardware_flops_per_step = compiled.flops.hardware;
  result.model_tflops_per_gpu = compiled.flops.model / step_s / gpus / kFlopsPerTflop;
  result.hardware_tflops_per_gpu = compiled.flops.hardware / step_s / gpus / kFlopsPerTflop;
  const double peak = compiled.cluster.device.peak_flops(plan.dtype);
  result.mfu = compiled.flops.model / (step_s * gpus * peak);
  result.hfu = compiled.flops.hardware / (step_s * gpus * peak);
  for (const StageResult& stage : result.per_stage) {
    result.bubble_fraction = std::max(result.bubble_fraction, stage.bubble_fraction);
    for (const Axis axis : kNamedAxes) {
      result.exposed_comm_s[axis] =
          std::max(result.exposed_comm_s[axis], stage.exposed_comm_s[axis]);
      result.comm_s[axis] = std::max(result.comm_s[axis], stage.comm_s[axis]);
    }
    result.peak_memory_bytes = std::max(result.peak_memory_bytes, stage.peak_memory_bytes);
  }
  result.cost_usd_per_step = step_s / kSecondsPerHour * gpus * price_usd_per_gpu_hour;
  result.cost_usd_per_million_tokens = result.cost_usd_per_step / tokens * 1e6;
  double watts = 0;  // all GPUs' TDP; a folded graph's ranks stand for plan.gpus() alike
  bool tdp_known = true;
  for (const DeviceSpec& device : timeline.rank_devices) {
    watts += device.tdp_watts;
    tdp_known = tdp_known && device.tdp_watts > 0;
  }
  if (graph.mode() == GraphMode::kFolded) watts = gpus * compiled.cluster.device.tdp_watts;
  result.energy_joules_per_step = tdp_known ? watts * step_s : 0.0;
  result.tasks = std::move(timeline.tasks);
  result.engine = timeline.engine;
  return result;
}

}  // namespace strata
