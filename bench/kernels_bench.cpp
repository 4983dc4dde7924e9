// strata_bench_kernels: the CUDA kernels of kernels/cuda, in bf16, on the sizes of one layer of
// GPT-2 1.5B (B 8, T 1024, C 1600) and of Llama 3 8B (B 1, T 8192, C 4096), against two ceilings
// measured in the same run (issue 7):
//  - copy: cudaMemcpyAsync device to device of a 2 GiB buffer, counting the bytes read and the
//    bytes written (2 x 2 GiB per copy);
//  - matmul: cublasGemmEx with bf16 A, B and C and fp32 compute, at the layers' QKV and MLP-up
//    shapes and at 8192^3, counting 2 M N K flops; the best of them is the ceiling.
//
// Timing: W = 3 warm-up calls, then R calls (20 by default, 5 for a call over 100 ms), each
// between its own pair of CUDA events, with the L2 flushed before each outside the pair; the
// median is reported in microseconds. The flush reads a buffer of twice the L2's size
// (cublasSasum, one scalar written), so the L2 holds only clean lines of it when the kernel starts:
// every kernel reads its inputs from memory, and no dirty line left by the flush is written back
// during the timed call (a memset flush would leave the L2 full of them).
//
// What each case counts (stated next to it in bench/kernels_bench_cases.cpp):
//  - memory-bound kernels: the fewest bytes the op must read and write, each input read once and
//    each output written once (a parameter gradient that accumulates is read and written), over
//    the median time: GB/s and its share of the copy rate; target 70%;
//  - matmuls: 2 N C OC flops forward, 4 N C OC backward (dinp and dweight); attention, causal, as
//    FlashAttention-2 counts: forward 2 * 2 * B NH T T HS / 2, backward 2.5x the forward; TFLOP/s
//    and the share of the matmul ceiling; target 40% for the tiled attention forward at T = 8192.
//
// Usage: strata_bench_kernels [--only NAME] [--repetitions R] [--markdown FILE] [--commit SHA]
// Without a CUDA device it prints one line and exits 0. Missed targets are printed, not failures;
// the exit code is 1 when a case could not run (its row says why) and 2 for a bad option.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "bench/kernels_bench_cases.hpp"
#include "bench/kernels_bench_support.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata::kernels_bench {
namespace {

// ---- Ceilings -------------------------------------------------------------------------------

// out (M,N) = a (M,K) @ b (N,K)^T, row-major: cuBLAS's column-major out^T = b @ a^T, the layout of
// matmul_forward.
struct GemmShape {
  std::string name;
  int64_t m, n, k;
};

struct GemmFigure {
  GemmShape shape;
  Timing timing;
  double flops_per_s;
};

struct Ceilings {
  Timing copy;
  double copy_bytes_per_s = 0;  // 2 x kCopyBytes over the median
  std::vector<GemmFigure> gemms;
  double matmul_flops_per_s = 0;  // the best of gemms
};

Ceilings measure_ceilings(const Timer& timer, const std::vector<GemmShape>& shapes) {
  Ceilings ceilings;
  {
    const auto src = random_buffer<float>(kCopyBytes / 4, -1, 1);
    const DeviceBuffer<float> dst(kCopyBytes / 4);
    ceilings.copy = timer.time([&] {
      STRATA_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice,
                                        timer.ctx().stream()));
    });
    ceilings.copy_bytes_per_s = 2.0 * kCopyBytes / (ceilings.copy.median_us * 1e-6);
  }
  for (const GemmShape& shape : shapes) {
    const auto a = random_buffer<bf16>(shape.m * shape.k, -1, 1);
    const auto b = random_buffer<bf16>(shape.n * shape.k, -1, 1);
    const DeviceBuffer<bf16> out(shape.m * shape.n);
    const float alpha = 1, beta = 0;
    const auto m = static_cast<int>(shape.m), n = static_cast<int>(shape.n),
               k = static_cast<int>(shape.k);
    const Timing timing = timer.time([&] {
      STRATA_CUBLAS_CHECK(cublasGemmEx(timer.ctx().cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k,
                                       &alpha, b.get(), CUDA_R_16BF, k, a.get(), CUDA_R_16BF, k,
                                       &beta, out.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
    });
    const double flops = 2.0 * shape.m * shape.n * shape.k;
    ceilings.gemms.push_back({shape, timing, flops / (timing.median_us * 1e-6)});
    ceilings.matmul_flops_per_s =
        std::max(ceilings.matmul_flops_per_s, ceilings.gemms.back().flops_per_s);
  }
  return ceilings;
}

std::vector<GemmShape> gemm_shapes(const std::vector<Layer>& all) {
  std::vector<GemmShape> shapes;
  for (const Layer& layer : all) {
    shapes.push_back({layer.name + " qkv", layer.n(), 3 * layer.nh * layer.hs, layer.c});
    shapes.push_back({layer.name + (layer.llama ? " mlp_gate_up" : " mlp_up"), layer.n(),
                      layer.mlp_up_oc(), layer.c});
  }
  shapes.push_back({"square", kSquareGemm, kSquareGemm, kSquareGemm});
  return shapes;
}

// ---- Results and reports --------------------------------------------------------------------

struct Result {
  const Case* item;
  Timing timing;
  std::string error;  // why the case did not run; empty when it ran
};

struct Figures {
  std::string work;     // "52.4 MB" or "12.3 GFLOP"
  std::string rate;     // "3120 GB/s" or "612.4 TFLOP/s"
  std::string share;    // of the ceiling, "72.1%"
  std::string target;   // ">= 70%" or "-"
  std::string verdict;  // "PASS", "MISS" or "-"
};

Figures figures(const Result& result, const Ceilings& ceilings) {
  const Case& item = *result.item;
  const bool memory = item.bound == Bound::kMemory;
  Figures f;
  f.work = memory ? fmt::format("{:.1f} MB", item.work / 1e6)
                  : fmt::format("{:.1f} GFLOP", item.work / 1e9);
  f.target = item.target > 0 ? fmt::format(">= {:.0f}%", 100 * item.target) : "-";
  if (!result.error.empty()) {
    // Moved in, not assigned from a literal, on which GCC 12 at -O3 reports a false -Wrestrict.
    f.rate = std::string("-");
    f.share = std::string("-");
    f.verdict = item.target > 0 ? "not run" : "-";
    return f;
  }
  const double rate = item.work / (result.timing.median_us * 1e-6);
  const double share = rate / (memory ? ceilings.copy_bytes_per_s : ceilings.matmul_flops_per_s);
  f.rate =
      memory ? fmt::format("{:.0f} GB/s", rate / 1e9) : fmt::format("{:.1f} TFLOP/s", rate / 1e12);
  f.share = fmt::format("{:.1f}%", 100 * share);
  f.verdict = item.target <= 0 ? "-" : share >= item.target ? "PASS" : "MISS";
  return f;
}

constexpr const char* kRowFormat = "  {:<32} {:<38} {:>11} {:>9} {:>14} {:>6} {:>6} {}\n";

void print_row(const Result& result, const Ceilings& ceilings) {
  const Figures f = figures(result, ceilings);
  const std::string time =
      result.error.empty() ? fmt::format("{:.1f}", result.timing.median_us) : std::string("-");
  fmt::print(kRowFormat, result.item->label(), result.item->shape, f.work, time, f.rate, f.share,
             f.target, f.verdict);
  if (!result.error.empty()) fmt::print("    not run: {}\n", result.error);
  std::fflush(stdout);
}

struct RunInfo {
  int repetitions;
  std::string date;  // UTC
  std::string commit;
  std::string command;
  std::string device;
};

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &utc);
  return text;
}

// `git rev-parse --short HEAD` where it works (run from the repository), else "unknown".
std::string git_commit() {
  FILE* pipe = popen("git rev-parse --short HEAD 2>/dev/null", "r");
  if (pipe == nullptr) return "unknown";
  char line[64] = {};
  const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
  const int status = pclose(pipe);
  std::string commit = read && status == 0 ? line : "";
  while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r')) commit.pop_back();
  return commit.empty() ? "unknown" : commit;
}

std::string device_line(int device) {
  cudaDeviceProp prop{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int sm_khz = 0, memory_khz = 0, runtime = 0, driver = 0, major = 0, minor = 0, patch = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device));
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device));
  STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  STRATA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  STRATA_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
  STRATA_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &minor));
  STRATA_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &patch));
  return fmt::format(
      "{} (compute capability {}.{}), {} SMs, SM clock up to {} MHz, memory clock {} MHz, {}-bit "
      "bus, {:.0f} MB L2, {:.1f} GiB; CUDA runtime {}.{}, driver {}.{}, cuBLAS {}.{}.{}",
      prop.name, prop.major, prop.minor, prop.multiProcessorCount, sm_khz / 1000, memory_khz / 1000,
      prop.memoryBusWidth, prop.l2CacheSize / 1e6,
      static_cast<double>(prop.totalGlobalMem) / (1 << 30), runtime / 1000, runtime % 1000 / 10,
      driver / 1000, driver % 1000 / 10, major, minor, patch);
}

struct Section {
  const Layer* layer;
  std::vector<Result> results;
};

// text with its '|' escaped, to stand in a markdown table cell.
std::string table_cell(const std::string& text) {
  std::string cell;
  for (const char ch : text) cell += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return cell;
}

void write_markdown(const std::string& path, const RunInfo& info, const Ceilings& ceilings,
                    const std::vector<Section>& sections, const std::string& summary) {
  std::ofstream file(path);
  if (!file) throw std::runtime_error(fmt::format("cannot write {}: {}", path, strerror(errno)));
  std::string text = fmt::format(
      "# strata_bench_kernels: the CUDA kernels on one layer, against the copy and cuBLAS "
      "ceilings\n\n"
      "Measured {} at commit `{}` with `{}`.\n\n"
      "Device: {}.\n\n"
      "Each kernel runs in bf16 (fp32 arithmetic); each time is the median of up to {} calls "
      "after {} warm-up calls, each call between its own pair of CUDA events with the L2 flushed "
      "before it. Memory-bound kernels are rated by the fewest bytes they must read and write "
      "(bench/kernels_bench_cases.cpp states the count next to each case) against the copy rate, "
      "target "
      "70%; matmuls by 2 N C OC flops forward and 4 N C OC backward, attention by the causal "
      "flops as FlashAttention-2 counts them (forward 2 B NH T^2 HS, backward 2.5x), against the "
      "matmul ceiling; the tiled attention forward at T = 8192 has the target 40%. A missed target "
      "is reported, not a failure.\n\n",
      info.date, info.commit, info.command, info.device, info.repetitions, kWarmups);
  text +=
      "## Ceilings, measured in this run\n\n| ceiling | size | median (µs) | rate "
      "|\n|---|---|---|---|\n";
  text += fmt::format(
      "| device-to-device copy (cudaMemcpyAsync) | {:.2f} GiB, read + write counted | {:.1f} | "
      "**{:.0f} GB/s** (best call {:.0f} GB/s) |\n",
      kCopyBytes / double(1 << 30), ceilings.copy.median_us, ceilings.copy_bytes_per_s / 1e9,
      2.0 * kCopyBytes / (ceilings.copy.best_us * 1e-6) / 1e9);
  for (const GemmFigure& gemm : ceilings.gemms) {
    text += fmt::format(
        "| cuBLAS bf16 product, fp32 compute: {} | M {} x N {} x K {} | {:.1f} | {:.1f} TFLOP/s "
        "|\n",
        gemm.shape.name, gemm.shape.m, gemm.shape.n, gemm.shape.k, gemm.timing.median_us,
        gemm.flops_per_s / 1e12);
  }
  text += fmt::format("\nMatmul ceiling (the best product): **{:.1f} TFLOP/s**.\n",
                      ceilings.matmul_flops_per_s / 1e12);
  for (const Section& section : sections) {
    text += fmt::format("\n## {}\n\n{}.\n\n", section.layer->name, section.layer->description);
    text +=
        "| kernel | shape | counted | time (µs) | achieved | % of ceiling | target | result "
        "|\n|---|---|---|---|---|---|---|---|\n";
    for (const Result& result : section.results) {
      const Figures f = figures(result, ceilings);
      const std::string time = result.error.empty() ? fmt::format("{:.1f}", result.timing.median_us)
                                                    : "not run: " + table_cell(result.error);
      text += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", result.item->label(),
                          result.item->shape, f.work, time, f.rate, f.share, f.target, f.verdict);
    }
  }
  text += fmt::format("\n{}\n", summary);
  file << text;
  if (!file) throw std::runtime_error(fmt::format("cannot write {}", path));
}

// ---- Options and the run --------------------------------------------------------------------

struct Options {
  std::optional<std::string> markdown;
  std::optional<std::string> commit;
  std::string only;
  int repetitions = kDefaultRepetitions;
  std::string command;
};

constexpr const char* kUsage = R"(usage: strata_bench_kernels [OPTION...]
  --only NAME      run only the cases whose id contains NAME; ids are layer/kernel[/product],
                   e.g. gpt2-1.5b/layernorm_forward, llama3-8b/matmul_backward/mlp_down
                   (the ceilings always run)
  --repetitions R  timed calls per case (default 20; at most 5 for a call over 100 ms)
  --markdown FILE  also write the results as markdown (bench/results/h200-kernels.md)
  --commit SHA     the commit the markdown names (default: git rev-parse --short HEAD)
)";

// The options, or the message of a bad one.
std::variant<Options, std::string> parse_options(int argc, char** argv) {
  Options options;
  // The command as the markdown states it: the program and the markdown file by name alone, so
  // that a results file names no machine's paths.
  options.command = "strata_bench_kernels";
  for (int i = 1; i < argc; ++i) {
    const bool path = std::string_view(argv[i - 1]) == "--markdown";
    options.command.push_back(' ');
    options.command.append(path ? std::filesystem::path(argv[i]).filename().string() : argv[i]);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string option = argv[i];
    if (option == "--help" || option == "-h") continue;
    if (option != "--markdown" && option != "--commit" && option != "--only" &&
        option != "--repetitions") {
      return fmt::format("unknown option '{}' (try --help)", option);
    }
    if (i + 1 >= argc) return fmt::format("{} needs a value (try --help)", option);
    const std::string value = argv[++i];
    if (option == "--markdown") options.markdown = value;
    if (option == "--commit") options.commit = value;
    if (option == "--only") options.only = value;
    if (option == "--repetitions") {
      char* end = nullptr;
      const long repetitions = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || repetitions < 1 || repetitions > 10000) {
        return fmt::format("--repetitions wants a whole number from 1 to 10000, not '{}'", value);
      }
      options.repetitions = static_cast<int>(repetitions);
    }
  }
  return options;
}

// Runs one case; a case that throws (a shape a kernel refuses, memory it cannot get) records why
// and the run goes on, unless the device is left in an error state, which ends the run.
Result run_case(const Case& item, const Timer& timer) {
  Result result{&item, {}, ""};
  try {
    result.timing = item.run(timer);
  } catch (const std::exception& error) {
    result.error = error.what();
    cudaGetLastError();  // clears an error that does not outlive the call
    const cudaError_t state = cudaDeviceSynchronize();
    if (state != cudaSuccess) {
      throw std::runtime_error(fmt::format("{} left the device in error ({}: {}): {}", item.id(),
                                           cudaGetErrorName(state), cudaGetErrorString(state),
                                           result.error));
    }
  }
  return result;
}

int run(const Options& options, const std::vector<Layer>& all) {
  constexpr int kDevice = 0;
  STRATA_CUDA_CHECK(cudaSetDevice(kDevice));
  RunInfo info{options.repetitions, utc_now(), options.commit.value_or(git_commit()),
               options.command, device_line(kDevice)};
  int l2_bytes = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, kDevice));
  fmt::print("{}: CUDA kernels in bf16 on one layer of GPT-2 1.5B and of Llama 3 8B\n", kProgram);
  fmt::print("device: {}\ncommit: {}, {}\n", info.device, info.commit, info.date);
  fmt::print(
      "timing: median of {} calls (at most {} for a call over {:.0f} ms) after {} warm-ups, "
      "L2 flushed before each\n\n",
      options.repetitions, kLongRepetitions, kLongCallMs, kWarmups);

  Context ctx;
  const Timer timer(ctx, options.repetitions, l2_bytes);
  const Ceilings ceilings = measure_ceilings(timer, gemm_shapes(all));
  fmt::print("ceilings (measured now):\n");
  fmt::print(
      "  copy    {:.0f} GB/s  (cudaMemcpyAsync of {:.0f} GiB, read + write, median {:.1f} "
      "us; best call {:.0f} GB/s)\n",
      ceilings.copy_bytes_per_s / 1e9, kCopyBytes / double(1 << 30), ceilings.copy.median_us,
      2.0 * kCopyBytes / (ceilings.copy.best_us * 1e-6) / 1e9);
  for (const GemmFigure& gemm : ceilings.gemms) {
    fmt::print(
        "  matmul  {:.1f} TFLOP/s  cuBLAS bf16, fp32 compute, {} (M {} x N {} x K {}), "
        "median {:.1f} us\n",
        gemm.flops_per_s / 1e12, gemm.shape.name, gemm.shape.m, gemm.shape.n, gemm.shape.k,
        gemm.timing.median_us);
  }
  fmt::print("  matmul ceiling: {:.1f} TFLOP/s (the best)\n", ceilings.matmul_flops_per_s / 1e12);

  std::vector<std::vector<Case>> cases_by_layer;
  for (const Layer& layer : all) cases_by_layer.push_back(layer_cases(layer));
  std::vector<Section> sections;
  int met = 0, missed = 0, failed = 0;
  std::vector<std::string> misses;
  for (size_t l = 0; l < all.size(); ++l) {
    Section section{&all[l], {}};
    for (const Case& item : cases_by_layer[l]) {
      if (item.id().find(options.only) == std::string::npos) continue;
      if (section.results.empty()) {
        fmt::print("\n{}\n", all[l].description);
        fmt::print(kRowFormat, "kernel", "shape", "counted", "time us", "achieved", "% ceil",
                   "target", "");
      }
      section.results.push_back(run_case(item, timer));
      const Result& result = section.results.back();
      print_row(result, ceilings);
      if (!result.error.empty()) ++failed;
      if (item.target <= 0 || !result.error.empty()) continue;
      if (figures(result, ceilings).verdict == "PASS") {
        ++met;
      } else {
        ++missed;
        misses.push_back(item.id());
      }
    }
    if (!section.results.empty()) sections.push_back(std::move(section));
  }
  std::string summary = fmt::format("Targets: {} met, {} missed", met, missed);
  for (size_t i = 0; i < misses.size(); ++i) summary += (i == 0 ? " (" : ", ") + misses[i];
  summary += misses.empty() ? "." : ").";
  if (failed > 0) summary += fmt::format(" {} case(s) could not run (marked 'not run').", failed);
  fmt::print("\n{}\n", summary);
  if (options.markdown) {
    write_markdown(*options.markdown, info, ceilings, sections, summary);
    fmt::print("wrote {}\n", *options.markdown);
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace strata::kernels_bench

int main(int argc, char** argv) {
  using namespace strata::kernels_bench;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    }
  }
  const auto parsed = parse_options(argc, argv);
  if (const auto* message = std::get_if<std::string>(&parsed)) {
    fmt::print(stderr, "{}: {}\n", kProgram, *message);
    return 2;
  }
  const Options& options = std::get<Options>(parsed);
  const std::vector<Layer> all = layers();
  bool any = false;
  for (const Layer& layer : all) {
    for (const Case& item : layer_cases(layer))
      any = any || item.id().find(options.only) != std::string::npos;
  }
  if (!any) {
    fmt::print(stderr,
               "{}: --only '{}' matches no case (ids such as gpt2-1.5b/layernorm_forward)\n",
               kProgram, options.only);
    return 2;
  }
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    fmt::print("{}: no CUDA device ({}), nothing measured\n", kProgram,
               status != cudaSuccess ? cudaGetErrorName(status) : "cudaGetDeviceCount found 0");
    return 0;
  }
  try {
    return run(options, all);
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}: {}\n", kProgram, error.what());
    return 1;
  }
}
