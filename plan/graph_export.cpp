#include "plan/graph_export.hpp"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

namespace {

const char* direction_name(Direction direction) {
  return direction == Direction::kForward ? "fwd" : "bwd";
}

void append_task_json(std::string& out, const TaskGraph& graph, TaskId id) {
  const Task& t = graph.task(id);
  fmt::format_to(std::back_inserter(out),
                 R"({{"id":{},"rank":{},"stream":"{}","kind":"{}","phase":"{}","role":"{}",)"
                 R"("layer":{},"micro_batch":{},"chunk":{},"deps":[{}])",
                 id, t.rank, to_string(t.stream), to_string(t.kind), to_string(t.phase),
                 to_string(t.role), t.layer, t.micro_batch, t.chunk,
                 fmt::join(graph.deps(id), ","));
  out += R"(,"uses":[)";
  for (const TensorUse use : graph.uses(id)) {
    fmt::format_to(std::back_inserter(out), R"({}[{},"{}"])", out.back() == '[' ? "" : ",",
                   use.tensor(), to_string(use.access()));
  }
  out += ']';
  switch (t.kind) {
    case TaskKind::kCompute:
      fmt::format_to(std::back_inserter(out), R"(,"op":{})", t.op);
      if (graph.random_stream(id) > 0) {
        fmt::format_to(std::back_inserter(out), R"(,"random_stream":{})", graph.random_stream(id));
      }
      break;
    case TaskKind::kCollective:
      fmt::format_to(std::back_inserter(out), R"(,"collective":"{}","group":{},"bytes":{})",
                     to_string(t.collective), t.group, t.bytes);
      if (t.bucket >= 0) fmt::format_to(std::back_inserter(out), R"(,"bucket":{})", t.bucket);
      if (t.reduce == ReduceOp::kMax) out += R"(,"reduce":"max")";
      if (t.collective == CollectiveKind::kAllToAll) {
        fmt::format_to(std::back_inserter(out), R"(,"peer_bytes":[{}])",
                       fmt::join(graph.peer_bytes(id), ","));
      }
      break;
    case TaskKind::kP2p:
      fmt::format_to(std::back_inserter(out), R"(,"p2p":"{}","peer":{},"tag":{},"bytes":{})",
                     t.p2p == P2pKind::kSend ? "send" : "recv", t.peer, t.tag, t.bytes);
      break;
    case TaskKind::kMemory:
      fmt::format_to(std::back_inserter(out), R"(,"memory":"{}","buffer":"{}","bytes":{})",
                     t.memory == MemoryAction::kAlloc ? "alloc" : "free", to_string(t.buffer),
                     t.bytes);
      break;
    case TaskKind::kCopy:
      fmt::format_to(std::back_inserter(out), R"(,"copy":"{}","bytes":{})",
                     t.copy == CopyDirection::kToHost ? "to_host" : "to_device", t.bytes);
      break;
  }
  out += '}';
}

// The tensors a task uses, a line per access: "\nread: L0 mb0 x, L0 norm1_w".
std::string uses_label(const TaskGraph& graph, TaskId id) {
  std::string label;
  for (const Access access :
       {Access::kRead, Access::kWrite, Access::kUpdate, Access::kAlloc, Access::kFree}) {
    std::vector<std::string> names;
    for (const TensorUse use : graph.uses(id)) {
      if (use.access() == access) names.push_back(tensor_name(graph, graph.tensor(use.tensor())));
    }
    if (!names.empty())
      label += fmt::format("\\n{}: {}", to_string(access), fmt::join(names, ", "));
  }
  return label;
}

const char* dot_color(const Task& t) {
  switch (t.kind) {
    case TaskKind::kCompute:
      switch (t.phase) {
        case Phase::kForward:
          return "#9ecae1";
        case Phase::kBackward:
          return "#fdae6b";
        case Phase::kRecompute:
          return "#c7e9c0";
        case Phase::kOptimizer:
          return "#bcbddc";
      }
      return "white";
    case TaskKind::kCollective:
      return "#fb6a4a";
    case TaskKind::kP2p:
      return "#fee391";
    case TaskKind::kMemory:
      return "#eeeeee";
    case TaskKind::kCopy:
      return "#a1d99b";
  }
  return "white";
}

}  // namespace

std::string graph_to_json(const TaskGraph& graph) {
  std::string out;
  out.reserve(static_cast<size_t>(graph.size()) * 160 + 4096);
  const ParallelAxes& axes = graph.axes();
  fmt::format_to(
      std::back_inserter(out),
      R"({{"format":"strata-task-graph","version":2,"mode":"{}","dp":{},"tp":{},"pp":{},"cp":{},)"
      R"("ep":{},)",
      to_string(graph.mode()), axes.size(Axis::kDp), axes.tp(), axes.size(Axis::kPp),
      axes.size(Axis::kCp), axes.size(Axis::kEp) * axes.size(Axis::kTpOuter));
  if (axes.size(Axis::kTpOuter) > 1)
    fmt::format_to(std::back_inserter(out), R"("etp":{},)", axes.size(Axis::kTp));
  fmt::format_to(std::back_inserter(out), R"("rank_order":"{}",)", axes.order_text());
  out += "\n\"ranks\":[";
  for (size_t i = 0; i < graph.ranks().size(); ++i) {
    const GraphRank& r = graph.ranks()[i];
    fmt::format_to(std::back_inserter(out), R"({}{{"rank":{},"stage":{}}})", i ? "," : "", r.rank,
                   r.stage);
  }
  out += "],\n\"ops\":[";
  for (size_t i = 0; i < graph.ops().size(); ++i) {
    const OpShape& op = graph.ops()[i];
    fmt::format_to(
        std::back_inserter(out),
        R"({}{{"kind":"{}","function":"{}","direction":"{}","dtype":"{}","dims":[{}],"flops":{},)"
        R"("model_flops":{},"bytes":{})",
        i ? ",\n" : "\n", to_string(op.kind), to_string(op.function), direction_name(op.direction),
        to_string(op.dtype), fmt::join(op.dims, ","), op.flops, op.model_flops, op.bytes);
    if (op.window > 0) fmt::format_to(std::back_inserter(out), R"(,"window":{})", op.window);
    if (op.value_dim > 0)
      fmt::format_to(std::back_inserter(out), R"(,"value_dim":{})", op.value_dim);
    out += '}';
  }
  out += "],\n\"groups\":[";
  for (size_t i = 0; i < graph.groups().size(); ++i) {
    const CommGroup& g = graph.groups()[i];
    fmt::format_to(std::back_inserter(out), R"({}{{"kind":"{}","ranks":[{}]}})", i ? ",\n" : "\n",
                   to_string(g.kind), fmt::join(g.ranks, ","));
  }
  out += "],\n\"buckets\":[";
  for (size_t i = 0; i < graph.buckets().size(); ++i) {
    const ParamBucket& b = graph.buckets()[i];
    fmt::format_to(std::back_inserter(out),
                   R"({}{{"first_layer":{},"layers":{},"embedding":{},"head":{},"experts":{}}})",
                   i ? ",\n" : "\n", b.first_layer, b.layers, b.embedding, b.head, b.experts);
  }
  out += "],\n\"tensors\":[";
  for (TensorId id = 0; id < graph.tensor_count(); ++id) {
    const Tensor& t = graph.tensor(id);
    const TensorShape& shape = graph.shape(t.shape);
    fmt::format_to(std::back_inserter(out),
                   R"({}{{"id":{},"rank":{},"name":"{}","kind":"{}","dims":[{}],"dtype":"{}",)"
                   R"("bytes":{},"layer":{},"micro_batch":{},"index":{}}})",
                   id ? ",\n" : "\n", id, t.rank, tensor_name(graph, t), to_string(t.kind),
                   fmt::join(shape.dims, ","), to_string(shape.dtype), shape.bytes(), t.layer,
                   t.micro_batch, t.index);
  }
  out += "],\n\"tasks\":[";
  for (TaskId id = 0; id < graph.size(); ++id) {
    out += id ? ",\n" : "\n";
    append_task_json(out, graph, id);
  }
  out += "]}\n";
  return out;
}

std::string graph_to_dot(const TaskGraph& graph, const std::string& path) {
  if (graph.size() > kMaxDotTasks) {
    throw InputError(path, "--dot",
                     fmt::format("the graph has {} tasks; DOT output is for graphs of at most {}",
                                 graph.size(), kMaxDotTasks),
                     "use --graph folded, fewer layers or micro-batches, or --emit-graph for JSON");
  }
  std::string out =
      "digraph strata {\n  rankdir=LR;\n  node [shape=box, style=filled, fontsize=10];\n";
  std::map<int32_t, std::vector<TaskId>> by_rank;
  for (TaskId id = 0; id < graph.size(); ++id) by_rank[graph.task(id).rank].push_back(id);
  for (const auto& [rank, ids] : by_rank) {
    fmt::format_to(std::back_inserter(out), "  subgraph cluster_r{} {{\n    label=\"rank {}\";\n",
                   rank, rank);
    for (const TaskId id : ids) {
      const Task& t = graph.task(id);
      fmt::format_to(std::back_inserter(out), "    t{} [label=\"{}\\n{}{}\", fillcolor=\"{}\"];\n",
                     id, task_name(graph, t), to_string(t.stream), uses_label(graph, id),
                     dot_color(t));
    }
    out += "  }\n";
  }
  const std::vector<TaskId> previous = stream_predecessors(graph);
  std::map<std::tuple<int32_t, int32_t, int32_t>, TaskId> sends;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    for (const TaskId dep : graph.deps(id))
      fmt::format_to(std::back_inserter(out), "  t{} -> t{};\n", dep, id);
    if (const TaskId before = previous[static_cast<size_t>(id)]; before >= 0) {
      fmt::format_to(std::back_inserter(out), "  t{} -> t{} [color=gray, style=dotted];\n", before,
                     id);
    }
    if (t.kind == TaskKind::kP2p && t.p2p == P2pKind::kSend) sends[{t.rank, t.peer, t.tag}] = id;
  }
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind != TaskKind::kP2p || t.p2p != P2pKind::kRecv) continue;
    if (const auto found = sends.find({t.peer, t.rank, t.tag}); found != sends.end()) {
      fmt::format_to(std::back_inserter(out), "  t{} -> t{} [color=red, style=dashed];\n",
                     found->second, id);
    }
  }
  out += "}\n";
  return out;
}

}  // namespace strata
