#include "exec/trainer.hpp"

#include <exception>
#include <fstream>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/units.hpp"
#include "exec/checkpoint.hpp"
#include "exec/inprocess_communicator.hpp"
#include "exec/loopback_communicator.hpp"
#include "plan/plan_json.hpp"
#include "plan/rank_layout.hpp"

namespace strata {

namespace {

std::vector<int32_t> world_group(int32_t world_size) {
  std::vector<int32_t> world(static_cast<size_t>(world_size));
  std::iota(world.begin(), world.end(), 0);
  return world;
}

// Puts the ranks' tensors back together: ZeRO-3 chunks over DP first, then TP shards.
std::map<std::string, std::vector<float>> assemble_weights(
    const CompiledPlan& compiled, const std::vector<std::vector<CheckpointTensor>>& per_rank) {
  const ParallelPlan& plan = compiled.plan;
  const RankLayout layout(plan, compiled.cluster.gpus_per_node);
  const bool chunks = plan.zero_stage == 3 && plan.dp > 1;
  std::map<std::string, std::vector<float>> weights;
  for (int64_t stage = 0; stage < plan.pp; ++stage) {
    const std::vector<ParamBlock> blocks = rank_param_blocks(compiled.model, plan, stage, 0);
    size_t index = 0;
    for (const ParamBlock& block : blocks) {
      for (const ParamSpec& spec : block.params) {
        std::vector<std::vector<float>> shards;
        for (int64_t tp = 0; tp < plan.tp; ++tp) {
          std::vector<float> shard;
          for (int64_t dp = 0; dp < (chunks ? plan.dp : 1); ++dp) {
            const auto& part =
                per_rank[static_cast<size_t>(layout.rank_of({.tp = tp, .dp = dp, .pp = stage}))]
                        [index];
            STRATA_ASSERT(part.name == spec.name, "ranks list their tensors in block order");
            shard.insert(shard.end(), part.values.begin(), part.values.end());
          }
          shard.resize(static_cast<size_t>(spec.shard_size(plan.tp)));
          shards.push_back(std::move(shard));
        }
        std::vector<float> whole(static_cast<size_t>(spec.rows * spec.cols));
        const int64_t rows = spec.shard_rows(plan.tp);
        const int64_t cols = spec.shard_cols(plan.tp);
        for (int64_t tp = 0; tp < plan.tp; ++tp) {
          for (int64_t r = 0; r < rows; ++r) {
            const ParamSpec::FullPosition full = spec.full_position(r, tp, plan.tp);
            for (int64_t c = 0; c < cols; ++c) {
              whole[static_cast<size_t>(full.row * spec.cols + full.first_col + c)] =
                  shards[static_cast<size_t>(tp)][static_cast<size_t>(r * cols + c)];
            }
          }
        }
        weights[spec.name] = std::move(whole);
        ++index;
      }
    }
  }
  return weights;
}

// One rank's whole run; the reports are the same on every rank.
struct RankRun {
  std::vector<StepReport> steps;
  std::vector<MeasuredTask> last_step_tasks;
  std::vector<CheckpointTensor> weights;
};

// `threads` is the in-process world of thread-ranks, null for an MPI rank: a device backend's
// buffers then meet through the loopback communicator on it, else through the staged one.
RankRun run_rank(const CompiledPlan& compiled, const TrainOptions& options, Communicator& comm,
                 InProcessWorld* threads, const TextDataset& data, int64_t first_step,
                 const std::function<void(const StepReport&)>& on_step) {
  const int32_t rank = comm.rank();
  const std::vector<int32_t> world = world_group(comm.world_size());
  std::vector<std::vector<int32_t>> groups;
  for (const CommGroup& group : compiled.graph.groups()) groups.push_back(group.ranks);
  groups.push_back(world);
  comm.register_groups(groups);

  std::unique_ptr<Backend> backend =
      options.device_backend ? options.device_backend(rank) : make_cpu_backend();
  std::unique_ptr<Communicator> device_comm;
  if (options.device_backend) {
    if (options.device_communicator) {
      device_comm = options.device_communicator(comm, *backend);
    } else if (threads != nullptr) {
      device_comm = make_loopback_communicator(*threads, rank, *backend);
    } else {
      device_comm = make_staged_communicator(comm, *backend);
    }
    device_comm->register_groups(groups);
  }
  RankRuntime runtime(compiled, rank, *backend, device_comm ? *device_comm : comm, data,
                      options.optimizer, options.seed);
  if (first_step > 0) {
    const std::string file = checkpoint_step_dir(options.checkpoint_dir, first_step) +
                             fmt::format("/rank-{:05}.bin", rank);
    const CheckpointShard shard = read_checkpoint_shard(options.checkpoint_dir, first_step, rank);
    runtime.params().load(shard.tensors, file);
  }
  const ParallelPlan& plan = compiled.plan;
  const std::string identity = run_identity(compiled, options);
  RankRun run;
  for (int64_t step = first_step; step < options.steps; ++step) {
    // Every rank's measured times count from the instant the last rank reached the barrier, one
    // time line for the ranks of this process (an MPI rank counts from its own start).
    comm.mark_transfers();
    comm.barrier();
    const int64_t origin_ns = comm.first_transfer_ns();
    const auto start = std::chrono::steady_clock::now();
    StepMeasurement m = runtime.run_step(step, origin_ns);
    const auto end = std::chrono::steady_clock::now();
    const int64_t end_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count();
    // From the shared origin where there is one, so that the step holds every measured task.
    double seconds = origin_ns >= 0 ? static_cast<double>(end_ns - origin_ns) * 1e-9
                                    : std::chrono::duration<double>(end - start).count();
    // Reporting, outside the graph (as Megatron-LM averages its logged loss): the loss over the
    // last stage's ranks, the slowest rank's time.
    std::array<double, 2> loss{m.loss_sum, static_cast<double>(m.loss_tokens)};
    comm.all_reduce(std::span(loss), world, ReduceOp::kSum);
    comm.all_reduce(std::span(&seconds, 1), world, ReduceOp::kMax);
    StepReport report;
    report.step = step;
    report.loss = loss[0] / loss[1];
    report.step_time_s = seconds;
    report.grad_norm = m.grad_norm;
    report.tokens_per_s = static_cast<double>(plan.tokens_per_step()) / seconds;
    if (rank == 0 && on_step) on_step(report);
    run.steps.push_back(report);
    if (step + 1 == options.steps) run.last_step_tasks = std::move(m.tasks);

    const int64_t done = step + 1;
    if (options.checkpoint_every > 0 && done % options.checkpoint_every == 0) {
      CheckpointShard shard;
      shard.step = done;
      shard.data_position = done * plan.global_batch;
      shard.rng_seed = options.seed;
      shard.rng_counter = static_cast<uint64_t>(shard.data_position);
      shard.tensors = runtime.params().save();
      write_checkpoint_shard(options.checkpoint_dir, rank, shard);
      comm.barrier();
      if (rank == 0) {
        write_checkpoint_manifest(options.checkpoint_dir, done, comm.world_size(), identity);
      }
      comm.barrier();
    }
  }
  run.weights = runtime.params().full_params();
  return run;
}

}  // namespace

ClusterSpec cpu_host_cluster(int64_t ranks, int64_t bytes_per_rank) {
  ClusterSpec cluster;
  cluster.name = "cpu-host";
  cluster.device.name = "cpu-host";
  cluster.device.hbm_bytes = bytes_per_rank;
  cluster.gpus_per_node = ranks;
  cluster.max_nodes = 1;
  return cluster;
}

int64_t host_bytes_per_rank(int64_t ranks) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024 / ranks;
  }
  return static_cast<int64_t>(8 * kBytesPerGiB) / ranks;  // no /proc: assume a small machine
}

void check_plan_fits(const CompiledPlan& compiled) {
  const MemoryPlan& memory = compiled.memory;
  if (memory.fits) return;
  const StageMemory* worst = &memory.stages.front();
  for (const StageMemory& stage : memory.stages) {
    if (stage.peak_bytes > worst->peak_bytes) worst = &stage;
  }
  const MemoryBreakdown& b = worst->at_peak;
  throw InputError(
      "command line", "--device-memory",
      fmt::format("the plan needs {:.3f} GiB per rank on pipeline stage {} (params {:.3f}, "
                  "grads {:.3f}, optimizer {:.3f}, activations {:.3f}, buffers {:.3f} GiB); "
                  "each rank has {:.3f} GiB",
                  worst->peak_bytes / kBytesPerGiB, worst->stage, b.params / kBytesPerGiB,
                  b.grads / kBytesPerGiB, b.optimizer / kBytesPerGiB, b.activations / kBytesPerGiB,
                  b.buffers / kBytesPerGiB, memory.device_bytes / kBytesPerGiB),
      "use a smaller model or micro-batch, shard with --zero or --pp, or give more memory");
}

std::string run_identity(const CompiledPlan& compiled, const TrainOptions& options) {
  return nlohmann::json{{"model", compiled.model.name},
                        {"plan", plan_to_json(compiled.plan)},
                        {"seed", options.seed},
                        {"data", options.data_path}}
      .dump();
}

int64_t checkpoint_to_resume(const CompiledPlan& compiled, const TrainOptions& options) {
  if (!options.resume) return 0;
  if (options.checkpoint_dir.empty()) {
    throw InputError("command line", "--resume", "needs the directory to resume from",
                     "add --checkpoint-dir DIR");
  }
  const std::optional<int64_t> step = newest_complete_checkpoint(options.checkpoint_dir);
  if (!step) {
    throw InputError(options.checkpoint_dir, "--resume", "holds no complete checkpoint",
                     "start without --resume, or point --checkpoint-dir at a run's checkpoints");
  }
  verify_checkpoint(options.checkpoint_dir, *step, static_cast<int32_t>(compiled.plan.gpus()),
                    run_identity(compiled, options));
  if (*step >= options.steps) {
    throw InputError(
        "command line", "--steps",
        fmt::format("is {}, but the checkpoint has {} steps done already", options.steps, *step),
        fmt::format("ask for more than {} steps", *step));
  }
  return *step;
}

TrainResult train_in_process(const CompiledPlan& compiled, const TrainOptions& options,
                             const std::function<void(const StepReport&)>& on_step) {
  const int64_t first_step = checkpoint_to_resume(compiled, options);
  const TextDataset data(options.data_path, compiled.plan.seq_len, options.seed, "--data");
  const auto world_size = static_cast<int32_t>(compiled.plan.gpus());
  if (world_size > 1) cpu::set_matmul_threads(1);
  InProcessWorld world(world_size);
  std::vector<RankRun> runs(static_cast<size_t>(world_size));
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        std::unique_ptr<Communicator> comm = world.communicator(rank);
        runs[static_cast<size_t>(rank)] =
            run_rank(compiled, options, *comm, &world, data, first_step, on_step);
      } catch (...) {
        {
          const std::lock_guard lock(failure_mutex);
          if (!failure && !world.aborted()) failure = std::current_exception();
        }
        world.abort();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);

  TrainResult result;
  result.first_step = first_step;
  result.steps = runs.front().steps;
  result.last_step_tasks.resize(static_cast<size_t>(compiled.graph.size()));
  for (const RankRun& run : runs) {
    for (const MeasuredTask& task : run.last_step_tasks)
      result.last_step_tasks[static_cast<size_t>(task.task)] = task;
  }
  std::vector<std::vector<CheckpointTensor>> weights;
  for (RankRun& run : runs) weights.push_back(std::move(run.weights));
  result.weights = assemble_weights(compiled, weights);
  return result;
}

TrainResult train_rank(const CompiledPlan& compiled, const TrainOptions& options,
                       Communicator& comm, const std::function<void(const StepReport&)>& on_step) {
  const int64_t first_step = checkpoint_to_resume(compiled, options);
  const TextDataset data(options.data_path, compiled.plan.seq_len, options.seed, "--data");
  if (comm.world_size() > 1) cpu::set_matmul_threads(1);
  RankRun run = run_rank(compiled, options, comm, nullptr, data, first_step, on_step);
  TrainResult result;
  result.first_step = first_step;
  result.steps = run.steps;
  // Every rank's measured tasks reach rank 0 through one sum over the world: each rank fills
  // its own tasks' entries (start, transfer, finish and CPU time as doubles: exact below 2^53 ns).
  constexpr size_t kFields = 4;
  std::vector<double> times(kFields * static_cast<size_t>(compiled.graph.size()), 0.0);
  for (const MeasuredTask& task : run.last_step_tasks) {
    double* entry = &times[kFields * static_cast<size_t>(task.task)];
    entry[0] = static_cast<double>(task.start_ns);
    entry[1] = static_cast<double>(task.transfer_ns);
    entry[2] = static_cast<double>(task.finish_ns);
    entry[3] = static_cast<double>(task.cpu_ns);
  }
  const std::vector<int32_t> world = world_group(comm.world_size());
  comm.all_reduce(std::span(times), world, ReduceOp::kSum);
  result.last_step_tasks.resize(static_cast<size_t>(compiled.graph.size()));
  for (TaskId id = 0; id < compiled.graph.size(); ++id) {
    const double* entry = &times[kFields * static_cast<size_t>(id)];
    result.last_step_tasks[static_cast<size_t>(id)] = {
        id, static_cast<int64_t>(entry[0]), static_cast<int64_t>(entry[1]),
        static_cast<int64_t>(entry[2]), static_cast<int64_t>(entry[3])};
  }
  return result;
}

}  // namespace strata
