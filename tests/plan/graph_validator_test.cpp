// The validator finds each broken invariant in a hand-made graph, and passes a correct one.

#include <catch2/catch.hpp>

#include "plan/graph_validator.hpp"
#include "plan/rank_program.hpp"

namespace strata {
namespace {

// Axes of `dp` data-parallel ranks and nothing else.
ParallelAxes dp_axes(int64_t dp) {
  ParallelAxes axes;
  at(axes.sizes, Axis::kDp) = dp;
  return axes;
}

bool mentions(const ValidationReport& report, const std::string& text) {
  for (const auto& error : report.errors) {
    if (error.find(text) != std::string::npos) return true;
  }
  return false;
}

// Two full ranks exchanging one message each way; `recv_first` posts each rank's recv before
// its send on the same stream order, which deadlocks when both do it.
TaskGraph exchange(bool both_recv_first) {
  TaskGraph graph(GraphMode::kFull, dp_axes(2));
  graph.add_rank({0, 0});
  graph.add_rank({1, 0});
  for (int32_t rank = 0; rank < 2; ++rank) {
    RankProgram p(graph, rank);
    const int32_t peer = 1 - rank;
    if (both_recv_first || rank == 0) {
      const TaskId got = p.recv(TaskRole::kPipeActivation, peer, 0, 64);
      p.send(TaskRole::kPipeActivation, peer, 0, 64, {got});
    } else {
      p.send(TaskRole::kPipeActivation, peer, 0, 64);
      p.recv(TaskRole::kPipeActivation, peer, 0, 64);
    }
  }
  return graph;
}

TEST_CASE("a correct exchange validates and has a topological order", "[validator]") {
  const TaskGraph graph = exchange(false);
  const ValidationReport report = validate_graph(graph);
  CHECK(report.ok());
  CHECK(report.topological_order.size() == static_cast<size_t>(graph.size()));
}

TEST_CASE("two ranks that each wait to receive before sending deadlock", "[validator]") {
  const ValidationReport report = validate_graph(exchange(true));
  CHECK(mentions(report, "cycle"));
}

TEST_CASE("a send without its recv, and mismatched bytes, are found", "[validator]") {
  TaskGraph graph(GraphMode::kFull, dp_axes(2));
  graph.add_rank({0, 0});
  graph.add_rank({1, 0});
  RankProgram r0(graph, 0);
  RankProgram r1(graph, 1);
  r0.send(TaskRole::kPipeActivation, 1, 7, 64);
  r0.send(TaskRole::kPipeActivation, 1, 8, 64);
  r1.recv(TaskRole::kPipeActivation, 0, 8, 32);
  const ValidationReport report = validate_graph(graph);
  CHECK(mentions(report, "tag 7: 1 send(s) and 0 recv(s)"));
  CHECK(mentions(report, "send of 64 bytes, recv of 32 bytes"));
}

TEST_CASE("a collective missing on one member is found", "[validator]") {
  TaskGraph graph(GraphMode::kFull, dp_axes(2));
  graph.add_rank({0, 0});
  graph.add_rank({1, 0});
  const int32_t group = graph.add_group(GroupKind::kDp, {0, 1});
  RankProgram r0(graph, 0);
  RankProgram r1(graph, 1);
  r0.collective(TaskRole::kGradSync, Stream::kDpComm, CollectiveKind::kAllReduce, group, 100);
  r0.collective(TaskRole::kGradSync, Stream::kDpComm, CollectiveKind::kAllReduce, group, 100);
  r1.collective(TaskRole::kGradSync, Stream::kDpComm, CollectiveKind::kAllReduce, group, 100);
  CHECK(mentions(validate_graph(graph), "r1 runs 1 collectives on it, r0 runs 2"));
}

TEST_CASE("collectives that differ in kind between members are found", "[validator]") {
  TaskGraph graph(GraphMode::kFull, dp_axes(2));
  graph.add_rank({0, 0});
  graph.add_rank({1, 0});
  const int32_t group = graph.add_group(GroupKind::kDp, {0, 1});
  RankProgram(graph, 0).collective(TaskRole::kGradSync, Stream::kDpComm, CollectiveKind::kAllReduce,
                                   group, 100);
  RankProgram(graph, 1).collective(TaskRole::kGradSync, Stream::kDpComm,
                                   CollectiveKind::kReduceScatter, group, 100);
  CHECK(mentions(validate_graph(graph), "differs"));
}

TEST_CASE("releasing more than was allocated, or leaking, is found", "[validator]") {
  TaskGraph graph(GraphMode::kFolded, dp_axes(1));
  graph.add_rank({0, 0});
  RankProgram p(graph, 0);
  p.alloc(Stream::kCompute, BufferClass::kActivations, 100);
  p.release(Stream::kCompute, BufferClass::kActivations, 150);
  p.alloc(Stream::kCompute, BufferClass::kHeadActivations, 10);
  const ValidationReport report = validate_graph(graph);
  CHECK(mentions(report, "releases more activations than is allocated"));
  CHECK(mentions(report, "10 bytes of head_activations still allocated"));
}

}  // namespace
}  // namespace strata
