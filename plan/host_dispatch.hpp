#pragma once
// The host thread as a resource of the task graph. A framework's Python (or C++) thread issues
// every kernel and communication call of a rank; the GPU runs them in order, so a block of work
// cannot start before the host has issued it. Each block (a layer's forward, backward or
// recompute; the work of a pass around its layers; the optimizer step) is one task on the rank's
// host stream, in program order, taking the block's kernels x the cost per kernel plus its calls
// x the cost per call; the block's first compute waits for it. While the GPU is the slower, the
// host runs ahead and costs nothing; a small model, a small micro-batch or a fine TP split makes
// the host the slower, and the GPU then waits block by block, as it does in practice.
//
// Costs per kernel and per communication call, by dispatch mode (assumptions of the order the
// sources give, until a GPU profile measures them):
//  - eager (PyTorch eager, Megatron-LM, DeepSpeed, FSDP2 without compile): 8 us per kernel. Eager
//    PyTorch runs about 280,000 tiny ops a second (He 2022, "Making Deep Learning Go Brrrr From
//    First Principles": ~3.6 us of framework overhead per op); a Strata compute task stands for
//    about two framework ops (Megatron-Core's layer launches ~14 kernels forward for its 11 tasks,
//    besides shape ops) and one CUDA launch (~2 us of host time). 15 us per torch.distributed
//    call (ProcessGroupNCCL records and waits on events and launches NCCL);
//  - compiled (torch.compile): 3 us per kernel (its generated wrapper launches without Python per
//    op), 15 us per call;
//  - cuda-graphs (Megatron's --enable-cuda-graph, TE's make_graphed_callables): 0.5 us per kernel
//    and 1 us per call (a replayed graph launches them; the host issues one graph per block);
//  - native (a C++/CUDA program such as llm.c): the CUDA launch alone, 2 us per kernel, 5 us per
//    NCCL call.

#include <array>
#include <cstdint>
#include <map>

#include "plan/parallel_plan.hpp"
#include "plan/rank_program.hpp"

namespace strata {

struct HostDispatchCosts {
  int64_t ns_per_kernel = 0;
  int64_t ns_per_call = 0;
};
HostDispatchCosts host_dispatch_costs(HostDispatch dispatch);

// An open host-dispatch block: its task, and what the rank had issued when it opened.
struct HostDispatchBlock {
  TaskId task = kNoTask;
  RankProgram::Launches before;
};

// Emits host blocks into one graph, sharing their ops (a handful of distinct counts).
class HostDispatchBlocks {
 public:
  HostDispatchBlocks(TaskGraph& graph, HostDispatch dispatch)
      : graph_(graph), costs_(host_dispatch_costs(dispatch)) {}

  // Opens a block on `program`'s host stream: the next compute waits for it.
  HostDispatchBlock begin(RankProgram& program);
  // Closes it: its op counts the kernels (compute tasks) and calls (collectives, p2p and copies)
  // emitted on `program` since begin() (RankProgram::launches).
  void end(const RankProgram& program, const HostDispatchBlock& block);

 private:
  TaskGraph& graph_;
  HostDispatchCosts costs_;
  std::map<std::array<int64_t, 2>, int32_t> ops_;
};

}  // namespace strata
