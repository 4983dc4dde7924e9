#include "plan/host_dispatch.hpp"

#include "common/error.hpp"

namespace strata {

HostDispatchCosts host_dispatch_costs(HostDispatch dispatch) {
  switch (dispatch) {
    case HostDispatch::kEager:
      return {8'000, 15'000};
    case HostDispatch::kCompiled:
      return {3'000, 15'000};
    case HostDispatch::kCudaGraphs:
      return {500, 1'000};
    case HostDispatch::kNative:
      return {2'000, 5'000};
    case HostDispatch::kNone:
      return {0, 0};
  }
  return {};
}

HostDispatchBlock HostDispatchBlocks::begin(RankProgram& program) {
  const TaskId task = program.host_block();
  program.block_next_compute_on(task);
  return {task, program.launches()};
}

void HostDispatchBlocks::end(const RankProgram& program, const HostDispatchBlock& block) {
  const RankProgram::Launches& now = program.launches();
  const std::array<int64_t, 2> counts{now.kernels - block.before.kernels,
                                      now.calls - block.before.calls};
  auto [found, added] = ops_.try_emplace(counts, -1);
  if (added) {
    found->second = graph_.add_op(
        host_dispatch_op(counts[0], counts[1], costs_.ns_per_kernel, costs_.ns_per_call));
  }
  graph_.set_op(block.task, found->second);
}

}  // namespace strata
