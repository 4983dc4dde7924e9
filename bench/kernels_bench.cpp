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
// What each case counts (stated next to it below):
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
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata {
namespace {

using cuda::bf16;
using cuda::Context;

constexpr const char* kProgram = "strata_bench_kernels";
// The issue's targets: memory-bound kernels at 70% of the copy rate; the tiled attention forward
// at T = 8192 at 40% of the matmul rate.
constexpr double kMemoryTarget = 0.70;
constexpr double kAttentionTarget = 0.40;
constexpr int64_t kAttentionTargetT = 8192;
constexpr int kWarmups = 3;
constexpr int kDefaultRepetitions = 20;
constexpr double kLongCallMs = 100;  // a call longer than this is repeated at most kLongRepetitions
constexpr int kLongRepetitions = 5;
constexpr int64_t kCopyBytes = int64_t{2} << 30;
constexpr int64_t kSquareGemm = 8192;
constexpr int64_t kFillBlock = int64_t{1} << 20;  // values drawn on the host per buffer
// Bytes per element.
constexpr double kBf16 = 2;
constexpr double kF32 = 4;
constexpr double kI32 = 4;
constexpr double kF64 = 8;

// ---- Device memory, random fills, events ---------------------------------------------------

// count elements of T in device memory (none, and a null pointer, when count is 0).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t count) : count_(count) {
    if (count_ == 0) return;
    void* memory = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&memory, bytes()));
    data_ = static_cast<T*>(memory);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  T* get() const { return data_; }
  int64_t count() const { return count_; }
  size_t bytes() const { return static_cast<size_t>(count_) * sizeof(T); }

 private:
  T* data_ = nullptr;
  int64_t count_ = 0;
};

// SplitMix64 (Steele et al. 2014): a fixed sequence per seed, so runs draw the same inputs.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
};

// The bits of x rounded to the nearest bf16, ties to even (finite inputs only).
uint16_t bf16_bits(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// A buffer of count values uniform in [lo, hi): kFillBlock values drawn on the host, copied up,
// then repeated on the device by doubling copies until the buffer is full. Never zeros: a product
// of zeros runs faster than one of real data (METHOD.md).
template <typename T>
DeviceBuffer<T> random_buffer(int64_t count, double lo, double hi) {
  static uint64_t seed = 2024;
  Random random{seed++};
  DeviceBuffer<T> buffer(count);
  if (count == 0) return buffer;
  using Host = std::conditional_t<std::is_same_v<T, bf16>, uint16_t, T>;
  static_assert(sizeof(Host) == sizeof(T));
  std::vector<Host> host(static_cast<size_t>(std::min(count, kFillBlock)));
  for (Host& value : host) {
    const double drawn = random.uniform(lo, hi);
    if constexpr (std::is_same_v<T, bf16>) {
      value = bf16_bits(static_cast<float>(drawn));
    } else {
      value = static_cast<Host>(drawn);
    }
  }
  const auto block = static_cast<int64_t>(host.size());
  STRATA_CUDA_CHECK(
      cudaMemcpy(buffer.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  for (int64_t filled = block; filled < count; filled *= 2) {
    const int64_t copied = std::min(filled, count - filled);
    STRATA_CUDA_CHECK(cudaMemcpy(buffer.get() + filled, buffer.get(),
                                 static_cast<size_t>(copied) * sizeof(T),
                                 cudaMemcpyDeviceToDevice));
  }
  return buffer;
}

// count tokens uniform in [0, vocab), drawn from seed: a case draws its tokens when it is listed,
// to count the distinct table rows they touch, and uploads the same ones when it runs.
std::vector<int32_t> draw_tokens(int64_t count, int64_t vocab, uint64_t seed) {
  Random random{seed};
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (int32_t& id : tokens) {
    id = static_cast<int32_t>(random.next() % static_cast<uint64_t>(vocab));
  }
  return tokens;
}

int64_t distinct_count(const std::vector<int32_t>& tokens) {
  return static_cast<int64_t>(std::unordered_set<int32_t>(tokens.begin(), tokens.end()).size());
}

DeviceBuffer<int32_t> upload(const std::vector<int32_t>& host) {
  DeviceBuffer<int32_t> buffer(static_cast<int64_t>(host.size()));
  STRATA_CUDA_CHECK(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

class Event {
 public:
  Event() { STRATA_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream) { STRATA_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  // Milliseconds from begin to this event; both must have completed.
  double ms_since(const Event& begin) const {
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, begin.event_, event_));
    return ms;
  }
  void synchronize() const { STRATA_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

// ---- Timing ---------------------------------------------------------------------------------

struct Timing {
  double median_us = 0;
  double best_us = 0;
};

// Times launches on the context's stream as the header says.
class Timer {
 public:
  Timer(Context& ctx, int repetitions, int64_t l2_bytes)
      : ctx_(ctx),
        repetitions_(repetitions),
        flush_(random_buffer<float>(std::max<int64_t>(2 * l2_bytes, int64_t{64} << 20) / 4, -1, 1)),
        flush_sum_(1) {
    // Its own handle: the device pointer mode (the sum stays on the device, no host round trip)
    // must not change the handle the kernels use.
    STRATA_CUBLAS_CHECK(cublasCreate(&flush_cublas_));
    STRATA_CUBLAS_CHECK(cublasSetStream(flush_cublas_, ctx_.stream()));
    STRATA_CUBLAS_CHECK(cublasSetPointerMode(flush_cublas_, CUBLAS_POINTER_MODE_DEVICE));
  }
  ~Timer() { cublasDestroy(flush_cublas_); }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  Context& ctx() const { return ctx_; }

  Timing time(const std::function<void()>& launch) const {
    const cudaStream_t stream = ctx_.stream();
    Event begin, end;
    for (int i = 0; i < kWarmups; ++i) {
      flush_l2();
      if (i == kWarmups - 1) begin.record(stream);
      launch();
    }
    end.record(stream);
    end.synchronize();
    const int repetitions =
        end.ms_since(begin) > kLongCallMs ? std::min(repetitions_, kLongRepetitions) : repetitions_;
    std::vector<Event> begins(static_cast<size_t>(repetitions));
    std::vector<Event> ends(static_cast<size_t>(repetitions));
    for (size_t r = 0; r < begins.size(); ++r) {
      flush_l2();
      begins[r].record(stream);
      launch();
      ends[r].record(stream);
    }
    ends.back().synchronize();
    std::vector<double> us;
    for (size_t r = 0; r < begins.size(); ++r) us.push_back(1e3 * ends[r].ms_since(begins[r]));
    std::sort(us.begin(), us.end());
    const size_t mid = us.size() / 2;
    const double median = us.size() % 2 == 1 ? us[mid] : (us[mid - 1] + us[mid]) / 2;
    return {median, us.front()};
  }

 private:
  void flush_l2() const {
    STRATA_CUBLAS_CHECK(cublasSasum(flush_cublas_, static_cast<int>(flush_.count()), flush_.get(),
                                    1, flush_sum_.get()));
  }

  Context& ctx_;
  int repetitions_;
  DeviceBuffer<float> flush_;
  DeviceBuffer<float> flush_sum_;
  cublasHandle_t flush_cublas_ = nullptr;
};

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

// ---- The layers and their cases -------------------------------------------------------------

// One transformer layer's sizes, as the issue gives them.
struct Layer {
  std::string name;         // case ids start with it: "gpt2-1.5b/layernorm_forward"
  std::string description;  // its table's title
  int64_t b, t, c, nh, hs, hidden, vocab;
  bool llama;  // RMSNorm, SwiGLU, no biases, no position table; else LayerNorm, GELU, biases, wpe
  int64_t n() const { return b * t; }
  int64_t mlp_up_oc() const { return llama ? 2 * hidden : hidden; }
  // One layer's matrix parameters as the issue counts them: GPT-2 12 C^2 (QKV 3, projection 1,
  // MLP 8); Llama with MHA 4 C^2 + 3 C H (gate, up, down).
  int64_t params() const { return llama ? 4 * c * c + 3 * c * hidden : 12 * c * c; }
};

std::vector<Layer> layers() {
  return {
      {"gpt2-1.5b",
       "GPT-2 1.5B layer: B 8, T 1024, C 1600, NH 25, HS 64, MLP 6400 with GELU, LayerNorm, "
       "biases, vocabulary 50257",
       8, 1024, 1600, 25, 64, 6400, 50257, false},
      {"llama3-8b",
       "Llama 3 8B layer: B 1, T 8192, C 4096, NH 32, HS 128, run as multi-head attention (32 KV "
       "heads where Llama 3 has 8: our kernels have no GQA), MLP 14336 with SwiGLU, RMSNorm, no "
       "biases, vocabulary 128256",
       1, 8192, 4096, 32, 128, 14336, 128256, true},
  };
}

enum class Bound { kMemory, kCompute };

struct Case {
  std::string layer;
  std::string kernel;  // the kernels.hpp function
  std::string what;    // which product, for the matmuls ("qkv"); else empty
  std::string shape;
  Bound bound;
  double work;    // bytes read and written (kMemory) or flops (kCompute)
  double target;  // share of the ceiling the issue asks for; 0 where it sets none
  std::function<Timing(const Timer&)> run;  // allocates and fills its buffers, times the kernel

  std::string id() const { return layer + "/" + kernel + (what.empty() ? "" : "/" + what); }
  std::string label() const { return what.empty() ? kernel : kernel + " (" + what + ")"; }
};

std::string rows_shape(int64_t n, int64_t c) { return fmt::format("N {}, C {}", n, c); }

// One linear layer of the block: out (N,OC) = inp (N,C) @ weight^T (+ bias).
struct Linear {
  const char* what;
  int64_t c, oc;
  bool gelu_after;   // GPT-2's MLP up: the forward applies GELU (matmul_gelu_forward)
  bool gelu_before;  // GPT-2's MLP down: its input was gelu(pre_gelu); the backward applies dGELU
};

void add_matmul_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), c = layer.c, qkv = 3 * layer.nh * layer.hs;
  const std::vector<Linear> linears = {
      {"qkv", c, qkv, false, false},
      {"attn_proj", layer.nh * layer.hs, c, false, false},
      {layer.llama ? "mlp_gate_up" : "mlp_up", c, layer.mlp_up_oc(), !layer.llama, false},
      {"mlp_down", layer.hidden, c, false, !layer.llama},
  };
  const bool bias = !layer.llama;
  for (const Linear& linear : linears) {
    const int64_t in = linear.c, oc = linear.oc;
    const bool gelu = linear.gelu_after, dgelu = linear.gelu_before;
    const std::string shape = fmt::format("N {}, C {} -> OC {}{}", n, in, oc, bias ? ", bias" : "");
    // Forward: 2 N C OC flops (the bias and GELU epilogues are not counted).
    cases.push_back({layer.name, gelu ? "matmul_gelu_forward" : "matmul_forward", linear.what,
                     gelu ? shape + ", GELU" : shape, Bound::kCompute, 2.0 * n * in * oc, 0,
                     [=](const Timer& timer) {
                       const auto inp = random_buffer<bf16>(n * in, -1, 1);
                       const auto weight = random_buffer<bf16>(oc * in, -0.05, 0.05);
                       const auto b = random_buffer<bf16>(bias ? oc : 0, -0.05, 0.05);
                       const DeviceBuffer<bf16> out(n * oc);
                       const DeviceBuffer<bf16> pre_gelu(gelu ? n * oc : 0);
                       return timer.time([&] {
                         if (gelu) {
                           cuda::matmul_gelu_forward(timer.ctx(), out.get(), pre_gelu.get(),
                                                     inp.get(), weight.get(), b.get(), n, in, oc);
                         } else {
                           cuda::matmul_forward(timer.ctx(), out.get(), inp.get(), weight.get(),
                                                b.get(), n, in, oc);
                         }
                       });
                     }});
    // Backward: 4 N C OC flops, dinp = dout @ weight and dweight += dout^T @ inp (the bias's column
    // sums and the dGELU epilogue are not counted).
    cases.push_back({layer.name, "matmul_backward", linear.what, dgelu ? shape + ", dGELU" : shape,
                     Bound::kCompute, 4.0 * n * in * oc, 0, [=](const Timer& timer) {
                       const auto inp = random_buffer<bf16>(n * in, -1, 1);
                       const auto weight = random_buffer<bf16>(oc * in, -0.05, 0.05);
                       const auto dout = random_buffer<bf16>(n * oc, -0.01, 0.01);
                       const auto pre_gelu = random_buffer<bf16>(dgelu ? n * in : 0, -3, 3);
                       const auto dweight = random_buffer<float>(oc * in, -1e-3, 1e-3);
                       const auto dbias = random_buffer<float>(bias ? oc : 0, -1e-3, 1e-3);
                       const DeviceBuffer<bf16> dinp(n * in);
                       return timer.time([&] {
                         cuda::matmul_backward(timer.ctx(), dinp.get(), dweight.get(), dbias.get(),
                                               dout.get(), inp.get(), weight.get(), pre_gelu.get(),
                                               n, in, oc);
                       });
                     }});
  }
}

void add_norm_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), c = layer.c;
  const std::string shape = rows_shape(n, c);
  const auto add = [&](const char* kernel, double bytes, std::function<Timing(const Timer&)> run) {
    cases.push_back({layer.name, kernel, "", shape, Bound::kMemory, bytes, kMemoryTarget, run});
  };
  // residual_forward (no bias: at tp 1 the projection's bias is its product's epilogue):
  // read residual and branch 2 N C bf16; write out N C bf16.
  add("residual_forward", 3 * n * c * kBf16, [=](const Timer& timer) {
    const auto residual = random_buffer<bf16>(n * c, -1, 1);
    const auto branch = random_buffer<bf16>(n * c, -1, 1);
    const DeviceBuffer<bf16> out(n * c);
    return timer.time([&] {
      cuda::residual_forward(timer.ctx(), out.get(), residual.get(), branch.get(),
                             static_cast<const bf16*>(nullptr), n, c);
    });
  });
  if (!layer.llama) {
    // layernorm_forward: read inp N C bf16, weight and bias 2 C bf16; write out N C bf16, mean
    // and rstd 2 N fp32.
    add("layernorm_forward", (2 * n * c + 2 * c) * kBf16 + 2 * n * kF32, [=](const Timer& timer) {
      const auto inp = random_buffer<bf16>(n * c, -2, 2);
      const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
      const auto bias = random_buffer<bf16>(c, -0.5, 0.5);
      const DeviceBuffer<bf16> out(n * c);
      const DeviceBuffer<float> mean(n), rstd(n);
      return timer.time([&] {
        cuda::layernorm_forward(timer.ctx(), out.get(), mean.get(), rstd.get(), inp.get(),
                                weight.get(), bias.get(), n, c);
      });
    });
    // layernorm_backward with the residual stream's gradient added (dresidual): read dout, inp,
    // dresidual 3 N C bf16, weight C bf16, mean and rstd 2 N fp32; write dinp N C bf16; dweight
    // and dbias 2 C fp32 read and written.
    add("layernorm_backward", (4 * n * c + c) * kBf16 + 2 * n * kF32 + 4 * c * kF32,
        [=](const Timer& timer) {
          const auto inp = random_buffer<bf16>(n * c, -2, 2);
          const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
          const auto bias = random_buffer<bf16>(c, -0.5, 0.5);
          const auto dout = random_buffer<bf16>(n * c, -0.01, 0.01);
          const auto dresidual = random_buffer<bf16>(n * c, -0.01, 0.01);
          const auto dweight = random_buffer<float>(c, -1e-3, 1e-3);
          const auto dbias = random_buffer<float>(c, -1e-3, 1e-3);
          const DeviceBuffer<bf16> out(n * c), dinp(n * c);
          const DeviceBuffer<float> mean(n), rstd(n);
          cuda::layernorm_forward(timer.ctx(), out.get(), mean.get(), rstd.get(), inp.get(),
                                  weight.get(), bias.get(), n, c);
          return timer.time([&] {
            cuda::layernorm_backward(timer.ctx(), dinp.get(), dweight.get(), dbias.get(),
                                     dout.get(), inp.get(), weight.get(), mean.get(), rstd.get(),
                                     dresidual.get(), n, c);
          });
        });
    // residual_layernorm_forward (no residual bias, as residual_forward): read residual and branch
    // 2 N C bf16, weight and norm bias 2 C bf16; write residual_out and out 2 N C bf16, mean and
    // rstd 2 N fp32.
    add("residual_layernorm_forward", (4 * n * c + 2 * c) * kBf16 + 2 * n * kF32,
        [=](const Timer& timer) {
          const auto residual = random_buffer<bf16>(n * c, -1, 1);
          const auto branch = random_buffer<bf16>(n * c, -1, 1);
          const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
          const auto norm_bias = random_buffer<bf16>(c, -0.5, 0.5);
          const DeviceBuffer<bf16> residual_out(n * c), out(n * c);
          const DeviceBuffer<float> mean(n), rstd(n);
          return timer.time([&] {
            cuda::residual_layernorm_forward(timer.ctx(), residual_out.get(), out.get(), mean.get(),
                                             rstd.get(), residual.get(), branch.get(),
                                             static_cast<const bf16*>(nullptr), weight.get(),
                                             norm_bias.get(), n, c);
          });
        });
    return;
  }
  // rmsnorm_forward: read inp N C bf16, weight C bf16; write out N C bf16, rstd N fp32.
  add("rmsnorm_forward", (2 * n * c + c) * kBf16 + n * kF32, [=](const Timer& timer) {
    const auto inp = random_buffer<bf16>(n * c, -2, 2);
    const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
    const DeviceBuffer<bf16> out(n * c);
    const DeviceBuffer<float> rstd(n);
    return timer.time([&] {
      cuda::rmsnorm_forward(timer.ctx(), out.get(), rstd.get(), inp.get(), weight.get(), n, c);
    });
  });
  // rmsnorm_backward with dresidual: read dout, inp, dresidual 3 N C bf16, weight C bf16, rstd
  // N fp32; write dinp N C bf16; dweight C fp32 read and written.
  add("rmsnorm_backward", (4 * n * c + c) * kBf16 + n * kF32 + 2 * c * kF32,
      [=](const Timer& timer) {
        const auto inp = random_buffer<bf16>(n * c, -2, 2);
        const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
        const auto dout = random_buffer<bf16>(n * c, -0.01, 0.01);
        const auto dresidual = random_buffer<bf16>(n * c, -0.01, 0.01);
        const auto dweight = random_buffer<float>(c, -1e-3, 1e-3);
        const DeviceBuffer<bf16> out(n * c), dinp(n * c);
        const DeviceBuffer<float> rstd(n);
        cuda::rmsnorm_forward(timer.ctx(), out.get(), rstd.get(), inp.get(), weight.get(), n, c);
        return timer.time([&] {
          cuda::rmsnorm_backward(timer.ctx(), dinp.get(), dweight.get(), dout.get(), inp.get(),
                                 weight.get(), rstd.get(), dresidual.get(), n, c);
        });
      });
  // residual_rmsnorm_forward: read residual and branch 2 N C bf16, weight C bf16; write
  // residual_out and out 2 N C bf16, rstd N fp32.
  add("residual_rmsnorm_forward", (4 * n * c + c) * kBf16 + n * kF32, [=](const Timer& timer) {
    const auto residual = random_buffer<bf16>(n * c, -1, 1);
    const auto branch = random_buffer<bf16>(n * c, -1, 1);
    const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
    const DeviceBuffer<bf16> residual_out(n * c), out(n * c);
    const DeviceBuffer<float> rstd(n);
    return timer.time([&] {
      cuda::residual_rmsnorm_forward(timer.ctx(), residual_out.get(), out.get(), rstd.get(),
                                     residual.get(), branch.get(),
                                     static_cast<const bf16*>(nullptr), weight.get(), n, c);
    });
  });
}

void add_activation_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), h = layer.hidden;
  const auto add = [&](const char* kernel, const std::string& shape, double bytes,
                       std::function<Timing(const Timer&)> run) {
    cases.push_back({layer.name, kernel, "", shape, Bound::kMemory, bytes, kMemoryTarget, run});
  };
  if (!layer.llama) {
    const int64_t count = n * h;
    const std::string shape = fmt::format("{} (N {} x {})", count, n, h);
    // gelu_forward: read inp, write out, count bf16 each.
    add("gelu_forward", shape, 2 * count * kBf16, [=](const Timer& timer) {
      const auto inp = random_buffer<bf16>(count, -3, 3);
      const DeviceBuffer<bf16> out(count);
      return timer.time([&] { cuda::gelu_forward(timer.ctx(), out.get(), inp.get(), count); });
    });
    // gelu_backward: read inp and dout, write dinp, count bf16 each.
    add("gelu_backward", shape, 3 * count * kBf16, [=](const Timer& timer) {
      const auto inp = random_buffer<bf16>(count, -3, 3);
      const auto dout = random_buffer<bf16>(count, -0.01, 0.01);
      const DeviceBuffer<bf16> dinp(count);
      return timer.time(
          [&] { cuda::gelu_backward(timer.ctx(), dinp.get(), inp.get(), dout.get(), count); });
    });
    return;
  }
  const std::string shape = fmt::format("N {}, H {}", n, h);
  // swiglu_forward: read inp (N,2H) bf16; write out (N,H) bf16.
  add("swiglu_forward", shape, 3 * n * h * kBf16, [=](const Timer& timer) {
    const auto inp = random_buffer<bf16>(n * 2 * h, -3, 3);
    const DeviceBuffer<bf16> out(n * h);
    return timer.time([&] { cuda::swiglu_forward(timer.ctx(), out.get(), inp.get(), n, h); });
  });
  // swiglu_backward: read inp (N,2H) and dout (N,H) bf16; write dinp (N,2H) bf16.
  add("swiglu_backward", shape, 5 * n * h * kBf16, [=](const Timer& timer) {
    const auto inp = random_buffer<bf16>(n * 2 * h, -3, 3);
    const auto dout = random_buffer<bf16>(n * h, -0.01, 0.01);
    const DeviceBuffer<bf16> dinp(n * 2 * h);
    return timer.time(
        [&] { cuda::swiglu_backward(timer.ctx(), dinp.get(), inp.get(), dout.get(), n, h); });
  });
}

void add_attention_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t b = layer.b, t = layer.t, nh = layer.nh, hs = layer.hs;
  const int64_t qkv_count = b * t * 3 * nh * hs, out_count = b * t * nh * hs;
  const std::string shape = fmt::format("B {}, T {}, NH {}, HS {}, causal", b, t, nh, hs);
  // Causal flops as FlashAttention-2's benchmark counts them: the two products of the forward,
  // 2 * 2 B NH T T HS, halved by the mask; the backward 2.5x that (five products).
  const double forward_flops = 2.0 * 2.0 * b * nh * t * t * hs / 2;
  const double backward_flops = 2.5 * forward_flops;
  const auto add = [&](const char* kernel, double flops, double target,
                       std::function<Timing(const Timer&)> run) {
    cases.push_back({layer.name, kernel, "", shape, Bound::kCompute, flops, target, run});
  };
  // Path 1 keeps att (B,NH,T,T) bf16: 4 GiB at the Llama layer, and its backward as much again in
  // the context's scratch.
  add("attention_forward", forward_flops, 0, [=](const Timer& timer) {
    const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
    const DeviceBuffer<bf16> out(out_count), att(b * nh * t * t);
    return timer.time([&] {
      cuda::attention_forward(timer.ctx(), out.get(), att.get(), qkv.get(), b, t, nh, hs);
    });
  });
  add("attention_backward", backward_flops, 0, [=](const Timer& timer) {
    const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
    const auto dout = random_buffer<bf16>(out_count, -0.01, 0.01);
    const DeviceBuffer<bf16> out(out_count), att(b * nh * t * t), dqkv(qkv_count);
    cuda::attention_forward(timer.ctx(), out.get(), att.get(), qkv.get(), b, t, nh, hs);
    return timer.time([&] {
      cuda::attention_backward(timer.ctx(), dqkv.get(), dout.get(), qkv.get(), att.get(), b, t, nh,
                               hs);
    });
  });
  // Path 2, tiled: the issue's 40% target applies to its forward at T = 8192.
  add("flash_attention_forward", forward_flops, t == kAttentionTargetT ? kAttentionTarget : 0,
      [=](const Timer& timer) {
        const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
        const DeviceBuffer<bf16> out(out_count);
        const DeviceBuffer<float> lse(b * nh * t);
        return timer.time([&] {
          cuda::flash_attention_forward(timer.ctx(), out.get(), lse.get(), qkv.get(), b, t, nh, hs);
        });
      });
  add("flash_attention_backward", backward_flops, 0, [=](const Timer& timer) {
    const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
    const auto dout = random_buffer<bf16>(out_count, -0.01, 0.01);
    const DeviceBuffer<bf16> out(out_count), dqkv(qkv_count);
    const DeviceBuffer<float> lse(b * nh * t);
    cuda::flash_attention_forward(timer.ctx(), out.get(), lse.get(), qkv.get(), b, t, nh, hs);
    return timer.time([&] {
      cuda::flash_attention_backward(timer.ctx(), dqkv.get(), dout.get(), qkv.get(), out.get(),
                                     lse.get(), b, t, nh, hs);
    });
  });
}

void add_embedding_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t b = layer.b, t = layer.t, c = layer.c, v = layer.vocab, n = layer.n();
  const bool wpe = !layer.llama;  // Llama has no position table (RoPE rotates q and k)
  const std::string shape = fmt::format("B {}, T {}, C {}, V {}{}", b, t, c, v, wpe ? ", wpe" : "");
  // U: the distinct rows of the table the tokens touch (about 7,560 of 8,192 draws from 50,257).
  const std::vector<int32_t> tokens = draw_tokens(n, v, 11);
  const auto distinct = static_cast<double>(distinct_count(tokens));
  // embedding_forward: read tokens N int32, the U distinct wte rows U C bf16, wpe T C bf16
  // (GPT-2); write out N C bf16.
  cases.push_back({layer.name, "embedding_forward", "", shape, Bound::kMemory,
                   n * kI32 + (distinct * c + (wpe ? t * c : 0) + n * c) * kBf16, kMemoryTarget,
                   [=](const Timer& timer) {
                     const auto ids = upload(tokens);
                     const auto wte = random_buffer<bf16>(v * c, -0.1, 0.1);
                     const auto pos = random_buffer<bf16>(wpe ? t * c : 0, -0.1, 0.1);
                     const DeviceBuffer<bf16> out(n * c);
                     return timer.time([&] {
                       cuda::embedding_forward(timer.ctx(), out.get(), ids.get(), wte.get(),
                                               pos.get(), 0, v, b, t, c);
                     });
                   }});
  // embedding_backward: read dout N C bf16 and tokens N int32; the U distinct dwte rows U C fp32
  // and dwpe T C fp32 (GPT-2) read and written.
  cases.push_back({layer.name, "embedding_backward", "", shape, Bound::kMemory,
                   n * c * kBf16 + n * kI32 + 2 * (distinct * c + (wpe ? t * c : 0)) * kF32,
                   kMemoryTarget, [=](const Timer& timer) {
                     const auto ids = upload(tokens);
                     const auto dout = random_buffer<bf16>(n * c, -0.01, 0.01);
                     const auto dwte = random_buffer<float>(v * c, -1e-3, 1e-3);
                     const auto dwpe = random_buffer<float>(wpe ? t * c : 0, -1e-3, 1e-3);
                     return timer.time([&] {
                       cuda::embedding_backward(timer.ctx(), dwte.get(), dwpe.get(), dout.get(),
                                                ids.get(), 0, v, b, t, c);
                     });
                   }});
}

void add_loss_and_optimizer_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), v = layer.vocab, p = layer.params();
  // fused_cross_entropy, dlogits apart from logits (the step may pass the same buffer; the bytes
  // are the same): read logits (N,V) bf16 and targets N int32; write dlogits (N,V) bf16 and
  // losses N fp32.
  cases.push_back(
      {layer.name, "fused_cross_entropy", "", fmt::format("N {}, V {}", n, v), Bound::kMemory,
       2 * n * v * kBf16 + n * kI32 + n * kF32, kMemoryTarget, [=](const Timer& timer) {
         const auto logits = random_buffer<bf16>(n * v, -4, 4);
         const auto targets = upload(draw_tokens(n, v, 13));
         const DeviceBuffer<bf16> dlogits(n * v);
         const DeviceBuffer<float> losses(n);
         return timer.time([&] {
           cuda::fused_cross_entropy(timer.ctx(), losses.get(), dlogits.get(), logits.get(),
                                     targets.get(), 1.0f / static_cast<float>(n), n, v);
         });
       }});
  const std::string shape = fmt::format("{} parameters (one layer)", p);
  // adamw_update: read master, grad, m, v 4 P fp32 and the squared norm 1 fp64; write master, m,
  // v 3 P fp32 and param P bf16.
  cases.push_back({layer.name, "adamw_update", "", shape, Bound::kMemory,
                   7 * p * kF32 + p * kBf16 + kF64, kMemoryTarget, [=](const Timer& timer) {
                     const auto master = random_buffer<float>(p, -0.05, 0.05);
                     const auto grad = random_buffer<float>(p, -1e-3, 1e-3);
                     const auto m = random_buffer<float>(p, -1e-4, 1e-4);
                     const auto second = random_buffer<float>(p, 0, 1e-7);
                     const auto norm_squared = random_buffer<double>(1, 0.5, 2);
                     const DeviceBuffer<bf16> param(p);
                     const cuda::AdamWConfig config{3e-4, 0.9, 0.95, 1e-8, 0.1};
                     return timer.time([&] {
                       cuda::adamw_update(timer.ctx(), param.get(), master.get(), grad.get(),
                                          m.get(), second.get(), p, config, 10, norm_squared.get(),
                                          1.0);
                     });
                   }});
  // sum_of_squares: read x P fp32; the total 1 fp64 read and written.
  cases.push_back({layer.name, "sum_of_squares", "", shape, Bound::kMemory, p * kF32 + 2 * kF64,
                   kMemoryTarget, [=](const Timer& timer) {
                     const auto grad = random_buffer<float>(p, -1e-3, 1e-3);
                     const auto total = random_buffer<double>(1, 0, 1);
                     return timer.time(
                         [&] { cuda::sum_of_squares(timer.ctx(), total.get(), grad.get(), p); });
                   }});
}

std::vector<Case> layer_cases(const Layer& layer) {
  std::vector<Case> cases;
  add_matmul_cases(cases, layer);
  add_norm_cases(cases, layer);
  add_activation_cases(cases, layer);
  add_attention_cases(cases, layer);
  add_embedding_cases(cases, layer);
  add_loss_and_optimizer_cases(cases, layer);
  return cases;
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
    f.rate = f.share = "-";
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
      "(bench/kernels_bench.cpp states the count next to each case) against the copy rate, target "
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
  options.command = argv[0];
  for (int i = 1; i < argc; ++i) options.command += std::string(" ") + argv[i];
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
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
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
