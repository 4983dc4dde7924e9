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

TaskId HostDispatchBlocks::begin(RankProgram& program) {
  const TaskId block = program.host_block();
  program.block_next_compute_on(block);
  return block;
}

void HostDispatchBlocks::end(RankProgram& program, TaskId block) {
  std::array<int64_t, 2> counts{};
  const auto end = static_cast<TaskId>(graph_.size());
  for (TaskId id = block + 1; id < end; ++id) {
    const Task& t = graph_.task(id);
    if (t.rank != program.rank()) continue;
    if (t.kind == TaskKind::kCompute && t.stream != Stream::kHost &&
        t.role != TaskRole::kHostDispatch) {
      counts[0] += graph_.op(t.op).kernels;
    }
    if (t.kind == TaskKind::kCollective || t.kind == TaskKind::kP2p || t.kind == TaskKind::kCopy)
      ++counts[1];
  }
  auto [found, added] = ops_.try_emplace(counts, -1);
  if (added) {
    found->second = graph_.add_op(
        host_dispatch_op(counts[0], counts[1], costs_.ns_per_kernel, costs_.ns_per_call));
  }
  graph_.set_op(block, found->second);
}

}  // namespace strata
