#include "plan/lowering_tensors.hpp"

#include <array>
#include <string_view>

#include "common/error.hpp"
#include "plan/activation_memory.hpp"
#include "plan/memory_plan.hpp"
#include "plan/moe_dims.hpp"
#include "plan/shard_sizes.hpp"

namespace strata {

void TaskUses::push_back_on_heap(TensorUse use) {
  if (heap_.empty()) heap_.assign(inline_, inline_ + kInline);
  heap_.push_back(use);
}

namespace {

// By Slot.
constexpr std::array<const char*, kSlotCount> kSlotNames = {
    "norm1_in",           // kNorm1In
    "qkv_in",             // kQkvIn
    "q_latent",           // kQLatent
    "q_up_in",            // kQUpIn
    "kv_latent",          // kKvLatent
    "kv_up_in",           // kKvUpIn
    "qkv",                // kQkv
    "qk_norm_in",         // kQkNormIn
    "lse",                // kLse
    "scores",             // kScores
    "scores_mask",        // kScoresMask
    "scores_dropped",     // kScoresDropped
    "out_in",             // kOutIn
    "attn_mask",          // kAttnMask
    "post_attn_norm_in",  // kPostAttnNormIn
    "norm2_in",           // kNorm2In
    "up_in",              // kUpIn
    "act_in",             // kActIn
    "down_in",            // kDownIn
    "router_probs",       // kRouterProbs
    "expert_in",          // kExpertIn
    "expert_act_in",      // kExpertActIn
    "expert_down_in",     // kExpertDownIn
    "expert_out",         // kExpertOut
    "shared_act_in",      // kSharedActIn
    "shared_down_in",     // kSharedDownIn
    "shared_out",         // kSharedOut
    "shared_gate",        // kSharedGate
    "mlp_mask",           // kMlpMask
    "post_mlp_norm_in",   // kPostMlpNormIn
    "x_ckpt",             // kCheckpoint
    "rebuilt",            // kRebuilt
    "stream",             // kStream
    "mid",                // kMid
    "proj",               // kProj
    "proj_rows",          // kProjRows
    "gathered",           // kGathered
    "branch",             // kBranch
    "act_out",            // kActOut
    "out_in_fp8",         // kOutInFp8
    "kv_block",           // kKvBlock
    "kv_gathered",        // kKvGathered
    "qkv_local",          // kQkvLocal
    "out_heads",          // kOutHeads
    "q_up_gathered",      // kQUpGathered
    "kv_up_gathered",     // kKvUpGathered
    "k_pe_gathered",      // kKPeGathered
    "kv_up_out",          // kKvUpOut
    "router_logits",      // kRouterLogits
    "moe_tokens",         // kMoeTokens
    "moe_dispatched",     // kMoeDispatched
    "moe_gathered",       // kMoeGathered
    "expert_proj",        // kExpertProj
    "moe_out",            // kMoeOut
    "moe_rows",           // kMoeRows
    "dstream",            // kDStream
    "dgathered",          // kDGathered
    "dbranch",            // kDBranch
    "ddropped",           // kDDropped
    "ddown_in",           // kDDownIn
    "dact_in",            // kDActIn
    "dout_in",            // kDOutIn
    "dqkv",               // kDQkv
    "dnorm_out",          // kDNormOut
    "dnorm_rows",         // kDNormRows
    "dproj_fp8",          // kDProjFp8
    "dact_in_fp8",        // kDActInFp8
    "dqkv_fp8",           // kDQkvFp8
    "dkv_step",           // kDKvStep
    "dkv_block",          // kDKvBlock
    "dkv_gathered",       // kDKvGathered
    "dout_heads",         // kDOutHeads
    "dqkv_heads",         // kDQkvHeads
    "dkv_up_out",         // kDKvUpOut
    "dk_pe",              // kDKPe
    "dk_pe_rows",         // kDKPeRows
    "dq_up_in",           // kDQUpIn
    "dq_up_rows",         // kDQUpRows
    "dkv_up_in",          // kDKvUpIn
    "dkv_up_rows",        // kDKvUpRows
    "dq_latent",          // kDQLatent
    "dkv_latent",         // kDKvLatent
    "drouter_probs",      // kDRouterProbs
    "dmoe_tokens",        // kDMoeTokens
    "dmoe_dispatched",    // kDMoeDispatched
    "dexpert_out",        // kDExpertOut
    "dexpert_down_in",    // kDExpertDownIn
    "dexpert_act_in",     // kDExpertActIn
    "dexpert_in",         // kDExpertIn
    "dmoe_gathered",      // kDMoeGathered
    "dup_in",             // kDUpIn
    "dshared_down_in",    // kDSharedDownIn
    "dshared_act_in",     // kDSharedActIn
    "dshared_out",        // kDSharedOut
    "head_in",            // kHeadIn
    "lm_in",              // kLmIn
    "logits",             // kLogits
    "lm_in_gathered",     // kLmInGathered
    "loss_max",           // kLossMax
    "loss_sum",           // kLossSum
    "target_logit",       // kTargetLogit
    "losses",             // kLosses
    "dlogits",            // kDLogits
    "dlm_in",             // kDLmIn
    "dlm_rows",           // kDLmRows
    "embed_out",          // kEmbedOut
    "embed_mask",         // kEmbedMask
    "message",            // kMessage
    "grad_norm",          // kGradNorm
};

}  // namespace

SlotTable::SlotTable(const ModelSpec& model, const ParallelPlan& plan, TaskGraph& graph) {
  shape.fill(-1);
  for (int s = 0; s < kSlotCount; ++s)
    name[static_cast<size_t>(s)] = graph.add_tensor_name(kSlotNames[s]);
  const auto set = [&](Slot slot, TensorShape s) {
    shape[static_cast<size_t>(slot)] = graph.add_shape(s);
  };
  // A slot both kinds of layer store has one shape (the attention's, the norms').
  const auto add_stored = [&](bool moe, std::array<bool, kStoredSlotCount>& kept) {
    for (const StoredTensor& t : layer_stored_tensors(model, plan, moe)) {
      for (int s = 0; s < kStoredSlotCount; ++s) {
        if (std::string_view(kSlotNames[s]) != t.name) continue;
        shape[static_cast<size_t>(s)] = graph.add_shape(t.shape);
        kept[static_cast<size_t>(s)] = true;
      }
    }
  };
  add_stored(false, stored);
  if (model.moe()) add_stored(true, moe_stored);
  const DType e = plan.dtype;
  const int64_t t = plan.tp;
  const int64_t n = plan.local_seq_len() * plan.micro_batch;
  const int64_t rows = plan.sequence_parallel ? n / t : n;
  const int64_t h = model.hidden;
  const int64_t context = model.context_hidden() / t;  // the attention's output
  const int64_t qkv = (model.q_hidden() + model.kv_hidden() + model.v_hidden()) / t;
  const int64_t f = model.ffn_hidden / t;
  const int64_t up = (model.gated_mlp() ? 2 : 1) * f;
  const int64_t vocab = shard_sizes(model, plan).vocab_shard;
  const auto matrix = [](int64_t r, int64_t c, DType dtype) {
    return TensorShape{{r, c, 1, 1}, dtype};
  };
  set(Slot::kCheckpoint, matrix(rows, h, e));
  for (const Slot slot :
       {Slot::kStream, Slot::kMid, Slot::kProjRows, Slot::kBranch, Slot::kDStream, Slot::kDBranch,
        Slot::kDDropped, Slot::kDNormRows, Slot::kHeadIn, Slot::kLmIn, Slot::kDLmRows}) {
    set(slot, matrix(rows, h, e));
  }
  for (const Slot slot : {Slot::kProj, Slot::kGathered, Slot::kDGathered, Slot::kDNormOut,
                          Slot::kLmInGathered, Slot::kDLmIn, Slot::kEmbedOut}) {
    set(slot, matrix(n, h, e));
  }
  set(Slot::kEmbedMask, matrix(rows, h, DType::kU8));
  set(Slot::kActOut, matrix(n, f, e));
  set(Slot::kOutInFp8, matrix(n, context, DType::kFp8));
  set(Slot::kDDownIn, matrix(n, f, e));
  set(Slot::kDActIn, matrix(n, up, e));
  set(Slot::kDOutIn, matrix(n, context, e));
  set(Slot::kDQkv, matrix(n, qkv, e));
  set(Slot::kDProjFp8, matrix(n, h, DType::kFp8));
  set(Slot::kDActInFp8, matrix(n, up, DType::kFp8));
  set(Slot::kDQkvFp8, matrix(n, qkv, DType::kFp8));
  set(Slot::kLogits, matrix(n, vocab, DType::kFp32));
  set(Slot::kDLogits, matrix(n, vocab, DType::kFp32));
  for (const Slot slot : {Slot::kLossMax, Slot::kLossSum, Slot::kTargetLogit, Slot::kLosses})
    set(slot, matrix(n, 1, DType::kFp32));
  // A pipeline message: the rank's 1/t slice of the boundary tensor (pipeline_message_bytes).
  set(Slot::kMessage, matrix(n * h / t, 1, e));
  set(Slot::kGradNorm, matrix(1, 1, DType::kFp32));
  if (plan.cp > 1) {
    // The rank's keys and values, or the sequence's (each as wide as the model's key and value
    // heads: latent attention's differ); Q, K, V and the output on heads / cp over the sequence
    // (cp_attention.cpp).
    const int64_t kv = (model.kv_hidden() + model.v_hidden()) / t;
    for (const Slot slot : {Slot::kKvBlock, Slot::kDKvStep, Slot::kDKvBlock})
      set(slot, matrix(n, kv, e));
    const int64_t sequence = plan.seq_len * plan.micro_batch;
    for (const Slot slot : {Slot::kKvGathered, Slot::kDKvGathered})
      set(slot, matrix(sequence, kv, e));
    if (plan.cp_comm == CpComm::kAllToAll) {
      set(Slot::kQkvLocal, matrix(n, qkv, e));
      for (const Slot slot : {Slot::kOutHeads, Slot::kDOutHeads})
        set(slot, matrix(sequence, context / plan.cp, e));
      set(Slot::kDQkvHeads, matrix(sequence, qkv / plan.cp, e));
    }
  }
  if (model.latent_attention()) {
    const int64_t q_latent = model.q_lora_rank;
    const int64_t kv_latent = model.kv_lora_rank;
    const int64_t rope = model.qk_rope_head_dim;
    const int64_t kv_up = model.heads / t * (model.qk_nope_head_dim + model.v_head_dim);
    for (const Slot slot : {Slot::kKvUpOut, Slot::kDKvUpOut}) set(slot, matrix(n, kv_up, e));
    for (const Slot slot : {Slot::kKPeGathered, Slot::kDKPe}) set(slot, matrix(n, rope, e));
    set(Slot::kDKPeRows, matrix(rows, rope, e));
    for (const Slot slot : {Slot::kKvUpGathered, Slot::kDKvUpIn})
      set(slot, matrix(n, kv_latent, e));
    set(Slot::kDKvUpRows, matrix(rows, kv_latent, e));
    set(Slot::kDKvLatent, matrix(rows, kv_latent + rope, e));
    if (q_latent > 0) {
      for (const Slot slot : {Slot::kQUpGathered, Slot::kDQUpIn}) set(slot, matrix(n, q_latent, e));
      for (const Slot slot : {Slot::kDQUpRows, Slot::kDQLatent})
        set(slot, matrix(rows, q_latent, e));
    }
  }
  if (model.moe()) {
    const MoeDims m = moe_dims(model, plan);
    const int64_t slots = m.tokens * model.experts_per_token;  // the rank's token slots
    const int64_t dispatched = m.expert_rows / plan.expert_tp();
    set(Slot::kRouterLogits, matrix(m.tokens, model.experts, DType::kFp32));
    set(Slot::kDRouterProbs, matrix(m.tokens, model.experts, DType::kFp32));
    for (const Slot slot : {Slot::kMoeTokens, Slot::kDMoeTokens}) set(slot, matrix(slots, h, e));
    for (const Slot slot : {Slot::kMoeDispatched, Slot::kDMoeDispatched})
      set(slot, matrix(dispatched, h, e));
    for (const Slot slot : {Slot::kMoeGathered, Slot::kMoeOut, Slot::kDMoeGathered})
      set(slot, matrix(m.gathered_tokens, h, e));
    for (const Slot slot : {Slot::kExpertProj, Slot::kDExpertOut, Slot::kDExpertIn})
      set(slot, matrix(m.expert_rows, h, e));
    set(Slot::kDExpertDownIn, matrix(m.expert_rows, m.expert_ffn, e));
    set(Slot::kDExpertActIn, matrix(m.expert_rows, m.expert_up, e));
    for (const Slot slot : {Slot::kMoeRows, Slot::kDUpIn, Slot::kDSharedOut})
      set(slot, matrix(m.tokens, h, e));
    if (m.shared_ffn > 0) {
      set(Slot::kDSharedDownIn, matrix(n, m.shared_ffn, e));
      set(Slot::kDSharedActIn, matrix(n, m.shared_up, e));
    }
  }
  if (plan.recompute == RecomputeKind::kSelectiveOp) {
    int64_t saved = 0;
    for (const StoredTensor& st : op_selective_tensors(model, plan)) {
      op_saved.emplace_back(graph.add_tensor_name(st.name), graph.add_shape(st.shape));
      saved += st.shape.bytes();
    }
    const int64_t rebuilt = layer_activations(model, plan, false).total() - saved;
    STRATA_ASSERT(rebuilt >= 0, "selective-op keeps less than the whole layer");
    rebuilt_shape = graph.add_shape({{rebuilt, 1, 1, 1}, DType::kU8});
  }
  if (plan.fp8 != Fp8Format::kNone) {
    fp8_weights = graph.add_tensor_name("fp8_weights");
    fp8_weights_shape =
        graph.add_shape({{shard_sizes(model, plan).layer_gemm_weights, 1, 1, 1}, DType::kFp8});
    // Delayed scaling's amaxes: input, weight and gradient of each of the four GEMMs, fp32.
    amax = graph.add_tensor_name("amax");
    amax_shape = graph.add_shape({{3, 4, 1, 1}, DType::kFp32});
  }
}

BlockSpec::BlockSpec(const std::vector<ParamTensorSpec>& specs, const ParallelPlan& plan,
                     TaskGraph& graph) {
  const StateBytesPerParameter bytes = state_bytes_per_parameter(plan.dtype, plan.precision);
  const DType param_dtype = bytes.params == 4 ? DType::kFp32 : plan.dtype;
  const DType grad_dtype = bytes.grads == 4 ? DType::kFp32 : plan.dtype;
  for (const ParamTensorSpec& p : specs) {
    name.push_back(graph.add_tensor_name(p.name));
    gathered_name.push_back(graph.add_tensor_name(p.name + " gathered"));
    const int64_t dp = p.expert ? plan.expert_data_shards() : plan.data_shards();
    expert.push_back(p.expert);
    micro_batch_apart.push_back(dp > 1 || plan.offload.optimizer);
    gathers.push_back(plan.zero_stage >= 3 && (dp > 1 || plan.offload.params));
    const int64_t n = p.elements();
    const TensorShape whole{{p.rows, p.cols, 1, 1}, param_dtype};
    param.push_back(graph.add_shape(
        plan.zero_stage >= 3 ? TensorShape{{sharded(n, dp), 1, 1, 1}, param_dtype} : whole));
    const bool fp8 = p.gemm_weight && plan.fp8_param_gather;
    gathered.push_back(graph.add_shape({whole.dims, fp8 ? DType::kFp8 : plan.dtype}));
    micro_batch_grad.push_back(graph.add_shape({whole.dims, grad_dtype}));
    grad.push_back(graph.add_shape(plan.zero_stage >= 2
                                       ? TensorShape{{sharded(n, dp), 1, 1, 1}, grad_dtype}
                                       : TensorShape{whole.dims, grad_dtype}));
    const int64_t states_of = plan.zero_stage >= 1 ? sharded(n, dp) : n;
    states.push_back(graph.add_shape({{states_of, bytes.optimizer, 1, 1}, DType::kU8}));
  }
}

BlockTensors make_block_tensors(RankProgram& program, const BlockSpec& spec, int32_t layer,
                                bool gathers, bool micro_batch_grads) {
  BlockTensors block;
  block.per_micro_batch = micro_batch_grads;
  block.params.reserve(spec.name.size());
  if (gathers) block.gathered.reserve(spec.name.size());
  block.grads.reserve(spec.name.size());
  block.states.reserve(spec.name.size());
  for (size_t i = 0; i < spec.name.size(); ++i) {
    const auto index = static_cast<int16_t>(i);
    block.params.push_back(
        program.tensor(TensorKind::kParameter, spec.name[i], spec.param[i], layer, -1, index));
    if (gathers) {
      block.gathered.push_back(spec.gathers[i]
                                   ? program.tensor(TensorKind::kParameter, spec.gathered_name[i],
                                                    spec.gathered[i], layer, -1, index)
                                   : block.params.back());
    }
    block.grads.push_back(
        program.tensor(TensorKind::kGradient, spec.name[i], spec.grad[i], layer, -1, index));
    block.states.push_back(program.tensor(TensorKind::kOptimizerState, spec.name[i], spec.states[i],
                                          layer, -1, index));
  }
  return block;
}

const std::vector<TensorId>& BlockTensors::grads_of(RankProgram& program, const BlockSpec& spec,
                                                    int64_t micro_batch, int32_t layer) {
  if (!per_micro_batch) return grads;
  auto [found, added] = micro_batch_grads.try_emplace(micro_batch);
  if (added) {
    for (size_t i = 0; i < spec.name.size(); ++i) {
      found->second.push_back(
          spec.micro_batch_apart[i]
              ? program.tensor(TensorKind::kGradient, spec.name[i], spec.micro_batch_grad[i], layer,
                               static_cast<int32_t>(micro_batch), static_cast<int16_t>(i))
              : grads[i]);
    }
  }
  return found->second;
}

}  // namespace strata
