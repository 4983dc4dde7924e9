// Device memory, CUDA events and the Sweep that times cases for strata calibrate --backend cuda.

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "exec/cuda_calibration_sweeps.hpp"
#include "kernels/cuda/check.hpp"

namespace strata::cuda_calibration {

DeviceBuffer::DeviceBuffer(size_t bytes, int fill) : bytes_(bytes) {
  STRATA_CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(bytes, 16)));
  STRATA_CUDA_CHECK(cudaMemset(data_, fill, bytes));
}

// Destructors do not throw: a failure while freeing is left to the next checked call to report.
DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

Event::Event() { STRATA_CUDA_CHECK(cudaEventCreate(&event_)); }
Event::~Event() { cudaEventDestroy(event_); }

Stream::Stream() { STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() { cudaStreamDestroy(stream_); }

double elapsed_seconds(const Event& start, const Event& end) {
  float milliseconds = 0;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start.get(), end.get()));
  return static_cast<double>(milliseconds) * 1e-3;
}

namespace {

// Seconds `calls` back-to-back calls of run take on stream, between two events.
double batch_seconds(cudaStream_t stream, const std::function<void()>& run, int64_t calls) {
  Event start;
  Event end;
  STRATA_CUDA_CHECK(cudaEventRecord(start.get(), stream));
  for (int64_t call = 0; call < calls; ++call) run();
  STRATA_CUDA_CHECK(cudaEventRecord(end.get(), stream));
  STRATA_CUDA_CHECK(cudaEventSynchronize(end.get()));
  return elapsed_seconds(start, end);
}

}  // namespace

double best_seconds(cudaStream_t stream, const std::function<void()>& run,
                    const TimingOptions& timing) {
  run();  // warm-up: cuBLASLt's heuristic, the scratch buffers, the caches
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double probe = batch_seconds(stream, run, 1);
  if (timing.min_seconds <= 0) return probe;
  const auto calls = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(timing.min_seconds / std::max(probe, 1e-7))), 1,
      timing.max_calls);
  double best = probe;
  for (int batch = 0; batch < timing.batches; ++batch) {
    best = std::min(best, batch_seconds(stream, run, calls) / static_cast<double>(calls));
  }
  return best;
}

Sweep::Sweep(cuda::Context& ctx, TimingOptions timing, size_t memory_budget_bytes, bool quick)
    : ctx_(ctx), timing_(timing), memory_budget_bytes_(memory_budget_bytes), quick_(quick) {}

bool Sweep::fits(size_t bytes, const std::string& what) {
  if (bytes <= memory_budget_bytes_) return true;
  skip(what, fmt::format("needs {:.1f} GB of device memory, over the budget of {:.1f} GB",
                         static_cast<double>(bytes) / 1e9,
                         static_cast<double>(memory_budget_bytes_) / 1e9));
  return false;
}

double Sweep::time(Sample sample, const std::function<void()>& run) {
  try {
    sample.seconds = best_seconds(ctx_.stream(), run, timing_);
  } catch (const std::invalid_argument& refusal) {
    skip(sample.what, refusal.what());
    return -1;
  }
  samples_.push_back(sample);
  return sample.seconds;
}

void Sweep::skip(std::string what, std::string reason) {
  skipped_.push_back({{"case", std::move(what)}, {"reason", std::move(reason)}});
}

std::vector<size_t> spread_indices(size_t count, int64_t max_cases) {
  std::vector<size_t> indices;
  if (count == 0) return indices;
  if (max_cases <= 0 || static_cast<size_t>(max_cases) >= count) {
    for (size_t i = 0; i < count; ++i) indices.push_back(i);
    return indices;
  }
  if (max_cases == 1) return {count - 1};  // the largest: the one nearest the ceiling
  const auto wanted = static_cast<size_t>(max_cases);
  for (size_t i = 0; i < wanted; ++i) indices.push_back(i * (count - 1) / (wanted - 1));
  return indices;
}

}  // namespace strata::cuda_calibration
