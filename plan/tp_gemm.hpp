#pragma once
// Tensor-parallel communication and products (internal to plan/): a TP collective, a row-parallel
// product's reduction, and a TP-sharded product with the sequence-parallel gather of its input,
// the reduction of its output and, under --tp-comm-overlap, its chunks and ring exchanges.

#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "plan/lowering_context.hpp"

namespace strata {

// A TP collective after `dep` on the tp-comm stream, using `uses`; returns `dep` when tp == 1.
TaskId tp_collective(const LoweringContext& ctx, RankState& state, TaskRole role,
                     CollectiveKind kind, int64_t bytes, TaskId dep,
                     std::initializer_list<TensorUse> uses, ReduceOp reduce = ReduceOp::kSum);
// A TP reduction of `partial` after `dep`: an all-reduce in place, or under sequence parallelism
// a reduce-scatter into `rows`. Returns the task and the tensor that holds the result.
std::pair<TaskId, TensorId> tp_reduce(const LoweringContext& ctx, RankState& state, TaskRole role,
                                      int64_t bytes, TaskId dep, TensorId partial, TensorId rows);

// One tensor-parallel product with the TP communication around it: the sequence-parallel
// all-gather of its input (`gather_in`, of `gather_bytes`) and the reduction of its output
// (`reduce_out`); under FP8 first the cast of its input (`cast`, an op, or -1).
//
// With --tp-comm-overlap (Transformer Engine's userbuffers, Megatron-LM's tp_comm_overlap) the
// product runs as t chunks of s b / t rows and the collective as t - 1 ring-exchange steps of one
// chunk each on the tp-comm stream: gathering, chunk 0 is the rank's own and chunk k waits only
// for exchange step k, which started with the input; reducing, step k carries the partial sum of
// chunk k - 1 while chunk k computes, and the next op waits for the last step. Only what a chunk's
// GEMM does not cover is exposed, and the chunks pay the smaller GEMMs' efficiency and the
// compute slowdown of the transfers beside them (the engine's comm_slowdown).
//
// Tensors: forward, the product reads `in` (its FP8 cast `cast_out`, its gather `gathered`) and
// the weights, and writes `out` (adds into it with `accumulate`), and the layer's stored copy of
// its input in `save_copy` when the product is the layer's first op; backward, it reads the
// output gradient `in` and its forward input `saved_in` (one of the two gathered: the output
// gradient of a row-parallel product, `saved_in` of a column-parallel one, `gather_saved`), the
// weights, and writes the input gradient `out` and adds into the weight gradients (`params`).
// The reduction reduces `out` in place, or scatters it into `reduced`.
struct TpGemm {
  // A constructor rather than aggregate initialization: GCC clears a mostly-default aggregate
  // whole before filling it in (a 216-byte rep stos per product, several per layer).
  TpGemm(TaskRole role, const OpPair& whole, const OpPair& chunk, Direction direction,
         bool gather_in = false, bool reduce_out = false, int32_t cast = -1,
         int64_t gather_bytes = 0, TaskId params = kNoTask)
      : role(role),
        whole(whole),
        chunk(chunk),
        direction(direction),
        gather_in(gather_in),
        reduce_out(reduce_out),
        cast(cast),
        gather_bytes(gather_bytes),
        params(params) {}

  TaskRole role;
  const OpPair& whole;
  const OpPair& chunk;
  Direction direction;
  bool gather_in = false;
  bool reduce_out = false;
  int32_t cast = -1;
  int64_t gather_bytes = 0;
  TaskId params = kNoTask;  // when the product is the layer's first op: the gathered weights
  TensorId in = kNoTensor;
  TensorId saved_in = kNoTensor;
  bool gather_saved = false;
  TensorId cast_out = kNoTensor;
  TensorId gathered = kNoTensor;
  TensorId out = kNoTensor;
  bool accumulate = false;
  TensorId reduced = kNoTensor;
  // The reduction's bytes per rank: a (s b h) activation's (ctx.tp_message_bytes) unless set
  // (latent attention's up projections reduce their narrower latents' gradients).
  int64_t reduce_bytes = 0;
  TaskUses weights;  // forward: weights read; backward: read, then grads added
  boost::container::small_vector<TensorId, 4> save_copy;  // forward: stored copies written
};

// The task the next op waits for and the tensor(s) holding the product's (reduced) result: under
// the TP overlap a reduced product ends in two parts, the exchanged rows and the last chunk.
struct GemmResult {
  TaskId task = kNoTask;
  TensorId out = kNoTensor;
  TensorId last_chunk = kNoTensor;
};

// Emits the product `g` after `input`: its tasks and their tensors.
GemmResult tp_gemm(const LoweringContext& ctx, RankState& state, const TpGemm& g, TaskId input);

}  // namespace strata
