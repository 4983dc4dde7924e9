// ZeRO-Offload and ZeRO-3 prefetch (plan/parallel_plan.hpp: Offload, prefetch_layers) as tasks
// of the graph, checked by hand on a two-GPU node whose GPU network costs nothing and whose PCIe
// link moves kPcie bytes/s with no latency: a copy of S bytes takes S / kPcie, the host's Adam
// over a shard of N parameters takes its bytes over the host's memory bandwidth
// (sim/compute_model.hpp, host_compute_time_ns), and the GPU's Adam its roofline time.

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "plan/memory_plan.hpp"
#include "plan/shard_sizes.hpp"
#include "sim/simulate.hpp"
#include "tests/sim/sim_fixtures.hpp"

namespace strata {
namespace {

constexpr double kPcie = 10e9;       // bytes/s
constexpr double kHostBw = 50e9;     // bytes/s
constexpr double kHostFlops = 1e15;  // so that the host's Adam is bound by its memory

ClusterSpec offload_node() {
  ClusterSpec cluster = test::free_network_cluster();
  cluster.gpus_per_node = 2;
  cluster.pcie = {kPcie / 1e9, 0};
  cluster.device.host_flops = kHostFlops;
  cluster.device.host_mem_bw_gbps = kHostBw / 1e9;
  cluster.device.host_memory_bytes = int64_t{1} << 40;
  return cluster;
}

ModelSpec four_layers() { return test::small_model(4, 1024, 8, 64, 2048); }

// dp 2, one micro-batch of 8 sequences per replica, ZeRO 2, no host dispatch time.
ParallelPlan zero2() {
  ParallelPlan plan = test::make_plan(2, 1, 1, 8, 16, 2048);
  plan.zero_stage = 2;
  plan.host_dispatch = HostDispatch::kNone;
  return plan;
}

struct Run {
  CompiledPlan compiled;
  SimResult result;
};

Run simulate_on(const ClusterSpec& cluster, const ModelSpec& model, const ParallelPlan& plan) {
  validate_plan(plan, model, std::nullopt, "test");
  validate_plan_on_device(plan, cluster.device, "test");
  SimOptions options;
  options.calibration = test::no_launch_overhead(cluster.device);
  CompiledPlan compiled = compile_plan(model, cluster, plan, GraphMode::kFolded);
  SimResult result = simulate(compiled, options);
  return {std::move(compiled), std::move(result)};
}

// With one gradient bucket and one micro-batch, the step ends: backward, the bucket's
// reduce-scatter (free), then on the GPU the Adam step; under offload the rank's gradient shard
// (2 bytes per parameter) down, the host's Adam over the shard, the updated 16-bit shard up. So
// the offloaded step is longer by G/P + host Adam + W/P - GPU Adam, G = W = 2 N bytes.
TEST_CASE("offloaded optimizer: shard down, Adam on the host, shard up", "[sim][offload]") {
  const ClusterSpec cluster = offload_node();
  const ModelSpec model = four_layers();
  const ParallelPlan on_gpu = zero2();
  ParallelPlan offloaded = zero2();
  offloaded.offload.optimizer = true;
  const Run gpu = simulate_on(cluster, model, on_gpu);
  const Run host = simulate_on(cluster, model, offloaded);

  const int64_t shard = (count_parameters(model).total + 1) / 2;
  const OpShape adam = optimizer_op(shard, DType::kBf16);
  const double gpu_adam =
      static_cast<double>(compute_time_ns(
          cluster.device, test::no_launch_overhead(cluster.device).devices.front(), adam)) /
      1e9;
  const double host_adam = static_cast<double>(adam.bytes) / kHostBw;
  REQUIRE(host_adam > static_cast<double>(adam.flops) / kHostFlops);
  // Megatron-Core's fp32 gradients (the default precision): 4 bytes down, 2 bytes of bf16
  // parameters up.
  const double copies = static_cast<double>(4 * shard + 2 * shard) / kPcie;
  const double expected = gpu.result.step_time_s - gpu_adam + copies + host_adam;
  INFO(fmt::format("GPU step {} s (Adam {} s); offloaded {} s, expected {} s",
                   gpu.result.step_time_s, gpu_adam, host.result.step_time_s, expected));
  CHECK(host.result.step_time_s == Approx(expected).epsilon(1e-3));

  // The graph: one copy down per reduced bucket, one up after the step, the step on the host.
  int64_t down = 0, up = 0, host_steps = 0;
  for (const Task& t : host.compiled.graph.tasks()) {
    if (t.kind == TaskKind::kCopy) (t.copy == CopyDirection::kToHost ? down : up) += t.bytes;
    if (t.role == TaskRole::kOptimizer && t.stream == Stream::kHost) ++host_steps;
  }
  CHECK(down == 4 * shard);
  CHECK(up == 2 * shard);
  CHECK(host_steps == 1);

  // Memory: nothing of the optimizer or the gradient shard stays on the GPU; the host holds the
  // 12-byte states and an fp32 gradient shard.
  const StageMemory& stage = host.compiled.memory.stages.front();
  CHECK(stage.at_peak.optimizer == 0);
  CHECK(stage.at_peak.grads == 0);
  CHECK(stage.host_bytes == 12 * shard + 4 * shard);
  CHECK(gpu.compiled.memory.stages.front().host_bytes == 0);
}

// ZeRO 3 with --offload-param: every gather first copies the rank's 1/dp shard up; the GPU holds
// no parameters between uses.
TEST_CASE("offloaded parameters are copied up before each gather", "[sim][offload]") {
  const ClusterSpec cluster = offload_node();
  const ModelSpec model = four_layers();
  ParallelPlan plan = zero2();
  plan.zero_stage = 3;
  plan.offload.params = true;
  const Run run = simulate_on(cluster, model, plan);
  const TaskGraph& graph = run.compiled.graph;
  std::map<TaskId, const Task*> copies;
  int64_t gathers = 0;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind == TaskKind::kCopy) copies[id] = &t;
    if (t.role != TaskRole::kParamGather) continue;
    ++gathers;
    // The gather waits for its shard's copy, half its bytes (rounded up).
    const Task& before = graph.task(id - 1);
    REQUIRE(before.kind == TaskKind::kCopy);
    CHECK(before.copy == CopyDirection::kToDevice);
    CHECK(before.bytes == (t.bytes + 1) / 2);
  }
  CHECK(gathers > 0);
  CHECK(static_cast<int64_t>(copies.size()) == gathers);
  CHECK(run.compiled.memory.stages.front().at_peak.params == 0);
  CHECK(run.compiled.memory.stages.front().host_bytes ==
        2 * ((count_parameters(model).total + 1) / 2));
}

// The ZeRO-3 prefetch window: gathers run prefetch_layers layers ahead of the layer computing, so
// at most prefetch_layers + 1 layers' parameters are gathered at once (in program order, as the
// memory plan replays them): with 4 layers, w = 0, 1, 2 hold 1, 2, 3 layers.
TEST_CASE("the ZeRO-3 prefetch window bounds the gathered layers", "[sim][offload]") {
  const ModelSpec model = test::small_model(4, 1024, 8, 64, 2048);
  for (const int64_t window : {0, 1, 2}) {
    INFO("prefetch_layers " << window);
    ParallelPlan plan = zero2();
    plan.zero_stage = 3;
    plan.prefetch_layers = window;
    plan.sequence_parallel = false;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    const int64_t layer_bytes = 2 * shard_sizes(model, plan).layer;
    int64_t live = 0, most = 0;
    for (const Task& t : compiled.graph.tasks()) {
      if (t.kind != TaskKind::kMemory || t.buffer != BufferClass::kGatheredParams || t.layer < 0) {
        continue;
      }
      live += t.memory == MemoryAction::kAlloc ? t.bytes : -t.bytes;
      most = std::max(most, live);
    }
    CHECK(most == (window + 1) * layer_bytes);
  }
}

// FSDP2's and DeepSpeed's module hooks issue each layer's gathers from the host thread: every
// layer gather sits in a host-dispatch block of its own, which counts it as a call (so it costs
// the framework's per-call time, plan/host_dispatch.hpp) and which no compute shares.
TEST_CASE("ZeRO-3 layer gathers are issued by a host block of their own", "[sim][offload]") {
  ParallelPlan plan = zero2();
  plan.zero_stage = 3;
  plan.host_dispatch = HostDispatch::kEager;
  const CompiledPlan compiled = test::compile_checked(four_layers(), plan);
  const TaskGraph& graph = compiled.graph;
  int64_t checked = 0;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& gather = graph.task(id);
    if (gather.role != TaskRole::kParamGather || gather.layer < 0) continue;
    TaskId block = id - 1;
    while (graph.task(block).stream != Stream::kHost) {
      REQUIRE(graph.task(block).kind != TaskKind::kCompute);
      --block;
    }
    CHECK(graph.op(graph.task(block).op).dims[1] >= 1);  // the calls it issues
    ++checked;
  }
  CHECK(checked == 2 * 4);  // one micro-batch: each of 4 layers gathered in forward and backward
}

}  // namespace
}  // namespace strata
