#include "plan/graph_validator.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>

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
    // A matrix, once set, is n x n over the group (TaskGraph::set_peer_bytes asserts it).
    if (t.collective == CollectiveKind::kAllToAll && graph.peer_bytes(id).empty()) {
      report(errors, count,
             fmt::format("{} on r{} states no traffic matrix (per-peer bytes)", task_name(graph, t),
                         t.rank));
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
        // An all-to-all's members send different amounts (load imbalance): each task's bytes are
        // its own row of the instance's matrix, which every member carries alike (interned
        // matrices are equal exactly when their indices are).
        const bool all_to_all = a.collective == CollectiveKind::kAllToAll;
        const bool same_kind = a.collective == b.collective;
        const bool same_size =
            all_to_all ? graph.peer_bytes_index(first[i]) == graph.peer_bytes_index(mine[i])
                       : a.bytes == b.bytes;
        if (!same_kind || !same_size) {
          report(errors, count,
                 fmt::format("{} group of r{}: collective {} differs: r{} runs {}, r{} runs {}{}",
                             to_string(group.kind), group.ranks.front(), i, expected.front(),
                             task_name(graph, a), rank, task_name(graph, b),
                             same_kind && all_to_all ? " with another traffic matrix" : ""));
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

// Per task, the position on each of its rank's streams up to which that stream's tasks happen
// before it (or are it): a vector clock over the rank's streams, from its dependencies and stream
// order. Task a on stream s at position p happens before task b when clock(b)[s] >= p.
using StreamClock = std::array<int32_t, kStreamCount>;

std::vector<StreamClock> stream_clocks(const TaskGraph& graph, std::vector<int32_t>& position) {
  const auto n = static_cast<size_t>(graph.size());
  std::vector<StreamClock> clocks(n);
  position.assign(n, 0);
  int32_t ranks = 0;
  for (const Task& t : graph.tasks()) ranks = std::max(ranks, t.rank + 1);
  std::vector<StreamClock> next_position(static_cast<size_t>(ranks));  // by rank, per stream
  const std::vector<TaskId> previous = stream_predecessors(graph);
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    StreamClock clock;
    clock.fill(-1);
    const auto join = [&](TaskId before) {
      const StreamClock& other = clocks[static_cast<size_t>(before)];
      for (int s = 0; s < kStreamCount; ++s) clock[s] = std::max(clock[s], other[s]);
    };
    if (const TaskId before = previous[static_cast<size_t>(id)]; before >= 0) join(before);
    for (const TaskId dep : graph.deps(id)) {
      if (graph.task(dep).rank == t.rank) join(dep);
    }
    StreamClock& next = next_position[static_cast<size_t>(t.rank)];
    const auto stream = static_cast<size_t>(t.stream);
    position[static_cast<size_t>(id)] = next[stream]++;
    clock[stream] = position[static_cast<size_t>(id)];
    clocks[static_cast<size_t>(id)] = clock;
  }
  return clocks;
}

// Data hazards and tensor lifetimes. Tasks of one rank use its tensors in id order, the order of
// its program; two uses on different streams must then be ordered by dependencies and stream
// order when either writes (read-after-write, write-after-read, write-after-write). An
// allocation and a free count as writes, so a use must follow the allocation and precede the
// free. A tensor is read only once written: one that no memory task allocates and that holds a
// parameter, a gradient or an optimizer state is written before the step; any other tensor only
// by a task of the step. Allocated tensors are used only while allocated and are all freed by the
// end of the step; a memory task's bytes are its tensors'.
void check_tensors(const TaskGraph& graph, std::vector<std::string>& errors) {
  size_t count = 0;
  struct State {
    bool allocated_by_task = false;  // some memory task allocates it
    bool live = false;               // allocated now (or never allocated by a task)
    bool written = false;
    TaskId last_write = -1;
    StreamClock last_read;  // per stream, the position of the latest read since the last write
  };
  std::vector<State> states(static_cast<size_t>(graph.tensor_count()));
  for (TaskId id = 0; id < graph.size(); ++id) {
    for (const TensorUse use : graph.uses(id)) {
      if (use.access() == Access::kAlloc)
        states[static_cast<size_t>(use.tensor())].allocated_by_task = true;
    }
  }
  for (size_t i = 0; i < states.size(); ++i) {
    State& state = states[i];
    state.last_read.fill(-1);
    state.live = !state.allocated_by_task;
    const TensorKind kind = graph.tensors()[i].kind;
    state.written = !state.allocated_by_task &&
                    (kind == TensorKind::kParameter || kind == TensorKind::kGradient ||
                     kind == TensorKind::kOptimizerState);
  }
  std::vector<int32_t> position;
  const std::vector<StreamClock> clocks = stream_clocks(graph, position);
  const auto before = [&](TaskId a, TaskId b) {
    return clocks[static_cast<size_t>(b)][static_cast<size_t>(graph.task(a).stream)] >=
           position[static_cast<size_t>(a)];
  };
  const auto hazard = [&](const char* what, TaskId first, TaskId then, TensorId tensor) {
    const Task& a = graph.task(first);
    const Task& b = graph.task(then);
    report(errors, count,
           fmt::format("r{}: {} on tensor '{}': '{}' ({}) and '{}' ({}) have no dependency "
                       "ordering them",
                       b.rank, what, tensor_name(graph, graph.tensor(tensor)), task_name(graph, a),
                       to_string(a.stream), task_name(graph, b), to_string(b.stream)));
  };
  for (TaskId id = 0; id < graph.size(); ++id) {
    const Task& t = graph.task(id);
    int64_t memory_bytes = 0;
    for (const TensorUse use : graph.uses(id)) {
      const TensorId tensor = use.tensor();
      State& state = states[static_cast<size_t>(tensor)];
      const auto name = [&] { return tensor_name(graph, graph.tensor(tensor)); };
      if (graph.tensor(tensor).rank != t.rank) {
        report(errors, count,
               fmt::format("r{}: '{}' uses tensor '{}' of r{}", t.rank, task_name(graph, t), name(),
                           graph.tensor(tensor).rank));
        continue;
      }
      const Access access = use.access();
      if (access == Access::kAlloc || access == Access::kFree) {
        memory_bytes += graph.bytes_of(tensor);
        if (t.kind != TaskKind::kMemory) {
          report(errors, count,
                 fmt::format("r{}: '{}' {}s tensor '{}' but is not a memory task", t.rank,
                             task_name(graph, t), to_string(access), name()));
        }
        const bool alloc = access == Access::kAlloc;
        if (state.live == alloc) {
          report(errors, count,
                 fmt::format("r{}: '{}' {} tensor '{}', which is {}", t.rank, task_name(graph, t),
                             alloc ? "allocates" : "frees", name(),
                             alloc ? "allocated already" : "not allocated"));
        }
        state.live = alloc;
        if (alloc) state.written = false;
      } else if (!state.live) {
        report(errors, count,
               fmt::format("r{}: '{}' uses tensor '{}' while it is not allocated", t.rank,
                           task_name(graph, t), name()));
      }
      if (use.reads() && !state.written) {
        report(errors, count,
               fmt::format("r{}: '{}' reads tensor '{}' before any task wrote it", t.rank,
                           task_name(graph, t), name()));
      }
      // Ordering against the uses before this one.
      if (state.last_write >= 0 && !before(state.last_write, id)) {
        hazard(use.writes() || !use.reads() ? "write-after-write" : "read-after-write",
               state.last_write, id, tensor);
      }
      if (use.reads() && !use.writes()) {
        int32_t& latest = state.last_read[static_cast<size_t>(t.stream)];
        latest = std::max(latest, position[static_cast<size_t>(id)]);
        continue;
      }
      for (int s = 0; s < kStreamCount; ++s) {
        const int32_t read_at = state.last_read[static_cast<size_t>(s)];
        if (read_at >= 0 && s != static_cast<int>(t.stream) &&
            clocks[static_cast<size_t>(id)][static_cast<size_t>(s)] < read_at) {
          report(errors, count,
                 fmt::format("r{}: write-after-read on tensor '{}': '{}' ({}) writes it with no "
                             "dependency after its read on the {} stream",
                             t.rank, name(), task_name(graph, t), to_string(t.stream),
                             to_string(static_cast<Stream>(s))));
        }
      }
      state.last_read.fill(-1);
      state.last_write = id;
      if (use.writes()) state.written = true;
    }
    // Every task with device work names its data, once the graph has tensors at all: all but the
    // host threads' (dispatch, Horovod's cycle, an offloaded optimizer step).
    const bool device_work = t.stream != Stream::kHost && t.stream != Stream::kBackground;
    if (t.use_count == 0 && device_work && graph.tensor_count() > 0) {
      report(errors, count,
             fmt::format("r{}: '{}' names no tensor it uses", t.rank, task_name(graph, t)));
    }
    if (t.kind == TaskKind::kMemory && t.use_count > 0 && memory_bytes != t.bytes) {
      report(errors, count,
             fmt::format("r{}: '{}' moves {} bytes, but its tensors hold {}", t.rank,
                         task_name(graph, t), t.bytes, memory_bytes));
    }
  }
  for (size_t i = 0; i < states.size(); ++i) {
    if (states[i].allocated_by_task && states[i].live) {
      report(errors, count,
             fmt::format("r{}: tensor '{}' is still allocated at the end of the step",
                         graph.tensors()[i].rank, tensor_name(graph, graph.tensors()[i])));
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
  // The merged nodes' edges as a CSR, each node's in the order added (every task's deps, then
  // its stream predecessor, by task id); an edge inside a node is dropped.
  const std::vector<TaskId> previous = stream_predecessors(graph);
  std::vector<std::pair<int32_t, int32_t>> edges;
  edges.reserve(static_cast<size_t>(graph.dep_count()) + n);
  const auto edge = [&](TaskId from, TaskId to) {
    const int32_t a = node_of[static_cast<size_t>(from)];
    const int32_t b = node_of[static_cast<size_t>(to)];
    if (a != b) edges.emplace_back(a, b);
  };
  for (TaskId id = 0; id < graph.size(); ++id) {
    for (const TaskId dep : graph.deps(id)) edge(dep, id);
    if (const TaskId before = previous[static_cast<size_t>(id)]; before >= 0) edge(before, id);
  }
  std::vector<int32_t> first_edge(static_cast<size_t>(nodes) + 1, 0);
  for (const auto& [from, to] : edges) ++first_edge[static_cast<size_t>(from) + 1];
  for (size_t v = 0; v < static_cast<size_t>(nodes); ++v) first_edge[v + 1] += first_edge[v];
  std::vector<int32_t> targets(edges.size());
  {
    std::vector<int32_t> next(first_edge.begin(), first_edge.end() - 1);
    for (const auto& [from, to] : edges)
      targets[static_cast<size_t>(next[static_cast<size_t>(from)]++)] = to;
  }
  std::vector<std::pair<int32_t, int32_t>>().swap(edges);

  // Depth-first search from each node in order, out-edges in order; a node's position in the
  // topological order is reversed finishing order (Boost's topological_sort, which this
  // replaced, gives the same order); an edge back to a node on the path is a cycle.
  enum : uint8_t { kUnseen, kOnPath, kDone };
  std::vector<uint8_t> state(static_cast<size_t>(nodes), kUnseen);
  std::vector<int32_t> position(static_cast<size_t>(nodes));
  std::vector<std::pair<int32_t, int32_t>> path;  // (node, its next edge)
  int32_t finished = 0;
  for (int32_t root = 0; root < nodes; ++root) {
    if (state[static_cast<size_t>(root)] != kUnseen) continue;
    state[static_cast<size_t>(root)] = kOnPath;
    path.emplace_back(root, first_edge[static_cast<size_t>(root)]);
    while (!path.empty()) {
      auto& [node, next_edge] = path.back();
      if (next_edge == first_edge[static_cast<size_t>(node) + 1]) {
        state[static_cast<size_t>(node)] = kDone;
        position[static_cast<size_t>(node)] = nodes - 1 - finished++;
        path.pop_back();
        continue;
      }
      const int32_t to = targets[static_cast<size_t>(next_edge++)];
      if (state[static_cast<size_t>(to)] == kOnPath) {
        report_out.errors.push_back(
            "the graph has a cycle once sends meet their recvs and collectives run together: the "
            "schedule would deadlock");
        return;
      }
      if (state[static_cast<size_t>(to)] == kUnseen) {
        state[static_cast<size_t>(to)] = kOnPath;
        path.emplace_back(to, first_edge[static_cast<size_t>(to)]);
      }
    }
  }
  // Expand merged nodes back into tasks, in topological order of the nodes (tasks of one node in
  // id order): a counting sort by position.
  std::vector<int32_t> first_of_position(static_cast<size_t>(nodes) + 1, 0);
  for (size_t id = 0; id < n; ++id) {
    ++first_of_position[static_cast<size_t>(position[static_cast<size_t>(node_of[id])]) + 1];
  }
  for (size_t p = 0; p < static_cast<size_t>(nodes); ++p)
    first_of_position[p + 1] += first_of_position[p];
  auto& order = report_out.topological_order;
  order.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const auto p = static_cast<size_t>(position[static_cast<size_t>(node_of[id])]);
    order[static_cast<size_t>(first_of_position[p]++)] = static_cast<TaskId>(id);
  }
}

}  // namespace

ValidationReport validate_graph(const TaskGraph& graph) {
  ValidationReport report_out;
  TaskUnion together(static_cast<size_t>(graph.size()));
  check_p2p(graph, together, report_out.errors);
  check_collectives(graph, together, report_out.errors);
  check_memory(graph, report_out.errors);
  check_tensors(graph, report_out.errors);
  check_acyclic(graph, together, report_out);
  return report_out;
}

}  // namespace strata
