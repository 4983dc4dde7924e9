// Communication overlap as the framework flags make it (plan/framework.hpp), simulated on a
// two-GPU node with one link of kB bytes/s whose ring collectives take the closed-form time of
// tests/sim/network_timing_test.cpp: an all-reduce of S bytes over two GPUs, 2a + S/B (a the
// route's latency), an all-gather of S bytes a + S/(2B).

#include <catch2/catch.hpp>

#include <algorithm>

#include <fmt/format.h>

#include "plan/framework.hpp"
#include "plan/op_shapes.hpp"
#include "plan/shard_sizes.hpp"
#include "sim/simulate.hpp"
#include "tests/sim/sim_fixtures.hpp"
#include "topologies/topology.hpp"

namespace strata {
namespace {

constexpr double kB = 100e9;

double route_latency_s(const ClusterSpec& cluster) {
  return static_cast<double>(Topology(cluster, 2).route(0, 1).latency_ns) / 1e9;
}

// Four layers of hidden 1024 over 16k tokens per micro-batch: a layer's backward (tens of ms)
// outlasts the reduction of two layers' fp32 gradients (about 1 ms at kB).
ModelSpec four_layers() { return test::small_model(4, 1024, 8, 64, 2048); }

ParallelPlan data_parallel(int64_t zero) {
  ParallelPlan plan = test::make_plan(2, 1, 1, 8, 16, 2048);
  plan.zero_stage = zero;
  return plan;
}

SimResult simulate_on(const ClusterSpec& cluster, const ModelSpec& model,
                      const ParallelPlan& plan) {
  validate_plan(plan, model, std::nullopt, "test");
  SimOptions options;
  options.calibration = test::no_launch_overhead(cluster.device);
  return simulate(compile_plan(model, cluster, plan, GraphMode::kFolded), options);
}

// Megatron-Core with --overlap-grad-reduce and a bucket of two layers and one parameter (a bucket
// closes once it holds at least that many): the buckets, in backward order, are {final norm,
// layer 3, layer 2} and {layer 1, layer 0, embedding}. The first is
// reduced while the backward of layers 1 and 0 runs; the second only after the embedding's
// backward, and the optimizer waits for it: the exposed data-parallel time is that last
// bucket's all-reduce, 2a + S/B with S its fp32 gradients. Without the flag Megatron reduces one
// bucket of every gradient after the backward: 2a + S_all/B.
TEST_CASE("gradient-reduce overlap leaves the last bucket's reduction exposed", "[sim][overlap]") {
  const ClusterSpec cluster = test::two_gpu_node(kB);
  const ModelSpec model = four_layers();
  const ShardSizes sizes = shard_sizes(model, data_parallel(0));
  const double a = route_latency_s(cluster);

  ParallelPlan overlapped = data_parallel(0);
  overlapped.overlap.grad_reduce = true;
  overlapped.bucket_size = 2 * sizes.layer + 1;
  const SimResult with = simulate_on(cluster, model, overlapped);
  const double last_bucket = 4.0 * static_cast<double>(2 * sizes.layer + sizes.embedding);
  INFO(fmt::format("exposed dp {} s, last bucket 2a + S/B = {} s", with.exposed_comm_s.dp,
                   2 * a + last_bucket / kB));
  CHECK(with.exposed_comm_s.dp == Approx(2 * a + last_bucket / kB).epsilon(0.01));
  // Both buckets were reduced: the first one's time is hidden behind the backward.
  CHECK(with.comm_s.dp == Approx(4 * a + (4.0 * count_parameters(model).total) / kB).epsilon(0.01));

  const SimResult without = simulate_on(cluster, model, data_parallel(0));
  const double everything = 4.0 * static_cast<double>(count_parameters(model).total);
  CHECK(without.exposed_comm_s.dp == Approx(2 * a + everything / kB).epsilon(0.01));
  CHECK(with.step_time_s < without.step_time_s);
}

// The distributed optimizer (ZeRO 1) all-gathers the updated 16-bit parameters, bucket by
// bucket: after the optimizer step without --overlap-param-gather, so the step ends with them
// exposed; with it, at the start of the next step's forward, where only the first bucket's
// gather is exposed (the second is dispatched by the first bucket's forward pre-hook and runs
// beside its forward), and the step ends with the optimizer.
TEST_CASE("parameter-gather overlap moves the gathers into the forward", "[sim][overlap]") {
  const ClusterSpec cluster = test::two_gpu_node(kB);
  const ModelSpec model = four_layers();
  const ShardSizes sizes = shard_sizes(model, data_parallel(1));
  const double a = route_latency_s(cluster);
  ParallelPlan plan = data_parallel(1);
  plan.overlap.grad_reduce = true;
  plan.bucket_size = 2 * sizes.layer + 1;
  const SimResult after_step = simulate_on(cluster, model, plan);
  plan.overlap.param_gather = true;
  const SimResult in_forward = simulate_on(cluster, model, plan);

  // The reduce-scatter of the last bucket (a + S/(2B) with S in fp32) is exposed in both.
  const double last_bucket = static_cast<double>(2 * sizes.layer + sizes.embedding);
  const double reduce_scatter = a + 4.0 * last_bucket / (2 * kB);
  // All-gathers of 16-bit parameters: the first bucket in forward order is the last in backward.
  const double first_gather = a + 2.0 * last_bucket / (2 * kB);
  const double second_gather =
      a + 2.0 * static_cast<double>(2 * sizes.layer + sizes.head) / (2 * kB);
  INFO(fmt::format("exposed dp: after the step {} s, in the forward {} s",
                   after_step.exposed_comm_s.dp, in_forward.exposed_comm_s.dp));
  // The gradient norm's 4-byte all-reduce (over the world under ZeRO 1) adds its latency 2a.
  CHECK(after_step.exposed_comm_s.dp ==
        Approx(reduce_scatter + 2 * a + first_gather + second_gather).epsilon(0.01));
  CHECK(in_forward.exposed_comm_s.dp ==
        Approx(reduce_scatter + 2 * a + first_gather).epsilon(0.01));
  TimeNs end = 0, optimizer_end = 0;
  const CompiledPlan compiled = compile_plan(model, cluster, plan, GraphMode::kFolded);
  for (TaskId id = 0; id < compiled.graph.size(); ++id) {
    const TaskTiming& t = in_forward.tasks[static_cast<size_t>(id)];
    end = std::max(end, t.finish_ns);
    if (compiled.graph.task(id).role == TaskRole::kOptimizer) optimizer_end = t.finish_ns;
  }
  CHECK(end == optimizer_end);
}

// Megatron-LM's 1F1B schedule sends pipeline messages in blocking calls the compute waits for;
// the interleaved schedule does not wait for sends, and with --overlap-p2p-communication posts
// its receives ahead on their own stream instead of when the schedule reaches them.
TEST_CASE("pipeline sends block the compute unless the interleaved schedule overlaps them",
          "[plan][overlap]") {
  const ModelSpec model = test::small_model(8, 256, 8, 64, 128);
  const auto sends_waited_for = [&](const ParallelPlan& plan) {
    const CompiledPlan compiled = test::compile_checked(model, plan);
    int64_t sends = 0, waited = 0;
    std::vector<bool> is_send(static_cast<size_t>(compiled.graph.size()), false);
    for (TaskId id = 0; id < compiled.graph.size(); ++id) {
      const Task& t = compiled.graph.task(id);
      if (t.kind == TaskKind::kP2p && t.p2p == P2pKind::kSend) {
        is_send[static_cast<size_t>(id)] = true;
        ++sends;
      }
      if (t.kind != TaskKind::kCompute) continue;
      for (const TaskId dep : compiled.graph.deps(id)) waited += is_send[static_cast<size_t>(dep)];
    }
    REQUIRE(sends > 0);
    return std::pair{sends, waited};
  };
  ParallelPlan plan = test::make_plan(1, 1, 2, 1, 4, 128);
  const auto [sends, waited] = sends_waited_for(plan);  // 1F1B: blocking, whatever the flag
  // Every send is followed by a compute that waits for it (the optimizer after the last).
  CHECK(waited == sends);
  plan.schedule = ScheduleKind::kInterleaved;
  plan.vpp = 2;
  CHECK(sends_waited_for(plan).second == 0);
  const auto receive_buffers_on = [&](const ParallelPlan& p, Stream stream) {
    const CompiledPlan compiled = test::compile_checked(model, p);
    int64_t count = 0;
    for (const Task& t : compiled.graph.tasks()) {
      count += t.kind == TaskKind::kMemory && t.memory == MemoryAction::kAlloc &&
               t.buffer == BufferClass::kPipelineBuffer && t.stream == stream;
    }
    return count;
  };
  CHECK(receive_buffers_on(plan, Stream::kPpRecv) > 0);
  plan.overlap.p2p = false;
  CHECK(receive_buffers_on(plan, Stream::kPpRecv) == 0);
}

// The union of [transfer, finish) of the tasks `pick` selects, minus the union of the compute
// stream's busy intervals: the communication the compute waits on.
template <typename Pick>
double exposed_s(const CompiledPlan& compiled, const SimResult& result, Pick pick) {
  std::vector<std::pair<TimeNs, TimeNs>> comm, busy;
  for (TaskId id = 0; id < compiled.graph.size(); ++id) {
    const Task& t = compiled.graph.task(id);
    const TaskTiming& time = result.tasks[static_cast<size_t>(id)];
    if (t.kind == TaskKind::kCompute) busy.emplace_back(time.start_ns, time.finish_ns);
    if (pick(t)) comm.emplace_back(time.transfer_ns, time.finish_ns);
  }
  TimeNs exposed = 0;
  for (const auto& [from, to] : comm) {
    TimeNs covered = 0;
    for (const auto& [start, finish] : busy)
      covered += std::max<TimeNs>(0, std::min(to, finish) - std::max(from, start));
    exposed += to - from - covered;  // compute tasks on one stream do not overlap each other
  }
  return static_cast<double>(exposed) / 1e9;
}

// One layer at tp 2 with sequence parallelism on a two-GPU node whose link (10 GB/s here) is so
// slow that a transfer outlasts any GEMM chunk beside it. Without --tp-comm-overlap the layer's
// ten TP collectives (forward: two all-gathers, two reduce-scatters; backward: four and two) each
// block the compute: 10 (a + S/(2B)), S = 2 s b h bytes. With it each becomes one ring-exchange
// step of c = S/2 bytes beside a GEMM chunk of s b / 2 rows (g, its time alone), which runs
// unslowed for the step's latency a and then at 1 / (1 + f) while the chunk's flow is on:
//  - gathering (QKV and MLP-up forward, MLP-down and attention-output backward): the step and
//    chunk 0 start together; exposed r - e(g0), r = a + c/B, e(g) = a + (g - a)(1 + f);
//  - reducing (attention-output and MLP-down forward): chunk 0, then the step beside chunk 1:
//    exposed r - e(g1);
//  - both (QKV and MLP-up backward): r - e(g0), then r - e(g1).
TEST_CASE("TP overlap exposes what a GEMM chunk does not cover of one exchange", "[sim][overlap]") {
  ClusterSpec cluster = test::two_gpu_node(kB);
  const double bandwidth = 10e9;
  cluster.nvlink.bw_gbps = bandwidth / 1e9;
  const ModelSpec model = test::small_model(1, 1024, 8, 64, 2048);
  ParallelPlan plan = test::make_plan(1, 2, 1, 4, 4, 2048);
  plan.sequence_parallel = true;
  const auto in_layer = [](const Task& t) { return t.stream == Stream::kTpComm && t.layer == 0; };
  const double a = route_latency_s(cluster);
  const double s_bytes = 2.0 * 2048 * 4 * 1024;

  const SimResult blocking = simulate_on(cluster, model, plan);
  const CompiledPlan blocking_graph = compile_plan(model, cluster, plan, GraphMode::kFolded);
  CHECK(exposed_s(blocking_graph, blocking, in_layer) ==
        Approx(10 * (a + s_bytes / (2 * bandwidth))).epsilon(0.01));

  plan.overlap.tp_comm = true;
  const SimResult overlapped = simulate_on(cluster, model, plan);
  const CompiledPlan graph = compile_plan(model, cluster, plan, GraphMode::kFolded);
  const DeviceEfficiency eff = *test::no_launch_overhead(cluster.device).devices.begin();
  const double f = eff.comm_slowdown;
  const PlanOpShapes ops = plan_op_shapes(model, plan);
  const auto g = [&](const OpShape& op) {
    return static_cast<double>(compute_time_ns(cluster.device, eff, op)) / 1e9;
  };
  const double r = a + s_bytes / 2 / bandwidth;
  const auto hidden = [&](double gemm) { return r - (a + (gemm - a) * (1 + f)); };
  const double expected =
      hidden(g(ops.qkv_chunk.forward)) + hidden(g(ops.attn_out_chunk.forward)) +
      hidden(g(ops.mlp_up_chunk.forward)) + hidden(g(ops.mlp_down_chunk.forward)) +
      hidden(g(ops.mlp_down_chunk.backward)) + 2 * hidden(g(ops.mlp_up_chunk.backward)) +
      hidden(g(ops.attn_out_chunk.backward)) + 2 * hidden(g(ops.qkv_chunk.backward));
  INFO(fmt::format("exposed tp in the layer: {} s blocking, {} s overlapped, hand {} s",
                   exposed_s(blocking_graph, blocking, in_layer),
                   exposed_s(graph, overlapped, in_layer), expected));
  for (const OpShape& chunk : {ops.qkv_chunk.forward, ops.attn_out_chunk.backward}) {
    REQUIRE(g(chunk) > a);                  // the latency passes within the chunk
    REQUIRE((g(chunk) - a) * (1 + f) < r);  // and the transfer outlasts it
  }
  CHECK(exposed_s(graph, overlapped, in_layer) == Approx(expected).epsilon(0.01));
  CHECK(overlapped.step_time_s < blocking.step_time_s);
}

// Horovod's background thread wakes every HOROVOD_CYCLE_TIME and launches what is ready. With a
// 100 ms cycle, longer than the whole backward, no bucket launches before the wake at 100 ms
// (the one at 0 comes before any gradient); then the nb buckets' all-reduces run back to back,
// 2a + S/B each with S their fp32 gradients, the gradient norm's 4-byte all-reduce and the GPU's
// Adam follow: step = 100 ms + nb 2a + 4P/B + (2a + 4/B) + Adam. A 200 ms cycle moves it by 100 ms.
TEST_CASE("Horovod launches ready reductions at its background thread's next wake",
          "[sim][overlap]") {
  const ClusterSpec cluster = test::two_gpu_node(kB);
  const ModelSpec model = four_layers();
  ParallelPlan plan = apply_framework(data_parallel(0), Framework::kHorovod);
  plan.host_dispatch = HostDispatch::kNone;
  REQUIRE(plan.cycle_time_ns == 1'000'000);  // HOROVOD_CYCLE_TIME's default, 1 ms
  plan.cycle_time_ns = 100'000'000;
  validate_plan(plan, model, std::nullopt, "test");
  const CompiledPlan compiled = compile_plan(model, cluster, plan, GraphMode::kFolded);
  SimOptions options;
  options.calibration = test::no_launch_overhead(cluster.device);
  const SimResult slow = simulate(compiled, options);

  const double a = route_latency_s(cluster);
  const auto buckets = static_cast<double>(compiled.graph.buckets().size());
  REQUIRE(buckets >= 2);
  double adam = 0;
  for (const Task& t : compiled.graph.tasks()) {
    if (t.role == TaskRole::kOptimizer) {
      adam = static_cast<double>(compute_time_ns(
                 cluster.device, options.calibration->devices.front(), compiled.graph.op(t.op))) /
             1e9;
    }
  }
  const double params = static_cast<double>(count_parameters(model).total);
  const double expected = 0.1 + buckets * 2 * a + 4 * params / kB + (2 * a + 4 / kB) + adam;
  INFO(fmt::format("{} buckets; step {} s, expected {} s", buckets, slow.step_time_s, expected));
  CHECK(slow.step_time_s == Approx(expected).epsilon(1e-4));

  plan.cycle_time_ns = 200'000'000;
  const SimResult slower =
      simulate(compile_plan(model, cluster, plan, GraphMode::kFolded), options);
  CHECK(slower.step_time_s - slow.step_time_s == Approx(0.1).epsilon(1e-6));
}

}  // namespace
}  // namespace strata
