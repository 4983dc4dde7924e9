#pragma once
// The sizes of an MoE layer's work on one rank (ModelSpec::experts), as Megatron-Core's token
// dispatchers move tokens (megatron/core/transformer/moe/token_dispatcher.py), shared by the
// layer's op shapes, stored activations, parameters and lowering.
//
// A rank enters the layer with the T tokens of its residual stream (s b / cp, / t under sequence
// parallelism, which Megatron requires of MoE with tp > 1; each context-parallel rank routes its
// own tokens). Both dispatchers bring each rank's
// experts the tokens routed to them from the tp x ep ranks that share the experts' data: the
// all-gather dispatcher gathers every token of those ranks and keeps its own experts' (a local
// permutation), the all-to-all dispatcher permutes its tokens by expert, sends each expert-parallel
// peer its experts' and gathers over the expert-tensor-parallel group. Balanced, a rank's
// E / ep experts receive T x etp x k rows (T tokens on each of tp x ep ranks, k experts each,
// 1/ep of the experts here).

#include <cstdint>
#include <vector>

#include "models/model_spec.hpp"
#include "plan/parallel_plan.hpp"

namespace strata {

struct MoeDims {
  int64_t tokens = 0;         // T: the rank's residual-stream rows entering the layer
  int64_t local_experts = 0;  // E / ep
  // The rows the rank's experts compute on, the busiest rank's (moe_rank_load).
  int64_t expert_rows = 0;
  int64_t expert_up = 0;   // an expert's up-product width on the rank: (2 if gated) f_e / etp
  int64_t expert_ffn = 0;  // f_e / etp
  int64_t shared_up = 0;   // the shared experts', per TP rank (0: none)
  int64_t shared_ffn = 0;
  // All-gather dispatcher: the tokens gathered over tp x ep, each rank's T.
  int64_t gathered_tokens = 0;
};

// The load of the rank holding the busiest expert over the balanced share, when that expert takes
// `imbalance` times the mean (capped by the capacity factor, which drops what exceeds it) and the
// other experts share the rest of the tokens equally: (i + (L - 1)(E - i) / (E - 1)) / L for L
// local experts of E. With every expert on the rank (ep 1) the load is 1 however skewed.
double moe_rank_load(const ModelSpec& model, const ParallelPlan& plan);

MoeDims moe_dims(const ModelSpec& model, const ParallelPlan& plan);

// The all-to-all token dispatcher's traffic over an expert-parallel group of ep members, as
// TaskGraph::set_peer_bytes takes it ([i * ep + j]: what member i sends member j): each member
// sends its T x k token slots, `row_bytes` each, to the members holding their experts. Member 0
// holds the busiest expert and receives moe_rank_load x its balanced 1/ep share of every
// member's slots, the others the rest equally, (ep - load) / (ep - 1) x the share each. The
// combine sends the same rows back: the transpose.
std::vector<int64_t> moe_dispatch_matrix(const ModelSpec& model, const ParallelPlan& plan,
                                         int64_t row_bytes);
std::vector<int64_t> transposed(const std::vector<int64_t>& matrix, int64_t n);

}  // namespace strata
