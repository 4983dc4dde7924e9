#include "plan/rank_program.hpp"

#include "common/error.hpp"

namespace strata {

RankProgram::Appended RankProgram::append(std::span<const TaskId> deps,
                                          std::span<const TensorUse> uses, TaskKind kind,
                                          Stream stream, TaskRole role) {
  const TaskId id = static_cast<TaskId>(graph_.size());
  Task& task = graph_.emplace(deps, uses, rank_, stream);
  task.kind = kind;
  task.phase = phase_;
  task.role = role;
  task.chunk = chunk_;
  task.layer = layer_;
  task.micro_batch = micro_batch_;
  return {id, task};
}

TaskId RankProgram::compute_task(std::span<const TaskId> deps, std::span<const TensorUse> uses,
                                 TaskRole role, int32_t op) {
  if (!blocked_on_.empty()) {
    // append copies the dependencies it keeps: the list is cleared after, keeping its storage.
    blocked_on_.insert(blocked_on_.end(), deps.begin(), deps.end());
    deps = blocked_on_;
  }
  STRATA_ASSERT(static_cast<size_t>(op) < graph_.ops().size(),
                "a compute task's op is one of the graph's");
  const auto [id, task] = append(deps, uses, TaskKind::kCompute, Stream::kCompute, role);
  task.op = op;
  if (role != TaskRole::kHostDispatch) launches_.kernels += graph_.op(op).kernels;
  blocked_on_.clear();
  last_compute_ = id;
  return id;
}

TaskId RankProgram::collective_task(std::span<const TaskId> deps, std::span<const TensorUse> uses,
                                    TaskRole role, Stream stream, CollectiveKind kind,
                                    int32_t group, int64_t bytes) {
  const auto [id, task] = append(deps, uses, TaskKind::kCollective, stream, role);
  ++launches_.calls;
  task.collective = kind;
  task.group = group;
  task.bytes = bytes;
  return id;
}

TaskId RankProgram::host_block() {
  return append({}, {}, TaskKind::kCompute, Stream::kHost, TaskRole::kHostDispatch).id;
}

TaskId RankProgram::host_compute(TaskRole role, int32_t op, std::span<const TaskId> deps) {
  const auto [id, task] = append(deps, {}, TaskKind::kCompute, Stream::kHost, role);
  task.op = op;
  return id;
}

TaskId RankProgram::background_wait(int32_t op, std::initializer_list<TaskId> deps) {
  const auto [id, task] = append(std::span<const TaskId>(deps.begin(), deps.size()), {},
                                 TaskKind::kCompute, Stream::kBackground, TaskRole::kHostDispatch);
  task.op = op;
  return id;
}

TaskId RankProgram::copy(TaskRole role, CopyDirection direction, int64_t bytes,
                         std::initializer_list<TaskId> deps, std::span<const TensorUse> uses) {
  const auto [id, task] = append(std::span<const TaskId>(deps.begin(), deps.size()), uses,
                                 TaskKind::kCopy, Stream::kDpComm, role);
  ++launches_.calls;
  task.copy = direction;
  task.bytes = bytes;
  return id;
}

TaskId RankProgram::bucket_collective(TaskRole role, CollectiveKind kind, int32_t group,
                                      int64_t bytes, int16_t bucket, std::span<const TaskId> deps,
                                      std::span<const TensorUse> uses) {
  const auto [id, task] = append(deps, uses, TaskKind::kCollective, Stream::kDpComm, role);
  ++launches_.calls;
  task.collective = kind;
  task.group = group;
  task.bytes = bytes;
  task.bucket = bucket;
  return id;
}

TaskId RankProgram::p2p(P2pKind kind, TaskRole role, int32_t peer, int32_t tag, int64_t bytes,
                        std::initializer_list<TaskId> deps, std::initializer_list<TensorUse> uses) {
  const auto [id, task] =
      append(std::span<const TaskId>(deps.begin(), deps.size()),
             std::span<const TensorUse>(uses.begin(), uses.size()), TaskKind::kP2p,
             kind == P2pKind::kSend ? Stream::kPpSend : Stream::kPpRecv, role);
  ++launches_.calls;
  task.p2p = kind;
  task.peer = peer;
  task.tag = tag;
  task.bytes = bytes;
  return id;
}

TaskId RankProgram::memory(MemoryAction action, Stream stream, BufferClass buffer, int64_t bytes,
                           std::initializer_list<TaskId> deps) {
  const auto [id, task] = append(std::span<const TaskId>(deps.begin(), deps.size()), {},
                                 TaskKind::kMemory, stream, TaskRole::kLayerBuffer);
  task.memory = action;
  task.buffer = buffer;
  task.bytes = bytes;
  return id;
}

TaskId RankProgram::memory(MemoryAction action, Stream stream, BufferClass buffer,
                           std::span<const TensorId> tensors, std::initializer_list<TaskId> deps) {
  int64_t bytes = 0;
  uses_scratch_.clear();
  for (const TensorId tensor : tensors) {
    bytes += graph_.bytes_of(tensor);
    uses_scratch_.emplace_back(tensor,
                               action == MemoryAction::kAlloc ? Access::kAlloc : Access::kFree);
  }
  const auto [id, task] = append(std::span<const TaskId>(deps.begin(), deps.size()), uses_scratch_,
                                 TaskKind::kMemory, stream, TaskRole::kLayerBuffer);
  task.memory = action;
  task.buffer = buffer;
  task.bytes = bytes;
  return id;
}

}  // namespace strata
