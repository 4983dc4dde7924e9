#pragma once
// Training: every rank of a compiled plan runs its RankRuntime step after step; the trainer
// reports the step's loss (the mean over the global batch), time and gradient norm, writes and
// resumes checkpoints, and keeps the last step's measured task times for a trace. Ranks are
// threads of this process (train_in_process) or MPI processes (train_rank under mpirun, one rank
// per process).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "exec/rank_runtime.hpp"
#include "plan/compile.hpp"
#include "topologies/cluster_spec.hpp"

namespace strata {

struct TrainOptions {
  int64_t steps = 10;  // the run ends after step `steps` - 1 (a resumed run continues to it)
  std::string data_path;
  uint64_t seed = 1337;
  OptimizerConfig optimizer;
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: none)
  bool resume = false;
  // Where each rank computes: null, the CPU backend on host memory; else the backend this
  // returns for a rank (the CUDA backend, exec/cuda_backend.hpp), whose buffers are device
  // memory: its collectives then go through device_communicator's communicator, by default the
  // loopback one of the thread-ranks (exec/loopback_communicator.hpp), or for an MPI rank the
  // staged one over the run's own.
  std::function<std::unique_ptr<Backend>(int32_t rank)> device_backend;
  // With device_backend: the communicator of each rank's device buffers, made from the run's
  // own (`host`) and the rank's backend; null, the default above. The NCCL communicator
  // (exec/nccl_communicator.hpp) has this signature: make_nccl_communicator.
  std::function<std::unique_ptr<Communicator>(Communicator& host, Backend& backend)>
      device_communicator;
};

struct StepReport {
  int64_t step = 0;
  double loss = 0;         // mean token loss over the global batch
  double step_time_s = 0;  // the slowest rank's wall time
  double grad_norm = 0;
  double tokens_per_s = 0;
};

struct TrainResult {
  int64_t first_step = 0;  // > 0 when resumed
  std::vector<StepReport> steps;
  // The last step's measured times of every task of the graph, by task id (start, finish ns
  // from the step's start on the task's rank).
  std::vector<MeasuredTask> last_step_tasks;
  // The final weights, whole (TP shards and ZeRO-3 chunks put back together), by tensor name.
  std::map<std::string, std::vector<float>> weights;
};

// The CPU host as the cluster the executor's plans compile against: `ranks` ranks on one node,
// each with `bytes_per_rank` of memory.
ClusterSpec cpu_host_cluster(int64_t ranks, int64_t bytes_per_rank);

// Memory this host offers each of `ranks` ranks: MemAvailable (/proc/meminfo) / ranks.
int64_t host_bytes_per_rank(int64_t ranks);

// Refuses (InputError with the figures) a plan whose memory plan does not fit its device.
void check_plan_fits(const CompiledPlan& compiled);

// Verifies the checkpoint a --resume would load (InputError when missing, partial, corrupted or
// of another run); returns its step. Call before any rank starts, so nothing is written.
int64_t checkpoint_to_resume(const CompiledPlan& compiled, const TrainOptions& options);

// Trains with every rank as a thread of this process. `on_step` sees each step's report.
TrainResult train_in_process(const CompiledPlan& compiled, const TrainOptions& options,
                             const std::function<void(const StepReport&)>& on_step);

// Trains as rank comm.rank() of an MPI job (world size = the plan's GPUs). Every process returns
// the same reports; only rank 0's result holds the measured tasks.
TrainResult train_rank(const CompiledPlan& compiled, const TrainOptions& options,
                       Communicator& comm, const std::function<void(const StepReport&)>& on_step);

// The JSON object a checkpoint records and a resume must match: model, plan, seed, data.
std::string run_identity(const CompiledPlan& compiled, const TrainOptions& options);

}  // namespace strata
