// An MoE layer's MLP in the task graph (ModelSpec::experts): the router, the token dispatcher's
// permutation and communication, the experts' products and the shared experts, forward and
// backward, as Megatron-Core's MoELayer runs them (megatron/core/transformer/moe/).

#include "common/error.hpp"
#include "plan/layer_ops.hpp"

namespace strata {

namespace {

// The all-gather dispatcher's collective over the expert-tensor- and expert-parallel ranks
// (Megatron's tp_ep group, etp x ep; the TP group at ep 1), or `dep` when that is the rank alone.
TaskId tp_ep_collective(const LoweringContext& ctx, RankState& state, CollectiveKind kind,
                        int64_t bytes, TaskId dep, std::initializer_list<TensorUse> uses) {
  if (ctx.plan.ep == 1) {
    return tp_collective(ctx, state, TaskRole::kMoeDispatch, kind, bytes, dep, uses);
  }
  return state.program.collective(TaskRole::kMoeDispatch, Stream::kTpComm, kind, state.groups.tp_ep,
                                  bytes, {dep}, uses);
}

// The all-to-all dispatcher's collective over the experts' tensor-parallel group (etp ranks:
// Megatron-Core's expert tensor-parallel group, the TP group unless etp < tp), or `dep` at etp 1.
TaskId expert_tp_collective(const LoweringContext& ctx, RankState& state, CollectiveKind kind,
                            int64_t bytes, TaskId dep, std::initializer_list<TensorUse> uses) {
  if (ctx.plan.expert_tp() == 1) return dep;
  return state.program.collective(TaskRole::kMoeDispatch, Stream::kTpComm, kind,
                                  state.groups.expert_tp, bytes, {dep}, uses);
}

// The all-to-all dispatcher's exchange over the expert-parallel ranks with its traffic matrix
// (dispatch or combine), or `dep` at ep 1. The dispatchers run their communication in line with
// the layer's compute (Megatron-Core without --overlap-moe-expert-parallel-comm).
TaskId ep_all_to_all(const LoweringContext& ctx, RankState& state,
                     const std::vector<int64_t>& matrix, TaskId dep,
                     std::initializer_list<TensorUse> uses) {
  if (ctx.plan.ep == 1) return dep;
  TaskGraph& graph = state.program.graph();
  const TaskId task =
      state.program.collective(TaskRole::kMoeDispatch, Stream::kTpComm, CollectiveKind::kAllToAll,
                               state.groups.ep, 0, {dep}, uses);
  graph.set_peer_bytes(task, matrix);
  return task;
}

}  // namespace

// An MoE layer's MLP forward, as Megatron-Core's MoELayer runs it (moe_dims has the rows): the
// router's product and scoring on the rank's T tokens; the all-gather dispatcher gathers the
// tokens (with their probabilities and routing map) over the tp x ep ranks and picks its experts'
// rows, the all-to-all dispatcher permutes its own tokens by expert, sends each expert-parallel
// peer its experts' rows and gathers what it received over the expert-TP group; the experts'
// products and activation, one grouped GEMM per product or one product per local expert; the way
// back (reduce-scatter, all-to-all and the weighted unpermutation, in the dispatcher's order);
// the shared experts beside them as a dense MLP over TP, gated for Qwen-MoE; and the residual
// add of both into the stream.
TaskId LayerOps::moe_forward(TaskId mlp_in, TensorId mid) {
  const auto fwd = Direction::kForward;
  const MoeDims& d = ctx_.moe_sizes;
  const int64_t e = bytes_per_element(ctx_.plan.dtype);
  const int64_t h = m_.hidden;
  const bool gather_dispatch = ctx_.plan.moe_dispatcher == MoeDispatcher::kAllGather;
  const bool tp = ctx_.plan.tp > 1;
  const bool etp = ctx_.plan.expert_tp() > 1;
  const bool ep = ctx_.plan.ep > 1;
  const TensorId x = at(Slot::kUpIn);
  const TensorId probs = at(Slot::kRouterProbs);
  {
    TaskUses uses{read(x)};
    weight(uses, lp_.router_w);
    uses.push_back(write(at(Slot::kRouterLogits)));
    p_.compute(TaskRole::kRouter, op_.router.forward, {mlp_in}, uses);
  }
  TaskUses routing{read(at(Slot::kRouterLogits))};
  weight(routing, lp_.router_b);
  routing.push_back(write(probs));
  const TaskId routed = p_.compute(TaskRole::kRouter, op_.routing.forward, {}, routing);
  const TensorId expert_in = at(Slot::kExpertIn);
  TaskId ready = kNoTask;
  if (gather_dispatch) {
    // Each token's h values and its E fp32 probabilities and 1-byte routing flags.
    const int64_t bytes = d.gathered_tokens * (e * h + 5 * m_.experts);
    const TensorId gathered = etp || ep ? at(Slot::kMoeGathered) : x;
    ready = tp_ep_collective(ctx_, state_, CollectiveKind::kAllGather, bytes, routed,
                             {read(x), read(probs), write(gathered)});
    p_.compute(TaskRole::kMoePermute, op_.permute.forward, {ready},
               {read(gathered), read(probs), write(expert_in)});
  } else {
    // Permuted slots -> (ep) the rows of this rank's experts -> (tp) gathered over expert TP.
    const TensorId dispatched = etp && ep ? at(Slot::kMoeDispatched) : expert_in;
    const TensorId tokens = etp || ep ? at(Slot::kMoeTokens) : expert_in;
    const TaskId permuted = p_.compute(TaskRole::kMoePermute, op_.permute.forward, {},
                                       {read(x), read(probs), write(tokens)});
    const TaskId sent =
        ep_all_to_all(ctx_, state_, ctx_.moe_dispatch, permuted, {read(tokens), write(dispatched)});
    const TensorId received = ep ? dispatched : tokens;
    ready = expert_tp_collective(ctx_, state_, CollectiveKind::kAllGather, e * d.expert_rows * h,
                                 sent, {read(received), write(expert_in)});
  }
  const int64_t products = ctx_.plan.grouped_gemm ? 1 : d.local_experts;
  const auto experts = [&](TaskRole role, int32_t op, TensorId in, int weight_index, TensorId out,
                           TaskId after) {
    for (int64_t i = 0; i < products; ++i) {
      TaskUses uses{read(in)};
      weight(uses, weight_index);
      uses.push_back(write(out));
      p_.compute(role, op, {i == 0 ? after : kNoTask}, uses);
    }
  };
  experts(TaskRole::kExpertUp, op_.experts_up.forward, expert_in, lp_.experts_up_w,
          at(Slot::kExpertActIn), ready);
  p_.compute(TaskRole::kExpertAct, op_.experts_act.forward, {},
             {read(at(Slot::kExpertActIn)), write(at(Slot::kExpertDownIn))});
  // The experts' output, stored for the probabilities' gradient: under the all-to-all dispatcher
  // once back at the rank's token slots (after the expert-TP reduce-scatter).
  const TensorId expert_out = at(Slot::kExpertOut);
  const TensorId proj = gather_dispatch || !(etp || ep) ? expert_out : at(Slot::kExpertProj);
  experts(TaskRole::kExpertDown, op_.experts_down.forward, at(Slot::kExpertDownIn),
          lp_.experts_down_w, proj, kNoTask);
  const TaskId projected = p_.last_compute();
  const TensorId rows = at(Slot::kMoeRows);
  TaskId routed_out = kNoTask;
  if (gather_dispatch) {
    // Unpermute into the gathered tokens' partial sums, then reduce-scatter them back.
    const TensorId out = etp || ep ? at(Slot::kMoeOut) : rows;
    const TaskId unpermuted = p_.compute(TaskRole::kMoePermute, op_.unpermute.forward, {},
                                         {read(expert_out), read(probs), write(out)});
    routed_out = tp_ep_collective(ctx_, state_, CollectiveKind::kReduceScatter,
                                  e * d.gathered_tokens * h, unpermuted, {read(out), write(rows)});
  } else {
    // (tp) reduce-scattered over expert TP -> (ep) back to the rank's token slots.
    const TensorId reduced = ep ? (etp ? at(Slot::kMoeDispatched) : proj) : expert_out;
    const TaskId back =
        expert_tp_collective(ctx_, state_, CollectiveKind::kReduceScatter, e * d.expert_rows * h,
                             projected, {read(proj), write(reduced)});
    const TaskId returned =
        ep_all_to_all(ctx_, state_, ctx_.moe_combine, back, {read(reduced), write(expert_out)});
    routed_out = p_.compute(TaskRole::kMoePermute, op_.unpermute.forward, {returned},
                            {read(expert_out), read(probs), write(rows)});
  }
  TaskId shared_out = kNoTask;
  TensorId shared_rows = kNoTensor;
  if (d.shared_ffn > 0) {
    const int64_t column_in = column_input_bytes(ctx_);
    TpGemm up{
        TaskRole::kSharedExpert, op_.shared_up, op_.shared_up, fwd, true, false, -1, column_in};
    up.in = x;
    up.gathered = at(Slot::kGathered);
    up.out = at(Slot::kSharedActIn);
    gemm_weight(up.weights, lp_.shared_up_w);
    tp_gemm(ctx_, state_, up, mlp_in);
    p_.compute(TaskRole::kSharedExpert, op_.shared_act.forward, {},
               {read(at(Slot::kSharedActIn)), write(at(Slot::kSharedDownIn))});
    TpGemm down{TaskRole::kSharedExpert, op_.shared_down, op_.shared_down, fwd, false, true};
    down.in = at(Slot::kSharedDownIn);
    // Reduced into the stored gate input (or the rows the residual reads); at tp 1 written there.
    down.reduced = m_.shared_expert_gate ? at(Slot::kSharedOut) : at(Slot::kProjRows);
    down.out = tp ? at(Slot::kProj) : down.reduced;
    gemm_weight(down.weights, lp_.shared_down_w);
    const GemmResult shared = tp_gemm(ctx_, state_, down, kNoTask);
    shared_out = shared.task;
    shared_rows = shared.out;
    if (m_.shared_expert_gate) {
      // sigmoid(x . w) scales the shared output, added into the routed experts' rows.
      TaskUses uses{read(shared.out), read(x)};
      weight(uses, lp_.shared_gate_w);
      uses.push_back(write(at(Slot::kSharedGate)));
      uses.push_back(update(rows));
      shared_out = p_.compute(TaskRole::kSharedExpert, op_.shared_gate.forward,
                              {shared.task, routed_out}, uses);
      routed_out = shared_out;
      shared_rows = kNoTensor;
    }
  }
  TaskUses uses{read(mid), read(rows)};
  if (shared_rows != kNoTensor) uses.push_back(read(shared_rows));
  return mlp_residual(uses, {routed_out, shared_out});
}

// The MoE MLP's backward, the forward's ops in reverse: the shared experts' (through their
// gate), the routed experts' from the output gradient back through the unpermutation (which
// also gives the probabilities' gradient), the dispatcher's communication, the experts' products
// and the permutation, the router's scoring and product; the norm's backward sums both paths'
// input gradients into the stream's.
void LayerOps::moe_backward(TensorId dout, TaskId grad_in) {
  const auto bwd = Direction::kBackward;
  const MoeDims& d = ctx_.moe_sizes;
  const int64_t e = bytes_per_element(ctx_.plan.dtype);
  const int64_t h = m_.hidden;
  const bool gather_dispatch = ctx_.plan.moe_dispatcher == MoeDispatcher::kAllGather;
  const bool etp = ctx_.plan.expert_tp() > 1;
  const bool ep = ctx_.plan.ep > 1;
  const TensorId x = at(Slot::kUpIn);
  const TensorId probs = at(Slot::kRouterProbs);
  const TensorId dprobs = at(Slot::kDRouterProbs);
  const TensorId dx = at(Slot::kDUpIn);
  // The shared experts' input gradient, reduce-scattered to the rank's rows.
  TaskId shared_done = kNoTask;
  TensorId shared_dx = kNoTensor;
  bool dx_written = false;
  if (d.shared_ffn > 0) {
    TensorId dshared = dout;
    TaskId after = grad_in;
    if (m_.shared_expert_gate) {
      TaskUses uses{read(dout), read(at(Slot::kSharedOut)), read(at(Slot::kSharedGate)), read(x)};
      weight(uses, lp_.shared_gate_w);
      uses.push_back(write(at(Slot::kDSharedOut)));
      uses.push_back(write(dx));
      add_grad(uses, lp_.shared_gate_w);
      after = p_.compute(TaskRole::kSharedExpert, op_.shared_gate.backward, {grad_in}, uses);
      dshared = at(Slot::kDSharedOut);
      dx_written = true;
    }
    TpGemm down{TaskRole::kSharedExpert, op_.shared_down, op_.shared_down, bwd, true, false, -1,
                ctx_.tp_message_bytes};
    down.in = dshared;
    down.gathered = at(Slot::kDGathered);
    down.saved_in = at(Slot::kSharedDownIn);
    down.out = at(Slot::kDSharedDownIn);
    gemm_weight(down.weights, lp_.shared_down_w);
    add_grad(down.weights, lp_.shared_down_w);
    tp_gemm(ctx_, state_, down, after);
    const TaskId act = p_.compute(TaskRole::kSharedExpert, op_.shared_act.backward, {},
                                  {read(at(Slot::kDSharedDownIn)), read(at(Slot::kSharedActIn)),
                                   write(at(Slot::kDSharedActIn))});
    const GemmResult shared = norm_input_backward(TaskRole::kSharedExpert, op_.shared_up,
                                                  at(Slot::kDSharedActIn), x, lp_.shared_up_w, act);
    shared_done = shared.task;
    shared_dx = shared.out;
  }
  // The experts' output gradient at their rows.
  const TensorId dexpert_out = at(Slot::kDExpertOut);
  TaskId ready = kNoTask;
  if (gather_dispatch) {
    const TensorId dgathered = etp || ep ? at(Slot::kDMoeGathered) : dout;
    const TaskId gathered =
        tp_ep_collective(ctx_, state_, CollectiveKind::kAllGather, e * d.gathered_tokens * h,
                         grad_in, {read(dout), write(dgathered)});
    ready = p_.compute(TaskRole::kMoePermute, op_.unpermute.backward, {gathered},
                       {read(dgathered), read(at(Slot::kExpertOut)), read(probs),
                        write(dexpert_out), write(dprobs)});
  } else {
    // The combine's way in reverse: token slots -> (ep) the experts' rows -> (tp) gathered.
    const TensorId dtokens = etp || ep ? at(Slot::kDMoeTokens) : dexpert_out;
    const TensorId dispatched = etp && ep ? at(Slot::kDMoeDispatched) : dexpert_out;
    const TaskId unpermuted = p_.compute(
        TaskRole::kMoePermute, op_.unpermute.backward, {grad_in},
        {read(dout), read(at(Slot::kExpertOut)), read(probs), write(dtokens), write(dprobs)});
    const TaskId sent = ep_all_to_all(ctx_, state_, ctx_.moe_dispatch, unpermuted,
                                      {read(dtokens), write(dispatched)});
    const TensorId received = ep ? dispatched : dtokens;
    ready = expert_tp_collective(ctx_, state_, CollectiveKind::kAllGather, e * d.expert_rows * h,
                                 sent, {read(received), write(dexpert_out)});
  }
  const int64_t products = ctx_.plan.grouped_gemm ? 1 : d.local_experts;
  const auto experts = [&](TaskRole role, int32_t op, TensorId dout_of, TensorId saved_in,
                           int weight_index, TensorId din, TaskId after) {
    for (int64_t i = 0; i < products; ++i) {
      TaskUses uses{read(dout_of), read(saved_in)};
      weight(uses, weight_index);
      uses.push_back(write(din));
      add_grad(uses, weight_index);
      p_.compute(role, op, {i == 0 ? after : kNoTask}, uses);
    }
  };
  experts(TaskRole::kExpertDown, op_.experts_down.backward, dexpert_out, at(Slot::kExpertDownIn),
          lp_.experts_down_w, at(Slot::kDExpertDownIn), ready);
  p_.compute(TaskRole::kExpertAct, op_.experts_act.backward, {},
             {read(at(Slot::kDExpertDownIn)), read(at(Slot::kExpertActIn)),
              write(at(Slot::kDExpertActIn))});
  const TensorId dexpert_in = at(Slot::kDExpertIn);
  experts(TaskRole::kExpertUp, op_.experts_up.backward, at(Slot::kDExpertActIn),
          at(Slot::kExpertIn), lp_.experts_up_w, dexpert_in, kNoTask);
  const TaskId upped = p_.last_compute();
  // Back to the rank's tokens: the router's input gradient from the experts' side.
  const Access into = dx_written ? Access::kUpdate : Access::kWrite;
  TaskId permuted = kNoTask;
  if (gather_dispatch) {
    const bool spread = etp || ep;
    const TensorId dgathered = spread ? at(Slot::kDMoeGathered) : dx;
    const TaskId scattered =
        p_.compute(TaskRole::kMoePermute, op_.permute.backward, {},
                   {read(dexpert_in), TensorUse{dgathered, spread ? Access::kWrite : into}});
    // The probabilities' gradients ride back with the tokens' (4 bytes each of E).
    permuted = tp_ep_collective(ctx_, state_, CollectiveKind::kReduceScatter,
                                d.gathered_tokens * (e * h + 4 * m_.experts), scattered,
                                {read(dgathered), TensorUse{dx, into}});
  } else {
    // The dispatch's way in reverse: (tp) reduce-scattered -> (ep) back to the token slots.
    const TensorId dtokens = etp || ep ? at(Slot::kDMoeTokens) : dexpert_in;
    const TensorId reduced = ep ? (etp ? at(Slot::kDMoeDispatched) : dexpert_in) : dtokens;
    const TaskId scattered =
        expert_tp_collective(ctx_, state_, CollectiveKind::kReduceScatter, e * d.expert_rows * h,
                             upped, {read(dexpert_in), write(reduced)});
    const TaskId returned =
        ep_all_to_all(ctx_, state_, ctx_.moe_combine, scattered, {read(reduced), write(dtokens)});
    permuted = p_.compute(TaskRole::kMoePermute, op_.permute.backward, {returned},
                          {read(dtokens), TensorUse{dx, into}});
  }
  p_.compute(TaskRole::kRouter, op_.routing.backward, {permuted}, {read(probs), update(dprobs)});
  TaskUses router{read(dprobs), read(x)};
  weight(router, lp_.router_w);
  router.push_back(update(dx));
  add_grad(router, lp_.router_w);
  add_grad(router, lp_.router_b);
  const TaskId routed = p_.compute(TaskRole::kRouter, op_.router.backward, {}, router);
  TaskUses uses{read(dx), read(at(Slot::kNorm2In))};
  if (shared_dx != kNoTensor) uses.push_back(read(shared_dx));
  weight(uses, lp_.norm2_w);
  uses.push_back(update(state_.dstream));
  add_grad(uses, lp_.norm2_w);
  add_grad(uses, lp_.norm2_b);
  p_.compute(TaskRole::kNorm2, op_.norm.backward, {routed, shared_done}, uses);
}

}  // namespace strata
