// The validator's tensor checks (plan/graph_validator.hpp): each data hazard and lifetime error
// planted in a small hand-made program of one rank is found, naming the tensor and the two tasks,
// and the same program with the dependency that orders it validates. The facts are the
// definitions of the hazards between concurrent streams (a GPU runs its streams concurrently;
// only dependencies and stream order order them).

#include <catch2/catch.hpp>

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

// One rank with a 64-byte activation `x`, a parameter `w`, a dp group of itself and rank 1 (which
// the folded graph does not hold), and one op (0) that its compute tasks run.
struct OneRank {
  OneRank() : graph(GraphMode::kFolded, axes()), p(graph, 0) {
    graph.add_rank({0, 0});
    graph.add_op(OpShape{});
    group = graph.add_group(GroupKind::kDp, {0, 1});
    const int32_t shape = graph.add_shape({{16, 1, 1, 1}, DType::kFp32});
    x = p.tensor(TensorKind::kActivation, graph.add_tensor_name("x"), shape, 0, 0);
    w = p.tensor(TensorKind::kParameter, graph.add_tensor_name("w"), shape, 0, -1);
    grad = p.tensor(TensorKind::kGradient, graph.add_tensor_name("w"), shape, 0, -1);
  }
  static ParallelAxes axes() {
    ParallelAxes a;
    at(a.sizes, Axis::kDp) = 2;
    return a;
  }
  // A collective on the dp-comm stream using `uses`, after `deps`.
  TaskId reduce(std::initializer_list<TaskId> deps, std::initializer_list<TensorUse> uses) {
    return p.collective(TaskRole::kGradSync, Stream::kDpComm, CollectiveKind::kAllReduce, group, 64,
                        deps, uses);
  }
  ValidationReport validate() const { return validate_graph(graph); }

  TaskGraph graph;
  RankProgram p;
  int32_t group = -1;
  TensorId x = kNoTensor, w = kNoTensor, grad = kNoTensor;
};

TEST_CASE("a read on another stream after a write needs a dependency (read-after-write)",
          "[validator][tensors]") {
  for (const bool ordered : {false, true}) {
    OneRank r;
    const TaskId produce = r.p.compute(TaskRole::kMlpDown, 0, {}, {read(r.w), write(r.x)});
    r.reduce({ordered ? produce : kNoTask}, {read(r.x)});
    const ValidationReport report = r.validate();
    INFO(ordered);
    CHECK(mentions(report, "read-after-write on tensor 'L0 mb0 x'") == !ordered);
    if (ordered) CHECK(report.ok());
  }
}

// The issue's example: a reduce-scatter on the dp stream reads gradients that the next
// micro-batch's backward updates on the compute stream.
TEST_CASE("a write on another stream after a read needs a dependency (write-after-read)",
          "[validator][tensors]") {
  for (const bool ordered : {false, true}) {
    OneRank r;
    const TaskId backward = r.p.compute(TaskRole::kMlpDown, 0, {}, {update(r.grad)});
    const TaskId reduce = r.reduce({backward}, {read(r.grad)});
    r.p.compute(TaskRole::kMlpDown, 0, {ordered ? reduce : kNoTask}, {update(r.grad)});
    const ValidationReport report = r.validate();
    INFO(ordered);
    CHECK(mentions(report, "write-after-read on tensor 'L0 w grad'") == !ordered);
    if (ordered) CHECK(report.ok());
  }
}

TEST_CASE("two writes on different streams need a dependency (write-after-write)",
          "[validator][tensors]") {
  for (const bool ordered : {false, true}) {
    OneRank r;
    const TaskId first = r.p.compute(TaskRole::kMlpDown, 0, {}, {write(r.x)});
    r.reduce({ordered ? first : kNoTask}, {write(r.x)});
    const ValidationReport report = r.validate();
    INFO(ordered);
    CHECK(mentions(report, "write-after-write on tensor 'L0 mb0 x'") == !ordered);
    if (ordered) CHECK(report.ok());
  }
}

TEST_CASE("uses on one stream are ordered by the stream itself", "[validator][tensors]") {
  OneRank r;
  r.p.compute(TaskRole::kMlpDown, 0, {}, {write(r.x)});
  r.p.compute(TaskRole::kMlpAct, 0, {}, {read(r.x)});
  r.p.compute(TaskRole::kMlpDown, 0, {}, {update(r.x)});
  CHECK(r.validate().ok());
}

TEST_CASE("an order through a third task is an order", "[validator][tensors]") {
  OneRank r;
  const TaskId produce = r.p.compute(TaskRole::kMlpDown, 0, {}, {write(r.x)});
  const TaskId middle = r.reduce({produce}, {});
  r.p.send(TaskRole::kPipeActivation, 1, 0, 64, {middle}, {read(r.x)});
  RankProgram(r.graph, 1).recv(TaskRole::kPipeActivation, 0, 0, 64);
  const ValidationReport report = r.validate();
  CHECK(!mentions(report, "on tensor"));
  // The middle task and the receive move no data of theirs here: the check that every task with
  // device work names its tensors finds them.
  CHECK(mentions(report, "'fwd grad_sync dp all-reduce' names no tensor it uses"));
}

TEST_CASE("a tensor read before any task wrote it is found", "[validator][tensors]") {
  OneRank r;
  r.p.compute(TaskRole::kMlpAct, 0, {}, {read(r.x), read(r.w), update(r.grad)});
  const ValidationReport report = r.validate();
  // Parameters and gradients hold their values from before the step; an activation does not.
  CHECK(mentions(report, "reads tensor 'L0 mb0 x' before any task wrote it"));
  CHECK(report.errors.size() == 1);
}

TEST_CASE("tensors are used only while allocated, and every allocation is freed",
          "[validator][tensors]") {
  const TensorId tensors[] = {0};
  SECTION("use after free") {
    OneRank r;
    r.p.alloc(Stream::kCompute, BufferClass::kActivations, tensors);
    r.p.compute(TaskRole::kMlpDown, 0, {}, {write(r.x)});
    r.p.release(Stream::kCompute, BufferClass::kActivations, tensors);
    r.p.compute(TaskRole::kMlpAct, 0, {}, {read(r.x)});
    CHECK(mentions(r.validate(), "uses tensor 'L0 mb0 x' while it is not allocated"));
  }
  SECTION("read of a fresh allocation") {
    OneRank r;
    r.p.alloc(Stream::kCompute, BufferClass::kActivations, tensors);
    r.p.compute(TaskRole::kMlpAct, 0, {}, {read(r.x)});
    r.p.release(Stream::kCompute, BufferClass::kActivations, tensors);
    CHECK(mentions(r.validate(), "reads tensor 'L0 mb0 x' before any task wrote it"));
  }
  SECTION("leak and double allocation") {
    OneRank r;
    r.p.alloc(Stream::kCompute, BufferClass::kActivations, tensors);
    r.p.alloc(Stream::kCompute, BufferClass::kActivations, tensors);
    const ValidationReport report = r.validate();
    CHECK(mentions(report, "allocates tensor 'L0 mb0 x', which is allocated already"));
    CHECK(mentions(report, "tensor 'L0 mb0 x' is still allocated at the end of the step"));
  }
  SECTION("a free on another stream before a use there ends") {
    OneRank r;
    r.p.alloc(Stream::kCompute, BufferClass::kPipelineBuffer, tensors);
    const TaskId fill = r.p.compute(TaskRole::kMlpDown, 0, {}, {write(r.x)});
    r.p.send(TaskRole::kPipeActivation, 1, 0, 64, {fill}, {read(r.x)});
    RankProgram(r.graph, 1).recv(TaskRole::kPipeActivation, 0, 0, 64);
    r.p.release(Stream::kCompute, BufferClass::kPipelineBuffer, tensors);
    CHECK(mentions(r.validate(), "write-after-read on tensor 'L0 mb0 x'"));
  }
  SECTION("a memory task's bytes are its tensors'") {
    OneRank r;
    r.p.alloc(Stream::kCompute, BufferClass::kActivations, tensors);
    r.p.compute(TaskRole::kMlpDown, 0, {}, {write(r.x)});
    r.p.release(Stream::kCompute, BufferClass::kActivations, tensors);
    CHECK(r.graph.task(0).bytes == 64);
    CHECK(r.validate().ok());
  }
}

TEST_CASE("a task uses only its own rank's tensors", "[validator][tensors]") {
  OneRank r;
  RankProgram(r.graph, 1).compute(TaskRole::kMlpAct, 0, {}, {read(r.w)});
  CHECK(mentions(r.validate(), "uses tensor 'L0 w' of r0"));
}

}  // namespace
}  // namespace strata

namespace strata {

// An all-to-all states its instance's traffic matrix, n x n over its group in the group's order
// (expert parallelism's dispatch sends each expert's tokens to its rank, so the sizes differ per
// pair): the task's bytes are its own member's row summed, the JSON export lists the matrix, and
// the validator refuses an all-to-all without one.
TEST_CASE("an all-to-all carries its instance's traffic matrix", "[validator][tensors]") {
  OneRank r;
  const TaskId produce = r.p.compute(TaskRole::kMlpUp, 0, {}, {write(r.x)});
  const TaskId a2a = r.p.collective(TaskRole::kGradSync, Stream::kDpComm, CollectiveKind::kAllToAll,
                                    r.group, 0, {produce}, {update(r.x)});
  r.p.compute(TaskRole::kMlpUp, 0, {a2a}, {read(r.x)});
  CHECK(mentions(r.validate(), "states no traffic matrix"));
  // Rank 0 (member 0) keeps 16 and sends 48 to rank 1; rank 1 sends 32 and keeps 32.
  const std::vector<int64_t> matrix{16, 48, 32, 32};
  r.graph.set_peer_bytes(a2a, matrix);
  CHECK(r.graph.task(a2a).bytes == 64);
  const std::span<const int64_t> stored = r.graph.peer_bytes(a2a);
  CHECK(std::vector<int64_t>(stored.begin(), stored.end()) == matrix);
  CHECK(!mentions(r.validate(), "traffic matrix"));
  CHECK(graph_to_json(r.graph).find(R"("peer_bytes":[16,48,32,32])") != std::string::npos);
}

}  // namespace strata
