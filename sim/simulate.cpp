// simulate(): the task graph onto the engine (sim/simulate.hpp).

#include "sim/simulate.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "common/error.hpp"
#include "plan/rank_layout.hpp"
#include "sim/network_model.hpp"
#include "sim/step_metrics.hpp"

namespace strata {

namespace {

void check_options(const CompiledPlan& compiled, const SimOptions& options) {
  const int64_t world = compiled.plan.gpus();
  const bool full = compiled.graph.mode() == GraphMode::kFull;
  for (const SlowRank& slow : options.slow_ranks) {
    if (!full) {
      throw InputError("command line", "--slow-rank", "a straggler needs every rank simulated",
                       "add --graph full");
    }
    if (slow.rank < 0 || slow.rank >= world) {
      throw InputError("command line", "--slow-rank",
                       fmt::format("rank {} is outside the plan's {} ranks", slow.rank, world),
                       fmt::format("name a rank from 0 to {}", world - 1));
    }
    if (!(slow.factor >= 1.0)) {
      throw InputError("command line", "--slow-rank",
                       fmt::format("factor {} is below 1", slow.factor),
                       "write RANK:FACTOR with FACTOR >= 1, e.g. 3:1.5");
    }
  }
  for (const RankDevice& mixed : options.rank_devices) {
    if (!full) {
      throw InputError("command line", "--rank-device",
                       "mixed device types need every rank simulated", "add --graph full");
    }
    if (mixed.first < 0 || mixed.last < mixed.first || mixed.last >= world) {
      throw InputError(
          "command line", "--rank-device",
          fmt::format("ranks {}-{} are not a range inside the plan's {} ranks", mixed.first,
                      mixed.last, world),
          fmt::format("write FIRST-LAST:DEVICE with 0 <= FIRST <= LAST <= {}", world - 1));
    }
  }
}

using InstanceKey = std::tuple<int64_t, int32_t, int32_t>;

// The members of one collective instance or p2p transfer seen so far while walking the graph.
struct Pending {
  std::vector<ActivityId> ready;
  std::vector<ActivityId> done;
  std::vector<TaskId> tasks;
};

class GraphMapper {
 public:
  GraphMapper(const CompiledPlan& compiled, const SimOptions& options)
      : compiled_(compiled), graph_(compiled.graph), options_(options) {}

  // nullopt when the step runs past `horizon_ns`.
  std::optional<StepTimeline> run(TimeNs horizon_ns) {
    const std::vector<ProcessorId> processor_of_rank = add_processors();
    NetworkModel network(graph_, compiled_.cluster, engine_, processor_of_rank);
    // A CPU host's ranks run their programs one task at a time in id order (exec/rank_runtime.hpp:
    // every backend call returns when done), so its streams do not overlap; a GPU's do.
    const bool host_program_order = compiled_.cluster.device.host_cores > 0;
    const std::vector<TaskId> previous =
        host_program_order ? program_predecessors(graph_) : stream_predecessors(graph_);
    const auto n = static_cast<size_t>(graph_.size());
    start_.assign(n, kNoActivity);
    transfer_.assign(n, kNoActivity);
    finish_.assign(n, kNoActivity);
    std::vector<ActivityId> deps;
    std::vector<ActivityId> first_activity(n + 1);
    // Activities a task vary from 1 to about 10 by plan (collectives' members and algorithm
    // steps, all-to-all flows): once a 32nd of the tasks is in, room for the rest at that rate
    // and as many again (Engine::reserve: the arrays then do not move, and room not used is only
    // address space).
    const TaskId sample =
        std::min<TaskId>(graph_.size(), std::max<TaskId>(1024, graph_.size() / 32));
    for (TaskId id = 0; id < graph_.size(); ++id) {
      const Task& task = graph_.task(id);
      first_activity[static_cast<size_t>(id)] = static_cast<ActivityId>(engine_.size());
      if (id == sample) {
        engine_.reserve(engine_.size() * graph_.size() / sample * 2 + 1024);
      }
      deps.clear();
      // The CPU executor's sends are buffered: its thread goes on once the message is copied
      // out, without waiting for the receiver.
      const auto after = [&](TaskId dep) {
        const Task& before = graph_.task(dep);
        const bool buffered_send =
            host_program_order && before.kind == TaskKind::kP2p && before.p2p == P2pKind::kSend;
        return buffered_send ? start_[static_cast<size_t>(dep)] : finish_[static_cast<size_t>(dep)];
      };
      for (const TaskId dep : graph_.deps(id)) deps.push_back(after(dep));
      const TaskId before = previous[static_cast<size_t>(id)];
      if (before >= 0) deps.push_back(after(before));
      switch (task.kind) {
        case TaskKind::kCompute:
          add_compute(id, task, deps);
          break;
        case TaskKind::kMemory:
          add_single(id, engine_.add({.kind = ActivityKind::kDelay}, deps));
          break;
        case TaskKind::kCollective:
        case TaskKind::kP2p:
          add_member(id, task, deps, network);
          break;
        case TaskKind::kCopy: {
          const auto i = static_cast<size_t>(id);
          start_[i] = transfer_[i] = engine_.add({.kind = ActivityKind::kDelay}, deps);
          finish_[i] = network.add_host_copy(task.rank, task.copy == CopyDirection::kToHost,
                                             task.bytes, start_[i]);
          break;
        }
      }
    }
    STRATA_ASSERT(pending_.empty(), "a collective or p2p transfer misses members in the graph");
    first_activity[n] = static_cast<ActivityId>(engine_.size());
    // A rank's thread gives its core up when its program ends.
    std::map<int32_t, TaskId> last_of_rank;
    for (TaskId id = 0; id < graph_.size(); ++id) last_of_rank[graph_.task(id).rank] = id;
    for (const auto& [rank, last] : last_of_rank) {
      const ThreadId thread = ranks_[static_cast<size_t>(rank_index_.at(rank))].thread;
      if (thread < 0) continue;
      const std::array<ActivityId, 1> done{finish_[static_cast<size_t>(last)]};
      engine_.add({.kind = ActivityKind::kRelease, .thread = thread}, done);
    }
    if (options_.fast_forward && repeats_long_enough()) {
      engine_.set_period_map(period_map(first_activity));
    }
    if (!engine_.run(horizon_ns)) return std::nullopt;
    StepTimeline timeline;
    timeline.tasks.resize(n);
    for (size_t i = 0; i < n; ++i) {
      // Ready and join activities take no time: their start is the member's start and the
      // transfer's.
      timeline.tasks[i] = {engine_.start_ns(start_[i]), engine_.start_ns(transfer_[i]),
                           engine_.finish_ns(finish_[i])};
    }
    timeline.rank_devices = rank_devices_;
    timeline.engine = engine_.stats();
    return timeline;
  }

 private:
  // Whether the schedule has a steady state long enough to copy from: two anchors with the same
  // state and a period after them. 1F1B's first stage is in its steady state for m - p of its m
  // micro-batches (warm-up and cool-down take p - 1 each; GPipe's forward phase likewise), and
  // Megatron's interleaved schedule repeats every p micro-batches once its warm-up of about
  // 2 p is done. Shorter schedules are simulated whole, sparing the engine its event log.
  bool repeats_long_enough() const {
    const int64_t m = compiled_.plan.micro_batches();
    const int64_t p = compiled_.plan.pp;
    return compiled_.plan.schedule == ScheduleKind::kInterleaved ? m >= 5 * p : m >= p + 4;
  }

  // The same task one micro-batch later: the k-th task of (rank, stream, micro-batch m) plays
  // the k-th of (rank, stream, m + 1)'s role, and each of its activities (created in the same
  // order, first_activity[task] to first_activity[task + 1]) the one at the same place. Tasks
  // once per step, and tasks whose activities differ in number, play none. The engine checks
  // every copied event against its rules, so a role that does not repeat only ends a copy. The
  // anchors are the first rank's first compute-stream task of each micro-batch.
  PeriodMap period_map(const std::vector<ActivityId>& first_activity) const {
    // Each (rank, stream, micro-batch)'s tasks in id order, as a CSR over groups; a group's key
    // plus one is the next micro-batch's.
    const auto key = [](int32_t rank, Stream stream, int32_t micro_batch) {
      return (uint64_t{static_cast<uint32_t>(rank)} << 32) |
             (uint64_t{static_cast<uint8_t>(stream)} << 24) | static_cast<uint64_t>(micro_batch);
    };
    std::unordered_map<uint64_t, int32_t> group_of_key;
    std::vector<int32_t> group_of_task(static_cast<size_t>(graph_.size()), -1);
    std::vector<uint64_t> group_key;
    uint64_t last_key = ~uint64_t{0};
    int32_t last_group = -1;
    for (TaskId id = 0; id < graph_.size(); ++id) {
      const Task& t = graph_.task(id);
      if (t.micro_batch < 0) continue;
      STRATA_ASSERT(t.micro_batch < (1 << 24), "more than 2^24 micro-batches");
      const uint64_t k = key(t.rank, t.stream, t.micro_batch);
      if (k != last_key) {
        const auto [it, inserted] =
            group_of_key.try_emplace(k, static_cast<int32_t>(group_key.size()));
        if (inserted) group_key.push_back(k);
        last_key = k;
        last_group = it->second;
      }
      group_of_task[static_cast<size_t>(id)] = last_group;
    }
    std::vector<int32_t> first_member(group_key.size() + 1, 0);
    for (const int32_t g : group_of_task) {
      if (g >= 0) ++first_member[static_cast<size_t>(g) + 1];
    }
    for (size_t g = 0; g < group_key.size(); ++g) first_member[g + 1] += first_member[g];
    std::vector<TaskId> members(static_cast<size_t>(first_member.back()));
    std::vector<int32_t> filled(first_member.begin(), first_member.end() - 1);
    for (TaskId id = 0; id < graph_.size(); ++id) {
      const int32_t g = group_of_task[static_cast<size_t>(id)];
      if (g >= 0) members[static_cast<size_t>(filled[static_cast<size_t>(g)]++)] = id;
    }

    PeriodMap map;
    map.next.assign(static_cast<size_t>(first_activity.back()), kNoActivity);
    for (size_t g = 0; g < group_key.size(); ++g) {
      const auto next = group_of_key.find(group_key[g] + 1);
      if (next == group_of_key.end()) continue;
      const auto h = static_cast<size_t>(next->second);
      const int32_t count =
          std::min(first_member[g + 1] - first_member[g], first_member[h + 1] - first_member[h]);
      for (int32_t k = 0; k < count; ++k) {
        const auto from_task =
            static_cast<size_t>(members[static_cast<size_t>(first_member[g] + k)]);
        const auto to_task = static_cast<size_t>(members[static_cast<size_t>(first_member[h] + k)]);
        const ActivityId from = first_activity[from_task];
        const ActivityId to = first_activity[to_task];
        const ActivityId size = first_activity[from_task + 1] - from;
        if (first_activity[to_task + 1] - to != size) continue;
        for (ActivityId a = 0; a < size; ++a) map.next[static_cast<size_t>(from + a)] = to + a;
      }
    }
    const int32_t anchor_rank = graph_.ranks().front().rank;
    for (int32_t m = 0;; ++m) {
      const auto g = group_of_key.find(key(anchor_rank, Stream::kCompute, m));
      if (g == group_of_key.end()) break;
      const TaskId first =
          members[static_cast<size_t>(first_member[static_cast<size_t>(g->second)])];
      map.anchors.push_back(start_[static_cast<size_t>(first)]);
    }
    // Megatron's interleaved schedule repeats every pipeline-size micro-batches.
    const bool interleaved = compiled_.plan.schedule == ScheduleKind::kInterleaved;
    map.max_periods = interleaved ? static_cast<int32_t>(compiled_.plan.pp) : 4;
    return map;
  }

  // One processor per graph rank, with its device, efficiency tables and straggler factor.
  std::vector<ProcessorId> add_processors() {
    std::vector<ProcessorId> processor_of_rank(static_cast<size_t>(compiled_.plan.gpus()),
                                               kNoProcessor);
    for (const GraphRank& rank : graph_.ranks()) {
      DeviceSpec device = compiled_.cluster.device;
      for (const RankDevice& mixed : options_.rank_devices) {
        if (rank.rank >= mixed.first && rank.rank <= mixed.last) device = mixed.device;
      }
      double slow = 1.0;
      for (const SlowRank& s : options_.slow_ranks) {
        if (s.rank == rank.rank) slow *= s.factor;
      }
      const int32_t efficiency = efficiency_index(device);
      const double contended =
          1.0 / (1.0 + efficiencies_[static_cast<size_t>(efficiency)].comm_slowdown);
      const ProcessorId processor = engine_.add_processor(contended);
      processor_of_rank[static_cast<size_t>(rank.rank)] = processor;
      rank_devices_.push_back(device);
      const bool threads = device.host_cores > 0 && graph_.mode() == GraphMode::kFull;
      ranks_.push_back({processor, efficiency, slow, threads ? -1 : host_path(device, rank.rank),
                        threads ? host_thread(device, rank.rank) : -1});
      rank_index_[rank.rank] = static_cast<int32_t>(ranks_.size() - 1);
    }
    return processor_of_rank;
  }

  // A CPU host's ranks are threads that its cores run one at a time each (the executor's CPU
  // backend: a thread per rank, exec/trainer.hpp), handed out by the host's scheduler
  // (sim/engine.hpp, core pools): a rank's computes run at their measured speed while it holds a
  // core; it gives the core up when it blocks in a collective or a receive (the in-process
  // communicator's waits sleep on condition variables) and queues for one when the transfer
  // ends, so a rank woken by its peers waits for a core inside its collective, as a measured
  // step shows; and a rank that has held its core for a time slice while others queue is
  // preempted, mid-compute if need be (a measured compute's thread CPU time falls short of its
  // wall time, exec/rank_runtime.hpp). The slice is the device's measured one, or Linux's
  // default (EEVDF's base slice, kernel/sched/fair.c: sysctl_sched_base_slice = 0.75 ms x (1 +
  // log2 of the CPUs, at most 8)). -1 for a GPU.
  ThreadId host_thread(const DeviceSpec& device, int32_t rank) {
    if (device.host_cores <= 0) return -1;
    const int64_t node =
        RankLayout(compiled_.plan, compiled_.cluster.gpus_per_node).coord(rank).node;
    auto [pool, inserted] = host_pools_.try_emplace(node, -1);
    if (inserted) {
      TimeNs slice_ns = device.host_slice_ns;
      if (slice_ns <= 0) {
        const auto cpus = static_cast<uint32_t>(std::min<int64_t>(device.host_cores, 8));
        slice_ns = 750'000 * std::bit_width(cpus);  // 1 + floor(log2(cpus))
      }
      pool->second = engine_.add_core_pool(
          static_cast<int32_t>(std::min<int64_t>(device.host_cores, 1 << 30)), slice_ns);
    }
    return engine_.add_thread(pool->second);
  }

  // A folded graph's rank stands for its replicas, which have no threads of their own: there the
  // cores are shared as processor sharing instead (the average rate an OS scheduler's time slices
  // give runnable threads): a compute is a flow of its uncontended nanoseconds over the rank's
  // own core (one ns of work per ns) and the host's cores (host_cores ns per ns, the rank
  // weighted by its replicas), so k computes at once on c cores each run at min(1, c / k).
  // -1 for a GPU.
  PathId host_path(const DeviceSpec& device, int32_t rank) {
    if (device.host_cores <= 0) return -1;
    const int64_t node =
        RankLayout(compiled_.plan, compiled_.cluster.gpus_per_node).coord(rank).node;
    auto [host, inserted] = host_links_.try_emplace(node, -1);
    if (inserted) host->second = engine_.add_link(static_cast<double>(device.host_cores) * 1e9);
    const LinkId core = engine_.add_link(1e9);
    const std::array<PathHop, 2> hops{
        PathHop{core, 1.0f}, PathHop{host->second, static_cast<float>(graph_.replicas_per_rank())}};
    return engine_.add_path(hops);
  }

  int32_t efficiency_index(const DeviceSpec& device) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i].name == device.name) return static_cast<int32_t>(i);
    }
    devices_.push_back(device);
    efficiencies_.push_back(efficiency_for(device, options_.calibration));
    op_times_.emplace_back(graph_.ops().size(), -1);
    return static_cast<int32_t>(devices_.size() - 1);
  }

  ActivitySpec compute_spec(const Task& task) {
    const RankCompute& rank = ranks_[static_cast<size_t>(rank_index_.at(task.rank))];
    if (task.stream == Stream::kBackground) {
      // Horovod's background thread: the reduction launches at its next wake.
      return {.kind = ActivityKind::kTick, .duration_ns = compiled_.plan.cycle_time_ns};
    }
    if (task.stream == Stream::kHost) {
      // The host thread: issuing work, or the offloaded optimizer step it runs itself; a delay,
      // slowed by nothing on the GPU. A CPU host's ranks are their own host threads and pay
      // dispatch in their computes.
      const OpShape& host_op = graph_.op(task.op);
      const DeviceSpec& device = devices_[static_cast<size_t>(rank.efficiency)];
      if (host_op.kind != OpKind::kHost) {
        return {.kind = ActivityKind::kDelay, .duration_ns = host_compute_time_ns(device, host_op)};
      }
      const bool cpu = device.host_cores > 0;
      return {.kind = ActivityKind::kDelay,
              .duration_ns = cpu ? 0 : compute_time_ns({}, {}, host_op)};
    }
    const auto e = static_cast<size_t>(rank.efficiency);
    TimeNs& time = op_times_[e][static_cast<size_t>(task.op)];
    if (time < 0) time = compute_time_ns(devices_[e], efficiencies_[e], graph_.op(task.op));
    const TimeNs duration =
        rank.slow == 1.0 ? time
                         : static_cast<TimeNs>(std::llround(static_cast<double>(time) * rank.slow));
    if (rank.host_path >= 0) {
      return {.kind = ActivityKind::kFlow,
              .bytes = static_cast<double>(duration),
              .path = rank.host_path};
    }
    if (rank.thread >= 0) return {.kind = ActivityKind::kDelay, .duration_ns = duration};
    ActivitySpec spec{.kind = ActivityKind::kCompute, .processor = rank.processor};
    spec.duration_ns = duration;
    return spec;
  }

  // A compute; on a CPU host's thread, work that goes on while the rank holds a core.
  void add_compute(TaskId id, const Task& task, const std::vector<ActivityId>& deps) {
    const ThreadId thread = ranks_[static_cast<size_t>(rank_index_.at(task.rank))].thread;
    if (thread < 0 || task.stream != Stream::kCompute) {
      add_single(id, engine_.add(compute_spec(task), deps));
      return;
    }
    ActivitySpec run = compute_spec(task);
    run.kind = ActivityKind::kRun;
    run.thread = thread;
    add_single(id, engine_.add(run, deps));
  }

  void add_single(TaskId id, ActivityId activity) {
    const auto i = static_cast<size_t>(id);
    start_[i] = transfer_[i] = finish_[i] = activity;
  }

  // A collective member or a send/recv: it is ready when its deps are; the transfer starts when
  // every simulated member is ready, and every member finishes with it.
  void add_member(TaskId id, const Task& task, const std::vector<ActivityId>& deps,
                  NetworkModel& network) {
    const auto i = static_cast<size_t>(id);
    start_[i] = engine_.add({.kind = ActivityKind::kDelay}, deps);
    // On a CPU host's thread a collective or a receive blocks: the rank gives its core up when
    // it arrives and queues for one when the transfer ends. A send is buffered: it goes on.
    const ThreadId thread = ranks_[static_cast<size_t>(rank_index_.at(task.rank))].thread;
    const bool blocks = thread >= 0 && !(task.kind == TaskKind::kP2p && task.p2p == P2pKind::kSend);
    ActivityId ready = start_[i];
    if (blocks) {
      const std::array<ActivityId, 1> arrived{start_[i]};
      ready = engine_.add({.kind = ActivityKind::kRelease, .thread = thread}, arrived);
    }
    finish_[i] = engine_.add({.kind = blocks ? ActivityKind::kAcquire : ActivityKind::kDelay,
                              .thread = blocks ? thread : -1});
    const auto [key, expected] = instance_key(task);
    if (expected == 1) {  // a folded graph's collectives: the member is the whole instance
      add_transfer(task, {&ready, 1}, {&finish_[i], 1}, {&id, 1}, network);
      return;
    }
    Pending& pending = pending_[key];
    pending.ready.push_back(ready);
    pending.done.push_back(finish_[i]);
    pending.tasks.push_back(id);
    if (static_cast<int64_t>(pending.tasks.size()) < expected) return;
    add_transfer(task, pending.ready, pending.done, pending.tasks, network);
    pending_.erase(key);
  }

  // An instance whose members are all ready: the join of their ready activities, the transfer
  // after it, and every member's finish after the transfer.
  void add_transfer(const Task& task, std::span<const ActivityId> ready,
                    std::span<const ActivityId> done, std::span<const TaskId> members,
                    NetworkModel& network) {
    const ActivityId join = engine_.add({.kind = ActivityKind::kDelay}, ready);
    ActivityId end = kNoActivity;
    if (task.kind == TaskKind::kCollective) {
      end = network.add_collective(members.back(), join);
    } else {
      const bool send = task.p2p == P2pKind::kSend;
      end = network.add_p2p(send ? task.rank : task.peer, send ? task.peer : task.rank, task.bytes,
                            join);
    }
    for (const ActivityId member_done : done) engine_.add_dependency(member_done, end);
    for (const TaskId member : members) transfer_[static_cast<size_t>(member)] = join;
  }

  // Collectives: the k-th collective task of a rank on a group meets the k-th of every other
  // member, key (0, group, k); p2p: a send meets the recv with the same (sender, receiver, tag),
  // key (1 + sender, receiver, tag). Returns the key and how many members the graph holds.
  std::pair<InstanceKey, int64_t> instance_key(const Task& task) {
    if (task.kind == TaskKind::kCollective) {
      const int64_t members = members_in_graph(task.group);
      if (members == 1) return {{0, task.group, 0}, 1};  // nobody to meet
      const int32_t occurrence = occurrences_[{task.rank, task.group}]++;
      return {{0, task.group, occurrence}, members};
    }
    const bool send = task.p2p == P2pKind::kSend;
    const int32_t sender = send ? task.rank : task.peer;
    const int32_t receiver = send ? task.peer : task.rank;
    return {{1 + int64_t{sender}, receiver, task.tag}, rank_index_.count(task.peer) ? 2 : 1};
  }

  int64_t members_in_graph(int32_t group) {
    if (group_members_.empty()) group_members_.assign(graph_.groups().size(), -1);
    int64_t& members = group_members_[static_cast<size_t>(group)];
    if (members < 0) {
      members = 0;
      for (const int32_t member : graph_.group(group).ranks) members += rank_index_.count(member);
    }
    return members;
  }

  struct RankCompute {
    ProcessorId processor = kNoProcessor;
    int32_t efficiency = 0;
    double slow = 1.0;
    PathId host_path = -1;  // a folded CPU host's shared cores (host_path()), or -1
    ThreadId thread = -1;   // a CPU host's rank thread (host_thread()), or -1
  };

  const CompiledPlan& compiled_;
  const TaskGraph& graph_;
  const SimOptions& options_;
  Engine engine_;
  std::vector<ActivityId> start_, transfer_, finish_;
  std::vector<RankCompute> ranks_;
  std::vector<DeviceSpec> rank_devices_;
  std::unordered_map<int32_t, int32_t> rank_index_;  // global rank -> graph rank (lookups only)
  std::vector<DeviceSpec> devices_;
  std::vector<DeviceEfficiency> efficiencies_;
  std::vector<std::vector<TimeNs>> op_times_;  // by device, op
  std::map<InstanceKey, Pending> pending_;
  std::map<std::pair<int32_t, int32_t>, int32_t> occurrences_;  // (rank, group) -> collectives
  std::vector<int64_t> group_members_;        // by group: members in the graph, -1 until counted
  std::map<int64_t, LinkId> host_links_;      // node -> its shared cores
  std::map<int64_t, CorePoolId> host_pools_;  // node -> its cores
};

}  // namespace

std::optional<SimResult> simulate_within(const CompiledPlan& compiled, const SimOptions& options,
                                         TimeNs horizon_ns) {
  STRATA_ASSERT(compiled.validation.ok(), "simulate() needs a valid task graph");
  check_options(compiled, options);
  GraphMapper mapper(compiled, options);
  std::optional<StepTimeline> timeline = mapper.run(horizon_ns);
  if (!timeline) return std::nullopt;
  const double price = options.price_usd_per_gpu_hour > 0 ? options.price_usd_per_gpu_hour
                                                          : compiled.cluster.price_usd_per_gpu_hour;
  return summarize_step(compiled, std::move(*timeline), price);
}

SimResult simulate(const CompiledPlan& compiled, const SimOptions& options) {
  return *simulate_within(compiled, options, kNoHorizon);
}

}  // namespace strata
