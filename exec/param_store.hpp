#pragma once
// ParamStore: one rank's parameters, gradients and AdamW states, block by block, and the
// data-parallel collectives over them under ZeRO stages 0-3 (Rajbhandari et al. 2020).
//
// Every tensor is this rank's TP shard (exec/model_params.hpp). Under ZeRO >= 1 each tensor is
// further cut into dp equal chunks (the last zero-padded); DP rank d owns chunk d of EVERY tensor,
// so the chunk a rank owns of a tied embedding is the same on the first and the last stage, and
// their gradients can be summed chunk by chunk. A block's collectives move the concatenation of
// its tensors' chunks, member-major: [member 0: chunk 0 of each tensor][member 1: ...]...
//
//                 full params      full grads          owned (updated by AdamW)
//   ZeRO 0        persistent       accumulate, AR      full params, m and v full
//   ZeRO 1        persistent       accumulate, RS once chunk: master copy, m, v, reduced grad
//   ZeRO 2        persistent       per micro-batch RS  chunk
//   ZeRO 3        gathered/freed   per micro-batch RS  chunk (the only copy of the params)
//
// With dp == 1 every stage behaves as ZeRO 0 (the plan compiler emits no DP collectives).

#include <cstdint>
#include <span>
#include <vector>

#include "exec/backend.hpp"
#include "exec/checkpoint.hpp"
#include "exec/communicator.hpp"
#include "exec/model_params.hpp"

namespace strata {

struct ParamState {
  ParamSpec spec;
  int64_t size = 0;   // elements of the TP shard
  int64_t chunk = 0;  // elements of one DP chunk (ZeRO >= 1)
  DeviceTensor param;
  DeviceTensor grad;
  DeviceTensor master;      // ZeRO >= 1: chunk d of the params
  DeviceTensor chunk_grad;  // ZeRO >= 1: chunk d of the reduced gradients
  DeviceTensor m;
  DeviceTensor v;
};

struct BlockState {
  BlockKind kind = BlockKind::kLayer;
  int64_t layer = -1;
  std::vector<ParamState> params;
};

class ParamStore {
 public:
  ParamStore(Backend& backend, const std::vector<ParamBlock>& blocks, int64_t zero_stage,
             int64_t dp, int64_t dp_rank, int64_t tp, int64_t tp_rank, uint64_t seed);

  int64_t zero_stage() const { return zero_; }
  BlockState& layer(int64_t layer);
  BlockState* embedding() { return find(BlockKind::kEmbedding); }
  BlockState* head() { return find(BlockKind::kHead); }
  std::vector<BlockState>& blocks() { return blocks_; }

  // DP gradient reduction of full gradients (`grad`, each the size of its parameter's TP shard:
  // the step's, or one micro-batch's under ZeRO 2 and 3): all-reduce in place (ZeRO 0) or
  // reduce-scatter, adding into the owned chunks (ZeRO >= 1; ZeRO 2 and 3 then clear `grad`).
  struct GradientSource {
    ParamState* param = nullptr;
    float* grad = nullptr;
  };
  void reduce_gradients(std::span<const GradientSource> sources, Communicator& comm,
                        RankGroup dp_group);
  // All-gather the owned chunks into the full params (ZeRO 1 and 2 after the step, ZeRO 3
  // before a block's forward or backward, into memory allocated for them).
  void gather_params(std::span<ParamState* const> params, Communicator& comm, RankGroup dp_group);
  // The gradient this rank reduces further or updates with: the full one under ZeRO 0, the owned
  // chunk otherwise.
  float* reduced_grad(ParamState& p) { return zero_ == 0 ? p.grad.data<float>() : p.chunk_grad.data<float>(); }
  int64_t reduced_size(const ParamState& p) const { return zero_ == 0 ? p.size : p.chunk; }
  // Sum of squares of the reduced gradients that count in the global norm: all of them, or one
  // parameter's (0 when it is counted on another rank).
  double gradient_sum_of_squares();
  double gradient_sum_of_squares(ParamState& p);
  // AdamW on every owned element, with the clipping factor; then clears the gradients.
  void step(const cpu::AdamWConfig& config, int64_t step, double grad_scale);

  // Checkpoint tensors: params (when held), masters, m and v, by name.
  std::vector<CheckpointTensor> save() const;
  void load(const std::vector<CheckpointTensor>& tensors, const std::string& file);
  // The full params of every block this rank holds (for parity checks and final weights).
  std::vector<CheckpointTensor> full_params() const;

 private:
  BlockState* find(BlockKind kind);

  Backend& backend_;
  int64_t zero_;
  int64_t dp_;
  std::vector<BlockState> blocks_;
  // Device staging for a block's collectives, grown as needed.
  float* staging(DeviceTensor& buffer, int64_t elements);
  DeviceTensor send_;
  DeviceTensor recv_;
};

}  // namespace strata
