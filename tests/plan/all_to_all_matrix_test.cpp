// An all-to-all's traffic matrix in the task graph (plan/task_graph.hpp, set_peer_bytes): n x n
// over the group in its rank order, matrix[i * n + j] what member i sends to member j; interned
// (equal matrices share one copy); each task's bytes its own member's row sum; the validator
// refuses members of one instance that carry different matrices; the JSON export lists it
// (plan/graph_export.hpp). The graphs are built by hand: the plan compiler emits no all-to-all
// yet.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "plan/graph_export.hpp"
#include "plan/graph_validator.hpp"
#include "plan/rank_program.hpp"

namespace strata {
namespace {

bool mentions(const ValidationReport& report, const std::string& text) {
  for (const auto& error : report.errors) {
    if (error.find(text) != std::string::npos) return true;
  }
  return false;
}

// A full graph of `ep` ranks, one expert-parallel group of them all.
struct EpGraph {
  explicit EpGraph(int64_t ep) : graph(GraphMode::kFull, axes(ep)) {
    std::vector<int32_t> ranks;
    for (int32_t rank = 0; rank < ep; ++rank) {
      graph.add_rank({rank, 0});
      ranks.push_back(rank);
    }
    group = graph.add_group(GroupKind::kEp, ranks);
  }
  static ParallelAxes axes(int64_t ep) {
    ParallelAxes a;
    at(a.sizes, Axis::kEp) = ep;
    return a;
  }
  // Rank `rank`'s next all-to-all on the group, carrying `matrix` (none when empty).
  TaskId all_to_all(int32_t rank, const std::vector<int64_t>& matrix) {
    const TaskId id =
        RankProgram(graph, rank)
            .collective(TaskRole::kMlpUp, Stream::kTpComm, CollectiveKind::kAllToAll, group, 0);
    if (!matrix.empty()) graph.set_peer_bytes(id, matrix);
    return id;
  }

  TaskGraph graph;
  int32_t group = -1;
};

// 4 members; member 0 is a hot expert's rank: every other member sends it 3 x 10 bytes and 10 to
// each other member, member 0 sends 10 to each; each keeps 10.
const std::vector<int64_t> kHot{10, 10, 10, 10,  //
                                30, 10, 10, 10,  //
                                30, 10, 10, 10,  //
                                30, 10, 10, 10};

// Interning: tasks with equal matrices share one stored copy (the same index and the same
// storage); the footprint grows by the matrix once, not per task; a different matrix is stored
// apart. A task's bytes are its own row's sum (member 0: 40; the others: 60).
TEST_CASE("equal traffic matrices are stored once", "[graph][all-to-all]") {
  EpGraph g(4);
  g.graph.reserve(16, 0, 0, 0);
  std::vector<TaskId> ids;
  for (int32_t rank = 0; rank < 4; ++rank) ids.push_back(g.all_to_all(rank, {}));
  const TaskId other = g.all_to_all(0, {});
  CHECK(g.graph.peer_bytes(ids[0]).empty());
  CHECK(g.graph.peer_bytes_index(ids[0]) == -1);

  const int64_t before = g.graph.footprint_bytes();
  g.graph.set_peer_bytes(ids[0], kHot);
  const int64_t one = g.graph.footprint_bytes();
  for (size_t i = 1; i < ids.size(); ++i) g.graph.set_peer_bytes(ids[i], kHot);
  CHECK(g.graph.footprint_bytes() == one);
  CHECK(one - before >= static_cast<int64_t>(kHot.size() * sizeof(int64_t)));
  CHECK(g.graph.peer_bytes_count() == 1);
  for (const TaskId id : ids) {
    CHECK(g.graph.peer_bytes_index(id) == 0);
    CHECK(g.graph.peer_bytes(id).data() == g.graph.peer_bytes(ids[0]).data());
    CHECK(g.graph.peer_bytes(id).size() == 16);
  }
  CHECK(g.graph.task(ids[0]).bytes == 40);
  CHECK(g.graph.task(ids[1]).bytes == 60);
  CHECK(g.graph.task(ids[3]).bytes == 60);

  std::vector<int64_t> balanced(16, 10);
  g.graph.set_peer_bytes(other, balanced);
  CHECK(g.graph.peer_bytes_count() == 2);
  CHECK(g.graph.peer_bytes_index(other) == 1);
  CHECK(g.graph.footprint_bytes() - one >= static_cast<int64_t>(16 * sizeof(int64_t)));
  const std::span<const int64_t> stored = g.graph.peer_bytes(other);
  CHECK(std::vector<int64_t>(stored.begin(), stored.end()) == balanced);
  CHECK(g.graph.task(other).bytes == 40);
}

// The validator: one instance's members carry one matrix, whatever their own row sums (the hot
// matrix gives member 0 40 bytes and the others 60, and validates); a member with another matrix
// is refused, and so is a member without one.
TEST_CASE("an all-to-all instance's members carry one matrix", "[validator][all-to-all]") {
  {
    EpGraph g(4);
    for (int32_t rank = 0; rank < 4; ++rank) g.all_to_all(rank, kHot);
    const ValidationReport report = validate_graph(g.graph);
    INFO((report.errors.empty() ? std::string() : report.errors.front()));
    CHECK(report.ok());
  }
  {
    EpGraph g(4);
    std::vector<int64_t> other = kHot;
    other[4] = 20;  // member 1 sends member 0 20 bytes instead of 30
    for (int32_t rank = 0; rank < 4; ++rank) g.all_to_all(rank, rank == 2 ? other : kHot);
    const ValidationReport report = validate_graph(g.graph);
    CHECK(mentions(report, "ep group of r0: collective 0 differs"));
    CHECK(mentions(report, "with another traffic matrix"));
  }
  {
    EpGraph g(4);
    for (int32_t rank = 0; rank < 4; ++rank)
      g.all_to_all(rank, rank == 3 ? std::vector<int64_t>{} : kHot);
    CHECK(mentions(validate_graph(g.graph), "on r3 states no traffic matrix"));
  }
}

// The export: each member's task lists the whole matrix row-major as "peer_bytes" and its own
// row's sum as "bytes" (golden lines: member 0 keeps 1 and sends 2; member 1 sends 3, keeps 4).
TEST_CASE("the JSON export lists an all-to-all's matrix", "[export][all-to-all]") {
  EpGraph g(2);
  g.all_to_all(0, {1, 2, 3, 4});
  g.all_to_all(1, {1, 2, 3, 4});
  const std::string json = graph_to_json(g.graph);
  CHECK(json.find(R"({"kind":"ep","ranks":[0,1]})") != std::string::npos);
  CHECK(json.find(R"({"id":0,"rank":0,"stream":"tp-comm","kind":"collective","phase":"fwd",)"
                  R"("role":"mlp_up","layer":-1,"micro_batch":-1,"chunk":0,"deps":[],"uses":[],)"
                  R"("collective":"all-to-all","group":0,"bytes":3,"peer_bytes":[1,2,3,4]})") !=
        std::string::npos);
  CHECK(json.find(R"({"id":1,"rank":1,"stream":"tp-comm","kind":"collective","phase":"fwd",)"
                  R"("role":"mlp_up","layer":-1,"micro_batch":-1,"chunk":0,"deps":[],"uses":[],)"
                  R"("collective":"all-to-all","group":0,"bytes":7,"peer_bytes":[1,2,3,4]})") !=
        std::string::npos);
}

}  // namespace
}  // namespace strata
