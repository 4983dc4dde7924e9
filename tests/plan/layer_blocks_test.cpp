// The layer shapes of the Hugging Face families beyond Llama, lowered into the task graph: the
// TP collectives of parallel blocks, the norms of sandwich and post-norm blocks, QK-norm, stated
// head widths and per-layer attention windows. Each fact is a count from the block's definition
// (models/model_spec.hpp, LayerBlock) or a closed form.

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "plan/op_shapes.hpp"
#include "tests/plan/plan_fixtures.hpp"

namespace strata {
namespace {

ModelSpec llama_like() {
  ModelSpec model = load_model("llama3-8b");
  model.layers = 4;
  return model;
}

int64_t count_tasks(const CompiledPlan& compiled, TaskKind kind, Stream stream, TaskRole role) {
  const auto& tasks = compiled.graph.tasks();
  return std::count_if(tasks.begin(), tasks.end(), [&](const Task& task) {
    return task.kind == kind && task.stream == stream && task.role == role;
  });
}

int64_t tp_collectives(const CompiledPlan& compiled) {
  const auto& tasks = compiled.graph.tasks();
  return std::count_if(tasks.begin(), tasks.end(), [](const Task& task) {
    return task.kind == TaskKind::kCollective && task.stream == Stream::kTpComm && task.layer >= 0;
  });
}

// Under tensor parallelism a sequential block reduces the attention output and the MLP output,
// each way (4 all-reduces per layer and micro-batch); a parallel block whose branches share a
// norm sums them and reduces once each way (2); with a norm per branch the backward still reduces
// each branch's input gradient for its own norm (3). With sequence parallelism the gathers follow
// the same sharing: 2 + 4 for sequential, 1 + 2 shared, 2 + 3 with two norms.
TEST_CASE("parallel blocks halve the layer's TP collectives when their branches share a norm",
          "[plan]") {
  const ParallelPlan plan = test::make_plan(1, 2, 1, 1, 1, 256);
  const int64_t per_layer_passes = 4;  // layers, one micro-batch
  ModelSpec model = llama_like();
  const auto collectives = [&](LayerBlock block, bool sequence_parallel) {
    model.block = block;
    ParallelPlan p = plan;
    p.sequence_parallel = sequence_parallel;
    return tp_collectives(test::compile_checked(model, p)) / per_layer_passes;
  };
  CHECK(collectives(LayerBlock::kPreNorm, false) == 4);
  CHECK(collectives(LayerBlock::kParallel, false) == 2);
  CHECK(collectives(LayerBlock::kParallelTwoNorms, false) == 3);
  CHECK(collectives(LayerBlock::kPreNorm, true) == 4 + 6);
  CHECK(collectives(LayerBlock::kParallel, true) == 2 + 3);
  CHECK(collectives(LayerBlock::kParallelTwoNorms, true) == 3 + 5);
}

// Norm tasks per layer forward: 2 pre-norm, 2 post-norm (after attention and MLP), 4 sandwich,
// 1 parallel; QK-norm adds one over the queries and keys.
TEST_CASE("norm tasks follow the block, and QK-norm adds one", "[plan]") {
  const ParallelPlan plan = test::make_plan(1, 1, 1, 1, 1, 256);
  ModelSpec model = llama_like();
  const auto norms = [&](LayerBlock block, QkNorm qk) {
    model.block = block;
    model.qk_norm = qk;
    const CompiledPlan compiled = test::compile_checked(model, plan);
    int64_t count = 0;
    for (const TaskRole role :
         {TaskRole::kNorm1, TaskRole::kNorm2, TaskRole::kPostNorm, TaskRole::kQkNorm}) {
      count += count_tasks(compiled, TaskKind::kCompute, Stream::kCompute, role);
    }
    return count / (2 * model.layers);  // forward and backward
  };
  CHECK(norms(LayerBlock::kPreNorm, QkNorm::kNone) == 2);
  CHECK(norms(LayerBlock::kPostNorm, QkNorm::kNone) == 2);
  CHECK(norms(LayerBlock::kSandwich, QkNorm::kNone) == 4);
  CHECK(norms(LayerBlock::kParallel, QkNorm::kNone) == 1);
  CHECK(norms(LayerBlock::kSandwich, QkNorm::kPerHead) == 5);
}

// A stated head width sets the QKV and output products: Qwen3-0.6B's shape (hidden 1024, 16 heads
// of 128, 8 K/V heads) gives QKV (s b) x 1024 -> 2048 + 2 x 1024 and the output 2048 -> 1024, split
// over tp.
TEST_CASE("a stated head_dim sets the products' widths", "[plan]") {
  ModelSpec model = llama_like();
  model.hidden = 1024;
  model.heads = 16;
  model.kv_heads = 8;
  model.head_size = 128;
  model.ffn_hidden = 3072;
  const ParallelPlan plan = test::make_plan(1, 2, 1, 1, 1, 256);
  const PlanOpShapes ops = plan_op_shapes(model, plan);
  CHECK(ops.qkv.forward.dims == std::array<int64_t, 4>{256, (2048 + 2 * 1024) / 2, 1024, 0});
  CHECK(ops.attn_out.forward.dims == std::array<int64_t, 4>{256, 1024, 2048 / 2, 0});
  CHECK(ops.attention.forward.dims == std::array<int64_t, 4>{1, 256, 8, 128});
}

// Windows per layer: with one global layer every 2 (Gemma 2), half the layers attend through the
// window and half globally, so the step's model FLOPs are exactly the mean of an all-windowed and
// an all-global model's (the rest of the step is the same in all three).
TEST_CASE("alternating windows give the mean of windowed and global FLOPs", "[plan][flops]") {
  ModelSpec model = llama_like();
  const ParallelPlan plan = test::make_plan(1, 1, 1, 1, 2, 2048);
  const auto model_flops = [&](int64_t window, int64_t global_every) {
    model.sliding_window = window;
    model.global_every = global_every;
    return test::compile_checked(model, plan).flops.model;
  };
  const int64_t global = model_flops(0, 0);
  const int64_t windowed = model_flops(512, 0);
  CHECK(windowed < global);
  CHECK(2 * model_flops(512, 2) == windowed + global);
}

}  // namespace
}  // namespace strata

namespace strata {

// Every block's graph is free of data hazards (plan/graph_validator.hpp: each read-after-write,
// write-after-read and write-after-write across streams ordered) at tp 2, with and without
// sequence parallelism, under each recompute mode. Post-norm blocks once let the MLP's gather read
// the stream before the attention's residual add wrote it, and joined the MLP's input gradient
// before its TP reduction had run. With dropout, the residual adds' backwards write the dropped
// branch's gradient, which the branch's first backward op (or its gather) then reads.
TEST_CASE("every block's graph is free of data hazards under TP, SP and recompute", "[plan]") {
  ModelSpec model = load_model("llama3-8b");
  model.layers = 2;
  for (const LayerBlock block : {LayerBlock::kPreNorm, LayerBlock::kPostNorm, LayerBlock::kSandwich,
                                 LayerBlock::kParallel, LayerBlock::kParallelTwoNorms}) {
    model.block = block;
    for (const bool dropout : {false, true}) {
      model.dropout = dropout;
      for (const bool sp : {false, true}) {
        for (const RecomputeKind recompute :
             {RecomputeKind::kNone, RecomputeKind::kSelective, RecomputeKind::kFull}) {
          INFO(to_string(block) << (dropout ? ", dropout" : "") << (sp ? ", SP" : "")
                                << ", recompute " << to_string(recompute));
          ParallelPlan plan = test::make_plan(2, 2, 2, 1, 4, 256);
          plan.sequence_parallel = sp;
          plan.recompute = recompute;
          plan.attention = AttentionKind::kUnfused;
          const CompiledPlan compiled = test::compile_checked(model, plan, GraphMode::kFull);
          CHECK(compiled.validation.ok());
        }
      }
    }
  }
}

}  // namespace strata

namespace strata {

// Dropout's draws (TaskGraph::random_stream): the embedding's output, and a layer's attention
// probabilities and each of its branches before the residual add, are one draw site each, whose
// tasks (the forward, its full recompute, and flash attention's backward, which draws the mask
// again) name one stream in every micro-batch, so that every plan and every recompute draws the
// same masks. No other task draws, and a model without dropout draws nothing. Under dropout a
// residual add's backward reads its branch's mask and writes the dropped branch's gradient.
TEST_CASE("each dropout site is one random stream", "[plan]") {
  ModelSpec model = load_model("llama3-8b");
  model.layers = 2;
  ParallelPlan plan = test::make_plan(2, 2, 2, 1, 4, 256);
  plan.recompute = RecomputeKind::kFull;
  for (const bool dropout : {false, true}) {
    model.dropout = dropout;
    const TaskGraph graph = test::compile_checked(model, plan, GraphMode::kFull).graph;
    std::map<int32_t, std::set<std::pair<TaskRole, int32_t>>> sites;  // stream: (role, layer)
    int64_t dropped_gradients = 0;
    for (TaskId id = 0; id < graph.size(); ++id) {
      const Task& t = graph.task(id);
      if (graph.random_stream(id) > 0) sites[graph.random_stream(id)].insert({t.role, t.layer});
      if (t.kind != TaskKind::kCompute || graph.op(t.op).function != OpFunction::kResidualAdd ||
          t.phase != Phase::kBackward) {
        continue;
      }
      for (const TensorUse use : graph.uses(id)) {
        if (use.access() == Access::kWrite &&
            graph.tensor_name(graph.tensor(use.tensor()).name) == "ddropped")
          ++dropped_gradients;
      }
    }
    INFO("dropout " << dropout);
    CHECK(sites.size() == (dropout ? 7u : 0u));  // 2 layers x 3 sites, and the embedding
    for (const auto& [stream, site] : sites) {
      INFO("stream " << stream);
      CHECK(site.size() == 1);
    }
    // Two residual adds per layer and micro-batch, one layer per stage, 2 micro-batches per DP
    // replica (global batch 4 over dp 2), on each of the 8 ranks.
    CHECK(dropped_gradients == (dropout ? 2 * 2 * 8 : 0));
  }
}

}  // namespace strata
