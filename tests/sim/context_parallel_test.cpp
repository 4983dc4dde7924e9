// Context parallelism simulated (plan/cp_attention.cpp): the ring attention's exchanges hide
// behind its blocks exactly when a block takes longer than a hop, folded and full graphs of cp
// plans agree (latent attention's among them), and Llama 3 8B plans at long sequences simulate with
// their cp traffic reported.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "plan/op_shapes.hpp"
#include "sim/simulate.hpp"
#include "sim/transfer_builder.hpp"
#include "tests/sim/sim_fixtures.hpp"
#include "topologies/topology.hpp"

namespace strata {
namespace {

// The device's tables without launch overhead and without the slowdown of compute beside
// communication: every op costs its roofline time, whatever runs beside it.
DeviceEfficiency exact_efficiency(const DeviceSpec& device) {
  DeviceEfficiency eff = default_efficiency(device);
  eff.launch_overhead_ns = 0;
  eff.comm_slowdown = 0;
  return eff;
}

// A Llama-style layer of hidden 1024 (8 heads of 128) over sequences of 8192 tokens: a rank of
// cp 2 holds 4096, whose attention blocks take about a tenth of a millisecond each on an A100.
ModelSpec ring_model() { return test::small_llama(2, 1024, 8, 256, 8192); }

// Layer 0's ring in micro-batch 0: the spans of its forward (step 0's start to step 1's end) and
// backward (step 0's start to the last add of the travelling dK, dV) attention.
struct RingSpans {
  double forward_s = 0;
  double backward_s = 0;
};

RingSpans ring_spans(const CompiledPlan& compiled, const SimResult& result) {
  const TaskGraph& graph = compiled.graph;
  TimeNs starts[2] = {-1, -1};
  TimeNs ends[2] = {0, 0};
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind != TaskKind::kCompute || t.role != TaskRole::kAttention || t.layer != 0 ||
        t.micro_batch != 0 || t.rank != graph.ranks().front().rank) {
      continue;
    }
    const int pass = t.phase == Phase::kForward ? 0 : 1;
    const TaskTiming& timing = result.tasks[static_cast<size_t>(id)];
    if (starts[pass] < 0) starts[pass] = timing.start_ns;
    ends[pass] = std::max(ends[pass], timing.finish_ns);
  }
  return {static_cast<double>(ends[0] - starts[0]) / 1e9,
          static_cast<double>(ends[1] - starts[1]) / 1e9};
}

// cp 2, p2p (Transformer Engine's ring). Forward: the hop of the rank's K and V (x) runs beside
// step 0, the causal block of its own tokens (c0), and step 1, half a block (c1), waits for both:
// span max(c0, x) + c1. Backward, from the received block to the rank's own: hop 0 (K and V)
// beside step 0, half a block (b0), then the add of step 0's dK, dV (d); hop 1 (the accumulated
// dK, dV, as many bytes) beside step 1, the causal block (b1), then its add: span
// max(b0, x) + d + max(b1, x) + d. The
// exposed cp time is what the hops add: max(0, x - c0) + max(0, x - b0) + max(0, x - b1), zero
// when every block outlasts a hop (links of 1 TB/s: x is about 17 us against blocks of 0.1 ms and
// more), and (x - c0) + (x - b0) + (x - b1) when each hop outlasts its block (10 GB/s: 1.7 ms).
TEST_CASE("ring attention's hops hide behind its blocks when the blocks are longer", "[sim][cp]") {
  const ModelSpec model = ring_model();
  ParallelPlan plan = test::make_plan(1, 1, 1, 1, 1, 8192);
  plan.cp = 2;
  plan.cp_comm = CpComm::kP2p;
  validate_plan(plan, model, std::nullopt, "test");
  const PlanOpShapes ops = plan_op_shapes(model, plan);
  const int64_t kv_bytes = 2 * (8192 / 2) * 2 * model.kv_hidden();
  for (const double bw : {1000e9, 10e9}) {
    const ClusterSpec cluster = test::two_gpu_node(bw);
    const DeviceEfficiency eff = exact_efficiency(cluster.device);
    const auto seconds = [&](const OpShape& op) {
      return static_cast<double>(compute_time_ns(cluster.device, eff, op)) / 1e9;
    };
    const double c0 = seconds(ops.attention.forward);
    const double c1 = seconds(ops.cp_block.forward);
    const double b0 = seconds(ops.cp_block.backward);
    const double b1 = seconds(ops.attention.backward);
    const double d = seconds(ops.cp_dkv_add);
    const double a = static_cast<double>(Topology(cluster, 2).route(0, 1).latency_ns) / 1e9;
    const double x = a + static_cast<double>(kv_bytes) / bw;
    // The engine's ring exchange alone takes the closed form.
    const CollectiveRun hop{CollectiveKind::kRingExchange, {0, 1}, kv_bytes};
    CHECK(static_cast<double>(time_collectives(cluster, 2, std::span(&hop, 1)).front()) / 1e9 ==
          Approx(x).epsilon(0.01));

    SimOptions options;
    options.calibration = Calibration{"test", {eff}, std::nullopt};
    const CompiledPlan compiled = compile_plan(model, cluster, plan, GraphMode::kFolded);
    REQUIRE(compiled.validation.ok());
    const SimResult result = simulate(compiled, options);
    const RingSpans spans = ring_spans(compiled, result);
    const double exposed = std::max(0.0, x - c0) + std::max(0.0, x - b0) + std::max(0.0, x - b1);
    INFO(fmt::format(
        "links {} GB/s: hop {:.1f} us; blocks forward {:.1f} and {:.1f} us, "
        "backward {:.1f} and {:.1f} us, adds {:.1f} us; spans {:.1f} and {:.1f} us; "
        "exposed cp {:.1f} us (per layer {:.1f} expected)",
        bw / 1e9, x * 1e6, c0 * 1e6, c1 * 1e6, b0 * 1e6, b1 * 1e6, d * 1e6, spans.forward_s * 1e6,
        spans.backward_s * 1e6, result.exposed_comm_s.cp * 1e6, exposed * 1e6));
    CHECK(spans.forward_s == Approx(std::max(c0, x) + c1).epsilon(0.01));
    CHECK(spans.backward_s == Approx(std::max(b0, x) + d + std::max(b1, x) + d).epsilon(0.01));
    if (bw > 100e9) {
      CHECK(x < std::min({c0, b0, b1}));
      CHECK(result.exposed_comm_s.cp == 0);
    } else {
      CHECK(x > std::max({c0, b0, b1}));
      // Each of the two layers' rings in each micro-batch (one here).
      CHECK(result.exposed_comm_s.cp == Approx(model.layers * exposed).epsilon(0.01));
    }
    // Every hop is counted as cp communication: three per layer.
    CHECK(result.comm_s.cp == Approx(model.layers * 3 * x).epsilon(0.01));
  }
}

// Symmetry folding holds along cp: a folded graph's rank stands for its cp peers, whose ring
// exchanges, all-gathers and all-to-alls the network model prices as the group's images.
TEST_CASE("folded and full cp graphs agree within 1% on step time", "[sim][cp][folding]") {
  const ModelSpec model = ring_model();
  struct Case {
    int64_t dp, tp, pp, cp;
    CpComm comm;
  };
  const Case cases[] = {{2, 2, 1, 2, CpComm::kP2p},
                        {1, 2, 2, 4, CpComm::kP2p},
                        {2, 1, 1, 4, CpComm::kAllGather},
                        {1, 2, 2, 2, CpComm::kAllToAll},
                        {1, 4, 1, 4, CpComm::kP2p}};
  for (const Case& c : cases) {
    ParallelPlan plan = test::make_plan(c.dp, c.tp, c.pp, 1, c.dp * 4, 4096);
    plan.cp = c.cp;
    plan.cp_comm = c.comm;
    plan.sequence_parallel = c.tp > 1;
    plan.zero_stage = 1;
    for (const std::string cluster : {"dgx-h100"}) {
      const double folded =
          simulate(test::compile_checked(model, plan, GraphMode::kFolded, cluster)).step_time_s;
      const double full =
          simulate(test::compile_checked(model, plan, GraphMode::kFull, cluster)).step_time_s;
      INFO(fmt::format("dp {} tp {} pp {} cp {} {} on {}: folded {:.6f} s, full {:.6f} s", c.dp,
                       c.tp, c.pp, c.cp, to_string(c.comm), cluster, folded, full));
      CHECK(std::abs(folded / full - 1) <= 0.01);
    }
  }
}

// ring_model's layers with DeepSeek's multi-head latent attention (8 heads of 96 + 32 query-key
// and 128 value dimensions, latents of 384 for the query and 256 for the keys and values) and
// its layout of experts (the first layer dense, the second 4 routed experts of 256, top 2, and a
// shared one).
ModelSpec latent_ring_model() {
  ModelSpec m = ring_model();
  m.q_lora_rank = 384;
  m.kv_lora_rank = 256;
  m.qk_nope_head_dim = 96;
  m.qk_rope_head_dim = 32;
  m.v_head_dim = 128;
  m.experts = 4;
  m.experts_per_token = 2;
  m.expert_ffn_hidden = 256;
  m.shared_expert_ffn_hidden = 256;
  m.first_dense_layers = 1;
  validate_model(m, "test");
  return m;
}

// Symmetry folding holds along cp with latent attention too: its K and V blocks (nope + rope and
// v_head_dim wide per head) travel the ring, the all-gather or the all-to-alls of every cp peer
// alike, so a folded graph's step time is the full graph's.
TEST_CASE("folded and full cp graphs of latent attention agree within 1% on step time",
          "[sim][cp][mla][folding]") {
  const ModelSpec model = latent_ring_model();
  for (const CpComm comm : {CpComm::kP2p, CpComm::kAllToAll}) {
    ParallelPlan plan = test::make_plan(1, 2, 2, 1, 4, 4096);
    plan.cp = 2;
    plan.cp_comm = comm;
    plan.sequence_parallel = true;
    plan.zero_stage = 1;
    const double folded =
        simulate(test::compile_checked(model, plan, GraphMode::kFolded, "dgx-h100")).step_time_s;
    const double full =
        simulate(test::compile_checked(model, plan, GraphMode::kFull, "dgx-h100")).step_time_s;
    INFO(fmt::format("{}: folded {:.6f} s, full {:.6f} s", to_string(comm), folded, full));
    CHECK(full > 0);
    CHECK(std::abs(folded / full - 1) <= 0.01);
  }
}

// Llama 3 8B on DGX H100 nodes at 8k tokens over cp 2 and at 128k over cp 8 (Llama 3's long
// context stage ran cp 16 over 131,072 tokens, Dubey et al. 2024, Table 4), each comm type: the
// step simulates, its cp communication is reported, and the ring hides more of it than the
// unoverlapped all-gather.
TEST_CASE("Llama 3 8B simulates at long sequences under context parallelism", "[sim][cp]") {
  const ModelSpec model = load_model("llama3-8b");
  struct Case {
    int64_t seq, cp, tp, dp, global_batch;
  };
  // tp x cp within the 8 key/value heads, for a2a.
  for (const Case& c : {Case{8192, 2, 2, 2, 16}, Case{131072, 8, 1, 1, 4}}) {
    double exposed_ring = 0, exposed_gather = 0;
    for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
      ParallelPlan plan = test::make_plan(c.dp, c.tp, 1, 1, c.global_batch, c.seq);
      plan.cp = c.cp;
      plan.cp_comm = comm;
      plan.sequence_parallel = c.tp > 1;
      plan.zero_stage = 1;
      plan.recompute = c.seq > 8192 ? RecomputeKind::kFull : RecomputeKind::kNone;
      const CompiledPlan compiled =
          test::compile_checked(model, plan, GraphMode::kFolded, "dgx-h100");
      REQUIRE(compiled.validation.ok());
      const SimResult r = simulate(compiled);
      INFO(
          fmt::format("seq {} cp {} {} tp {} dp {}: {} tasks, step {:.3f} s, MFU {:.1f}%, cp "
                      "comm {:.1f} ms ({:.1f} exposed), peak {:.1f} GiB",
                      c.seq, c.cp, to_string(comm), c.tp, c.dp, compiled.graph.size(),
                      r.step_time_s, r.mfu * 100, r.comm_s.cp * 1e3, r.exposed_comm_s.cp * 1e3,
                      static_cast<double>(r.peak_memory_bytes) / (1 << 30)));
      CHECK(r.comm_s.cp > 0);
      CHECK(r.mfu > 0.1);
      CHECK(r.mfu < 0.8);
      if (comm == CpComm::kP2p) exposed_ring = r.exposed_comm_s.cp;
      if (comm == CpComm::kAllGather) exposed_gather = r.exposed_comm_s.cp;
    }
    CHECK(exposed_ring < exposed_gather);
  }
}

}  // namespace
}  // namespace strata
