#pragma once
// The task graph: the contract between the plan compiler, the simulator and the executor
// (docs/design.md, "The task graph").
//
// A task runs on one rank and one stream. Tasks on one (rank, stream) run in the order of their
// ids; `deps` are extra dependencies across streams (always on tasks with smaller ids, so id order
// is a topological order of each rank's program). Cross-rank synchronization is implicit: a send
// meets the recv with the same (sender, receiver, tag), and the tasks of one collective instance
// (the i-th collective on a group, on each member) run together.
//
// A task is one of:
//  - compute: an OpShape (op kind, per-rank dims, dtype, FLOPs, bytes) from ops();
//  - collective: all-reduce / reduce-scatter / all-gather / ... over groups()[group]; `bytes` is
//    the size of the full (unsharded) buffer on each rank, as nccl-tests counts "size"; a
//    data-parallel gradient reduction or parameter all-gather names the parameter blocks it
//    covers by `bucket` (into buckets()); an all-to-all carries its instance's traffic matrix
//    (set_peer_bytes), and its `bytes` is its own member's row of it summed;
//  - p2p: a send to or recv from `peer`, `bytes` long, matched by `tag`;
//  - memory: allocation or release of `bytes` of a buffer class, so memory over time is known.
// Labels (phase, role, layer, micro-batch, chunk) name the task in traces and let the executor
// name the buffers it reads and writes: (role, layer, micro_batch, chunk) identifies a tensor.
//
// Folded graphs hold one representative rank per pipeline stage (coordinate 0 along every other
// axis); their collectives still name the full group, so the network model can price all
// symmetric groups together.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/append_array.hpp"
#include "common/error.hpp"
#include "models/ops.hpp"
#include "plan/parallel_axes.hpp"
#include "plan/tensor.hpp"

namespace strata {

using TaskId = int32_t;
inline constexpr TaskId kNoTask = -1;  // no task: a dependency that TaskGraph::emplace drops

// kHost: the rank's host thread issuing the work of the others (host-dispatch tasks);
// kBackground: a framework's background thread that launches collectives (Horovod's cycle);
// kCpComm: context parallelism's exchange of keys and values (Transformer Engine's cp stream and
// NCCL's), beside the attention blocks on the compute stream.
enum class Stream : uint8_t {
  kCompute,
  kTpComm,
  kDpComm,
  kPpSend,
  kPpRecv,
  kHost,
  kBackground,
  kCpComm,
};
inline constexpr int kStreamCount = 8;

enum class Phase : uint8_t { kForward, kBackward, kRecompute, kOptimizer };
// kCopy: a copy between the rank's GPU and its host's memory over the GPU's PCIe link (offload).
enum class TaskKind : uint8_t { kCompute, kCollective, kP2p, kMemory, kCopy };
// How a reduction combines its members' values.
enum class ReduceOp : uint8_t { kSum, kMax };
enum class CollectiveKind : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kAllToAll,
  // One step of a ring: every member sends `bytes` to the next member of the group and receives
  // as much from the one before (Transformer Engine's userbuffers ring exchange, a collective
  // permute); `bytes` is the message, not a buffer to be split.
  kRingExchange,
};
// A group is formed along axes (plan/rank_layout.hpp): group_axes says which.
enum class GroupKind : uint8_t {
  kTp,        // tensor-parallel peers (one node)
  kCp,        // context-parallel peers
  kEp,        // expert-parallel peers
  kTpEp,      // tensor- and expert-parallel peers (the all-gather token dispatcher's)
  kExpertTp,  // the experts' tensor-parallel peers (etp of them; the TP group unless etp < tp)
  // The ranks holding one shard of the dense layers (cp x ep x dp / ep: Megatron's data-parallel
  // group with context parallelism; the context-parallel ranks' gradients are summed with it).
  kDp,
  kExpertDp,       // the ranks holding one shard of the experts (cp x dp / ep)
  kEmbedding,      // first and last stage holding a tied embedding
  kModelParallel,  // tp x ep x pp ranks of one replica (gradient norm with ZeRO 0)
  kWorld,          // every rank (gradient norm with ZeRO >= 1)
  kStage,          // every rank of one pipeline stage (FP8 amax reduction)
};
// The axes a group of this kind spans (the embedding group: the first and last rank along pp).
AxisMask group_axes(GroupKind kind);
// The axis whose communication a collective on such a group counts as in the step's metrics:
// its own axis for a group along one axis; dp for the step's gradient-side collectives over
// several (the tied embedding's all-reduce, the gradient norm, FP8's amax reduction).
Axis reported_axis(GroupKind kind);
enum class P2pKind : uint8_t { kSend, kRecv };
enum class MemoryAction : uint8_t { kAlloc, kFree };
enum class CopyDirection : uint8_t { kToHost, kToDevice };

// Buffer classes of memory tasks, and which part of the memory breakdown they belong to.
enum class BufferClass : uint8_t {
  kActivations,      // activations a layer stores for its backward (per micro-batch)
  kLayerInput,       // full recompute: the layer input checkpoint
  kAttentionScores,  // selective recompute: the recomputed softmax/dropout (5as^2b/t)
  kHeadActivations,  // final norm, LM head input and fp32 logits on the last stage
  kPipelineBuffer,   // a pipeline send or receive buffer
  kGatheredParams,   // ZeRO-3 parameters of a layer gathered for its forward or backward
};
bool counts_as_activations(BufferClass buffer);

// Which op of the model a task belongs to.
enum class TaskRole : uint8_t {
  kNorm1,
  kQkv,
  kAttention,
  kAttnOut,
  kAttnResidual,
  kNorm2,
  kMlpUp,
  kMlpAct,
  kMlpDown,
  kMlpResidual,  // transformer layer
  kRotary,       // rotary position embedding of the queries and keys (rotary models)
  kQkNorm,       // the norm over queries and keys (QK-norm models)
  kPostNorm,     // a norm after attention or the MLP (post-norm and sandwich blocks)
  kEmbedding,
  kFinalNorm,
  kLmHead,
  kLoss,  // first and last stage
  kPipeActivation,
  kPipeGradient,  // pipeline p2p
  kGradSync,
  kParamGather,
  kEmbeddingGradSync,
  kSequenceParallelGradSync,  // norm and bias gradients summed over TP under sequence parallel
  kGradNorm,
  kOptimizer,       // data parallel and step
  kLayerBuffer,     // memory tasks of a layer's buffers
  kFp8Cast,         // FP8: casts and transposes around the FP8 GEMMs
  kAmaxReduce,      // FP8: the amax all-reduce of delayed scaling
  kHostDispatch,    // the host thread issuing a block of work (no device work)
  kGradToHost,      // offload: a reduced gradient shard copied to host memory
  kParamsToDevice,  // offload: a 16-bit parameter shard copied up from host memory
  // An MoE layer's MLP: the router's product and scoring, the permutation of tokens by expert and
  // its inverse, the dispatch and combine communication, the experts' products and activation,
  // and the shared experts' work.
  kRouter,
  kMoePermute,
  kMoeDispatch,
  kExpertUp,
  kExpertAct,
  kExpertDown,
  kSharedExpert,
};

const char* to_string(Stream stream);
const char* to_string(Phase phase);
const char* to_string(TaskKind kind);
const char* to_string(CollectiveKind kind);
const char* to_string(GroupKind kind);
const char* to_string(BufferClass buffer);
const char* to_string(TaskRole role);

struct Task {
  int32_t rank = 0;
  Stream stream = Stream::kCompute;
  TaskKind kind = TaskKind::kCompute;
  Phase phase = Phase::kForward;
  TaskRole role = TaskRole::kNorm1;
  int16_t chunk = 0;
  int16_t bucket = -1;       // a DP gradient reduction or parameter all-gather: into buckets()
  int32_t layer = -1;        // global transformer layer, -1 when not a layer's task
  int32_t micro_batch = -1;  // -1 for once-per-step tasks
  uint32_t first_dep = 0;    // into TaskGraph::deps()
  uint32_t dep_count = 0;
  // By kind, one of: a compute task's op (into ops()), a collective's group (into groups()), a
  // p2p's peer rank. They share their storage: a task is one kind.
  union {
    int32_t op = -1;
    int32_t group;
    int32_t peer;
  };
  // p2p: matches a send with its recv. An all-to-all: 1 + the index of its traffic matrix among
  // the graph's distinct matrices (TaskGraph::peer_bytes), 0 until set. A compute task: the
  // random stream it draws from (TaskGraph::set_random_stream), 0 when it draws nothing.
  int32_t tag = 0;
  CollectiveKind collective = CollectiveKind::kAllReduce;
  P2pKind p2p = P2pKind::kSend;
  MemoryAction memory = MemoryAction::kAlloc;
  BufferClass buffer = BufferClass::kActivations;
  CopyDirection copy = CopyDirection::kToHost;
  ReduceOp reduce = ReduceOp::kSum;  // all-reduce and reduce-scatter: how values combine
  uint16_t use_count = 0;  // into TaskGraph::uses(): the tensors the task reads, writes, allocates
  uint32_t first_use = 0;  // or frees
  int64_t bytes = 0;       // collective, p2p, memory and copy size
};

// A compute task's random stream (TaskGraph::set_random_stream), 0 when it draws nothing.
inline int32_t random_stream(const Task& task) {
  return task.kind == TaskKind::kCompute ? task.tag : 0;
}

// The parameter blocks of one data-parallel bucket, which one gradient reduction or parameter
// all-gather covers (Megatron-Core's DDP buckets, DeepSpeed's reduce buckets, PyTorch DDP's
// buckets): `layers` transformer layers from `first_layer`, and the first stage's embedding or
// the last stage's head when they belong to it. Interned per graph: the ranks of a stage share
// theirs.
struct ParamBucket {
  int32_t first_layer = 0;
  int32_t layers = 0;
  bool embedding = false;
  bool head = false;
  // The routed experts' weights of its layers kept apart (ParamTensorSpec::expert: ep > 1),
  // reduced over the expert-data-parallel group; else the blocks' other parameters.
  bool experts = false;

  auto operator<=>(const ParamBucket&) const = default;
};

struct CommGroup {
  GroupKind kind = GroupKind::kTp;
  std::vector<int32_t> ranks;  // global ranks, ascending
};

enum class GraphMode : uint8_t { kFolded, kFull };
const char* to_string(GraphMode mode);

// A rank present in the graph and its pipeline stage.
struct GraphRank {
  int32_t rank = 0;
  int32_t stage = 0;
};

class TaskGraph {
 public:
  TaskGraph(GraphMode mode, const ParallelAxes& axes);

  // Appends a task of `rank` on `stream` with these dependencies and uses, every one of them
  // already in the graph, and returns it for the caller to fill in its other fields (RankProgram):
  // the reference holds until the next task is added. Dependencies that are kNoTask, or on the same
  // stream (implied by stream order), are dropped; the rest must be on `rank` (other ranks are
  // reached through p2p and collectives). Built in place: a task built elsewhere and copied in
  // would wait for its fields' narrow stores to reach the cache (a store-forwarding stall).
  Task& emplace(std::span<const TaskId> deps, std::span<const TensorUse> uses, int32_t rank,
                Stream stream);
  // Appends a tensor of this shape and name, in place as emplace() does, for the caller to fill in
  // its other fields (RankProgram::tensor). Its id is tensor_count() - 1. Inline: the lowering adds
  // a tensor for every few tasks.
  Tensor& emplace_tensor(int32_t shape, uint8_t name) {
    STRATA_ASSERT(static_cast<size_t>(shape) < shape_bytes_.size(),
                  "a tensor's shape is one of the graph's");
    STRATA_ASSERT(name < tensor_names_.size(), "a tensor's name is one of the graph's");
    STRATA_ASSERT(tensors_.size() < static_cast<size_t>(kMaxTensors),
                  "a graph holds fewer than 2^28 tensors");
    Tensor& tensor = tensors_.emplace_back();
    tensor.shape = shape;
    tensor.name = name;
    return tensor;
  }
  // Returns the index of this shape, or of this name, adding it once.
  int32_t add_shape(const TensorShape& shape);
  uint8_t add_tensor_name(const std::string& name);
  int32_t add_op(const OpShape& op);
  // How a reduction's values combine (collectives are sums unless set).
  void set_reduce(TaskId id, ReduceOp op) { tasks_[static_cast<size_t>(id)].reduce = op; }
  // An all-to-all's traffic: its instance's n x n matrix over the n members of its group,
  // row-major in the group's rank order: matrix[i * n + j] is what member i sends to member j
  // (sizes differ per pair: expert parallelism's token dispatch sends each expert's tokens to its
  // rank). The diagonal is what a member keeps: allowed, and never moved over a link. Every
  // member's task of one instance carries the same matrix, and every all-to-all states one. The
  // task's bytes become its own member's row sum, the per-rank size nccl-tests counts (balanced
  // traffic of S per rank, S/n to each member itself included, gives S). Matrices are interned:
  // equal matrices share one copy (a step has thousands of all-to-all tasks and a handful of
  // distinct matrices). The task's rank must be a member of its group.
  void set_peer_bytes(TaskId id, std::span<const int64_t> matrix);
  // The random stream a compute task draws from (dropout's masks), >= 1: the lowering names each
  // draw site once for the model (a layer's attention probabilities, or a branch before its
  // residual add), so every plan, and a recompute, draws the same numbers at the same site.
  void set_random_stream(TaskId id, int32_t stream);
  // Names the op of a compute task added before its op was known (a host-dispatch block, whose
  // work is counted once emitted).
  void set_op(TaskId id, int32_t op);
  // Returns the index of the group with these members, adding it once.
  int32_t add_group(GroupKind kind, std::vector<int32_t> ranks);
  // Returns the index of this bucket, adding it once.
  int16_t add_bucket(const ParamBucket& bucket);
  void add_rank(GraphRank rank) { ranks_.push_back(rank); }

  int64_t size() const { return static_cast<int64_t>(tasks_.size()); }
  const Task& task(TaskId id) const { return tasks_[static_cast<size_t>(id)]; }
  const std::vector<Task>& tasks() const { return tasks_; }
  std::span<const TaskId> deps(TaskId id) const;
  std::span<const TensorUse> uses(TaskId id) const;
  // A compute task's random stream (set_random_stream), 0 when it draws nothing.
  int32_t random_stream(TaskId id) const { return strata::random_stream(task(id)); }
  // An all-to-all's traffic matrix (set_peer_bytes), n * n values; empty for other tasks and
  // before it is set.
  std::span<const int64_t> peer_bytes(TaskId id) const;
  // Which of the graph's distinct matrices an all-to-all carries, -1 for none: two tasks carry
  // equal matrices exactly when their indices are equal (the simulator's plan cache key).
  int32_t peer_bytes_index(TaskId id) const;
  // How many distinct matrices the graph holds.
  int64_t peer_bytes_count() const { return static_cast<int64_t>(matrix_starts_.size()) - 1; }
  int64_t tensor_count() const { return static_cast<int64_t>(tensors_.size()); }
  const Tensor& tensor(TensorId id) const { return tensors_[static_cast<size_t>(id)]; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const TensorShape& shape(int32_t index) const { return shapes_[static_cast<size_t>(index)]; }
  const TensorShape& shape_of(TensorId id) const { return shape(tensor(id).shape); }
  // A tensor's bytes, its shape's bytes() kept when the shape was added.
  int64_t bytes_of(TensorId id) const {
    return shape_bytes_[static_cast<size_t>(tensor(id).shape)];
  }
  const std::vector<TensorShape>& shapes() const { return shapes_; }
  const std::string& tensor_name(uint8_t index) const { return tensor_names_[index]; }
  const OpShape& op(int32_t index) const { return ops_[static_cast<size_t>(index)]; }
  const std::vector<OpShape>& ops() const { return ops_; }
  const CommGroup& group(int32_t index) const { return groups_[static_cast<size_t>(index)]; }
  const std::vector<CommGroup>& groups() const { return groups_; }
  const ParamBucket& bucket(int16_t index) const { return buckets_[static_cast<size_t>(index)]; }
  const std::vector<ParamBucket>& buckets() const { return buckets_; }
  const std::vector<GraphRank>& ranks() const { return ranks_; }

  GraphMode mode() const { return mode_; }
  const ParallelAxes& axes() const { return axes_; }
  int64_t size(Axis axis) const { return axes_.size(axis); }
  // How many real ranks each rank of this graph stands for: the product of every axis but pp
  // when folded, 1 when full.
  int64_t replicas_per_rank() const {
    return mode_ == GraphMode::kFolded ? axes_.product(kReplicaAxes) : 1;
  }

  // Bytes the graph holds in memory, for benchmarks.
  int64_t footprint_bytes() const;
  // Room for this many tasks, dependencies, tensor uses and tensors in all, so that a graph whose
  // size the caller can estimate grows without copying itself (vector doubling).
  void reserve(int64_t tasks, int64_t deps, int64_t uses, int64_t tensors);
  int64_t dep_count() const { return static_cast<int64_t>(deps_.size()); }
  int64_t use_count() const { return static_cast<int64_t>(uses_.size()); }

 private:
  GraphMode mode_;
  ParallelAxes axes_;
  std::vector<Task> tasks_;
  AppendArray<TaskId> deps_;
  AppendArray<TensorUse> uses_;
  // All-to-alls' traffic matrices, distinct ones only, one after another: matrix k is
  // peer_bytes_[matrix_starts_[k], matrix_starts_[k + 1]).
  std::vector<int64_t> peer_bytes_;
  std::vector<size_t> matrix_starts_{0};
  // A matrix's content hash -> the indices of the matrices with that hash (equal hashes are
  // compared value by value). Only looked up, never iterated: the indices are in order of first
  // use, whatever the hash map's layout.
  std::unordered_map<uint64_t, std::vector<int32_t>> matrix_index_;
  std::vector<Tensor> tensors_;
  std::vector<TensorShape> shapes_;
  std::vector<int64_t> shape_bytes_;  // by shape: its bytes()
  std::map<TensorShape, int32_t> shape_index_;
  std::vector<std::string> tensor_names_;
  std::map<std::string, uint8_t> tensor_name_index_;
  std::vector<OpShape> ops_;
  std::vector<CommGroup> groups_;
  std::map<std::pair<GroupKind, std::vector<int32_t>>, int32_t> group_index_;
  std::vector<ParamBucket> buckets_;
  std::map<ParamBucket, int16_t> bucket_index_;
  std::vector<GraphRank> ranks_;
};

// For each task, the task before it on the same (rank, stream), or -1 for the first: the
// stream-order edges the simulator, the validator and DOT output all follow.
std::vector<TaskId> stream_predecessors(const TaskGraph& graph);
// For each task, the task before it on the same rank whatever the stream, or -1: the order of a
// backend that runs a rank's program one task at a time (the CPU executor).
std::vector<TaskId> program_predecessors(const TaskGraph& graph);

// The axis a communication task counts with in the step's metrics: a collective's group's
// reported_axis, a p2p's the axis along which its two ranks differ; an offload copy counts with
// dp, the data-parallel side of the step whose gradients and parameters it moves.
Axis comm_axis(const TaskGraph& graph, const Task& task);

// A readable name for traces and DOT: "fwd L3 mb0 qkv", "bwd L3 mb0 attn_out tp all-reduce".
std::string task_name(const TaskGraph& graph, const Task& task);
// A tensor's: "L3 mb0 qkv", "L3 qkv_w", "mb2 logits", "wte".
std::string tensor_name(const TaskGraph& graph, const Tensor& tensor);

}  // namespace strata
