#include "cli/train_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/number_flags.hpp"
#include "cli/plan_options.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "exec/checkpoint.hpp"
#include "exec/trainer.hpp"
#include "plan/plan_json.hpp"
#include "sim/trace.hpp"
#if STRATA_HAVE_CUDA_BACKEND
#include "exec/cuda_backend.hpp"
#endif
#if STRATA_HAVE_NCCL_COMMUNICATOR
#include "exec/nccl_communicator.hpp"
#endif
#if STRATA_HAVE_MPI
#include <mpi.h>

#include "exec/mpi_check.hpp"
#include "exec/mpi_communicator.hpp"
#endif

namespace strata::cli {

namespace {

constexpr const char* kCommandLine = "command line";

struct TrainCommandOptions {
  PlanFlags flags;
  std::string backend = "cpu";
  std::string comm = "inprocess";
  int64_t steps = 10;
  std::string data;  // empty: the shipped text (default_data_path())
  double lr = 1e-3;
  uint64_t seed = 1337;
  double weight_decay = 0.1;
  double clip = 1.0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  std::optional<std::string> device_memory;
  std::string trace_path;
  std::string json_path;
};

// --comm: inprocess (ranks as threads), mpi (MPI processes; a device backend's buffers reduced
// through the staged communicator over MPI), or nccl (MPI processes, one GPU each, device
// buffers reduced by NCCL: --backend cuda only).
void check_comm(const TrainCommandOptions& options) {
  if (options.comm != "inprocess" && options.comm != "mpi" && options.comm != "nccl") {
    throw InputError(kCommandLine, "--comm", fmt::format("unknown communicator '{}'", options.comm),
                     "use --comm inprocess, mpi or nccl");
  }
  if (options.comm != "inprocess" && !STRATA_HAVE_MPI) {
    throw InputError(
        kCommandLine, "--comm",
        fmt::format("'{}' runs ranks as MPI processes, and this build has no MPI", options.comm),
        "install libopenmpi-dev and rebuild, or use --comm inprocess");
  }
  if (options.comm == "nccl" && options.backend != "cuda") {
    throw InputError(kCommandLine, "--comm",
                     "'nccl' reduces device buffers: it needs --backend cuda",
                     "add --backend cuda, or use --comm mpi");
  }
  if (options.comm == "nccl" && !STRATA_HAVE_NCCL_COMMUNICATOR) {
    throw InputError(kCommandLine, "--comm", "'nccl' is not built: this build found no NCCL",
                     "build where the CUDA toolkit's NCCL is (include/nccl.h, lib/libnccl.so), "
                     "or use --comm mpi");
  }
}

// The plan as `strata train` runs it: fp32 on the CPU host, with small defaults for the shape of
// a batch where the flags give none.
CompiledPlan compile_train_plan(TrainCommandOptions& options) {
  PlanFlags& flags = options.flags;
  if (options.backend != "cpu" && !(options.backend == "cuda" && STRATA_HAVE_CUDA_BACKEND)) {
    throw InputError(kCommandLine, "--backend",
                     fmt::format("'{}' is not built; this build runs {}", options.backend,
                                 STRATA_HAVE_CUDA_BACKEND ? "--backend cpu or cuda"
                                                          : "the cpu "
                                                            "backend"),
                     STRATA_HAVE_CUDA_BACKEND ? "use --backend cpu or --backend cuda"
                                              : "use --backend cpu, or build where the CUDA "
                                                "toolkit is for --backend cuda");
  }
  check_comm(options);
  // The CPU backend trains in fp32; the CUDA backend in fp32 (its kernels' parity variants, the
  // default) or bf16 (check_executable_model refuses other dtypes).
  if (options.backend == "cpu") {
    const std::string trains_in = "the CPU backend trains in fp32 (bf16 needs --backend cuda)";
    if (flags.dtype && *flags.dtype != "fp32") {
      throw InputError(kCommandLine, "--dtype", trains_in,
                       "drop --dtype, or give --backend cuda for bf16");
    }
    if (flags.bf16 || flags.fp16) {
      throw InputError(kCommandLine, flags.bf16 ? "--bf16" : "--fp16", trains_in,
                       "drop the flag, or give --backend cuda for bf16");
    }
  }
  if (!flags.dtype && !flags.bf16 && !flags.fp16) flags.dtype = "fp32";
  if (flags.model.empty() && flags.scenario.empty()) flags.model = "tiny-gpt";
  // The CPU host stands in for the cluster; a zoo cluster name satisfies the flag resolution.
  if (flags.cluster.empty()) flags.cluster = "dgx-a100";
  if (!flags.seq_len) flags.seq_len = 64;
  if (!flags.micro_batch) flags.micro_batch = 4;
  // Two micro-batches per DP replica unless told otherwise.
  if (!flags.global_batch) flags.global_batch = flags.dp.value_or(1) * *flags.micro_batch * 2;
  const PlanInputs inputs = resolve_plan_inputs(flags);
  check_executable_model(inputs.model, inputs.plan, inputs.model.name);
  const int64_t ranks = inputs.plan.gpus();
  int64_t bytes = host_bytes_per_rank(ranks);
  if (options.device_memory) {
    const std::optional<double> gib = parse_number(*options.device_memory);
    if (!gib || *gib <= 0) {
      throw InputError(kCommandLine, "--device-memory",
                       fmt::format("'{}' is not a positive number of GiB", *options.device_memory),
                       "e.g. --device-memory 2");
    }
    bytes = static_cast<int64_t>(*gib * kBytesPerGiB);
  }
  const ClusterSpec host = cpu_host_cluster(ranks, bytes);
  CompiledPlan compiled = compile_plan(inputs.model, host, inputs.plan, GraphMode::kFull);
  STRATA_ASSERT(compiled.validation.ok(), "the compiled task graph breaks its invariants");
  check_plan_fits(compiled);
  return compiled;
}

// The shipped text, found where a clone or an install puts it: scenarios/data/ under the working
// directory, else beside the program (build/default/cli/strata in a clone: three folders up; an
// install's bin/strata: share/strata/ one folder up). No path is compiled in.
std::string default_data_path() {
  const std::filesystem::path relative = "scenarios/data/kjv-genesis-exodus.txt";
  std::vector<std::filesystem::path> tried = {relative};
  std::error_code error;
  const std::filesystem::path program = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (std::filesystem::path dir = program.parent_path(); tried.size() < 12 && !dir.empty();
         dir = dir.parent_path()) {
      tried.push_back(dir / relative);
      tried.push_back(dir / "share/strata" / relative);
      if (dir == dir.root_path()) break;
    }
  }
  for (const std::filesystem::path& path : tried) {
    if (std::filesystem::is_regular_file(path, error)) return path.string();
  }
  throw InputError(kCommandLine, "--data",
                   fmt::format("not given, and the shipped text {} is neither under the working "
                               "directory nor beside the program",
                               relative.string()),
                   "give --data FILE (any text file), or run from the repository's root");
}

TrainOptions train_options(const TrainCommandOptions& options) {
  if (options.steps < 1) {
    throw InputError(kCommandLine, "--steps", "must be at least 1", "e.g. --steps 100");
  }
  // Written so that NaN fails each check (every comparison with NaN is false).
  if (!(options.lr > 0 && options.lr <= 1)) {
    throw InputError(kCommandLine, "--lr", fmt::format("must be in (0, 1], found {}", options.lr),
                     "e.g. --lr 1e-3");
  }
  if (!(options.weight_decay >= 0 && options.weight_decay <= 1)) {
    throw InputError(kCommandLine, "--weight-decay",
                     fmt::format("must be in [0, 1], found {}", options.weight_decay),
                     "e.g. --weight-decay 0.1");
  }
  if (!(options.clip >= 0 && std::isfinite(options.clip))) {
    throw InputError(kCommandLine, "--clip-grad",
                     fmt::format("must be a finite norm >= 0 (0: off), found {}", options.clip),
                     "e.g. --clip-grad 1.0");
  }
  if (options.checkpoint_every < 0 ||
      (options.checkpoint_every > 0 && options.checkpoint_dir.empty())) {
    throw InputError(kCommandLine, "--checkpoint-every",
                     "needs a positive count and --checkpoint-dir",
                     "e.g. --checkpoint-dir ckpt --checkpoint-every 5");
  }
  TrainOptions train;
  train.steps = options.steps;
  train.data_path = options.data.empty() ? default_data_path() : options.data;
  train.seed = options.seed;
  train.optimizer.adamw.lr = options.lr;
  train.optimizer.adamw.weight_decay = options.weight_decay;
  train.optimizer.clip_grad_norm = options.clip;
  train.checkpoint_dir = options.checkpoint_dir;
  train.checkpoint_every = options.checkpoint_every;
  train.resume = options.resume;
#if STRATA_HAVE_CUDA_BACKEND
  // Thread-ranks share device 0 (their collectives through the loopback communicator); MPI
  // processes take their node's devices (use_node_devices).
  if (options.backend == "cuda") {
    if (cuda_device_count() == 0) {
      throw InputError(kCommandLine, "--backend",
                       "'cuda' needs a CUDA device, and this machine's driver shows none",
                       "run on a machine with an NVIDIA GPU, or use --backend cpu");
    }
    train.device_backend = [](int32_t) { return make_cuda_backend(0); };
  }
#endif
  return train;
}

#if STRATA_HAVE_MPI && STRATA_HAVE_CUDA_BACKEND
// An MPI process takes its node's device at its node-local rank (in turn where there are fewer
// devices, each process's collectives then staged through the host and MPI); under --comm nccl
// each process needs a device of its own (NCCL refuses two ranks of a communicator on one GPU)
// and its device buffers are reduced by NCCL.
void use_node_devices(const TrainCommandOptions& options, TrainOptions& train) {
  MPI_Comm node = MPI_COMM_NULL;
  STRATA_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local = 0;
  int local_size = 0;
  STRATA_MPI_CHECK(MPI_Comm_rank(node, &local));
  STRATA_MPI_CHECK(MPI_Comm_size(node, &local_size));
  STRATA_MPI_CHECK(MPI_Comm_free(&node));
  const int devices = cuda_device_count();
  if (options.comm == "nccl" && local_size > devices) {
    throw InputError(kCommandLine, "mpirun -np",
                     fmt::format("{} processes on this node share its {} GPU(s); NCCL needs one "
                                 "GPU per rank",
                                 local_size, devices),
                     fmt::format("start at most {} processes per node, or use --comm mpi (ranks "
                                 "on one GPU reduce through the host and MPI)",
                                 devices));
  }
  train.device_backend = [device = local % devices](int32_t) { return make_cuda_backend(device); };
#if STRATA_HAVE_NCCL_COMMUNICATOR
  if (options.comm == "nccl") train.device_communicator = make_nccl_communicator;
#endif
}
#endif

void print_step(const StepReport& r, int64_t steps) {
  std::printf("step %4lld/%lld  loss %.4f  %9.0f tokens/s  %.3f s  grad norm %.3f\n",
              static_cast<long long>(r.step + 1), static_cast<long long>(steps), r.loss,
              r.tokens_per_s, r.step_time_s, r.grad_norm);
  std::fflush(stdout);
}

std::vector<OutputFile> train_outputs(const TrainCommandOptions& options,
                                      const CompiledPlan& compiled, const TrainResult& result) {
  std::vector<OutputFile> outputs;
  nlohmann::json losses = nlohmann::json::array();
  nlohmann::json times = nlohmann::json::array();
  nlohmann::json rates = nlohmann::json::array();
  nlohmann::json norms = nlohmann::json::array();
  for (const StepReport& r : result.steps) {
    losses.push_back(r.loss);
    times.push_back(r.step_time_s);
    rates.push_back(r.tokens_per_s);
    norms.push_back(r.grad_norm);
  }
  const nlohmann::json summary = {{"generator", "strata train"},
                                  {"backend", options.backend},
                                  {"comm", options.comm},
                                  {"model", compiled.model.name},
                                  {"plan", plan_to_json(compiled.plan)},
                                  {"ranks", compiled.plan.gpus()},
                                  {"first_step", result.first_step},
                                  {"losses", losses},
                                  {"step_times_s", times},
                                  {"tokens_per_s", rates},
                                  {"grad_norms", norms}};
  if (!options.json_path.empty()) outputs.push_back({options.json_path, summary.dump(2) + "\n"});
  if (!options.trace_path.empty()) {
    std::vector<TaskTiming> timings(result.last_step_tasks.size());
    std::vector<TimeNs> cpu_ns(timings.size());
    for (size_t i = 0; i < timings.size(); ++i) {
      const MeasuredTask& t = result.last_step_tasks[i];
      timings[i] = {t.start_ns, t.transfer_ns, t.finish_ns};
      cpu_ns[i] = t.cpu_ns;
    }
    std::vector<std::vector<MemorySample>> memory(compiled.graph.ranks().size());
    nlohmann::json metadata = summary;
    metadata["step_time_s"] = result.steps.back().step_time_s;
    metadata["measured_step"] = result.steps.back().step;
    outputs.push_back(
        {options.trace_path, trace_json(compiled, timings, memory, metadata, cpu_ns)});
  }
  return outputs;
}

int run_train(TrainCommandOptions& options) {
  const CompiledPlan compiled = compile_train_plan(options);
  TrainOptions train = train_options(options);
  // The header goes out with the first step, once the data and any checkpoint were accepted:
  // a refused run prints nothing on stdout.
  bool started = false;
  const auto on_step = [&](const StepReport& r) {
    if (!started) {
      std::printf("strata train: %s, %lld ranks as %s (dp %lld x tp %lld x pp %lld), %s\n",
                  compiled.model.name.c_str(), static_cast<long long>(compiled.plan.gpus()),
                  options.comm == "inprocess" ? "threads"
                  : options.comm == "mpi"     ? "MPI processes"
                                              : "MPI processes on NCCL",
                  static_cast<long long>(compiled.plan.dp),
                  static_cast<long long>(compiled.plan.tp),
                  static_cast<long long>(compiled.plan.pp), train.data_path.c_str());
      if (r.step > 0) {
        std::printf("resumed from %s (%lld steps done)\n",
                    checkpoint_step_dir(train.checkpoint_dir, r.step).c_str(),
                    static_cast<long long>(r.step));
      }
      started = true;
    }
    print_step(r, train.steps);
  };
  TrainResult result;
  bool writes_outputs = true;
  if (options.comm == "inprocess") {
    result = train_in_process(compiled, train, on_step);
  } else {
#if STRATA_HAVE_MPI
    STRATA_MPI_CHECK(MPI_Init(nullptr, nullptr));
    int size = 0;
    STRATA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    {
      MpiCommunicator comm;
      if (size != compiled.plan.gpus()) {
        throw InputError(
            kCommandLine, "mpirun -np",
            fmt::format("started {} processes; the plan has {} ranks", size, compiled.plan.gpus()),
            fmt::format("run mpirun -np {}", compiled.plan.gpus()));
      }
#if STRATA_HAVE_CUDA_BACKEND
      if (options.backend == "cuda") use_node_devices(options, train);
#endif
      result = train_rank(compiled, train, comm, on_step);
      writes_outputs = comm.rank() == 0;
    }
    STRATA_MPI_CHECK(MPI_Finalize());
#endif
  }
  if (writes_outputs) {
    const std::vector<OutputFile> outputs = train_outputs(options, compiled, result);
    write_files_atomically(outputs);
    for (const OutputFile& file : outputs) std::printf("wrote %s\n", file.path.c_str());
    if (train.checkpoint_every > 0) {
      std::printf("checkpoints every %lld steps in %s\n",
                  static_cast<long long>(train.checkpoint_every), train.checkpoint_dir.c_str());
    }
  }
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, std::function<int()>& run) {
  auto options = std::make_shared<TrainCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "train",
      "Run a plan for real: train a GPT-2- or Llama-style model on byte-level text, rank by "
      "rank");
  add_plan_flags(*command, options->flags);
  command
      ->add_option("--backend", options->backend,
                   "Where ranks compute: cpu (fp32), or cuda (fp32, or bf16 with --dtype bf16, "
                   "on CUDA devices; builds with the CUDA toolkit)")
      ->type_name("cpu|cuda");
  command
      ->add_option("--comm", options->comm,
                   "Ranks as threads of this process (inprocess), as MPI processes (mpi, under "
                   "mpirun -np GPUS), or as MPI processes reducing device buffers with NCCL, one "
                   "GPU each (nccl, with --backend cuda)")
      ->type_name("inprocess|mpi|nccl");
  command->add_option("--steps", options->steps, "Optimizer steps to run (default 10)");
  command
      ->add_option("--data", options->data,
                   "Training text, read as bytes (default: scenarios/data/kjv-genesis-exodus.txt)")
      ->type_name("FILE");
  command->add_option("--lr", options->lr, "AdamW learning rate (default 1e-3)");
  command->add_option("--seed", options->seed,
                      "Seed of the weights and the data order (default 1337)");
  command->add_option("--weight-decay", options->weight_decay,
                      "AdamW weight decay of 2-D weights (default 0.1)");
  command->add_option("--clip-grad", options->clip,
                      "Clip the global gradient norm to this (default 1.0; 0: off)");
  command->add_option("--checkpoint-dir", options->checkpoint_dir, "Where checkpoints go")
      ->type_name("DIR");
  command
      ->add_option("--checkpoint-every", options->checkpoint_every,
                   "Write a checkpoint every K steps (default 0: none)")
      ->type_name("K");
  command->add_flag("--resume", options->resume,
                    "Continue from the newest complete checkpoint in --checkpoint-dir");
  command
      ->add_option("--device-memory", options->device_memory,
                   "Memory of each rank in GiB (default: this host's available memory / ranks)")
      ->type_name("GIB");
  command->add_option("--json", options->json_path, "Write losses and step times as JSON")
      ->type_name("FILE");
  command
      ->add_option("--trace", options->trace_path,
                   "Write the last step's measured task times as a Chrome trace")
      ->type_name("FILE");
  command->callback([options, &run] { run = [options] { return run_train(*options); }; });
}

}  // namespace strata::cli
