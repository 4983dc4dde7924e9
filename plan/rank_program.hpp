#pragma once
// RankProgram appends one rank's tasks to a TaskGraph: it carries the current labels (phase,
// layer, micro-batch, chunk) and drops dependencies that stream order already implies, so the
// lowering code reads as the sequence of ops it emits. Each task may name the tensors it uses
// (plan/tensor.hpp), in the order its op kind defines.

#include <initializer_list>
#include <vector>

#include "plan/task_graph.hpp"

namespace strata {

class RankProgram {
 public:
  RankProgram(TaskGraph& graph, int32_t rank) : graph_(graph), rank_(rank) {}

  int32_t rank() const { return rank_; }
  TaskGraph& graph() { return graph_; }

  // Labels for the tasks that follow.
  void label(Phase phase, int32_t layer, int32_t micro_batch, int16_t chunk) {
    phase_ = phase;
    layer_ = layer;
    micro_batch_ = micro_batch;
    chunk_ = chunk;
  }
  void set_layer(int32_t layer) { layer_ = layer; }
  void set_phase(Phase phase) { phase_ = phase; }
  Phase phase() const { return phase_; }
  int32_t micro_batch() const { return micro_batch_; }
  int16_t chunk() const { return chunk_; }
  // The compute task appended last (kNoTask before the first).
  TaskId last_compute() const { return last_compute_; }
  // What the rank's host thread has issued so far: kernels (device compute tasks, by their ops'
  // kernel counts) and communication calls (collectives, p2p, copies). A host-dispatch block
  // (plan/host_dispatch.hpp) issues the difference across it.
  struct Launches {
    int64_t kernels = 0;
    int64_t calls = 0;
  };
  const Launches& launches() const { return launches_; }

  // A tensor of this rank.
  TensorId tensor(TensorKind kind, uint8_t name, int32_t shape, int32_t layer, int32_t micro_batch,
                  int16_t index = -1) {
    Tensor& tensor = graph_.emplace_tensor(shape, name);
    tensor.rank = rank_;
    tensor.layer = layer;
    tensor.micro_batch = micro_batch;
    tensor.index = index;
    tensor.kind = kind;
    return static_cast<TensorId>(graph_.tensor_count() - 1);
  }

  // `deps` may hold kNoTask entries, which are ignored.
  TaskId compute(TaskRole role, int32_t op, std::initializer_list<TaskId> deps = {},
                 std::initializer_list<TensorUse> uses = {}) {
    return compute_task({deps.begin(), deps.size()}, {uses.begin(), uses.size()}, role, op);
  }
  TaskId compute(TaskRole role, int32_t op, std::span<const TaskId> deps,
                 std::span<const TensorUse> uses = {}) {
    return compute_task(deps, uses, role, op);
  }
  TaskId compute(TaskRole role, int32_t op, std::initializer_list<TaskId> deps,
                 std::span<const TensorUse> uses) {
    return compute_task({deps.begin(), deps.size()}, uses, role, op);
  }
  TaskId collective(TaskRole role, Stream stream, CollectiveKind kind, int32_t group, int64_t bytes,
                    std::initializer_list<TaskId> deps = {},
                    std::initializer_list<TensorUse> uses = {}) {
    return collective_task({deps.begin(), deps.size()}, {uses.begin(), uses.size()}, role, stream,
                           kind, group, bytes);
  }
  TaskId collective(TaskRole role, Stream stream, CollectiveKind kind, int32_t group, int64_t bytes,
                    std::span<const TaskId> deps, std::span<const TensorUse> uses = {}) {
    return collective_task(deps, uses, role, stream, kind, group, bytes);
  }
  TaskId collective(TaskRole role, Stream stream, CollectiveKind kind, int32_t group, int64_t bytes,
                    std::initializer_list<TaskId> deps, std::span<const TensorUse> uses) {
    return collective_task({deps.begin(), deps.size()}, uses, role, stream, kind, group, bytes);
  }
  // A data-parallel collective of a parameter bucket (graph().buckets()), on the dp-comm stream.
  TaskId bucket_collective(TaskRole role, CollectiveKind kind, int32_t group, int64_t bytes,
                           int16_t bucket, std::span<const TaskId> deps,
                           std::span<const TensorUse> uses = {});
  // A host-dispatch task on the host stream, its op to be named (plan/host_dispatch.hpp).
  TaskId host_block();
  // Work the host CPU runs itself (the offloaded optimizer step), on the host stream.
  TaskId host_compute(TaskRole role, int32_t op, std::span<const TaskId> deps);
  // A wait of the thread that launches data-parallel collectives (Horovod's background cycle): a
  // host-time op on the background stream, ahead of the collective it launches.
  TaskId background_wait(int32_t op, std::initializer_list<TaskId> deps);
  // A copy between the GPU and host memory (offload), on the dp-comm stream.
  TaskId copy(TaskRole role, CopyDirection direction, int64_t bytes,
              std::initializer_list<TaskId> deps = {}, std::span<const TensorUse> uses = {});
  // The next compute task also waits for `task` (communication the framework does not overlap:
  // the compute stream blocks on it).
  void block_next_compute_on(TaskId task) { blocked_on_.push_back(task); }
  TaskId send(TaskRole role, int32_t peer, int32_t tag, int64_t bytes,
              std::initializer_list<TaskId> deps = {}, std::initializer_list<TensorUse> uses = {}) {
    return p2p(P2pKind::kSend, role, peer, tag, bytes, deps, uses);
  }
  TaskId recv(TaskRole role, int32_t peer, int32_t tag, int64_t bytes,
              std::initializer_list<TaskId> deps = {}, std::initializer_list<TensorUse> uses = {}) {
    return p2p(P2pKind::kRecv, role, peer, tag, bytes, deps, uses);
  }
  // Allocates or frees `tensors` (a buffer class's), as many bytes as they hold.
  TaskId alloc(Stream stream, BufferClass buffer, std::span<const TensorId> tensors,
               std::initializer_list<TaskId> deps = {}) {
    return memory(MemoryAction::kAlloc, stream, buffer, tensors, deps);
  }
  TaskId release(Stream stream, BufferClass buffer, std::span<const TensorId> tensors,
                 std::initializer_list<TaskId> deps = {}) {
    return memory(MemoryAction::kFree, stream, buffer, tensors, deps);
  }
  TaskId alloc(Stream stream, BufferClass buffer, int64_t bytes,
               std::initializer_list<TaskId> deps = {}) {
    return memory(MemoryAction::kAlloc, stream, buffer, bytes, deps);
  }
  TaskId release(Stream stream, BufferClass buffer, int64_t bytes,
                 std::initializer_list<TaskId> deps = {}) {
    return memory(MemoryAction::kFree, stream, buffer, bytes, deps);
  }

 private:
  TaskId p2p(P2pKind kind, TaskRole role, int32_t peer, int32_t tag, int64_t bytes,
             std::initializer_list<TaskId> deps, std::initializer_list<TensorUse> uses);
  TaskId memory(MemoryAction action, Stream stream, BufferClass buffer, int64_t bytes,
                std::initializer_list<TaskId> deps);
  TaskId memory(MemoryAction action, Stream stream, BufferClass buffer,
                std::span<const TensorId> tensors, std::initializer_list<TaskId> deps);
  // Appends a task with the current labels, for the caller to fill in its kind's fields in place
  // (TaskGraph::emplace).
  struct Appended {
    TaskId id;
    Task& task;
  };
  // The spans come first here, in compute_task, collective_task and TaskGraph::emplace, so that
  // they are passed in registers: passed on the stack, a span stored as two 8-byte halves and
  // loaded whole waits for the stores to reach the cache (a store-forwarding stall, once per task).
  Appended append(std::span<const TaskId> deps, std::span<const TensorUse> uses, TaskKind kind,
                  Stream stream, TaskRole role);
  TaskId compute_task(std::span<const TaskId> deps, std::span<const TensorUse> uses, TaskRole role,
                      int32_t op);
  TaskId collective_task(std::span<const TaskId> deps, std::span<const TensorUse> uses,
                         TaskRole role, Stream stream, CollectiveKind kind, int32_t group,
                         int64_t bytes);

  TaskGraph& graph_;
  int32_t rank_;
  Phase phase_ = Phase::kForward;
  int32_t layer_ = -1;
  int32_t micro_batch_ = -1;
  int16_t chunk_ = 0;
  std::vector<TensorUse> uses_scratch_;
  std::vector<TaskId> blocked_on_;
  TaskId last_compute_ = kNoTask;
  Launches launches_;
};

}  // namespace strata
