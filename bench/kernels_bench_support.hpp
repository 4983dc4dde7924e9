#pragma once
// What strata_bench_kernels (bench/kernels_bench.cpp) and its cases (bench/kernels_bench_cases.cpp)
// share: the targets and constants, device buffers with seeded random fills, CUDA events, and the
// Timer that times a launch as kernels_bench.cpp's header comment says.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata::kernels_bench {

using cuda::bf16;
using cuda::Context;

constexpr const char* kProgram = "strata_bench_kernels";
// The targets: memory-bound kernels at 70% of the copy rate; the tiled attention forward
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
inline uint16_t bf16_bits(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// A buffer of count values uniform in [lo, hi): kFillBlock values drawn on the host, copied up,
// then repeated on the device by doubling copies until the buffer is full. Never zeros: a product
// of zeros runs faster than one of real data (METHOD.md).
template <typename T>
inline DeviceBuffer<T> random_buffer(int64_t count, double lo, double hi) {
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
inline std::vector<int32_t> draw_tokens(int64_t count, int64_t vocab, uint64_t seed) {
  Random random{seed};
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (int32_t& id : tokens) {
    id = static_cast<int32_t>(random.next() % static_cast<uint64_t>(vocab));
  }
  return tokens;
}

inline int64_t distinct_count(const std::vector<int32_t>& tokens) {
  return static_cast<int64_t>(std::unordered_set<int32_t>(tokens.begin(), tokens.end()).size());
}

inline DeviceBuffer<int32_t> upload(const std::vector<int32_t>& host) {
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

}  // namespace strata::kernels_bench
