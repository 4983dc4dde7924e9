#pragma once
// The task graph's invariants (docs/design.md), checked after lowering:
//  - every send has exactly one recv with the same sender, receiver, tag and bytes;
//  - every collective is complete: each member of its group that is in the graph (every member,
//    in a full graph) runs the same sequence of collectives on that group, kind and bytes alike;
//  - memory never negative: on each rank, in program order, no buffer class is released beyond
//    what was allocated, and nothing is left allocated at the end of the step;
//  - tensors (plan/tensor.hpp): on each rank, in program order, every two uses of a tensor on
//    different streams where either writes it are ordered by dependencies and stream order (no
//    read-after-write, write-after-read or write-after-write hazard: the streams of a GPU run
//    concurrently); no tensor is read before it is written or used while not allocated; every
//    tensor allocated is freed by the end of the step; a memory task's bytes are its tensors';
//    every task but the host threads' names the tensors it uses (once the graph has tensors);
//  - acyclic, and so free of deadlock: with each send merged with its recv and each collective
//    instance's member tasks merged into one node (they run together), the graph of dependencies
//    and stream order has a topological order (Boost.Graph's topological_sort).

#include <string>
#include <vector>

#include "plan/task_graph.hpp"

namespace strata {

struct ValidationReport {
  std::vector<std::string> errors;  // empty when the graph is valid; at most a few per check
  std::vector<TaskId> topological_order;

  bool ok() const { return errors.empty(); }
};

ValidationReport validate_graph(const TaskGraph& graph);

}  // namespace strata
