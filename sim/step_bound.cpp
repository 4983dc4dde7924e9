#include "sim/step_bound.hpp"

#include <algorithm>
#include <utility>

#include "plan/host_dispatch.hpp"
#include "plan/memory_plan.hpp"
#include "plan/moe_dims.hpp"
#include "plan/op_shapes.hpp"
#include "plan/rank_layout.hpp"
#include "plan/shard_sizes.hpp"
#include "sim/transfer_builder.hpp"

namespace strata {

namespace {

// One micro-batch's forward and backward chain through one layer and through a stage's extras.
struct PassTimes {
  TimeNs forward_ns = 0;
  TimeNs backward_ns = 0;
};

}  // namespace

StepBoundModel::StepBoundModel(ModelSpec model, ClusterSpec cluster,
                               const std::optional<Calibration>& calibration)
    : model_(std::move(model)),
      cluster_(std::move(cluster)),
      efficiency_(efficiency_for(cluster_.device, calibration)) {}

TimeNs StepBoundModel::collective_ns(CollectiveKind kind, const std::vector<int64_t>& group,
                                     int64_t gpus, int64_t bytes) {
  auto key = std::make_tuple(kind, group, gpus, bytes);
  const auto found = times_.find(key);
  if (found != times_.end()) return found->second;
  const CollectiveRun run{kind, group, bytes};
  const TimeNs time = time_collectives(cluster_, gpus, std::span(&run, 1)).front();
  times_.emplace(std::move(key), time);
  return time;
}

TimeNs StepBoundModel::moe_dispatch_ns(const ParallelPlan& plan, const RankLayout& layout) {
  const MoeDims d = moe_dims(model_, plan);
  const int64_t e = bytes_per_element(plan.dtype);
  const int64_t h = model_.hidden;
  const auto along = [&](GroupKind kind) { return layout.group(0, group_axes(kind)); };
  if (plan.moe_dispatcher == MoeDispatcher::kAllGather) {
    if (plan.tp * plan.ep == 1) return 0;
    // The tokens gathered and their partial outputs reduce-scattered over etp x ep.
    const std::vector<int64_t> group = along(plan.ep > 1 ? GroupKind::kTpEp : GroupKind::kTp);
    const int64_t bytes = e * d.gathered_tokens * h;
    return collective_ns(CollectiveKind::kAllGather, group, plan.gpus(), bytes) +
           collective_ns(CollectiveKind::kReduceScatter, group, plan.gpus(), bytes);
  }
  TimeNs ns = 0;
  if (plan.ep > 1) {
    // Dispatch and combine, each the rank's T x k slots.
    ns += 2 * collective_ns(CollectiveKind::kAllToAll, along(GroupKind::kEp), plan.gpus(),
                            e * d.tokens * model_.experts_per_token * h);
  }
  if (plan.expert_tp() > 1) {
    const std::vector<int64_t> group = along(GroupKind::kExpertTp);
    const int64_t bytes = e * d.expert_rows * h;
    ns += collective_ns(CollectiveKind::kAllGather, group, plan.gpus(), bytes) +
          collective_ns(CollectiveKind::kReduceScatter, group, plan.gpus(), bytes);
  }
  return ns;
}

TimeNs StepBoundModel::step_lower_bound_ns(const ParallelPlan& plan) {
  const PlanOpShapes op = plan_op_shapes(model_, plan);
  const auto time = [this](const OpShape& shape) {
    return compute_time_ns(cluster_.device, efficiency_, shape);
  };
  // An op the model does not have (a QK-norm) is an empty shape: no time.
  const auto forward = [&time](const OpShapePair& pair) {
    return pair.forward.dims[0] > 0 ? time(pair.forward) : 0;
  };
  const auto backward = [&time](const OpShapePair& pair) {
    return pair.backward.dims[0] > 0 ? time(pair.backward) : 0;
  };

  // The layer's TP collectives on the compute chain (plan/layer_lowering.cpp): two row-parallel
  // reductions each way, and with sequence parallelism an all-gather before each column-parallel
  // product (two forward, four backward). With --tp-comm-overlap they run beside the product's
  // chunks and none is counted (the chunks, each less efficient than the whole product, are).
  const RankLayout layout(plan, cluster_.gpus_per_node);
  const int64_t element_bytes = bytes_per_element(plan.dtype);
  TimeNs reduce_ns = 0;
  TimeNs gather_ns = 0;
  if (plan.tp > 1 && !plan.overlap.tp_comm) {
    const std::vector<int64_t> tp_group = layout.group(0, group_axes(GroupKind::kTp));
    const int64_t message = element_bytes * plan.local_seq_len() * plan.micro_batch * model_.hidden;
    reduce_ns = collective_ns(
        plan.sequence_parallel ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
        tp_group, plan.gpus(), message);
    if (plan.sequence_parallel)
      gather_ns = collective_ns(CollectiveKind::kAllGather, tp_group, plan.gpus(), message);
  }
  // The layer's norms, residual adds and TP collectives by block (plan/layer_lowering.cpp): a
  // parallel block reduces once each way when its branches share a norm. A windowed model with
  // global layers is bounded by its cheaper (windowed) attention.
  const int64_t norms = model_.norms_per_layer();
  const int64_t residuals = model_.parallel_block() ? 1 : 2;
  const bool shared_norm = model_.block == LayerBlock::kParallel;
  const int64_t forward_reductions = model_.parallel_block() ? 1 : 2;
  // Latent attention runs its projections in place of the QKV product (empty then); with a query
  // latent only the latents cross the TP group around them (left out: a fraction of an
  // activation), one activation-sized gather each way and one reduction fewer.
  const int64_t latent = model_.latent_attention() && model_.q_lora_rank > 0 ? 1 : 0;
  const int64_t forward_gathers = (shared_norm ? 1 : 2) - latent;
  const int64_t backward_reductions = (shared_norm ? 1 : 2) - latent;
  const int64_t backward_gathers = model_.parallel_block() ? 1 + forward_gathers : 4 - latent;
  const TimeNs latent_forward_ns =
      forward(op.q_down) + forward(op.q_latent_norm) + forward(op.q_up) + forward(op.kv_down) +
      forward(op.kv_latent_norm) + forward(op.kv_up) + forward(op.latent_key_value);
  const TimeNs latent_backward_ns =
      backward(op.q_down) + backward(op.q_latent_norm) + backward(op.q_up) + backward(op.kv_down) +
      backward(op.kv_latent_norm) + backward(op.kv_up) + backward(op.latent_key_value);
  // Context parallelism's ring runs its later steps' blocks after step 0 (plan/cp_attention.cpp);
  // its communication, overlapped or not, is not counted.
  const int64_t ring_steps = plan.cp > 1 && plan.cp_comm == CpComm::kP2p ? plan.cp - 1 : 0;
  // The attention half of a layer (norms and residual adds included), then the dense MLP's or an
  // MoE layer's: the router, the experts' products on the busiest rank's rows and the shared
  // experts (the dispatcher's permutations and communication left out, as a bound may).
  PassTimes attention;
  attention.forward_ns = latent_forward_ns + norms * forward(op.norm) + forward(op.qkv) +
                         forward(op.qk_norm) + forward(op.attention) +
                         ring_steps * forward(op.cp_block) + forward(op.attn_out) +
                         residuals * forward(op.residual);
  attention.backward_ns = latent_backward_ns + norms * backward(op.norm) + backward(op.qkv) +
                          backward(op.qk_norm) + backward(op.attention) +
                          ring_steps * backward(op.cp_block) + backward(op.attn_out) +
                          residuals * backward(op.residual);
  PassTimes layer = attention;
  layer.forward_ns += forward(op.mlp_up) + forward(op.mlp_act) + forward(op.mlp_down) +
                      forward_reductions * reduce_ns + forward_gathers * gather_ns;
  layer.backward_ns += backward(op.mlp_up) + backward(op.mlp_act) + backward(op.mlp_down) +
                       backward_reductions * reduce_ns + backward_gathers * gather_ns;
  PassTimes moe_layer = attention;
  for (const OpShapePair* pair :
       {&op.router, &op.routing, &op.permute, &op.unpermute, &op.experts_up, &op.experts_act,
        &op.experts_down, &op.shared_up, &op.shared_act, &op.shared_down, &op.shared_gate}) {
    moe_layer.forward_ns += forward(*pair);
    moe_layer.backward_ns += backward(*pair);
  }
  // The attention's own TP collectives: its output's reduction and, under sequence parallelism,
  // the QKV product's input gathered (again in the backward for its weight gradient, whose
  // input gradient is reduced), fewer with a query latent; and the token dispatcher's, each way
  // (plan/moe_lowering.cpp), the all-to-alls taken balanced.
  const TimeNs dispatch_ns = model_.moe() ? moe_dispatch_ns(plan, layout) : 0;
  moe_layer.forward_ns += reduce_ns + (1 - latent) * gather_ns + dispatch_ns;
  moe_layer.backward_ns += (1 - latent) * reduce_ns + (2 - latent) * gather_ns + dispatch_ns;
  for (PassTimes* pass : {&layer, &moe_layer}) {
    if (plan.recompute == RecomputeKind::kFull) pass->backward_ns += pass->forward_ns;
    if (recomputes_attention_scores(plan)) pass->backward_ns += forward(op.attention);
  }
  const PassTimes cheaper{std::min(layer.forward_ns, moe_layer.forward_ns),
                          std::min(layer.backward_ns, moe_layer.backward_ns)};

  const PassTimes first{forward(op.embedding), backward(op.embedding)};
  const PassTimes last{forward(op.final_norm) + forward(op.lm_head) + forward(op.loss),
                       backward(op.loss) + backward(op.lm_head) + backward(op.final_norm)};
  const std::vector<int64_t> stage_layers = layers_per_stage(plan, model_);
  // Of each stage's layers, the MoE ones.
  const std::vector<int64_t> stage_moe_layers = sum_over_stage_layers(
      plan, model_, [&](int64_t l) { return int64_t{model_.is_moe_layer(l)}; });
  const int64_t micro_batches = plan.micro_batches();

  // A stage's data-parallel collectives (plan/step_lowering.cpp), by ZeRO stage: gradient buckets
  // and parameter all-gathers of its layers. Buckets of any size move the stage's bytes at least
  // once, and one collective of them all takes no longer than several (it pays the latency once),
  // so each is counted as one collective of the stage's layers; ZeRO 3's per-layer gathers as
  // they are.
  // The experts' weights kept apart (ep > 1) go over their own data-parallel group.
  const ShardSizes sizes = shard_sizes(model_, plan);
  const int64_t moe_dense_parameters = sizes.moe_layer - sizes.moe_layer_experts;
  const int64_t smallest_layer =
      model_.moe() ? std::min(sizes.layer, moe_dense_parameters) : sizes.layer;
  const int64_t grad_bytes = state_bytes_per_parameter(plan.dtype, plan.precision).grads;
  const auto group_of = [&](bool experts) {
    return layout.group(0, group_axes(experts ? GroupKind::kExpertDp : GroupKind::kDp));
  };
  const auto shards = [&](bool experts) {
    return experts ? plan.expert_data_shards() : plan.data_shards();
  };
  const auto sync_ns = [&](int64_t parameters, bool experts) -> TimeNs {
    if (shards(experts) == 1 || parameters == 0) return 0;
    return collective_ns(
        plan.zero_stage == 0 ? CollectiveKind::kAllReduce : CollectiveKind::kReduceScatter,
        group_of(experts), plan.gpus(), parameters * grad_bytes);
  };
  const auto param_gather_ns = [&](int64_t parameters, bool experts) -> TimeNs {
    if (shards(experts) == 1 || plan.zero_stage == 0 || parameters == 0) return 0;
    return collective_ns(CollectiveKind::kAllGather, group_of(experts), plan.gpus(),
                         parameters * element_bytes);
  };
  const int64_t syncs_per_step = plan.zero_stage >= 2 ? plan.micro_batches() : 1;
  // ZeRO 1 and 2 gather the updated parameters after the optimizer step, unless
  // --overlap-param-gather moves them into the next forward.
  const bool gathers_after_step =
      (plan.zero_stage == 1 || plan.zero_stage == 2) && !plan.overlap.param_gather;

  TimeNs fill_ns = 0;   // sum over earlier stages of chunk 0's forward of one micro-batch
  TimeNs drain_ns = 0;  // and of its backward
  TimeNs pipeline_ns = 0;
  TimeNs after_backward_ns = 0;
  TimeNs dp_stream_ns = 0;
  TimeNs blocking_ns = 0;
  for (int64_t s = 0; s < plan.pp; ++s) {
    const int64_t layers = stage_layers[static_cast<size_t>(s)];
    const int64_t moe_layers = stage_moe_layers[static_cast<size_t>(s)];
    const int64_t dense_layers = layers - moe_layers;
    PassTimes stage{dense_layers * layer.forward_ns + moe_layers * moe_layer.forward_ns,
                    dense_layers * layer.backward_ns + moe_layers * moe_layer.backward_ns};
    PassTimes chunk0{layers / plan.vpp * cheaper.forward_ns,
                     layers / plan.vpp * cheaper.backward_ns};
    if (s == 0) {
      stage.forward_ns += first.forward_ns;
      stage.backward_ns += first.backward_ns;
      chunk0.forward_ns += first.forward_ns;
      chunk0.backward_ns += first.backward_ns;
    }
    if (s == plan.pp - 1) {
      stage.forward_ns += last.forward_ns;
      stage.backward_ns += last.backward_ns;
    }
    const TimeNs stage_chain_ns = fill_ns + micro_batches * (stage.forward_ns + stage.backward_ns);
    pipeline_ns = std::max(pipeline_ns, stage_chain_ns + drain_ns);
    fill_ns += chunk0.forward_ns;
    drain_ns += chunk0.backward_ns;
    const int64_t dense_parameters = dense_layers * sizes.layer + moe_layers * moe_dense_parameters;
    const int64_t expert_parameters = moe_layers * sizes.moe_layer_experts;
    const TimeNs gathers_ns =
        param_gather_ns(dense_parameters, false) + param_gather_ns(expert_parameters, true);
    const TimeNs optimizer_ns = time(op.optimizer[static_cast<size_t>(s)]);
    after_backward_ns =
        std::max(after_backward_ns, optimizer_ns + (gathers_after_step ? gathers_ns : 0));
    const TimeNs syncs_ns =
        syncs_per_step * (sync_ns(dense_parameters, false) + sync_ns(expert_parameters, true));
    // Without --overlap-grad-reduce each reduction holds the stage's next compute (the next
    // layer's backward, or its optimizer step): they add to its chain.
    if (!plan.overlap.grad_reduce)
      blocking_ns = std::max(blocking_ns, stage_chain_ns + syncs_ns + optimizer_ns);
    TimeNs dp_ns = syncs_ns;
    // ZeRO 3 gathers each layer before its forward and its backward: an MoE layer's experts
    // kept apart in a gather of their own over the expert-data-parallel group.
    if (plan.zero_stage == 3) {
      dp_ns += 2 * plan.micro_batches() *
               (layers * param_gather_ns(smallest_layer, false) +
                moe_layers * param_gather_ns(sizes.moe_layer_experts, true));
    }
    if (plan.zero_stage == 1 || plan.zero_stage == 2) dp_ns += gathers_ns;
    dp_stream_ns = std::max(dp_stream_ns, dp_ns);
  }
  // The host thread issues every block of a stage in order (plan/host_dispatch.hpp): at least the
  // ten compute tasks of each layer's forward and backward (and its recompute), and its TP
  // collectives, for every micro-batch.
  TimeNs host_ns = 0;
  if (cluster_.device.host_cores == 0) {
    const HostDispatchCosts costs = host_dispatch_costs(plan.host_dispatch);
    const bool every_layer = plan.recompute == RecomputeKind::kFull && plan.recompute_layers == 0;
    const int64_t kernels = 20 + (every_layer ? 10 : 0);
    const int64_t calls = plan.tp == 1 ? 0 : plan.sequence_parallel ? 10 : 4;
    const int64_t layer_ns = kernels * costs.ns_per_kernel + calls * costs.ns_per_call;
    for (const int64_t layers : stage_layers) {
      host_ns = std::max(host_ns, micro_batches * layers * layer_ns);
    }
  }
  return std::max({pipeline_ns + after_backward_ns, dp_stream_ns, blocking_ns, host_ns});
}

}  // namespace strata
