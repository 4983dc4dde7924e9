#include "plan/graph_validator.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>

namespace strata {

namespace {

constexpr size_t kMaxErrorsPerCheck = 5;

void report(std::vector<std::string>& errors, size_t& count, std::string message) {
  if (count++ < kMaxErrorsPerCheck) errors.push_back(std::move(message));
}

// Union-find over task ids: tasks that must run together become one node.
class TaskUnion {
 public:
  explicit TaskUnion(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  TaskId find(TaskId x) {
    while (parent_[static_cast<size_t>(x)] != x) {
      parent_[static_cast<size_t>(x)] =
          parent_[static_cast<size_t>(parent_[static_cast<size_t>(x)])];
      x = parent_[static_cast<size_t>(x)];
    }
    return x;
  }
  void merge(TaskId a, TaskId b) {
    a = find(a);
    b = find(b);
    if (a != b) parent_[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
  }

 private:
  std::vector<TaskId> parent_;
};

void check_p2p(const TaskGraph& graph, TaskUnion& together, std::vector<std::string>& errors) {
  // (sender, receiver, tag) -> sends and recvs with that key.
  std::map<std::tuple<int32_t, int32_t, int32_t>,
           std::pair<std::vector<TaskId>, std::vector<TaskId>>>
      messages;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind != TaskKind::kP2p) continue;
    if (t.p2p == P2pKind::kSend) {
      messages[{t.rank, t.peer, t.tag}].first.push_back(id);
    } else {
      messages[{t.peer, t.rank, t.tag}].second.push_back(id);
    }
  }
  size_t count = 0;
  for (const auto& [key, tasks] : messages) {
    const auto& [sends, recvs] = tasks;
    const auto [sender, receiver, tag] = key;
    if (sends.size() != 1 || recvs.size() != 1) {
      report(errors, count,
             fmt::format("p2p r{} -> r{} tag {}: {} send(s) and {} recv(s), expected one each",
                         sender, receiver, tag, sends.size(), recvs.size()));
      continue;
    }
    if (graph.task(sends[0]).bytes != graph.task(recvs[0]).bytes) {
      report(errors, count,
             fmt::format("p2p r{} -> r{} tag {}: send of {} bytes, recv of {} bytes", sender,
                         receiver, tag, graph.task(sends[0]).bytes, graph.task(recvs[0]).bytes));
    }
    together.merge(sends[0], recvs[0]);
  }
}

void check_collectives(const TaskGraph& graph, TaskUnion& together,
                       std::vector<std::string>& errors) {
  std::set<int32_t> present;
  for (const GraphRank& r : graph.ranks()) present.insert(r.rank);
  // group -> rank -> its collectives on that group, in program order.
  std::vector<std::map<int32_t, std::vector<TaskId>>> calls(graph.groups().size());
  size_t count = 0;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind != TaskKind::kCollective) continue;
    const auto& members = graph.group(t.group).ranks;
    if (!std::binary_search(members.begin(), members.end(), t.rank)) {
      report(errors, count,
             fmt::format("{} on r{} is not a member of its group", task_name(graph, t), t.rank));
      continue;
    }
    calls[static_cast<size_t>(t.group)][t.rank].push_back(id);
  }
  for (size_t g = 0; g < calls.size(); ++g) {
    const CommGroup& group = graph.groups()[g];
    std::vector<int32_t> expected;
    for (const int32_t rank : group.ranks) {
      if (graph.mode() == GraphMode::kFull || present.count(rank) > 0) expected.push_back(rank);
    }
    const auto& first = calls[g][expected.front()];
    for (const int32_t rank : expected) {
      const auto& mine = calls[g][rank];
      if (mine.size() != first.size()) {
        report(errors, count,
               fmt::format("{} group of r{}: r{} runs {} collectives on it, r{} runs {}",
                           to_string(group.kind), group.ranks.front(), rank, mine.size(),
                           expected.front(), first.size()));
        continue;
      }
      for (size_t i = 0; i < mine.size(); ++i) {
        const Task& a = graph.task(first[i]);
        const Task& b = graph.task(mine[i]);
        if (a.collective != b.collective || a.bytes != b.bytes) {
          report(errors, count,
                 fmt::format("{} group of r{}: collective {} differs: r{} runs {}, r{} runs {}",
                             to_string(group.kind), group.ranks.front(), i, expected.front(),
                             task_name(graph, a), rank, task_name(graph, b)));
          break;
        }
        together.merge(first[i], mine[i]);
      }
    }
  }
}

void check_memory(const TaskGraph& graph, std::vector<std::string>& errors) {
  std::map<std::pair<int32_t, BufferClass>, int64_t> live;  // (rank, class) -> bytes
  size_t count = 0;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    if (t.kind != TaskKind::kMemory) continue;
    int64_t& bytes = live[{t.rank, t.buffer}];
    bytes += t.memory == MemoryAction::kAlloc ? t.bytes : -t.bytes;
    if (bytes < 0) {
      report(errors, count,
             fmt::format("r{}: {} releases more {} than is allocated", t.rank, task_name(graph, t),
                         to_string(t.buffer)));
      bytes = 0;
    }
  }
  for (const auto& [key, bytes] : live) {
    if (bytes != 0) {
      report(errors, count,
             fmt::format("r{}: {} bytes of {} still allocated at the end of the step", key.first,
                         bytes, to_string(key.second)));
    }
  }
}

void check_acyclic(const TaskGraph& graph, TaskUnion& together, ValidationReport& report_out) {
  const auto n = static_cast<size_t>(graph.size());
  // Dense node numbers for the merged nodes.
  std::vector<int32_t> node_of(n);
  std::vector<int32_t> root_node(n, -1);
  int32_t nodes = 0;
  for (TaskId id = 0; id < graph.size(); ++id) {
    const TaskId root = together.find(id);
    if (root_node[static_cast<size_t>(root)] < 0) root_node[static_cast<size_t>(root)] = nodes++;
    node_of[static_cast<size_t>(id)] = root_node[static_cast<size_t>(root)];
  }
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph dag(static_cast<size_t>(nodes));
  const std::vector<TaskId> previous = stream_predecessors(graph);
  const auto edge = [&](TaskId from, TaskId to) {
    const int32_t a = node_of[static_cast<size_t>(from)];
    const int32_t b = node_of[static_cast<size_t>(to)];
    if (a != b) boost::add_edge(static_cast<size_t>(a), static_cast<size_t>(b), dag);
  };
  for (TaskId id = 0; id < graph.size(); ++id) {
    for (const TaskId dep : graph.deps(id)) edge(dep, id);
    if (const TaskId before = previous[static_cast<size_t>(id)]; before >= 0) edge(before, id);
  }
  std::vector<size_t> reversed;
  reversed.reserve(static_cast<size_t>(nodes));
  try {
    boost::topological_sort(dag, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    report_out.errors.push_back(
        "the graph has a cycle once sends meet their recvs and collectives run together: the "
        "schedule would deadlock");
    return;
  }
  // Expand merged nodes back into tasks, in topological order of the nodes.
  std::vector<int32_t> position(static_cast<size_t>(nodes));
  for (size_t i = 0; i < reversed.size(); ++i) {
    position[reversed[i]] = static_cast<int32_t>(reversed.size() - 1 - i);
  }
  auto& order = report_out.topological_order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](TaskId a, TaskId b) {
    return position[static_cast<size_t>(node_of[static_cast<size_t>(a)])] <
           position[static_cast<size_t>(node_of[static_cast<size_t>(b)])];
  });
}

}  // namespace

ValidationReport validate_graph(const TaskGraph& graph) {
  ValidationReport report_out;
  TaskUnion together(static_cast<size_t>(graph.size()));
  check_p2p(graph, together, report_out.errors);
  check_collectives(graph, together, report_out.errors);
  check_memory(graph, report_out.errors);
  check_acyclic(graph, together, report_out);
  return report_out;
}

}  // namespace strata
