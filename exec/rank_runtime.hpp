#pragma once
// RankRuntime: runs one rank's part of the full task graph, task by task, as a program
// (docs/design.md, "Executor"). The runtime interprets the graph: each task names the tensors it
// reads, writes, allocates and frees (plan/tensor.hpp), and the runtime runs a compute task's
// kernel (by its op's kind, function and direction) on those tensors, a collective or a p2p on
// the tensors it names, and a memory task by allocating or freeing them. It knows nothing of
// roles, layers or schedules: which buffers are reused and when memory is freed is the graph's
// decision. Parameters, their gathered copies and gradients live in the ParamStore, which
// initializes, checkpoints and updates them; the runtime binds the graph's tensors to them.
//
// Tasks are issued in id order, which is a topological order of the rank's program. Each task
// goes to its stream, after waiting on the events of its dependencies on other streams; on the
// CPU backend the calls run at once, so the order is the program's. Collectives and receives
// block until their peers arrive, and sends are buffered: every rank of a group reaches the
// group's i-th collective, and the schedules post receives in an order their senders meet, so
// issuing in id order never deadlocks (the simulator runs the same graph).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "exec/data_loader.hpp"
#include "exec/param_store.hpp"
#include "plan/compile.hpp"

namespace strata {

struct OptimizerConfig {
  cpu::AdamWConfig adamw;
  double clip_grad_norm = 1.0;  // <= 0: no clipping
};

// One task as measured, in wall-clock nanoseconds from the step's origin (run_step):
//  - start and finish: when the runtime issued it and when the call returned;
//  - transfer: when its data began to move (a collective's last member arrived, a received
//    message was sent; Communicator::first_transfer_ns), or its start where that is unknown or
//    earlier (a compute, a send, MPI); the time before it is the rank waiting for its peers;
//  - cpu: the CPU time this rank's thread spent in it (CLOCK_THREAD_CPUTIME_ID), so that
//    finish - start - cpu is the time the thread waited: blocked on a peer, or runnable while
//    other ranks held the host's cores.
struct MeasuredTask {
  TaskId task = -1;
  int64_t start_ns = 0;
  int64_t transfer_ns = 0;
  int64_t finish_ns = 0;
  int64_t cpu_ns = 0;
};

struct StepMeasurement {
  double loss_sum = 0;              // summed token losses on this rank (last stage, tp rank 0)
  int64_t loss_tokens = 0;          // tokens behind loss_sum
  double grad_norm = 0;             // the global gradient norm before clipping
  std::vector<MeasuredTask> tasks;  // this rank's tasks in id order
};

class RankRuntime {
 public:
  RankRuntime(const CompiledPlan& compiled, int32_t rank, Backend& backend, Communicator& comm,
              const TextDataset& data, const OptimizerConfig& optimizer, uint64_t seed);
  ~RankRuntime();

  // Runs step `step` (0-based) of the run: every task of this rank once. Measured times count
  // from `origin_ns` on std::chrono::steady_clock (ranks given one origin share one time line),
  // or from this call where it is negative.
  StepMeasurement run_step(int64_t step, int64_t origin_ns = -1);

  ParamStore& params() { return *params_; }
  int32_t rank() const { return rank_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<ParamStore> params_;
  int32_t rank_;
};

}  // namespace strata
