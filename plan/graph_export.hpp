#pragma once
// Writing a task graph for other tools: JSON (`strata plan --emit-graph FILE.json`), the full
// contract for a reader in another language, and Graphviz DOT (`--dot FILE.dot`) for looking at
// small graphs. Both are deterministic: the same graph gives the same bytes.
//
// JSON: {"format": "strata-task-graph", "version": 2, "mode", "dp" (the data-parallel ranks
//   beside expert parallelism: dp / ep, or dp x tp / (etp x ep) with etp < tp), "tp", "pp", "cp",
//   "ep", "etp" (only when below tp), "rank_order" ("tp-cp-ep-dp-pp", innermost first), "ranks":
//   [{"rank", "stage"}], "ops":
//   [{"kind", "function" (the kernel of a norm or an elementwise op: layernorm, rmsnorm,
//   residual_add, gelu, swiglu, geglu, rotary, fp8_cast, latent_key_value, ...; default for the
//   others), "direction", "dtype", "dims", "flops" (executed), "model_flops" (counted in MFU),
//   "bytes", and for an attention op "window" when windowed and "value_dim" when its value heads
//   are narrower than dims[3] (latent attention)}], "groups":
//   [{"kind", "ranks"}], "buckets": [{"first_layer", "layers", "embedding", "head", "experts"}],
//   "tensors":
//   [{"id", "rank", "name", "kind", "dims", "dtype", "bytes", "layer", "micro_batch", "index"}],
//   "tasks": [{"id", "rank", "stream", "kind", "phase", "role", "layer", "micro_batch", "chunk",
//   "deps", "uses"
//   ([[tensor id, "read" | "write" | "update" | "alloc" | "free"]]), then by kind:
//   "op" | "collective", "group", "bytes" and, for a data-parallel bucket's gradient reduction
//   or parameter all-gather, "bucket", for a max reduction "reduce": "max", for an all-to-all
//   "peer_bytes" (its instance's n x n traffic matrix over the group's n members, row-major in
//   the group's rank order: [i * n + j] is what member i sends to member j; every member's task
//   lists the same matrix, and its "bytes" is its own row's sum) | "p2p", "peer", "tag", "bytes"
//   | "memory", "buffer", "bytes"}]}

#include <cstdint>
#include <string>

#include "plan/task_graph.hpp"

namespace strata {

inline constexpr int64_t kMaxDotTasks = 5000;

std::string graph_to_json(const TaskGraph& graph);
// Throws InputError naming `path` when the graph has more than kMaxDotTasks tasks.
std::string graph_to_dot(const TaskGraph& graph, const std::string& path);

}  // namespace strata
