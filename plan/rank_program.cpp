#include "plan/rank_program.hpp"

#include "common/error.hpp"

namespace strata {

Task RankProgram::labeled(TaskKind kind, Stream stream, TaskRole role) const {
  Task task;
  task.rank = rank_;
  task.stream = stream;
  task.kind = kind;
  task.phase = phase_;
  task.role = role;
  task.chunk = chunk_;
  task.layer = layer_;
  task.micro_batch = micro_batch_;
  return task;
}

TensorId RankProgram::tensor(TensorKind kind, uint8_t name, int32_t shape, int32_t layer,
                             int32_t micro_batch, int16_t index) {
  Tensor tensor;
  tensor.rank = rank_;
  tensor.shape = shape;
  tensor.layer = layer;
  tensor.micro_batch = micro_batch;
  tensor.index = index;
  tensor.kind = kind;
  tensor.name = name;
  return graph_.add_tensor(tensor);
}

TaskId RankProgram::append(const Task& task, std::span<const TaskId> deps,
                           std::span<const TensorUse> uses) {
  scratch_.clear();
  for (const TaskId dep : deps) {
    if (dep == kNoTask) continue;
    const Task& before = graph_.task(dep);
    STRATA_ASSERT(before.rank == rank_, "dependencies across ranks go through p2p or collectives");
    if (before.stream == task.stream) continue;  // implied by stream order
    scratch_.push_back(dep);
  }
  return graph_.add(task, scratch_, uses);
}

TaskId RankProgram::compute(TaskRole role, int32_t op, std::initializer_list<TaskId> deps,
                            std::initializer_list<TensorUse> uses) {
  return compute(role, op, std::span<const TaskId>(deps.begin(), deps.size()),
                 std::span<const TensorUse>(uses.begin(), uses.size()));
}

TaskId RankProgram::compute(TaskRole role, int32_t op, std::span<const TaskId> deps,
                            std::span<const TensorUse> uses) {
  Task task = labeled(TaskKind::kCompute, Stream::kCompute, role);
  task.op = op;
  if (blocked_on_.empty()) {
    last_compute_ = append(task, deps, uses);
  } else {
    // append copies the dependencies it keeps: the list is cleared after, keeping its storage.
    blocked_on_.insert(blocked_on_.end(), deps.begin(), deps.end());
    last_compute_ = append(task, blocked_on_, uses);
    blocked_on_.clear();
  }
  return last_compute_;
}

TaskId RankProgram::collective(TaskRole role, Stream stream, CollectiveKind kind, int32_t group,
                               int64_t bytes, std::initializer_list<TaskId> deps,
                               std::initializer_list<TensorUse> uses) {
  return collective(role, stream, kind, group, bytes,
                    std::span<const TaskId>(deps.begin(), deps.size()),
                    std::span<const TensorUse>(uses.begin(), uses.size()));
}

TaskId RankProgram::collective(TaskRole role, Stream stream, CollectiveKind kind, int32_t group,
                               int64_t bytes, std::span<const TaskId> deps,
                               std::span<const TensorUse> uses) {
  Task task = labeled(TaskKind::kCollective, stream, role);
  task.collective = kind;
  task.group = group;
  task.bytes = bytes;
  return append(task, deps, uses);
}

TaskId RankProgram::host_block() {
  Task task = labeled(TaskKind::kCompute, Stream::kHost, TaskRole::kHostDispatch);
  return append(task, {});
}

TaskId RankProgram::host_compute(TaskRole role, int32_t op, std::span<const TaskId> deps) {
  Task task = labeled(TaskKind::kCompute, Stream::kHost, role);
  task.op = op;
  return append(task, deps);
}

TaskId RankProgram::background_wait(int32_t op, std::initializer_list<TaskId> deps) {
  Task task = labeled(TaskKind::kCompute, Stream::kBackground, TaskRole::kHostDispatch);
  task.op = op;
  return append(task, std::span<const TaskId>(deps.begin(), deps.size()));
}

TaskId RankProgram::copy(TaskRole role, CopyDirection direction, int64_t bytes,
                         std::initializer_list<TaskId> deps, std::span<const TensorUse> uses) {
  Task task = labeled(TaskKind::kCopy, Stream::kDpComm, role);
  task.copy = direction;
  task.bytes = bytes;
  return append(task, deps, uses);
}

TaskId RankProgram::bucket_collective(TaskRole role, CollectiveKind kind, int32_t group,
                                      int64_t bytes, int16_t bucket, std::span<const TaskId> deps,
                                      std::span<const TensorUse> uses) {
  Task task = labeled(TaskKind::kCollective, Stream::kDpComm, role);
  task.collective = kind;
  task.group = group;
  task.bytes = bytes;
  task.bucket = bucket;
  return append(task, deps, uses);
}

TaskId RankProgram::p2p(P2pKind kind, TaskRole role, int32_t peer, int32_t tag, int64_t bytes,
                        std::initializer_list<TaskId> deps, std::initializer_list<TensorUse> uses) {
  Task task =
      labeled(TaskKind::kP2p, kind == P2pKind::kSend ? Stream::kPpSend : Stream::kPpRecv, role);
  task.p2p = kind;
  task.peer = peer;
  task.tag = tag;
  task.bytes = bytes;
  return append(task, deps, std::span<const TensorUse>(uses.begin(), uses.size()));
}

TaskId RankProgram::memory(MemoryAction action, Stream stream, BufferClass buffer, int64_t bytes,
                           std::initializer_list<TaskId> deps) {
  Task task = labeled(TaskKind::kMemory, stream, TaskRole::kLayerBuffer);
  task.memory = action;
  task.buffer = buffer;
  task.bytes = bytes;
  return append(task, deps);
}

TaskId RankProgram::memory(MemoryAction action, Stream stream, BufferClass buffer,
                           std::span<const TensorId> tensors, std::initializer_list<TaskId> deps) {
  Task task = labeled(TaskKind::kMemory, stream, TaskRole::kLayerBuffer);
  task.memory = action;
  task.buffer = buffer;
  uses_scratch_.clear();
  for (const TensorId tensor : tensors) {
    task.bytes += graph_.shape_of(tensor).bytes();
    uses_scratch_.emplace_back(tensor,
                               action == MemoryAction::kAlloc ? Access::kAlloc : Access::kFree);
  }
  return append(task, deps, uses_scratch_);
}

}  // namespace strata
