// RankRuntime: binding the rank's tensors, issuing its tasks in order, its memory tasks, its
// collectives and pipeline messages. The compute tasks are in exec/runtime_compute.cpp.

#include "exec/rank_runtime.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "common/error.hpp"
#include "exec/runtime_state.hpp"
#include "plan/memory_plan.hpp"

namespace strata {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The CPU time of the calling thread (POSIX CLOCK_THREAD_CPUTIME_ID): it advances only while
// the thread runs on a core.
int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

constexpr std::string_view kGatheredSuffix = " gathered";

bool frees_only(std::span<const TensorUse> uses) {
  return !uses.empty() && std::ranges::all_of(uses, [](const TensorUse use) {
    return use.access() == Access::kFree;
  });
}

// Sets RankRuntime::Impl::batch_last (`last`, each position its own until then) for a program.
void find_pipeline_batches(const TaskGraph& graph, const std::vector<TaskId>& program,
                           std::vector<size_t>& last) {
  for (size_t first = 0; first < program.size(); ++first) {
    if (graph.task(program[first]).kind != TaskKind::kP2p) continue;
    std::set<TaskId> deferred = {program[first]};  // ending with the batch
    for (size_t j = first + 1; j < program.size(); ++j) {
      const TaskId id = program[j];
      const Task& task = graph.task(id);
      const bool waits = std::ranges::any_of(
          graph.deps(id), [&](const TaskId dep) { return deferred.count(dep) != 0; });
      const bool host = task.kind == TaskKind::kCompute && graph.op(task.op).kind == OpKind::kHost;
      if (task.kind == TaskKind::kP2p && !waits) {
        deferred.insert(id);
        last[first] = j;
      } else if (task.kind == TaskKind::kMemory && frees_only(graph.uses(id))) {
        deferred.insert(id);
      } else if (waits || !(host || task.kind == TaskKind::kMemory)) {
        break;
      }
    }
    first = last[first];
  }
}

}  // namespace

RankRuntime::Impl::Impl(const CompiledPlan& compiled, int32_t rank, Backend& backend,
                        Communicator& comm, const TextDataset& data,
                        const OptimizerConfig& optimizer, ParamStore& params, uint64_t seed)
    : graph(compiled.graph),
      plan(compiled.plan),
      model(compiled.model),
      rank(rank),
      backend(backend),
      comm(comm),
      text(data),
      optimizer(optimizer),
      params(params),
      seed(seed),
      coord(RankLayout(plan, compiled.cluster.gpus_per_node).coord(rank)),
      tokens_per_micro_batch(plan.micro_batch * plan.seq_len),
      norm_squared(backend) {
  for (TaskId id = 0; id < graph.size(); ++id) {
    if (graph.task(id).rank == rank) program.push_back(id);
  }
  batch_last.resize(program.size());
  std::iota(batch_last.begin(), batch_last.end(), size_t{0});
  if (comm.batches_p2p()) find_pipeline_batches(graph, program, batch_last);
  bind_tensors();
  // Room for the per-token losses of every loss backward of a step (counted on TP rank 0).
  int64_t loss_rows = 0;
  for (const TaskId id : program) {
    const Task& task = graph.task(id);
    if (task.kind != TaskKind::kCompute) continue;
    const OpShape& op = graph.op(task.op);
    if (op.kind == OpKind::kLoss && op.direction == Direction::kBackward) loss_rows += op.dims[0];
  }
  if (coord.tp == 0 && loss_rows > 0) step_losses = DeviceTensor(backend, loss_rows, DType::kFp32);
}

ParamState& RankRuntime::Impl::param_of(TensorId id) {
  const Tensor& t = graph.tensor(id);
  std::string_view name = graph.tensor_name(t.name);
  if (name.ends_with(kGatheredSuffix)) name.remove_suffix(kGatheredSuffix.size());
  BlockState* block = nullptr;
  if (t.layer >= 0) {
    block = &params.layer(t.layer);
  } else {
    block = name == "wte" || name == "wpe" ? params.embedding() : params.head();
  }
  STRATA_ASSERT(
      block != nullptr && t.index >= 0 && static_cast<size_t>(t.index) < block->params.size(),
      fmt::format("tensor {} ({}) has no parameter on rank {}", id, name, rank));
  // The store's blocks hold the graph's tensors in its order (rank_param_blocks): the index is
  // the parameter; bind_tensors checks the sizes.
  return block->params[static_cast<size_t>(t.index)];
}

void RankRuntime::Impl::bind_tensors() {
  // Tensors a memory task allocates live from that task to the one that frees them; the others
  // for the whole run.
  std::vector<bool> allocated_by_task(static_cast<size_t>(graph.tensor_count()));
  for (const TaskId id : program) {
    for (const TensorUse use : graph.uses(id)) {
      if (use.access() == Access::kAlloc)
        allocated_by_task[static_cast<size_t>(use.tensor())] = true;
    }
  }
  slots.resize(static_cast<size_t>(graph.tensor_count()));
  const bool sharded_params = params.zero_stage() == 3;
  const bool sharded_grads = params.zero_stage() >= 2;
  for (TensorId id = 0; id < graph.tensor_count(); ++id) {
    const Tensor& t = graph.tensor(id);
    if (t.rank != rank) continue;
    TensorSlot& slot = slots[static_cast<size_t>(id)];
    int64_t store_elements = -1;  // a store buffer's size, which must be the graph's
    switch (t.kind) {
      case TensorKind::kParameter: {
        slot.param = &param_of(id);
        const bool gathered = graph.tensor_name(t.name).ends_with(kGatheredSuffix);
        slot.buffer =
            gathered || !sharded_params ? &slot.param->param : &params.owned_params(*slot.param);
        store_elements = gathered || !sharded_params ? slot.param->size : slot.param->chunk;
        break;
      }
      case TensorKind::kGradient:
        slot.param = &param_of(id);
        // A micro-batch's own gradient (ZeRO 2 and 3) is the runtime's; the step's is the
        // store's, whole or its owned chunk.
        if (t.micro_batch < 0) {
          slot.buffer = sharded_grads ? &slot.param->chunk_grad : &slot.param->grad;
          store_elements = sharded_grads ? slot.param->chunk : slot.param->size;
        }
        break;
      case TensorKind::kOptimizerState:
        slot.param = &param_of(id);  // the store's to update (ParamStore::step)
        continue;
      default:
        break;
    }
    if (store_elements >= 0) {
      STRATA_ASSERT(store_elements == elements(id),
                    fmt::format("{}: {} elements in the graph, {} in the parameter store",
                                slot.param->spec.name, elements(id), store_elements));
      STRATA_ASSERT(
          slot.buffer->dtype() == storage_dtype(id) || !slot.buffer->allocated(),
          fmt::format("{}: {} in the graph, {} in the parameter store", slot.param->spec.name,
                      to_string(storage_dtype(id)), to_string(slot.buffer->dtype())));
      continue;
    }
    owned.emplace_back();
    slot.buffer = &owned.back();
    if (!allocated_by_task[static_cast<size_t>(id)])
      *slot.buffer = DeviceTensor(backend, elements(id), storage_dtype(id));
  }
}

Operands RankRuntime::Impl::operands(std::span<const TensorUse> uses) const {
  Operands o;
  for (const TensorUse use : uses) {
    const TensorKind kind = graph.tensor(use.tensor()).kind;
    switch (use.access()) {
      case Access::kRead:
        if (kind == TensorKind::kParameter) {
          o.weights.push_back(use.tensor());
        } else if (kind == TensorKind::kGradient) {
          o.read_grads.push_back(use.tensor());
        } else {
          o.in.push_back(use.tensor());
        }
        break;
      case Access::kWrite:
      case Access::kUpdate:
        if (kind == TensorKind::kGradient) {
          o.grads.push_back(use.tensor());
        } else if (kind == TensorKind::kActivation || kind == TensorKind::kCommBuffer ||
                   kind == TensorKind::kScratch || kind == TensorKind::kParameter) {
          o.out_added.push_back(use.access() == Access::kUpdate);
          o.out.push_back(use.tensor());
        }
        break;
      case Access::kAlloc:
      case Access::kFree:
        break;
    }
  }
  return o;
}

// Dependencies on other streams: the backend orders them with events (a no-op on the CPU,
// where every call has finished when it returns).
void RankRuntime::Impl::wait_for_dependencies(TaskId id) {
  const Task& task = graph.task(id);
  for (const TaskId dep : graph.deps(id)) {
    if (graph.task(dep).rank == rank) backend.wait_event(task.stream, dep);
  }
}

void RankRuntime::Impl::run_task(TaskId id) {
  const Task& task = graph.task(id);
  backend.set_stream(task.stream);
  const std::span<const TensorUse> uses = graph.uses(id);
  switch (task.kind) {
    case TaskKind::kCompute:
      run_compute(task, uses);
      break;
    case TaskKind::kCollective:
      run_collective(task, uses);
      break;
    case TaskKind::kP2p:
      run_p2p(task, uses);
      break;
    case TaskKind::kMemory:
      run_memory(uses);
      break;
    case TaskKind::kCopy:
      STRATA_ASSERT(false, "offload plans are refused before they run (check_executable_model)");
      break;
  }
  backend.record_event(task.stream, id);
}

void RankRuntime::Impl::run_memory(std::span<const TensorUse> uses) {
  for (const TensorUse use : uses) {
    DeviceTensor& buffer = *slots[static_cast<size_t>(use.tensor())].buffer;
    if (use.access() == Access::kAlloc) {
      STRATA_ASSERT(!buffer.allocated(), fmt::format("tensor {} allocated twice", use.tensor()));
      buffer = DeviceTensor(backend, elements(use.tensor()), storage_dtype(use.tensor()));
    } else {
      buffer.reset();
    }
  }
}

void RankRuntime::Impl::run_collective(const Task& task, std::span<const TensorUse> uses) {
  const Operands o = operands(uses);
  if (!o.grads.empty() || !o.read_grads.empty() ||
      (!o.out.empty() && graph.tensor(o.out[0]).kind == TensorKind::kParameter)) {
    run_gradient_collective(task, o);
    return;
  }
  // Activations: the tensor read (or updated in place) and the one written.
  STRATA_ASSERT(o.out.size() == 1, fmt::format("{} writes one tensor", task_name(graph, task)));
  const TensorId out = o.out[0];
  with_storage_type(storage_dtype(out), [&]<typename T>(T) {
    const auto span = [&](TensorId id) {
      return std::span(data<T>(id), static_cast<size_t>(elements(id)));
    };
    switch (task.collective) {
      case CollectiveKind::kAllGather:
        comm.all_gather(std::span<const T>(span(o.in.at(0))), span(out), group(task));
        return;
      case CollectiveKind::kReduceScatter:
        comm.reduce_scatter(std::span<const T>(span(o.in.at(0))), span(out), group(task));
        return;
      case CollectiveKind::kAllReduce:
        if (!o.out_added[0]) backend.copy(data<T>(out), data<T>(o.in.at(0)), elements(out));
        comm.all_reduce(span(out), group(task), task.reduce);
        return;
      default:
        STRATA_ASSERT(false, fmt::format("no {} in the executor", to_string(task.collective)));
    }
  });
}

// Collectives over parameters and gradients go through the parameter store, which knows how
// ZeRO cuts each tensor into data-parallel chunks:
//  - a reduce-scatter of gradients, or an all-reduce of the step's whole gradients under ZeRO 0,
//    reduces the full gradients it reads (or, without reads, those it updates);
//  - an all-reduce of gradients after their data-parallel reduction (the tied embedding's two
//    copies, sequence parallelism's replicated parameters) sums the part this rank reduced;
//  - an all-reduce that reads gradients and writes one value is the global gradient norm;
//  - an all-gather of parameters gathers the owned chunks into the whole.
void RankRuntime::Impl::run_gradient_collective(const Task& task, const Operands& o) {
  const RankGroup members = group(task);
  if (task.collective == CollectiveKind::kAllGather) {
    std::vector<ParamState*> gathered;
    for (const TensorId t : o.out) gathered.push_back(slots[static_cast<size_t>(t)].param);
    params.gather_params(gathered, comm, members);
    return;
  }
  if (!o.out.empty()) {  // the norm, squared, summed and reduced where the gradients are
    double* sum = norm_squared.data();
    backend.fill_zero(sum, 1);
    for (const TensorId t : o.read_grads)
      params.add_gradient_sum_of_squares(*slots[static_cast<size_t>(t)].param, sum);
    comm.all_reduce(std::span(sum, 1), members, ReduceOp::kSum);
    grad_norm_reduced = true;
    return;
  }
  const bool data_parallel = graph.group(task.group).kind == GroupKind::kDp;
  if (task.collective == CollectiveKind::kReduceScatter ||
      (data_parallel && params.zero_stage() == 0)) {
    std::vector<ParamStore::GradientSource> sources;
    for (const TensorId t : o.read_grads.empty() ? o.grads : o.read_grads)
      sources.push_back({slots[static_cast<size_t>(t)].param, data<float>(t)});
    params.reduce_gradients(sources, comm, members);
    return;
  }
  STRATA_ASSERT(task.collective == CollectiveKind::kAllReduce,
                fmt::format("no {} of gradients in the executor", to_string(task.collective)));
  for (const TensorId t : o.grads)
    params.all_reduce_gradient(*slots[static_cast<size_t>(t)].param, comm, members);
}

// A pipeline message: a send copies the tensor it carries into its message buffer and sends it;
// a receive fills its message, and copies it into the tensor it also writes (when no TP gather
// follows). A message smaller than the tensor it carries is this rank's 1/t of it along TP
// (Megatron-LM's scatter-gather of pipeline messages; the receiver's TP all-gather rebuilds it).
void RankRuntime::Impl::run_p2p(const Task& task, std::span<const TensorUse> uses) {
  post_p2p(task, uses);
  finish_p2p(task, uses);
}

void RankRuntime::Impl::post_p2p(const Task& task, std::span<const TensorUse> uses) {
  const Operands o = operands(uses);
  const TensorId message = o.out.at(0);
  const int64_t size = elements(message);
  with_storage_type(storage_dtype(message), [&]<typename T>(T) {
    T* buffer = data<T>(message);
    if (task.p2p == P2pKind::kRecv) {
      comm.recv(std::span(buffer, static_cast<size_t>(size)), task.peer, task.tag);
      return;
    }
    const TensorId carried = o.in.at(0);
    const int64_t offset = elements(carried) == size ? 0 : coord.tp * size;
    backend.copy(buffer, data<T>(carried) + offset, size);
    comm.send(std::span<const T>(buffer, static_cast<size_t>(size)), task.peer, task.tag);
  });
}

void RankRuntime::Impl::finish_p2p(const Task& task, std::span<const TensorUse> uses) {
  if (task.p2p != P2pKind::kRecv) return;
  const Operands o = operands(uses);
  const TensorId message = o.out.at(0);
  const int64_t size = elements(message);
  with_storage_type(storage_dtype(message), [&]<typename T>(T) {
    for (size_t i = 1; i < o.out.size(); ++i)
      backend.copy(data<T>(o.out[i]), data<T>(message), size);
  });
}

void RankRuntime::Impl::issue(size_t position, std::vector<Issued>& issued) {
  const TaskId id = program[position];
  const Stream stream = graph.task(id).stream;
  wait_for_dependencies(id);
  comm.mark_transfers();
  const int64_t cpu_begin = thread_cpu_ns();
  const int64_t begin = now_ns();
  const int64_t begin_mark = backend.mark(stream);
  run_task(id);
  const int64_t end_mark = backend.mark(stream);
  const int64_t end = now_ns();
  const int64_t transfer = std::clamp(comm.first_transfer_ns(), begin, end);
  issued[position] = {begin_mark, end_mark, transfer - begin, thread_cpu_ns() - cpu_begin};
}

// The batch's host and allocating tasks are issued in order; its p2p tasks post their calls
// inside the communicator's batch, and they and its frees (which wait for them) finish, record
// their events and take their end marks once the batch has ended.
void RankRuntime::Impl::issue_batch(size_t first, size_t last, std::vector<Issued>& issued) {
  std::vector<size_t> ending;
  comm.begin_p2p_batch();
  for (size_t position = first; position <= last; ++position) {
    const TaskId id = program[position];
    const Task& task = graph.task(id);
    if (task.kind != TaskKind::kP2p &&
        !(task.kind == TaskKind::kMemory && frees_only(graph.uses(id)))) {
      issue(position, issued);
      continue;
    }
    wait_for_dependencies(id);
    const int64_t cpu_begin = thread_cpu_ns();
    issued[position].begin_mark = backend.mark(task.stream);
    backend.set_stream(task.stream);
    if (task.kind == TaskKind::kP2p) post_p2p(task, graph.uses(id));
    issued[position].cpu_ns = thread_cpu_ns() - cpu_begin;
    ending.push_back(position);
  }
  comm.end_p2p_batch();
  for (const size_t position : ending) {
    const TaskId id = program[position];
    const Task& task = graph.task(id);
    const int64_t cpu_begin = thread_cpu_ns();
    backend.set_stream(task.stream);
    if (task.kind == TaskKind::kP2p) {
      finish_p2p(task, graph.uses(id));
    } else {
      run_memory(graph.uses(id));
    }
    backend.record_event(task.stream, id);
    issued[position].end_mark = backend.mark(task.stream);
    issued[position].cpu_ns += thread_cpu_ns() - cpu_begin;
  }
}

RankRuntime::RankRuntime(const CompiledPlan& compiled, int32_t rank, Backend& backend,
                         Communicator& comm, const TextDataset& data,
                         const OptimizerConfig& optimizer, uint64_t seed)
    : rank_(rank) {
  const ParallelPlan& plan = compiled.plan;
  STRATA_ASSERT(plan.dtype == DType::kFp32 || backend.bf16() != nullptr,
                "a bf16 plan runs on a backend with bf16 kernels (strata train refuses others)");
  const RankCoord coord = RankLayout(plan, compiled.cluster.gpus_per_node).coord(rank);
  // The params' and gradients' dtypes as the graph has them (plan/lowering_tensors.cpp).
  const StateBytesPerParameter bytes = state_bytes_per_parameter(plan.dtype, plan.precision);
  const StoreLayout layout{.zero_stage = plan.zero_stage,
                           .dp = plan.dp,
                           .dp_rank = coord.dp,
                           .tp = plan.tp,
                           .tp_rank = coord.tp,
                           .param_dtype = bytes.params == 4 ? DType::kFp32 : plan.dtype,
                           .reduce_dtype = bytes.grads == 4 ? DType::kFp32 : plan.dtype};
  params_ = std::make_unique<ParamStore>(
      backend, rank_param_blocks(compiled.model, plan, coord.pp, coord.tp), layout, seed);
  impl_ = std::make_unique<Impl>(compiled, rank, backend, comm, data, optimizer, *params_, seed);
  // The tensors bound for the whole run were zeroed (and the weights uploaded) on the current
  // stream; a task on another stream has no event to wait for them.
  backend.synchronize();
}

RankRuntime::~RankRuntime() = default;

StepMeasurement RankRuntime::run_step(int64_t step, int64_t origin_ns) {
  Impl& impl = *impl_;
  impl.step = step;
  impl.first_sequence = step * impl.plan.global_batch;
  impl.measurement = StepMeasurement{};
  impl.measurement.tasks.reserve(impl.program.size());
  impl.step_tokens.clear();
  impl.grad_norm_reduced = false;
  impl.losses_written = 0;
  // Each task's span from marks on its stream, read once the step is done: on a device, where
  // the task ran rather than when the host queued it. A task's first mark follows its waits for
  // dependencies on other streams (queued first): it ran from when they were done. Times count
  // from origin_ns where given (the host clock, shared by the in-process ranks): mark 0's host
  // time less the origin shifts every mark. The wait for peers inside a collective or receive
  // is seen on the host (Communicator::first_transfer_ns) and moves the transfer's start within
  // the task's span.
  Backend& backend = impl.backend;
  backend.clear_marks();
  const int64_t host_start = now_ns();
  backend.mark(Stream::kCompute);  // mark 0
  const int64_t shift = origin_ns >= 0 ? host_start - origin_ns : 0;
  std::vector<Impl::Issued> issued(impl.program.size());
  for (size_t position = 0; position < impl.program.size();) {
    const size_t last = impl.batch_last[position];
    if (last > position) {
      impl.issue_batch(position, last, issued);
    } else {
      impl.issue(position, issued);
    }
    position = last + 1;
  }
  backend.synchronize();
  // The step's losses, read once (in the order the loss tasks wrote them).
  std::vector<float> losses(static_cast<size_t>(impl.losses_written));
  if (!losses.empty()) backend.download(std::span(losses), impl.step_losses.data<float>());
  for (const float loss : losses) impl.measurement.loss_sum += loss;
  impl.measurement.loss_tokens = impl.losses_written;
  double norm_squared = 0;
  backend.download(std::span(&norm_squared, 1), impl.norm_squared.data());
  impl.measurement.grad_norm = std::sqrt(norm_squared);
  for (size_t i = 0; i < issued.size(); ++i) {
    const int64_t start = shift + backend.mark_ns(issued[i].begin_mark);
    const int64_t finish = shift + backend.mark_ns(issued[i].end_mark);
    impl.measurement.tasks.push_back({impl.program[i], start,
                                      std::min(finish, start + issued[i].wait_ns), finish,
                                      issued[i].cpu_ns});
  }
  return std::move(impl.measurement);
}

}  // namespace strata
