#pragma once
// ParallelPlan: how one training step of a model is split over GPUs. The field names are the
// field's words (Megatron-LM, DeepSpeed): ranks along the parallel axes (plan/parallel_axes.hpp)
// in a rank order, vpp model chunks per pipeline stage (interleaved 1F1B), ZeRO stage, micro-batch
// and global batch in sequences, recompute, sequence parallel, pipeline schedule, training dtype.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/model_spec.hpp"
#include "models/ops.hpp"
#include "plan/parallel_axes.hpp"
#include "topologies/device_spec.hpp"

namespace strata {

enum class ScheduleKind : uint8_t { kGpipe, k1F1B, kInterleaved };
// kSelectiveOp: torchtitan's op-level selective activation checkpointing
// (activation_checkpoint.mode "selective", selective_ac_option "op"; stored_layer_activation_bytes
// says what a layer keeps and layer_lowering.cpp what it recomputes).
enum class RecomputeKind : uint8_t { kNone, kSelective, kFull, kSelectiveOp };
// How the attention core runs (--attention):
//  - flash: one fused kernel whose scores stay on chip (FlashAttention; Transformer Engine's
//    flash and cuDNN fused backends, PyTorch's scaled_dot_product_attention); a layer stores the
//    output and the fp32 log-sum-exp, and the backward recomputes the scores in the kernel;
//  - unfused: Megatron-LM 2022's path (Korthikanti et al. 2022): batched products around a fused
//    scale-mask-softmax, whose (b, heads, s, s) scores cross HBM and are stored for the backward.
enum class AttentionKind : uint8_t { kFlash, kUnfused };

// FP8 training with Transformer Engine (--fp8-format, Megatron's spelling; --fp8): the
// transformer layers' GEMMs in FP8 (hybrid: E4M3 forward, E5M2 gradients; e4m3: E4M3 both),
// everything else in the training dtype. The formats cost the same; the plan keeps the choice.
enum class Fp8Format : uint8_t { kNone, kHybrid, kE4m3 };

// How the framework's host thread issues work (--host-dispatch), each block of kernels and
// communication calls a task of the rank's host stream that the GPU's work waits for
// (plan/host_dispatch.hpp has the costs and their sources): eager PyTorch, torch.compile, CUDA
// graphs, a native C++/CUDA program (llm.c), or none (a host that never holds the GPU back: an
// idealization, to see what the host costs a plan).
enum class HostDispatch : uint8_t { kEager, kCompiled, kCudaGraphs, kNative, kNone };

// The software stack that runs the plan (--framework). It sets the defaults of the fields that
// follow (plan/framework.cpp has the table and the source of each), which can each be set on
// their own.
enum class Framework : uint8_t { kMegatronCore, kMegatron2022, kDeepSpeed, kFsdp2, kDdp, kHorovod };

// Communication overlapped with compute, under Megatron-LM's flag names. Without a flag, that
// communication is not overlapped, as in the framework without it.
struct Overlap {
  // --tp-comm-overlap (Transformer Engine's userbuffers): the sequence-parallel all-gather before
  // and reduce-scatter after each column/row-parallel GEMM move in tp chunks by ring exchange, each
  // GEMM chunk waiting only for its own chunk.
  bool tp_comm = false;
  // --overlap-grad-reduce: each gradient bucket is reduced as soon as the last micro-batch's
  // backward has produced it; without, the compute waits for each bucket's reduction (one bucket
  // of the whole stage in Megatron-LM, which then reduces after the last backward).
  bool grad_reduce = false;
  // --overlap-param-gather (distributed optimizer): each bucket's updated parameters are
  // all-gathered during the next step's forward instead of after the optimizer step.
  bool param_gather = false;
  // --overlap-p2p-communication (Megatron-LM's default, for the interleaved schedule): pipeline
  // sends and receives are posted ahead and waited for only when their data is needed.
  bool p2p = true;

  bool operator==(const Overlap&) const = default;
};

// How a 16-bit run keeps its model states (Rajbhandari et al. 2020 Sec. 3.1; Megatron-LM's
// docs/source/api-guide/dist_optimizer.md). Ignored by fp32 training, which keeps 4 + 4 + 8.
struct Precision {
  bool fp32_grads = true;             // gradients accumulated and reduced in fp32 (main_grad)
  bool fp32_params = false;           // parameters kept in fp32 and cast per op (AMP, FSDP2)
  bool fp32_master_weights = true;    // an fp32 master copy beside 16-bit parameters
  bool fp32_optimizer_states = true;  // Adam's m and v in fp32

  bool operator==(const Precision&) const = default;
};

// ZeRO-Offload and ZeRO-Infinity to CPU memory (DeepSpeed's zero_optimization.offload_optimizer
// and offload_param with "device": "cpu"; Ren et al. 2021). Both need the host figures of the
// device file (host_tflops, host_mem_bw_gbps, host_memory_gb).
struct Offload {
  // The optimizer states (and the fp32 master weights) live in host memory and the optimizer step
  // runs on the host: each reduced gradient shard is copied down over PCIe, the updated 16-bit
  // parameter shard is copied back up. ZeRO 1-3.
  bool optimizer = false;
  // ZeRO 3: the 16-bit parameter shard lives in host memory and is copied up before each gather.
  bool params = false;

  bool operator==(const Offload&) const = default;
};

// How an MoE layer's tokens reach their experts' ranks (Megatron's --moe-token-dispatcher-type):
// each rank sends each expert-parallel peer the tokens routed to the peer's experts
// (all-to-all), or every rank gathers every peer's tokens and keeps those routed to its own
// experts (all-gather, Megatron-LM's default).
enum class MoeDispatcher : uint8_t { kAllGather, kAllToAll };

// How context-parallel ranks share keys and values (Megatron's --cp-comm-type): a ring of KV
// block exchanges overlapped with the blockwise attention (p2p, Megatron's default), one
// all-gather of the keys and values before the attention (all_gather, Llama 3's), or all-to-alls
// that trade the sequence split for a head split around the attention (a2a, DeepSpeed-Ulysses).
enum class CpComm : uint8_t { kP2p, kAllGather, kAllToAll };

struct ParallelPlan {
  // Data-parallel replicas of the dense layers (Megatron's data-parallel size: the GPUs over
  // tp x cp x pp). Expert parallelism is carved out of it, and with expert tensor parallelism
  // etp < tp also out of the TP ranks the experts do not split over: ep spans tp / etp of them and
  // ep_from_dp() data-parallel ranks (axes()); the experts' own data parallelism is
  // dp / ep_from_dp() (x cp).
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  // Context parallelism (--context-parallel-size): each sequence split over cp ranks.
  int64_t cp = 1;
  // Expert parallelism (--expert-model-parallel-size): an MoE layer's routed experts split over
  // ep ranks of each data-parallel group.
  int64_t ep = 1;
  // Tensor parallelism inside each expert (--expert-tensor-parallel-size); 0: tp, Megatron's
  // default.
  int64_t etp = 0;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllGather;
  // --moe-grouped-gemm: a rank's local experts run as one grouped GEMM per product instead of a
  // GEMM per expert.
  bool grouped_gemm = false;
  // The busiest expert's tokens over the balanced share (--moe-imbalance; 1: balanced routing):
  // the busiest rank's expert GEMMs and the all-to-all bytes it receives grow by it, up to the
  // model's capacity factor when it drops tokens.
  double moe_imbalance = 1.0;
  CpComm cp_comm = CpComm::kP2p;
  // How ranks are laid out over the axes, innermost first (--rank-order; Megatron-Core's order).
  std::array<Axis, kAxisCount> rank_order = kMegatronOrder;
  int64_t vpp = 1;           // model chunks per pipeline stage; > 1 only with interleaved
  int64_t zero_stage = 0;    // 0: plain DP; 1: optimizer states; 2: + gradients; 3: + parameters
  int64_t micro_batch = 1;   // sequences per micro-batch per DP replica
  int64_t global_batch = 1;  // sequences per step over all DP replicas
  int64_t seq_len = 2048;
  RecomputeKind recompute = RecomputeKind::kNone;
  // Full recompute of only the first this many layers of each model chunk (Megatron-LM's
  // --recompute-method block --recompute-num-layers); 0: every layer.
  int64_t recompute_layers = 0;
  bool sequence_parallel = false;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  DType dtype = DType::kBf16;
  // Set by the framework's preset (plan/framework.hpp); these defaults are megatron-core's.
  Framework framework = Framework::kMegatronCore;
  AttentionKind attention = AttentionKind::kFlash;
  Overlap overlap;
  Precision precision;
  // Gradient bucket size in parameters (Megatron's --ddp-bucket-size, DeepSpeed's
  // reduce_bucket_size, PyTorch DDP's bucket_cap_mb over the gradient's bytes); 0: Megatron-Core's
  // default, max(40M, 1M x dp) with --overlap-grad-reduce and the whole stage without.
  int64_t bucket_size = 0;
  HostDispatch host_dispatch = HostDispatch::kEager;
  // Whether the model's norms, rotary embeddings and SwiGLU run as fused kernels (Megatron's and
  // Transformer Engine's, Apex's) or as eager PyTorch modules' chains of elementwise kernels
  // (torchtitan's and Hugging Face's models); torch.compile and native programs fuse them
  // whatever this says (runs_fused_kernels).
  bool fused_kernels = true;
  Fp8Format fp8 = Fp8Format::kNone;
  // --fp8-param-gather (Megatron) / FSDP2's float8 all-gather: the layers' GEMM weights are kept
  // and all-gathered in FP8 instead of 16-bit with an FP8 copy beside them.
  bool fp8_param_gather = false;
  // Uneven pipeline split (Megatron's --decoder-first/last-pipeline-num-layers; Llama 3 405B runs
  // 126 layers on 16 stages with one layer fewer on the first and the last, interleaved). The
  // middle stages split the rest evenly; with interleaving each stage's chunks split its layers
  // (chunk_layout). 0: even split.
  int64_t first_stage_layers = 0;
  int64_t last_stage_layers = 0;
  Offload offload;
  // Horovod's background thread (HOROVOD_CYCLE_TIME): it wakes every cycle and launches the
  // reductions whose gradients are ready, so a ready bucket waits for the next wake (cycles
  // counted from the step's start); 0: reductions launch when ready (every other framework).
  int64_t cycle_time_ns = 0;
  // ZeRO 3 / FSDP2: how many layers' parameter all-gathers may run ahead of the layer computing
  // (FSDP2's forward and backward prefetch, DeepSpeed's stage3_prefetch_bucket_size bounded by
  // stage3_max_live_parameters); -1: the framework's default (prefetch_window_layers).
  int64_t prefetch_layers = -1;

  // The axes' sizes in the rank order.
  ParallelAxes axes() const;
  int64_t gpus() const { return dp * tp * pp * cp; }
  // Tensor parallelism inside each expert (etp, or tp when unset).
  int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  // The TP ranks of a dense TP group that hold different experts: tp / etp (1 unless etp < tp
  // divides tp; validate_plan refuses other etp).
  int64_t tp_outer() const {
    const int64_t etp_ = expert_tp();
    return etp_ < tp && tp % etp_ == 0 ? tp / etp_ : 1;
  }
  // The expert-parallel ranks carved out of data parallelism: ep / tp_outer().
  int64_t ep_from_dp() const { return ep / tp_outer(); }
  // The ranks holding the same shard of a dense parameter, over which its gradient is reduced
  // and ZeRO shards it: dp x cp (Megatron-Core's data-parallel group with context parallelism).
  int64_t data_shards() const { return dp * cp; }
  // The same for an expert's parameter: the experts' data parallelism dp / ep_from_dp(), x cp
  // (Megatron-Core's expert-data-parallel group: tp x cp x dp / (etp x ep) ranks).
  int64_t expert_data_shards() const { return dp / ep_from_dp() * cp; }
  // Micro-batches each pipeline runs per step (gradient-accumulation steps).
  int64_t micro_batches() const { return global_batch / (dp * micro_batch); }
  int64_t tokens_per_step() const { return global_batch * seq_len; }
  // The tokens of each sequence one context-parallel rank holds: seq_len / cp, two of the
  // sequence's 2 x cp chunks (Megatron-Core's load-balanced split). Every per-token op of the
  // rank (norms, products, residual adds, embedding, head, loss) runs on them.
  int64_t local_seq_len() const { return seq_len / cp; }
};

// Upper bounds on a plan's sizes, far above any real run, so that what is derived from them (dp x
// tp x pp ranks, dp x micro-batch, tokens per step) stays well within 64-bit integers.
inline constexpr int64_t kMaxRanks = int64_t{1} << 24;      // each of dp, tp, pp, vpp; GPUs
inline constexpr int64_t kMaxSequences = int64_t{1} << 32;  // micro- and global batch
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;     // tokens per sequence
// Micro-batches per step per pipeline: the graph holds each op's tasks for each, and real runs
// use thousands at most (GPT-3 175B on 1,536 sequences with dp 1: 1,536).
inline constexpr int64_t kMaxMicroBatches = int64_t{1} << 16;

// The plan's sizes alone, before anything divides by them: each count within [1, its bound],
// uneven stage layers >= 0. Throws InputError naming `where` and the field with its flag.
void validate_plan_sizes(const ParallelPlan& plan, const std::string& where);

// Checks the plan against the model and the GPUs asked for (nullopt: whatever the plan implies).
// Throws InputError naming `where` (a scenario file, or "command line") and the field with the
// flag that sets it, e.g. "tp (--tp)", and the fix.
void validate_plan(const ParallelPlan& plan, const ModelSpec& model,
                   std::optional<int64_t> gpus_asked, const std::string& where);

// Transformer layers held by each pipeline stage, in stage order; sums to model.layers.
std::vector<int64_t> layers_per_stage(const ParallelPlan& plan, const ModelSpec& model);

// The global transformer layers of model chunk `chunk` (0..vpp-1) on pipeline stage `stage`:
// `count` layers from `first`. Virtual stage chunk * pp + stage follows virtual stage
// chunk * pp + stage - 1 in the model (without interleaving, a stage's layers follow the earlier
// stages'). A stage splits its layers over its chunks as evenly as they go; where they do not
// divide, the first stage's last chunks and every other stage's first chunks take one more, so
// the chunks holding the embedding and the output layer are the light ones.
struct ChunkLayers {
  int64_t first = 0;
  int64_t count = 0;
};
// Every model chunk's layers, indexed by virtual stage chunk * pp + stage.
std::vector<ChunkLayers> chunk_layout(const ParallelPlan& plan, const ModelSpec& model);
ChunkLayers chunk_layers(const ParallelPlan& plan, const ModelSpec& model, int64_t stage,
                         int64_t chunk);
// Per pipeline stage, the sum of `of_layer(l)` over the global layers l of its chunks.
template <typename OfLayer>
std::vector<int64_t> sum_over_stage_layers(const ParallelPlan& plan, const ModelSpec& model,
                                           OfLayer of_layer) {
  std::vector<int64_t> sums(static_cast<size_t>(plan.pp), 0);
  const std::vector<ChunkLayers> chunks = chunk_layout(plan, model);
  for (size_t v = 0; v < chunks.size(); ++v) {
    for (int64_t l = chunks[v].first; l < chunks[v].first + chunks[v].count; ++l)
      sums[v % static_cast<size_t>(plan.pp)] += of_layer(l);
  }
  return sums;
}

// Selective recompute rebuilds the attention scores (Korthikanti et al. 2022), which only the
// unfused attention stores; under flash attention there is nothing left to recompute, and
// Megatron-LM then recomputes nothing extra.
bool recomputes_attention_scores(const ParallelPlan& plan);

// Whether the elementwise work runs fused: plan.fused_kernels, or a torch.compile'd or native
// program, which fuses it.
bool runs_fused_kernels(const ParallelPlan& plan);

// Whether the layer at `index_in_chunk` (0 = the chunk's first) recomputes its forward in full.
bool recomputes_layer(const ParallelPlan& plan, int64_t index_in_chunk);

const char* to_string(ScheduleKind kind);
const char* to_string(RecomputeKind kind);
const char* to_string(AttentionKind kind);
const char* to_string(Fp8Format format);
const char* to_string(HostDispatch dispatch);
const char* to_string(MoeDispatcher dispatcher);
const char* to_string(CpComm comm);

// What the plan needs of the device: FP8 tensor cores for --fp8. Throws InputError naming
// `where` and the field with its flag.
void validate_plan_on_device(const ParallelPlan& plan, const DeviceSpec& device,
                             const std::string& where);

}  // namespace strata
