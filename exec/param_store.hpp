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
//
// Mixed precision (Megatron-LM's default with bf16: Micikevicius et al. 2018): the params the
// kernels read are in the plan's dtype (`param_dtype`), and where that is bf16 AdamW updates fp32
// masters beside them (the whole under ZeRO 0, the owned chunk under ZeRO >= 1) and writes the
// params rounded from them: under ZeRO >= 1 into the owned chunk in bf16, which the all-gather
// moves. Gradients are fp32 on the rank (the kernels accumulate them in fp32); a plan that reduces
// them in bf16 (`reduce_dtype`, Precision::fp32_grads false) stages them in bf16 for the
// collectives, which sum in bf16, and widens the result. Checkpoints keep the fp32 masters.

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
  int64_t size = 0;    // elements of the TP shard
  int64_t chunk = 0;   // elements of one DP chunk (ZeRO >= 1)
  DeviceTensor param;  // whole, in param_dtype: ZeRO 0-2 always, ZeRO 3 inside a gather
  DeviceTensor grad;   // fp32
  // fp32, what AdamW updates where the params are not their own masters: the whole (ZeRO 0 with
  // bf16 params) or chunk d (ZeRO >= 1).
  DeviceTensor master;
  // ZeRO >= 1 with bf16 params: chunk d of the params in bf16, rounded from the master, the
  // all-gather's source (with fp32 params the master is).
  DeviceTensor owned;
  DeviceTensor chunk_grad;  // ZeRO >= 1: chunk d of the reduced gradients, fp32
  DeviceTensor m;
  DeviceTensor v;
};

struct BlockState {
  BlockKind kind = BlockKind::kLayer;
  int64_t layer = -1;
  std::vector<ParamState> params;
};

// How a rank's model states are stored and reduced.
struct StoreLayout {
  int64_t zero_stage = 0;
  int64_t dp = 1, dp_rank = 0;
  int64_t tp = 1, tp_rank = 0;
  DType param_dtype = DType::kFp32;   // the params the kernels read
  DType reduce_dtype = DType::kFp32;  // the gradients' collectives
};

class ParamStore {
 public:
  ParamStore(Backend& backend, const std::vector<ParamBlock>& blocks, const StoreLayout& layout,
             uint64_t seed);

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
  // Sums the gradient this rank reduced of `p` over `group` (a tied embedding's two copies,
  // sequence parallelism's replicated parameters), in the reduce dtype.
  void all_reduce_gradient(ParamState& p, Communicator& comm, RankGroup group);
  // All-gather the owned chunks into the full params (ZeRO 1 and 2 after the step, ZeRO 3
  // before a block's forward or backward, into memory allocated for them).
  void gather_params(std::span<ParamState* const> params, Communicator& comm, RankGroup dp_group);
  // The chunk of the params this rank owns, in param_dtype (ZeRO >= 1): ZeRO 3's only copy.
  DeviceTensor& owned_params(ParamState& p) { return separate_master_ ? p.owned : p.master; }
  // The gradient this rank reduces further or updates with: the full one under ZeRO 0, the owned
  // chunk otherwise.
  float* reduced_grad(ParamState& p) {
    return zero_ == 0 ? p.grad.data<float>() : p.chunk_grad.data<float>();
  }
  int64_t reduced_size(const ParamState& p) const { return zero_ == 0 ? p.size : p.chunk; }
  // Adds into *total (a double in the backend's memory) the sum of squares of the reduced
  // gradients that count in the global norm: all of them, or one parameter's (nothing when it
  // is counted on another rank).
  void add_gradient_sum_of_squares(double* total);
  void add_gradient_sum_of_squares(ParamState& p, double* total);
  // AdamW on every owned element, clipped by the squared global norm *norm_squared (in the
  // backend's memory) to max_norm; then clears the gradients.
  void step(const cpu::AdamWConfig& config, int64_t step, const double* norm_squared,
            double max_norm);

  // Checkpoint tensors: params (when held), masters, m and v, by name, all fp32: ".param" is the
  // whole params' fp32 values (ZeRO 0's masters where they are apart, else the params widened),
  // so a checkpoint reads the same whatever the plan's dtype.
  std::vector<CheckpointTensor> save() const;
  void load(const std::vector<CheckpointTensor>& tensors, const std::string& file);
  // The params of every block this rank holds, as fp32 (for parity checks and final weights):
  // whole (ZeRO 0's masters where they are apart), or the owned master chunk under ZeRO 3.
  std::vector<CheckpointTensor> full_params() const;

 private:
  BlockState* find(BlockKind kind);
  // The fp32 values ".param" holds: ZeRO 0's masters where they are apart, else the params.
  const DeviceTensor& whole_values(const ParamState& p) const {
    return zero_ == 0 && separate_master_ ? p.master : p.param;
  }
  // Device staging for a block's collectives, in `dtype`, grown as needed.
  DeviceTensor& staging(DeviceTensor& buffer, DType dtype, int64_t elements);

  Backend& backend_;
  int64_t zero_;
  int64_t dp_;
  DType param_dtype_;
  DType reduce_dtype_;
  bool separate_master_;  // bf16 params: fp32 masters beside them
  std::vector<BlockState> blocks_;
  DeviceTensor send_;
  DeviceTensor recv_;
  DeviceTensor widened_;  // a bf16 reduction's result in fp32
};

}  // namespace strata
