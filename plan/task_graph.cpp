#include "plan/task_graph.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

// Tasks are the bulk of a graph's bytes (bench/plan_bench.cpp): the kind-specific fields share
// storage, and the tensor fields fill what was padding.
static_assert(sizeof(Task) == 56, "a task is 56 bytes");

bool counts_as_activations(BufferClass buffer) {
  switch (buffer) {
    case BufferClass::kActivations:
    case BufferClass::kLayerInput:
    case BufferClass::kAttentionScores:
    case BufferClass::kHeadActivations:
      return true;
    case BufferClass::kPipelineBuffer:
    case BufferClass::kGatheredParams:
      return false;
  }
  return false;
}

TaskGraph::TaskGraph(GraphMode mode, const ParallelAxes& axes) : mode_(mode), axes_(axes) {}

Task& TaskGraph::emplace(std::span<const TaskId> deps, std::span<const TensorUse> uses,
                         int32_t rank, Stream stream) {
  const auto id = static_cast<TaskId>(tasks_.size());
  STRATA_ASSERT(uses.size() <= UINT16_MAX, "a task uses fewer than 65536 tensors");
  const size_t first_dep = deps_.size();
  TaskId* const dep_run = deps_.extend(deps.size());
  size_t dep_count = 0;
  for (const TaskId dep : deps) {
    if (dep == kNoTask) continue;
    STRATA_ASSERT(dep >= 0 && dep < id, "a dependency must be added before its dependent");
    const Task& before = tasks_[static_cast<size_t>(dep)];
    STRATA_ASSERT(before.rank == rank, "dependencies across ranks go through p2p or collectives");
    if (before.stream == stream) continue;  // implied by stream order
    dep_run[dep_count++] = dep;
  }
  deps_.truncate(first_dep + dep_count);
  const size_t first_use = uses_.size();
  TensorUse* const use_run = uses_.extend(uses.size());
  const auto tensors = static_cast<TensorId>(tensors_.size());
  for (size_t i = 0; i < uses.size(); ++i) {
    STRATA_ASSERT(uses[i].tensor() < tensors, "a tensor must be added before a task uses it");
    use_run[i] = uses[i];
  }
  Task& task = tasks_.emplace_back();
  task.rank = rank;
  task.stream = stream;
  task.first_dep = static_cast<uint32_t>(first_dep);
  task.dep_count = static_cast<uint32_t>(dep_count);
  task.first_use = static_cast<uint32_t>(first_use);
  task.use_count = static_cast<uint16_t>(uses.size());
  return task;
}

int32_t TaskGraph::add_shape(const TensorShape& shape) {
  const auto [found, added] = shape_index_.try_emplace(shape, static_cast<int32_t>(shapes_.size()));
  if (added) {
    shapes_.push_back(shape);
    shape_bytes_.push_back(shape.bytes());
  }
  return found->second;
}

uint8_t TaskGraph::add_tensor_name(const std::string& name) {
  if (const auto found = tensor_name_index_.find(name); found != tensor_name_index_.end())
    return found->second;
  STRATA_ASSERT(tensor_names_.size() < 256, "a graph names fewer than 256 kinds of tensor");
  const auto index = static_cast<uint8_t>(tensor_names_.size());
  tensor_names_.push_back(name);
  tensor_name_index_.emplace(name, index);
  return index;
}

int32_t TaskGraph::add_op(const OpShape& op) {
  ops_.push_back(op);
  return static_cast<int32_t>(ops_.size() - 1);
}

int32_t TaskGraph::add_group(GroupKind kind, std::vector<int32_t> ranks) {
  auto key = std::make_pair(kind, ranks);
  if (const auto found = group_index_.find(key); found != group_index_.end()) return found->second;
  const auto index = static_cast<int32_t>(groups_.size());
  groups_.push_back({kind, std::move(ranks)});
  group_index_.emplace(std::move(key), index);
  return index;
}

int16_t TaskGraph::add_bucket(const ParamBucket& bucket) {
  if (const auto found = bucket_index_.find(bucket); found != bucket_index_.end())
    return found->second;
  STRATA_ASSERT(buckets_.size() < 32767, "a graph holds fewer than 32767 distinct buckets");
  const auto index = static_cast<int16_t>(buckets_.size());
  buckets_.push_back(bucket);
  bucket_index_.emplace(bucket, index);
  return index;
}

void TaskGraph::set_op(TaskId id, int32_t op) {
  STRATA_ASSERT(op >= 0 && op < static_cast<int32_t>(ops_.size()),
                "set_op names an op of the graph");
  tasks_[static_cast<size_t>(id)].op = op;
}

std::span<const TaskId> TaskGraph::deps(TaskId id) const {
  const Task& t = task(id);
  return {deps_.data() + t.first_dep, t.dep_count};
}

std::span<const TensorUse> TaskGraph::uses(TaskId id) const {
  const Task& t = task(id);
  return {uses_.data() + t.first_use, t.use_count};
}

void TaskGraph::set_random_stream(TaskId id, int32_t stream) {
  Task& t = tasks_[static_cast<size_t>(id)];
  STRATA_ASSERT(t.kind == TaskKind::kCompute && stream >= 1,
                "a random stream (>= 1) is a compute task's");
  t.tag = stream;
}

namespace {

// A matrix's content hash for interning: FNV-1a's 64-bit offset basis and prime over the values'
// lengths and values, each value mixed whole (a fixed function, not std::hash, so that the table
// is the same on every platform).
uint64_t content_hash(std::span<const int64_t> values) {
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t hash = 14695981039346656037ULL;
  hash = (hash ^ values.size()) * kPrime;
  for (const int64_t value : values) hash = (hash ^ static_cast<uint64_t>(value)) * kPrime;
  return hash;
}

}  // namespace

void TaskGraph::set_peer_bytes(TaskId id, std::span<const int64_t> matrix) {
  Task& t = tasks_[static_cast<size_t>(id)];
  STRATA_ASSERT(t.kind == TaskKind::kCollective && t.collective == CollectiveKind::kAllToAll,
                "a traffic matrix is an all-to-all's");
  const std::vector<int32_t>& members = group(t.group).ranks;
  const size_t n = members.size();
  STRATA_ASSERT(matrix.size() == n * n,
                fmt::format("an all-to-all over {} members carries a {} x {} matrix, got {} values",
                            n, n, n, matrix.size()));
  const auto self = std::lower_bound(members.begin(), members.end(), t.rank);
  STRATA_ASSERT(self != members.end() && *self == t.rank,
                "an all-to-all's rank is a member of its group (its row of the matrix)");
  for (const int64_t b : matrix) {
    STRATA_ASSERT(b >= 0, "an all-to-all sends 0 or more bytes to each member");
  }
  // Interning: the index of an equal matrix already held, else the matrix appended.
  std::vector<int32_t>& same_hash = matrix_index_[content_hash(matrix)];
  int32_t index = -1;
  for (const int32_t k : same_hash) {
    const auto first =
        peer_bytes_.begin() + static_cast<ptrdiff_t>(matrix_starts_[static_cast<size_t>(k)]);
    const auto last =
        peer_bytes_.begin() + static_cast<ptrdiff_t>(matrix_starts_[static_cast<size_t>(k) + 1]);
    if (std::equal(first, last, matrix.begin(), matrix.end())) {
      index = k;
      break;
    }
  }
  if (index < 0) {
    STRATA_ASSERT(peer_bytes_count() < INT32_MAX - 1, "a graph holds fewer than 2^31 matrices");
    index = static_cast<int32_t>(peer_bytes_count());
    peer_bytes_.insert(peer_bytes_.end(), matrix.begin(), matrix.end());
    matrix_starts_.push_back(peer_bytes_.size());
    same_hash.push_back(index);
  }
  t.tag = index + 1;
  const auto row = static_cast<size_t>(self - members.begin()) * n;
  t.bytes = 0;
  for (size_t j = 0; j < n; ++j) t.bytes += matrix[row + j];
}

int32_t TaskGraph::peer_bytes_index(TaskId id) const {
  const Task& t = task(id);
  if (t.kind != TaskKind::kCollective || t.collective != CollectiveKind::kAllToAll) return -1;
  return t.tag - 1;
}

std::span<const int64_t> TaskGraph::peer_bytes(TaskId id) const {
  const int32_t index = peer_bytes_index(id);
  if (index < 0) return {};
  const size_t first = matrix_starts_[static_cast<size_t>(index)];
  return {peer_bytes_.data() + first, matrix_starts_[static_cast<size_t>(index) + 1] - first};
}

void TaskGraph::reserve(int64_t tasks, int64_t deps, int64_t uses, int64_t tensors) {
  tasks_.reserve(static_cast<size_t>(tasks));
  deps_.reserve(static_cast<size_t>(deps));
  uses_.reserve(static_cast<size_t>(uses));
  tensors_.reserve(static_cast<size_t>(tensors));
}

int64_t TaskGraph::footprint_bytes() const {
  int64_t bytes = static_cast<int64_t>(
      tasks_.capacity() * sizeof(Task) + deps_.capacity() * sizeof(TaskId) +
      uses_.capacity() * sizeof(TensorUse) + tensors_.capacity() * sizeof(Tensor) +
      peer_bytes_.capacity() * sizeof(int64_t) + matrix_starts_.capacity() * sizeof(size_t) +
      shapes_.capacity() * sizeof(TensorShape) + shape_bytes_.capacity() * sizeof(int64_t) +
      ops_.capacity() * sizeof(OpShape));
  // The matrices' index: its buckets, and per entry a node (key, value, next pointer) and the
  // indices it lists.
  bytes += static_cast<int64_t>(matrix_index_.bucket_count() * sizeof(void*));
  for (const auto& [hash, indices] : matrix_index_) {
    bytes += static_cast<int64_t>(sizeof(void*) + sizeof(hash) + sizeof(indices) +
                                  indices.capacity() * sizeof(int32_t));
  }
  for (const auto& group : groups_) {
    bytes += static_cast<int64_t>(sizeof(CommGroup) + 2 * group.ranks.capacity() * sizeof(int32_t));
  }
  return bytes;
}

const char* to_string(Stream stream) {
  switch (stream) {
    case Stream::kCompute:
      return "compute";
    case Stream::kTpComm:
      return "tp-comm";
    case Stream::kDpComm:
      return "dp-comm";
    case Stream::kPpSend:
      return "pp-send";
    case Stream::kPpRecv:
      return "pp-recv";
    case Stream::kHost:
      return "host";
    case Stream::kBackground:
      return "background";
    case Stream::kCpComm:
      return "cp-comm";
  }
  return "?";
}

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "fwd";
    case Phase::kBackward:
      return "bwd";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

const char* to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::kCompute:
      return "compute";
    case TaskKind::kCollective:
      return "collective";
    case TaskKind::kP2p:
      return "p2p";
    case TaskKind::kMemory:
      return "memory";
    case TaskKind::kCopy:
      return "copy";
  }
  return "?";
}

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all-reduce";
    case CollectiveKind::kReduceScatter:
      return "reduce-scatter";
    case CollectiveKind::kAllGather:
      return "all-gather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllToAll:
      return "all-to-all";
    case CollectiveKind::kRingExchange:
      return "ring-exchange";
  }
  return "?";
}

const char* to_string(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kCp:
      return "cp";
    case GroupKind::kEp:
      return "ep";
    case GroupKind::kTpEp:
      return "tp-ep";
    case GroupKind::kExpertTp:
      return "expert-tp";
    case GroupKind::kDp:
      return "dp";
    case GroupKind::kExpertDp:
      return "expert-dp";
    case GroupKind::kEmbedding:
      return "embedding";
    case GroupKind::kModelParallel:
      return "model-parallel";
    case GroupKind::kWorld:
      return "world";
    case GroupKind::kStage:
      return "stage";
  }
  return "?";
}

AxisMask group_axes(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
      return axes_mask({Axis::kTp, Axis::kTpOuter});
    case GroupKind::kCp:
      return axis_bit(Axis::kCp);
    case GroupKind::kEp:
      return axes_mask({Axis::kTpOuter, Axis::kEp});
    case GroupKind::kTpEp:
      return axes_mask({Axis::kTp, Axis::kTpOuter, Axis::kEp});
    case GroupKind::kExpertTp:
      return axis_bit(Axis::kTp);
    case GroupKind::kDp:
      return axes_mask({Axis::kCp, Axis::kEp, Axis::kDp});
    case GroupKind::kExpertDp:
      return axes_mask({Axis::kCp, Axis::kDp});
    case GroupKind::kEmbedding:
      return axis_bit(Axis::kPp);
    case GroupKind::kModelParallel:
      return axes_mask({Axis::kTp, Axis::kTpOuter, Axis::kEp, Axis::kPp});
    case GroupKind::kWorld:
      return kEveryAxis;
    case GroupKind::kStage:
      return kReplicaAxes;
  }
  return 0;
}

Axis reported_axis(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
    case GroupKind::kExpertTp:
      return Axis::kTp;
    case GroupKind::kCp:
      return Axis::kCp;
    case GroupKind::kEp:
    case GroupKind::kTpEp:
      return Axis::kEp;
    case GroupKind::kDp:
    case GroupKind::kExpertDp:
    case GroupKind::kEmbedding:
    case GroupKind::kModelParallel:
    case GroupKind::kWorld:
    case GroupKind::kStage:
      return Axis::kDp;
  }
  return Axis::kDp;
}

Axis comm_axis(const TaskGraph& graph, const Task& task) {
  if (task.kind == TaskKind::kCollective) return reported_axis(graph.group(task.group).kind);
  if (task.kind == TaskKind::kP2p) {
    const PerAxis self = graph.axes().coords(task.rank);
    const PerAxis peer = graph.axes().coords(task.peer);
    for (const Axis axis : kAllAxes) {
      if (at(self, axis) != at(peer, axis)) return axis;
    }
  }
  return Axis::kDp;
}

const char* to_string(BufferClass buffer) {
  switch (buffer) {
    case BufferClass::kActivations:
      return "activations";
    case BufferClass::kLayerInput:
      return "layer_input";
    case BufferClass::kAttentionScores:
      return "attention_scores";
    case BufferClass::kHeadActivations:
      return "head_activations";
    case BufferClass::kPipelineBuffer:
      return "pipeline_buffer";
    case BufferClass::kGatheredParams:
      return "gathered_params";
  }
  return "?";
}

const char* to_string(TaskRole role) {
  switch (role) {
    case TaskRole::kNorm1:
      return "norm1";
    case TaskRole::kQkv:
      return "qkv";
    case TaskRole::kAttention:
      return "attention";
    case TaskRole::kAttnOut:
      return "attn_out";
    case TaskRole::kAttnResidual:
      return "attn_residual";
    case TaskRole::kNorm2:
      return "norm2";
    case TaskRole::kMlpUp:
      return "mlp_up";
    case TaskRole::kMlpAct:
      return "mlp_act";
    case TaskRole::kMlpDown:
      return "mlp_down";
    case TaskRole::kMlpResidual:
      return "mlp_residual";
    case TaskRole::kRotary:
      return "rotary";
    case TaskRole::kQkNorm:
      return "qk_norm";
    case TaskRole::kPostNorm:
      return "post_norm";
    case TaskRole::kEmbedding:
      return "embedding";
    case TaskRole::kFinalNorm:
      return "final_norm";
    case TaskRole::kLmHead:
      return "lm_head";
    case TaskRole::kLoss:
      return "loss";
    case TaskRole::kPipeActivation:
      return "activation";
    case TaskRole::kPipeGradient:
      return "gradient";
    case TaskRole::kGradSync:
      return "grad_sync";
    case TaskRole::kParamGather:
      return "param_gather";
    case TaskRole::kEmbeddingGradSync:
      return "embedding_grad_sync";
    case TaskRole::kSequenceParallelGradSync:
      return "sp_grad_sync";
    case TaskRole::kGradNorm:
      return "grad_norm";
    case TaskRole::kOptimizer:
      return "optimizer";
    case TaskRole::kLayerBuffer:
      return "buffer";
    case TaskRole::kFp8Cast:
      return "fp8_cast";
    case TaskRole::kAmaxReduce:
      return "amax_reduce";
    case TaskRole::kHostDispatch:
      return "host_dispatch";
    case TaskRole::kGradToHost:
      return "grad_to_host";
    case TaskRole::kParamsToDevice:
      return "params_to_device";
    case TaskRole::kRouter:
      return "router";
    case TaskRole::kMoePermute:
      return "moe_permute";
    case TaskRole::kMoeDispatch:
      return "moe_dispatch";
    case TaskRole::kExpertUp:
      return "expert_up";
    case TaskRole::kExpertAct:
      return "expert_act";
    case TaskRole::kExpertDown:
      return "expert_down";
    case TaskRole::kSharedExpert:
      return "shared_expert";
  }
  return "?";
}

const char* to_string(GraphMode mode) { return mode == GraphMode::kFolded ? "folded" : "full"; }

std::vector<TaskId> stream_predecessors(const TaskGraph& graph) {
  std::vector<TaskId> previous(static_cast<size_t>(graph.size()), -1);
  std::map<std::pair<int32_t, Stream>, TaskId> last_on_stream;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    auto [slot, fresh] = last_on_stream.try_emplace({t.rank, t.stream}, id);
    if (!fresh) {
      previous[static_cast<size_t>(id)] = slot->second;
      slot->second = id;
    }
  }
  return previous;
}

std::vector<TaskId> program_predecessors(const TaskGraph& graph) {
  std::vector<TaskId> previous(static_cast<size_t>(graph.size()), -1);
  std::map<int32_t, TaskId> last_on_rank;
  for (TaskId id = 0; id < graph.size(); ++id) {
    auto [slot, fresh] = last_on_rank.try_emplace(graph.task(id).rank, id);
    if (!fresh) {
      previous[static_cast<size_t>(id)] = slot->second;
      slot->second = id;
    }
  }
  return previous;
}

std::string task_name(const TaskGraph& graph, const Task& task) {
  std::string name = to_string(task.phase);
  if (task.layer >= 0) name += fmt::format(" L{}", task.layer);
  if (task.micro_batch >= 0) name += fmt::format(" mb{}", task.micro_batch);
  name += fmt::format(" {}", to_string(task.role));
  switch (task.kind) {
    case TaskKind::kCompute:
      break;
    case TaskKind::kCollective:
      name += fmt::format(" {} {}", to_string(graph.group(task.group).kind),
                          to_string(task.collective));
      break;
    case TaskKind::kP2p:
      name +=
          fmt::format(" {} r{}", task.p2p == P2pKind::kSend ? "send to" : "recv from", task.peer);
      break;
    case TaskKind::kMemory:
      name += fmt::format(" {} {}", task.memory == MemoryAction::kAlloc ? "alloc" : "free",
                          to_string(task.buffer));
      break;
    case TaskKind::kCopy:
      name += task.copy == CopyDirection::kToHost ? " to host" : " to device";
      break;
  }
  return name;
}

std::string tensor_name(const TaskGraph& graph, const Tensor& tensor) {
  std::string name;
  if (tensor.layer >= 0) name += fmt::format("L{} ", tensor.layer);
  if (tensor.micro_batch >= 0) name += fmt::format("mb{} ", tensor.micro_batch);
  name += graph.tensor_name(tensor.name);
  switch (tensor.kind) {
    case TensorKind::kParameter:
      break;
    case TensorKind::kGradient:
      name += " grad";
      break;
    case TensorKind::kOptimizerState:
      name += " optimizer";
      break;
    case TensorKind::kActivation:
    case TensorKind::kCommBuffer:
    case TensorKind::kScratch:
      if (tensor.index >= 0) name += fmt::format("#{}", tensor.index);
      break;
  }
  return name;
}

}  // namespace strata
