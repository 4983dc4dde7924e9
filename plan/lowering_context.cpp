#include "plan/lowering_context.hpp"

#include <algorithm>
#include <utility>

#include "common/error.hpp"
#include "plan/activation_memory.hpp"
#include "plan/framework.hpp"
#include "plan/op_shapes.hpp"

namespace strata {

namespace {

OpPair intern(TaskGraph& graph, const OpShapePair& shapes) {
  return {graph.add_op(shapes.forward), graph.add_op(shapes.backward)};
}

OpTable build_op_table(const ModelSpec& model, const ParallelPlan& plan, TaskGraph& graph) {
  const PlanOpShapes shapes = plan_op_shapes(model, plan);
  OpTable ops;
  ops.norm = intern(graph, shapes.norm);
  if (!model.latent_attention()) ops.qkv = intern(graph, shapes.qkv);
  ops.attention = intern(graph, shapes.attention);
  ops.attn_out = intern(graph, shapes.attn_out);
  ops.residual = intern(graph, shapes.residual);
  ops.mlp_up = intern(graph, shapes.mlp_up);
  ops.mlp_act = intern(graph, shapes.mlp_act);
  ops.mlp_down = intern(graph, shapes.mlp_down);
  if (model.moe()) {
    ops.router = intern(graph, shapes.router);
    ops.routing = intern(graph, shapes.routing);
    ops.permute = intern(graph, shapes.permute);
    ops.unpermute = intern(graph, shapes.unpermute);
    ops.experts_up = intern(graph, shapes.experts_up);
    ops.experts_act = intern(graph, shapes.experts_act);
    ops.experts_down = intern(graph, shapes.experts_down);
    if (model.shared_expert_ffn_hidden > 0) {
      ops.shared_up = intern(graph, shapes.shared_up);
      ops.shared_act = intern(graph, shapes.shared_act);
      ops.shared_down = intern(graph, shapes.shared_down);
      if (model.shared_expert_gate) ops.shared_gate = intern(graph, shapes.shared_gate);
    }
  }
  if (model.latent_attention()) {
    if (model.q_lora_rank > 0) {
      ops.q_down = intern(graph, shapes.q_down);
      ops.q_latent_norm = intern(graph, shapes.q_latent_norm);
    }
    ops.q_up = intern(graph, shapes.q_up);
    ops.kv_down = intern(graph, shapes.kv_down);
    ops.kv_latent_norm = intern(graph, shapes.kv_latent_norm);
    ops.kv_up = intern(graph, shapes.kv_up);
    ops.latent_key_value = intern(graph, shapes.latent_key_value);
  }
  if (plan.fp8 != Fp8Format::kNone) {
    ops.fp8_cast_attn_out_in = graph.add_op(shapes.fp8_cast_attn_out_in);
    ops.fp8_cast_mlp_down_in = graph.add_op(shapes.fp8_cast_mlp_down_in);
    ops.fp8_grad_qkv = graph.add_op(shapes.fp8_grad_qkv);
    ops.fp8_grad_attn_out = graph.add_op(shapes.fp8_grad_attn_out);
    ops.fp8_grad_mlp_up = graph.add_op(shapes.fp8_grad_mlp_up);
    ops.fp8_grad_mlp_down = graph.add_op(shapes.fp8_grad_mlp_down);
    if (!plan.fp8_param_gather) ops.fp8_weight_cast = graph.add_op(shapes.fp8_weight_cast);
  }
  if (model.position == PositionKind::kRotary) ops.rotary = intern(graph, shapes.rotary);
  if (plan.cp > 1 && plan.cp_comm == CpComm::kP2p) {
    ops.cp_block = intern(graph, shapes.cp_block);
    ops.cp_dkv_add = graph.add_op(shapes.cp_dkv_add);
  }
  if (model.global_every > 0) ops.attention_global = intern(graph, shapes.attention_global);
  if (model.qk_norm != QkNorm::kNone) ops.qk_norm = intern(graph, shapes.qk_norm);
  if (plan.recompute == RecomputeKind::kSelectiveOp) {
    ops.k_product = graph.add_op(shapes.k_product);
    ops.mlp_up_half = graph.add_op(shapes.mlp_up_half);
  }
  if (plan.overlap.tp_comm) {
    ops.qkv_chunk = intern(graph, shapes.qkv_chunk);
    ops.attn_out_chunk = intern(graph, shapes.attn_out_chunk);
    ops.mlp_up_chunk = intern(graph, shapes.mlp_up_chunk);
    ops.mlp_down_chunk = intern(graph, shapes.mlp_down_chunk);
  }
  ops.embedding = intern(graph, shapes.embedding);
  ops.final_norm = intern(graph, shapes.final_norm);
  ops.lm_head = intern(graph, shapes.lm_head);
  ops.loss = intern(graph, shapes.loss);
  if (plan.tp > 1) {
    ops.loss_max = graph.add_op(shapes.loss_max);
    ops.loss_partials = graph.add_op(shapes.loss_partials);
  }
  if (model.dropout) ops.embedding_dropout = intern(graph, shapes.embedding_dropout);
  for (const OpShape& optimizer : shapes.optimizer)
    ops.optimizer.push_back(graph.add_op(optimizer));
  // Horovod: a ready bucket waits for the background thread's next wake, which the simulator
  // times from plan.cycle_time_ns (the op itself costs nothing).
  if (plan.cycle_time_ns > 0) ops.cycle_wait = graph.add_op(host_dispatch_op(0, 0, 0, 0));
  return ops;
}

}  // namespace

LayerParams::LayerParams(const std::vector<ParamTensorSpec>& specs) {
  const std::pair<const char*, int*> names[] = {{"norm1_w", &norm1_w},
                                                {"norm1_b", &norm1_b},
                                                {"qkv_w", &qkv_w},
                                                {"qkv_b", &qkv_b},
                                                {"q_norm_w", &q_norm_w},
                                                {"k_norm_w", &k_norm_w},
                                                {"out_w", &out_w},
                                                {"out_b", &out_b},
                                                {"post_attn_norm_w", &post_attn_norm_w},
                                                {"post_attn_norm_b", &post_attn_norm_b},
                                                {"norm2_w", &norm2_w},
                                                {"norm2_b", &norm2_b},
                                                {"up_w", &up_w},
                                                {"up_b", &up_b},
                                                {"down_w", &down_w},
                                                {"down_b", &down_b},
                                                {"post_mlp_norm_w", &post_mlp_norm_w},
                                                {"post_mlp_norm_b", &post_mlp_norm_b},
                                                {"router_w", &router_w},
                                                {"router_b", &router_b},
                                                {"experts_up_w", &experts_up_w},
                                                {"experts_down_w", &experts_down_w},
                                                {"shared_up_w", &shared_up_w},
                                                {"shared_down_w", &shared_down_w},
                                                {"shared_gate_w", &shared_gate_w},
                                                {"q_down_w", &q_down_w},
                                                {"q_down_b", &q_down_b},
                                                {"q_layernorm_w", &q_layernorm_w},
                                                {"q_up_w", &q_up_w},
                                                {"q_w", &q_w},
                                                {"kv_down_w", &kv_down_w},
                                                {"kv_down_b", &kv_down_b},
                                                {"kv_layernorm_w", &kv_layernorm_w},
                                                {"kv_up_w", &kv_up_w}};
  for (size_t i = 0; i < specs.size(); ++i) {
    for (const auto& [name, index] : names) {
      if (specs[i].name == name) *index = static_cast<int>(i);
    }
  }
}

RankState::StoredLayer& RankState::stored_for_backward(int64_t layer) {
  StoredQueue& waiting = stored[static_cast<size_t>(layer)];
  STRATA_ASSERT(!waiting.empty() && waiting.front().micro_batch == program.micro_batch(),
                "a layer's backwards run in the order of its forwards");
  return waiting.front();
}

TensorId RankState::make_scratch(const SlotTable& slots, Slot slot) {
  const int32_t shape = slots.shape[static_cast<size_t>(slot)];
  STRATA_ASSERT(shape >= 0, "a slot the lowering uses has a shape under the plan");
  const TensorId made = program.tensor(TensorKind::kScratch, slots.name[static_cast<size_t>(slot)],
                                       shape, -1, program.micro_batch());
  scratch[static_cast<size_t>(slot)] = made;
  return made;
}

LayerKindSpec::LayerKindSpec(const ModelSpec& model, const ParallelPlan& plan, bool moe,
                             TaskGraph& graph)
    : specs(layer_param_specs(model, plan, moe)),
      params(specs),
      block(specs, plan, graph),
      stored_bytes(stored_layer_activation_bytes(model, plan, moe)),
      full_layer_bytes(layer_activations(model, plan, moe).total()) {}

LoweringContext::LoweringContext(const ModelSpec& model, const ParallelPlan& plan,
                                 int64_t gpus_per_node, TaskGraph& graph)
    : model(model),
      plan(plan),
      layout(plan, gpus_per_node),
      sizes(shard_sizes(model, plan)),
      stage_layers(layers_per_stage(plan, model)),
      chunks(chunk_layout(plan, model)),
      stage_params(stage_parameters(model, plan)),
      ops(build_op_table(model, plan, graph)),
      slots(model, plan, graph),
      dense(model, plan, false, graph),
      embedding_block(embedding_param_specs(model, plan), plan, graph),
      head_block(head_param_specs(model, plan), plan, graph) {
  const int64_t e = bytes_per_element(plan.dtype);
  tp_message_bytes = e * plan.local_seq_len() * plan.micro_batch * model.hidden;
  if (model.moe()) {
    moe.emplace(model, plan, true, graph);
    moe_sizes = moe_dims(model, plan);
    if (plan.ep > 1 && plan.moe_dispatcher == MoeDispatcher::kAllToAll) {
      moe_dispatch = moe_dispatch_matrix(model, plan, e * model.hidden);
      moe_combine = transposed(moe_dispatch, plan.ep);
    }
  }
  layer_input_bytes = strata::layer_input_bytes(model, plan);
  pipe_bytes = pipeline_message_bytes(model, plan);
  fp8_gemm_weights = sizes.layer_gemm_weights;
  // Delayed scaling's amaxes: input, weight and gradient of each FP8 GEMM, fp32, per layer.
  amax_bytes = 4 * 3 * 4;
  prefetch_layers = prefetch_window_layers(plan, std::max(sizes.layer, sizes.moe_layer));
  final_norm_params = model.norm == NormKind::kLayerNorm ? 2 : 1;
}

}  // namespace strata
