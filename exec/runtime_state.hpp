#pragma once
// The state behind RankRuntime (internal to exec/): where each of the rank's tensors lives, the
// operands of a task sorted by what they are, and the step being run.

#include <array>
#include <deque>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/container/small_vector.hpp>

#include "common/error.hpp"
#include "exec/rank_runtime.hpp"
#include "plan/rank_layout.hpp"

namespace strata {

// A task's tensors sorted by kind and access, each list in the order of the task's uses
// (plan/tensor.hpp): the op kind defines that order, so the k-th activation a kind reads is the
// same operand in every graph.
struct Operands {
  template <size_t N>
  using List = boost::container::small_vector<TensorId, N>;
  List<6> in;       // activations (and other non-parameter tensors) read
  List<4> weights;  // parameters read
  List<4> out;      // tensors written (=) or, where `out_added`, added into
  boost::container::small_vector<bool, 4> out_added;
  List<4> grads;       // parameter gradients added into (+=) or reduced
  List<4> read_grads;  // parameter gradients read
};

// This rank's heads in a row of a fused QKV output: [q (q_heads) | k (kv_heads) | v (kv_heads)],
// each head_dim wide.
struct QkvColumns {
  int64_t head_dim = 0, q_heads = 0, kv_heads = 0;
  int64_t k_first() const { return q_heads * head_dim; }
  int64_t v_first() const { return (q_heads + kv_heads) * head_dim; }
  int64_t width() const { return (q_heads + 2 * kv_heads) * head_dim; }
};

struct RankRuntime::Impl {
  Impl(const CompiledPlan& compiled, int32_t rank, Backend& backend, Communicator& comm,
       const TextDataset& data, const OptimizerConfig& optimizer, ParamStore& params,
       uint64_t seed);

  // Where a tensor of this rank lives: a buffer of the runtime, or of the parameter store (a
  // parameter, its gathered copy, a gradient), with the parameter it belongs to.
  struct TensorSlot {
    DeviceTensor* buffer = nullptr;
    ParamState* param = nullptr;
  };
  void bind_tensors();
  ParamState& param_of(TensorId id);
  // A tensor's elements, as its storage type T (storage_dtype).
  template <typename T>
  T* data(TensorId id) {
    return buffer(id).data<T>();
  }
  // A tensor's memory, whatever its storage type (for conversions between types).
  void* address(TensorId id) { return buffer(id).address(); }
  DeviceTensor& buffer(TensorId id) {
    const TensorSlot& slot = slots[static_cast<size_t>(id)];
    STRATA_ASSERT(slot.buffer != nullptr && slot.buffer->allocated(),
                  fmt::format("rank {} uses tensor {} while it holds no memory", rank, id));
    return *slot.buffer;
  }
  int64_t elements(TensorId id) const { return graph.shape_of(id).elements(); }
  // How the runtime stores a tensor: in the graph's dtype, but a dropout mask (1 byte in the
  // graph, as the frameworks keep it) in the plan's working dtype, as the kernels read it, and a
  // parameter gradient in fp32, as the kernels accumulate it (a plan that reduces gradients in
  // bf16 stages them in bf16 for the collectives: exec/param_store.hpp).
  DType storage_dtype(TensorId id) const {
    if (graph.tensor(id).kind == TensorKind::kGradient) return DType::kFp32;
    const DType dtype = graph.shape_of(id).dtype;
    return dtype == DType::kU8 ? plan.dtype : dtype;
  }
  // Scratch inside one kernel call, never a graph tensor, by what it holds.
  enum Workspace : size_t {
    kInputGradient,     // an input gradient before it is added into its tensor
    kMean,              // a norm's statistics (fp32)
    kRstd,              //
    kProbabilities,     // attention probabilities the graph does not keep (recomputed)
    kRecomputedOutput,  // the attention output recomputed beside them (discarded)
    kMask,              // an attention dropout mask drawn again
    kBiasSum,           // a parallel block's two biases, summed
    kQkBlock,           // QK-norm's columns of the queries or keys, their norm, its input
    kQkResult,          //
    kQkInput,           //
    kCast,              // an operand converted to the kernels' type (the output layer's)
    kWorkspaceCount
  };
  template <typename T>
  T* workspace(Workspace index, int64_t elements) {
    DeviceTensor& buffer = workspaces[index];
    if (buffer.dtype() != dtype_of<T>() || buffer.size() < elements) {
      buffer = DeviceTensor(backend, elements, dtype_of<T>());
    }
    return buffer.data<T>();
  }
  Operands operands(std::span<const TensorUse> uses) const;

  // A task as issued, in marks on its stream (Backend::mark), and what the host saw: the time it
  // waited for its peers before the data moved, and the CPU time its thread spent.
  struct Issued {
    int64_t begin_mark = 0, end_mark = 0, wait_ns = 0, cpu_ns = 0;
  };
  // Issues the task at program[position]: its waits, its calls, its event, its marks.
  void issue(size_t position, std::vector<Issued>& issued);
  // Issues program[first..last], a pipeline batch (batch_last).
  void issue_batch(size_t first, size_t last, std::vector<Issued>& issued);
  // Queues the waits of task id's stream for its dependencies on the rank's other streams.
  void wait_for_dependencies(TaskId id);
  // Runs task id on its stream, then records its event; its waits are queued already.
  void run_task(TaskId id);
  void run_memory(std::span<const TensorUse> uses);
  void run_collective(const Task& task, std::span<const TensorUse> uses);
  void run_gradient_collective(const Task& task, const Operands& o);
  // A pipeline message in two halves: the communicator's call (with a send's copy into its
  // message before it), then a receive's copies out of its message, queued after the call.
  void run_p2p(const Task& task, std::span<const TensorUse> uses);
  void post_p2p(const Task& task, std::span<const TensorUse> uses);
  void finish_p2p(const Task& task, std::span<const TensorUse> uses);
  // Compute tasks run with the kernels of T, the storage type of their activations (the
  // plan's working dtype; the loss's, its logits' type).
  void run_compute(const Task& task, std::span<const TensorUse> uses);
  template <typename T>
  void run_forward(const Task& task, const OpShape& op, const Operands& o);
  template <typename T>
  void run_backward(const Task& task, const OpShape& op, const Operands& o);
  template <typename T>
  void run_attention(const Task& task, const OpShape& op, const Operands& o);
  // Dropout (docs/design.md, "Executor"): the mask a task draws from its random stream (a
  // residual add's tensor, this rank's rows of the micro-batch's residual stream), and the
  // attention probabilities' mask (B, this rank's heads, T, T) into `keep`.
  template <typename T>
  void draw_hidden_mask(const Task& task, TensorId mask);
  template <typename T>
  void draw_probability_mask(const Task& task, T* keep, int64_t heads);
  // The index in the run of the micro-batch's b-th sequence on this rank.
  int64_t sequence_of(int64_t micro_batch, int64_t b) const;
  bool is_mask(TensorId id) const { return graph.shape_of(id).dtype == DType::kU8; }
  QkvColumns qkv_columns() const {
    return {model.head_dim(), model.heads / plan.tp, model.kv_heads / plan.tp};
  }
  template <typename T>
  void rotate(T* qkv, Direction direction);
  template <typename T>
  void qk_norm(const OpShape& op, const Operands& o);
  template <typename T>
  void run_loss(const Task& task, const OpShape& op, const Operands& o);
  void run_optimizer();
  // Writes the input gradient a backward kernel computes into out[0] (=), or adds it (+=).
  template <typename T>
  T* input_gradient(const Operands& o, int64_t elements);
  template <typename T>
  void finish_input_gradient(const Operands& o, int64_t elements);
  const int32_t* tokens(int64_t micro_batch, bool targets);
  RankGroup group(const Task& task) const { return graph.group(task.group).ranks; }

  const TaskGraph& graph;
  const ParallelPlan& plan;
  const ModelSpec& model;
  int32_t rank;
  Backend& backend;
  Communicator& comm;
  const TextDataset& text;
  OptimizerConfig optimizer;
  ParamStore& params;
  uint64_t seed;  // the run's: initial weights, data order and dropout masks
  RankCoord coord;
  int64_t tokens_per_micro_batch = 0;  // B T
  std::vector<TaskId> program;         // this rank's tasks, in id order
  // By program position, the last position of the pipeline batch starting there (the position
  // itself where none does): where the communicator batches its sends and receives
  // (Communicator::batches_p2p), a p2p task and the p2p tasks after it reached through host
  // tasks, memory tasks and p2p tasks only, none of which waits for one of the batch's p2p tasks
  // or frees (they finish only when the batch ends) unless it is itself a free.
  std::vector<size_t> batch_last;

  std::vector<TensorSlot> slots;  // by tensor id; empty for other ranks' tensors
  std::deque<DeviceTensor> owned;
  std::array<DeviceTensor, kWorkspaceCount> workspaces;
  // The per-token losses of the step's micro-batches (on TP rank 0 of the last stage), written
  // by the loss tasks one after another and read once the step is done.
  DeviceTensor step_losses;
  int64_t losses_written = 0;

  // The step being run.
  int64_t step = 0;
  int64_t first_sequence = 0;
  StepMeasurement measurement;
  // The step's squared global gradient norm, in the backend's memory: summed and reduced there,
  // read there by AdamW, and by the host once the step is done.
  DeviceScalar norm_squared;
  bool grad_norm_reduced = false;  // a collective computed the global norm this step
  // Per micro-batch of the step: input tokens (first stage) and targets (last stage).
  std::map<int64_t, std::pair<DeviceTokens, DeviceTokens>> step_tokens;
};

}  // namespace strata
