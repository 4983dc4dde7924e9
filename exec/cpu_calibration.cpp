#include "exec/cpu_calibration.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/units.hpp"
#include "exec/inprocess_communicator.hpp"
#include "exec/trainer.hpp"
#include "kernels/cpu/kernels.hpp"
#include "models/ops.hpp"

namespace strata {

namespace {

constexpr DType kFp32 = DType::kFp32;
constexpr auto kFwd = Direction::kForward;
constexpr auto kBwd = Direction::kBackward;

// The calling thread's CPU time in seconds (POSIX CLOCK_THREAD_CPUTIME_ID): it advances only
// while the thread runs on a core.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The best time of one call of `run` on a core, over batches that each last at least
// `min_seconds`. Timed in the thread's CPU time, not wall time: what a kernel costs while it
// holds a core, without the time the host's scheduler gave the core to another thread (another
// rank, or another process), which the simulator models itself (sim/engine.hpp, core pools).
double best_seconds(const std::function<void()>& run, double min_seconds) {
  run();  // warm caches and pages
  double best = 1e30;
  for (int batch = 0; batch < 3; ++batch) {
    int64_t calls = 0;
    const double start = thread_cpu_seconds();
    double elapsed = 0;
    do {
      run();
      ++calls;
      elapsed = thread_cpu_seconds() - start;
    } while (elapsed < min_seconds);
    best = std::min(best, elapsed / static_cast<double>(calls));
  }
  return best;
}

std::vector<float> random_buffer(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

enum class Roof : uint8_t { kFlops, kMemory };

struct Sample {
  OpKind kind;
  Roof roof;
  OpShape op;
  double seconds;
  std::string what;
};

class Sweep {
 public:
  explicit Sweep(double min_seconds) : min_seconds_(min_seconds) {}

  void time(OpKind kind, Roof roof, const OpShape& op, std::string what,
            const std::function<void()>& run) {
    samples_.push_back({kind, roof, op, best_seconds(run, min_seconds_), std::move(what)});
  }
  const std::vector<Sample>& samples() const { return samples_; }
  void set_seconds(size_t sample, double seconds) { samples_[sample].seconds = seconds; }

 private:
  double min_seconds_;
  std::vector<Sample> samples_;
};

void sweep_matmul(Sweep& sweep) {
  for (const int64_t m : {128, 512, 2048}) {
    // Named variables, not a structured binding: the lambdas below capture them, which clang
    // refuses for structured bindings before clang 16 (the fuzz preset builds with clang 14).
    for (const auto& k_n :
         {std::pair<int64_t, int64_t>{64, 192}, {256, 256}, {256, 768}, {256, 1024}, {1024, 256}}) {
      const int64_t k = k_n.first;
      const int64_t n = k_n.second;
      const auto inp = random_buffer(m * k, 1);
      const auto w = random_buffer(n * k, 2);
      const auto bias = random_buffer(n, 3);
      const auto dout = random_buffer(m * n, 4);
      std::vector<float> out(static_cast<size_t>(m * n));
      std::vector<float> dinp(static_cast<size_t>(m * k));
      std::vector<float> dw(static_cast<size_t>(n * k));
      std::vector<float> db(static_cast<size_t>(n));
      const std::string shape = fmt::format("{}x{}x{}", m, n, k);
      sweep.time(
          OpKind::kMatmul, Roof::kFlops, matmul_op(m, n, k, kFwd, kFp32), "fwd " + shape,
          [&] { cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), m, k, n); });
      sweep.time(OpKind::kMatmul, Roof::kFlops, matmul_op(m, n, k, kBwd, kFp32), "bwd " + shape,
                 [&] {
                   cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                                        w.data(), m, k, n);
                 });
    }
  }
}

void sweep_attention(Sweep& sweep) {
  struct Shape {
    int64_t b, t, nh, hs;
  };
  for (const Shape s :
       {Shape{1, 64, 4, 32}, {4, 64, 8, 32}, {4, 128, 8, 32}, {8, 256, 8, 32}, {2, 256, 4, 64}}) {
    const int64_t c = s.nh * s.hs;
    const auto qkv = random_buffer(s.b * s.t * 3 * c, 5);
    const auto dout = random_buffer(s.b * s.t * c, 6);
    std::vector<float> out(static_cast<size_t>(s.b * s.t * c));
    std::vector<float> att(static_cast<size_t>(s.b * s.nh * s.t * s.t));
    std::vector<float> dqkv(qkv.size());
    const std::string shape = fmt::format("b{} t{} heads{} hs{}", s.b, s.t, s.nh, s.hs);
    sweep.time(OpKind::kAttention, Roof::kFlops,
               attention_op(s.b, s.t, s.nh, s.hs, s.nh, 0, kFwd, kFp32), "fwd " + shape, [&] {
                 cpu::attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.nh, s.hs);
               });
    sweep.time(OpKind::kAttention, Roof::kFlops,
               attention_op(s.b, s.t, s.nh, s.hs, s.nh, 0, kBwd, kFp32), "bwd " + shape, [&] {
                 cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.b, s.t,
                                         s.nh, s.hs);
               });
    // The executor runs flash attention as the reference kernels do (exec/runtime_compute.cpp):
    // the forward keeps no scores, the backward recomputes them first.
    sweep.time(OpKind::kFlashAttention, Roof::kFlops,
               flash_attention_op(s.b, s.t, s.nh, s.hs, s.nh, 0, kFwd, kFp32), "fwd " + shape, [&] {
                 cpu::attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.nh, s.hs);
               });
    sweep.time(OpKind::kFlashAttention, Roof::kFlops,
               flash_attention_op(s.b, s.t, s.nh, s.hs, s.nh, 0, kBwd, kFp32), "bwd " + shape, [&] {
                 cpu::attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.nh, s.hs);
                 cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.b, s.t,
                                         s.nh, s.hs);
               });
  }
}

void sweep_rowwise(Sweep& sweep) {
  // Named variables, not a structured binding, for the lambdas' sake (sweep_matmul).
  for (const auto& rows_width :
       {std::pair<int64_t, int64_t>{256, 256}, {1024, 256}, {4096, 256}, {4096, 1024}}) {
    const int64_t rows = rows_width.first;
    const int64_t width = rows_width.second;
    const int64_t n = rows * width;
    const auto inp = random_buffer(n, 7);
    const auto dout = random_buffer(n, 8);
    const auto w = random_buffer(width, 9);
    std::vector<float> out(static_cast<size_t>(n)), dinp(static_cast<size_t>(n));
    std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
    std::vector<float> dw(static_cast<size_t>(width)), db(static_cast<size_t>(width));
    const std::string shape = fmt::format("{}x{}", rows, width);
    sweep.time(OpKind::kNorm, Roof::kMemory, norm_op(rows, width, kFwd, kFp32), "fwd " + shape,
               [&] {
                 cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                                        w.data(), rows, width);
               });
    sweep.time(OpKind::kNorm, Roof::kMemory, norm_op(rows, width, kBwd, kFp32), "bwd " + shape,
               [&] {
                 cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                                         w.data(), mean.data(), rstd.data(), rows, width);
               });
    // A residual add with its bias: memory-bound (the plan's 2 FLOPs and 3 tensors per element).
    sweep.time(OpKind::kElementwise, Roof::kMemory, elementwise_op(n, 2, 3, kFwd, kFp32),
               "residual " + shape, [&] {
                 cpu::residual_forward(out.data(), inp.data(), dout.data(), w.data(), rows, width,
                                       static_cast<const float*>(nullptr), 1.0f);
               });
    // GELU (tanh form): bound by its arithmetic (the plan's 8 FLOPs per element).
    sweep.time(OpKind::kElementwise, Roof::kFlops, elementwise_op(n, 8, 2, kFwd, kFp32),
               "gelu fwd " + shape, [&] { cpu::gelu_forward(out.data(), inp.data(), n); });
    sweep.time(OpKind::kElementwise, Roof::kFlops, elementwise_op(n, 8, 2, kBwd, kFp32),
               "gelu bwd " + shape,
               [&] { cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), n); });
  }
}

void sweep_embedding_loss_optimizer(Sweep& sweep) {
  const int64_t width = 256;
  const int64_t vocab = 256;
  for (const int64_t tokens : {256, 1024, 4096}) {
    std::vector<int32_t> ids(static_cast<size_t>(tokens));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % vocab);
    const auto wte = random_buffer(vocab * width, 10);
    const auto dout = random_buffer(tokens * width, 11);
    std::vector<float> out(static_cast<size_t>(tokens * width));
    std::vector<float> dwte(wte.size());
    const std::string shape = fmt::format("{} tokens", tokens);
    sweep.time(OpKind::kEmbedding, Roof::kMemory, embedding_op(tokens, width, vocab, kFwd, kFp32),
               "fwd " + shape, [&] {
                 cpu::embedding_forward<float>(out.data(), ids.data(), wte.data(), nullptr, 0,
                                               vocab, 1, tokens, width);
               });
    sweep.time(OpKind::kEmbedding, Roof::kMemory, embedding_op(tokens, width, vocab, kBwd, kFp32),
               "bwd " + shape, [&] {
                 cpu::embedding_backward<float>(dwte.data(), nullptr, dout.data(), ids.data(), 0,
                                                vocab, 1, tokens, width);
               });
    const auto logits = random_buffer(tokens * vocab, 12);
    std::vector<float> maxes(static_cast<size_t>(tokens)), sums(maxes.size()), target(maxes.size()),
        losses(maxes.size()), dlogits(logits.size());
    sweep.time(OpKind::kLoss, Roof::kFlops, loss_op(tokens, vocab, kFwd), "fwd " + shape, [&] {
      cpu::row_max(maxes.data(), logits.data(), tokens, vocab);
      cpu::cross_entropy_partials(sums.data(), target.data(), logits.data(), maxes.data(),
                                  ids.data(), 0, tokens, vocab);
      cpu::cross_entropy_losses(losses.data(), sums.data(), maxes.data(), target.data(), tokens);
    });
    sweep.time(OpKind::kLoss, Roof::kFlops, loss_op(tokens, vocab, kBwd), "bwd " + shape, [&] {
      cpu::cross_entropy_backward(dlogits.data(), logits.data(), maxes.data(), sums.data(),
                                  ids.data(), 0, 1.0f, tokens, vocab);
    });
  }
  for (const int64_t params : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 22}) {
    auto p = random_buffer(params, 13);
    const auto g = random_buffer(params, 14);
    std::vector<float> m(static_cast<size_t>(params)), v(static_cast<size_t>(params));
    int64_t step = 0;
    sweep.time(OpKind::kOptimizer, Roof::kMemory, optimizer_op(params, kFp32),
               fmt::format("{} parameters", params), [&] {
                 cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), params, {}, ++step, 1.0);
               });
  }
}

// One core's copy bandwidth (read + write), GB/s, while every core copies.
double copy_bandwidth_gbps(int64_t cores, double min_seconds) {
  const int64_t n = int64_t{1} << 24;  // 64 MiB of floats
  std::vector<double> seconds(static_cast<size_t>(cores));
  std::vector<std::thread> threads;
  for (size_t core = 0; core < seconds.size(); ++core) {
    threads.emplace_back([&, core] {
      const auto src = random_buffer(n, 15);
      std::vector<float> dst(static_cast<size_t>(n));
      seconds[core] = best_seconds(
          [&] { std::memcpy(dst.data(), src.data(), static_cast<size_t>(n) * sizeof(float)); },
          min_seconds);
    });
  }
  for (std::thread& thread : threads) thread.join();
  double mean = 0;
  for (const double s : seconds) mean += s / static_cast<double>(cores);
  return 2.0 * static_cast<double>(n) * sizeof(float) / mean / kBytesPerGB;
}

struct LinearFit {
  double intercept_s = 0;
  double seconds_per_byte = 0;
};

// In-process all-reduces between 2 thread-ranks alone on the host (each on a core of its own),
// least squares of a call's time against bytes: the cost of the collective itself (waking the
// peer, reading its buffer, summing, copying). Waiting for a core while other ranks hold them is
// not in it: the simulator models that (sim/engine.hpp, core pools), so measuring it here with
// every rank busy would count it twice.
LinearFit fit_all_reduce(nlohmann::json& cases) {
  const int32_t world_size = 2;
  const std::vector<std::vector<int32_t>> pairs = {{0, 1}};
  std::vector<std::pair<double, double>> points;
  for (const int64_t elements : {1024, 16384, 262144, 1048576}) {
    InProcessWorld world(world_size);
    std::vector<double> pair_seconds(pairs.size());
    std::vector<std::thread> threads;
    for (int32_t rank = 0; rank < world_size; ++rank) {
      threads.emplace_back([&, rank] {
        const std::vector<int32_t>& group = pairs[static_cast<size_t>(rank / 2)];
        std::unique_ptr<Communicator> comm = world.communicator(rank);
        comm->register_groups(pairs);
        auto data = random_buffer(elements, 16 + static_cast<uint32_t>(rank));
        // Both ranks make the same number of calls (a time limit per rank could leave one
        // waiting for a partner that stopped): about 16 MiB moved per batch.
        const int64_t calls = std::clamp<int64_t>((int64_t{1} << 22) / elements, 8, 4096);
        double best = 1e30;
        for (int batch = 0; batch < 3; ++batch) {
          comm->barrier();
          const auto start = std::chrono::steady_clock::now();
          for (int64_t call = 0; call < calls; ++call)
            comm->all_reduce(std::span(data), group, ReduceOp::kSum);
          const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
          best = std::min(best, elapsed.count() / static_cast<double>(calls));
        }
        if (rank % 2 == 0) pair_seconds[static_cast<size_t>(rank / 2)] = best;
      });
    }
    for (std::thread& thread : threads) thread.join();
    double seconds = 0;
    for (const double s : pair_seconds) seconds += s / static_cast<double>(pair_seconds.size());
    const double bytes = static_cast<double>(elements) * sizeof(float);
    points.emplace_back(bytes, seconds);
    cases.push_back({{"op", "all_reduce"},
                     {"group_size", 2},
                     {"concurrent_ranks", world_size},
                     {"bytes", bytes},
                     {"seconds", seconds}});
  }
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const auto n = static_cast<double>(points.size());
  LinearFit fit{};
  fit.seconds_per_byte = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  fit.intercept_s = std::max(0.0, (sy - fit.seconds_per_byte * sx) / n);
  return fit;
}

// How long a thread keeps a core while other threads wait for one: 2 x cores threads spin on
// the clock for `seconds`, each noting its runs (stretches without a gap over 20 us, the gaps
// being the time other threads held the core); the median run. It is the scheduler's time slice
// as this machine applies it (Linux EEVDF's base slice, rounded up to the timer tick that
// preempts), in ns.
int64_t measure_slice_ns(int64_t cores, double seconds) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<int64_t>> runs(static_cast<size_t>(2 * cores));
  std::vector<std::thread> threads;
  for (std::vector<int64_t>& mine : runs) {
    threads.emplace_back([&mine, seconds] {
      const auto end = Clock::now() + std::chrono::duration<double>(seconds);
      auto run_start = Clock::now();
      auto last = run_start;
      while (last < end) {
        const auto now = Clock::now();
        if (now - last > std::chrono::microseconds(20)) {
          mine.push_back(
              std::chrono::duration_cast<std::chrono::nanoseconds>(last - run_start).count());
          run_start = now;
        }
        last = now;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<int64_t> all;
  for (const std::vector<int64_t>& mine : runs) {
    // The first run starts before every thread was running; the rest are whole slices.
    all.insert(all.end(), mine.begin() + std::min<size_t>(1, mine.size()), mine.end());
  }
  if (all.empty()) return 0;  // never preempted: more cores than the threads could fill
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2),
                   all.end());
  return all[all.size() / 2];
}

// [[size, efficiency], ...] in increasing size: samples of one op kind on one roof, the
// efficiency each needed to take its measured time; equal sizes averaged.
nlohmann::json curve(const std::vector<Sample>& samples, OpKind kind, Roof roof, double peak_flops,
                     double bandwidth) {
  std::map<double, std::pair<double, int>> by_size;
  for (const Sample& s : samples) {
    if (s.kind != kind || s.roof != roof) continue;
    const double size =
        roof == Roof::kFlops ? static_cast<double>(s.op.flops) : static_cast<double>(s.op.bytes);
    const double rate = size / s.seconds;
    const double efficiency =
        std::clamp(rate / (roof == Roof::kFlops ? peak_flops : bandwidth), 1e-4, 1.0);
    auto& [sum, count] = by_size[size];
    sum += efficiency;
    ++count;
  }
  nlohmann::json points = nlohmann::json::array();
  for (const auto& [size, entry] : by_size) points.push_back({size, entry.first / entry.second});
  if (points.empty()) points.push_back({1.0, 1.0});  // the roof not measured: never binding
  return points;
}

// Every core runs the whole sweep at once, each on its own buffers, as every core runs a rank
// while a plan trains: the kernels meet the contention they meet then (memory bandwidth and
// caches shared between cores). A case's time is the mean over the cores.
Sweep sweep_on_every_core(int64_t cores, double min_seconds) {
  std::vector<Sweep> sweeps(static_cast<size_t>(cores), Sweep(min_seconds));
  std::vector<std::thread> threads;
  for (Sweep& sweep : sweeps) {
    threads.emplace_back([&sweep] {
      sweep_matmul(sweep);
      sweep_attention(sweep);
      sweep_rowwise(sweep);
      sweep_embedding_loss_optimizer(sweep);
    });
  }
  for (std::thread& thread : threads) thread.join();
  Sweep mean = sweeps.front();
  for (size_t i = 0; i < mean.samples().size(); ++i) {
    double seconds = 0;
    for (const Sweep& sweep : sweeps) seconds += sweep.samples()[i].seconds;
    mean.set_seconds(i, seconds / static_cast<double>(cores));
  }
  return mean;
}

}  // namespace

nlohmann::json calibrate_cpu(const CpuCalibrationOptions& options) {
  cpu::set_matmul_threads(1);  // as every rank of a multi-rank run
  const double min_s = options.seconds_per_case;
  const int64_t cores = std::max<unsigned>(1, std::thread::hardware_concurrency());
  const Sweep sweep = sweep_on_every_core(cores, min_s);

  double peak_flops = 0;
  for (const Sample& s : sweep.samples()) {
    if (s.kind == OpKind::kMatmul)
      peak_flops = std::max(peak_flops, static_cast<double>(s.op.flops) / s.seconds);
  }
  const double bandwidth_gbps = copy_bandwidth_gbps(cores, min_s);
  const double bandwidth = bandwidth_gbps * kBytesPerGB;
  nlohmann::json cases = nlohmann::json::array();
  for (const Sample& s : sweep.samples()) {
    cases.push_back({{"op", to_string(s.kind)},
                     {"case", s.what},
                     {"flops", s.op.flops},
                     {"bytes", s.op.bytes},
                     {"seconds", s.seconds}});
  }
  const LinearFit comm = fit_all_reduce(cases);
  const int64_t slice_ns = measure_slice_ns(cores, 0.5);
  // A ring all-reduce of S bytes over 2 ranks takes 2 (latency + S / (2 B)) = 2 latency + S / B.
  const double link_gbps = 1.0 / comm.seconds_per_byte / kBytesPerGB;
  const double latency_us = comm.intercept_s / 2 * 1e6;

  nlohmann::json ops;
  // Every op kind the calibration format has a table for, under its name (to_string).
  constexpr OpKind kinds[] = {OpKind::kMatmul, OpKind::kAttention,   OpKind::kFlashAttention,
                              OpKind::kNorm,   OpKind::kElementwise, OpKind::kEmbedding,
                              OpKind::kLoss,   OpKind::kOptimizer};
  for (const OpKind kind : kinds) {
    ops[to_string(kind)] = {
        {"flops_efficiency", curve(sweep.samples(), kind, Roof::kFlops, peak_flops, bandwidth)},
        {"memory_efficiency", curve(sweep.samples(), kind, Roof::kMemory, peak_flops, bandwidth)}};
  }
  const double peak_tflops = peak_flops / 1e12;
  const double memory_gb = static_cast<double>(host_bytes_per_rank(options.ranks)) / kBytesPerGB;
  nlohmann::json device = {
      {"name", "cpu-host"},
      {"peak_tflops", {{"bf16", peak_tflops}, {"fp16", peak_tflops}, {"fp32", peak_tflops}}},
      {"hbm_gb", memory_gb},
      {"hbm_bw_gbps", bandwidth_gbps},
      {"launch_overhead_us", 0},
      {"price_usd_per_hour", 0},
      {"host_cores", cores}};
  if (slice_ns > 0) device["host_slice_us"] = static_cast<double>(slice_ns) / 1e3;
  const nlohmann::json link = {{"bw_gbps", link_gbps}, {"latency_us", 0}};
  const nlohmann::json protocol = nlohmann::json::array({{{"protocol", "Simple"},
                                                          {"max_bytes", 0},
                                                          {"latency_us", latency_us},
                                                          {"bw_efficiency", 1}}});
  const nlohmann::json cluster = {
      {"name", "cpu-host"},
      {"device", device},
      {"gpus_per_node", options.ranks},
      {"max_nodes", 1},
      {"intra_node", {{"fabric", "nvswitch"}, {"bw_gbps", link_gbps}, {"latency_us", 0}}},
      {"pcie", link},
      {"inter_node",
       {{"nics_per_node", 1},
        {"nic_bw_gbps", link_gbps},
        {"nic_latency_us", 0},
        {"topology", "fat-tree"},
        {"oversubscription", 1},
        {"nodes_per_leaf", 1},
        {"switch_latency_us", 0}}},
      {"collectives",
       {{"in_switch_reduction", false},
        {"nvlink", protocol},
        {"net", protocol},
        {"tree_max_bytes", 0}}}};
  return {
      {"devices",
       {{{"device", "cpu-host"}, {"comm_slowdown", 0}, {"launch_overhead_us", 0}, {"ops", ops}}}},
      {"cluster", cluster},
      {"measurements",
       {{"threads_per_rank", 1},
        {"host_cores", cores},
        {"slice_us", static_cast<double>(slice_ns) / 1e3},
        {"cases", cases}}}};
}

}  // namespace strata
