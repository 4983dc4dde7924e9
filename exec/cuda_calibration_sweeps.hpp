#pragma once
// The timed parts of strata calibrate --backend cuda (exec/cuda_calibration.hpp): device memory,
// a timer of CUDA events, and the sweeps, each filling a Sweep with samples (an op shape as the
// plan compiler counts it and the seconds one call took) or the cases it skipped and why.
// Internal to the calibration: cuda_calibration.cpp turns the samples into efficiency tables.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/cuda_calibration.hpp"
#include "kernels/cuda/context.hpp"
#include "models/ops.hpp"

namespace strata::cuda_calibration {

// cudaMalloc'd memory filled with one byte value: 0x3c makes every bf16 0x3c3c (about 0.0115)
// and every fp32 about 0.0115 too, finite values that no kernel's branch treats specially.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, int fill = 0x3c);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA event, destroyed with its owner.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A stream of its own, destroyed with its owner; it does not synchronize with the default stream.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Seconds from start to end, both recorded and complete.
double elapsed_seconds(const Event& start, const Event& end);

struct TimingOptions {
  double min_seconds = 0.02;  // each batch of calls lasts at least this long
  int batches = 3;            // the best batch counts
  int64_t max_calls = 1000;   // calls per batch at most
};

// The seconds one call of `run` takes on `stream`, timed with CUDA events: one warm-up call, one
// timed call that sizes the batches, then `batches` batches of back-to-back calls lasting at least
// min_seconds; the best batch's mean. With min_seconds 0 (quick), the single timed call.
double best_seconds(cudaStream_t stream, const std::function<void()>& run,
                    const TimingOptions& timing);

enum class Roof : uint8_t { kFlops, kMemory };

// One timed case. `op` counts FLOPs and bytes as the plan compiler's op shapes do; `seconds` is
// one call's time. Cases with in_table false are recorded but feed no efficiency table (dX and dW
// apart: the plan prices a product's backward as one op, their sum).
struct Sample {
  OpKind kind;
  Roof roof;
  OpShape op;
  double seconds;
  std::string what;
  std::string kernel;
  std::vector<std::string> uses;  // e.g. "llama3-8b tp2 qkv"
  bool in_table = true;
};

// The samples and skipped cases of a run, and how to time them.
class Sweep {
 public:
  Sweep(cuda::Context& ctx, TimingOptions timing, size_t memory_budget_bytes, bool quick);

  cuda::Context& ctx() const { return ctx_; }
  const TimingOptions& timing() const { return timing_; }
  bool quick() const { return quick_; }

  // Whether buffers of `bytes` in all fit the memory budget; when not, records the case as
  // skipped and returns false.
  bool fits(size_t bytes, const std::string& what);
  // Times run into a sample and returns its seconds. A shape the kernels refuse
  // (std::invalid_argument, kernels/cuda/kernels.hpp) is recorded as skipped: returns -1.
  double time(Sample sample, const std::function<void()>& run);
  void add(Sample sample) { samples_.push_back(std::move(sample)); }
  void skip(std::string what, std::string reason);

  const std::vector<Sample>& samples() const { return samples_; }
  const nlohmann::json& skipped() const { return skipped_; }
  cudaStream_t stream() const { return ctx_.stream(); }

 private:
  cuda::Context& ctx_;
  TimingOptions timing_;
  size_t memory_budget_bytes_;
  bool quick_;
  std::vector<Sample> samples_;
  nlohmann::json skipped_ = nlohmann::json::array();
};

// At most max_cases of `count` indices (0: all), spread evenly from the first to the last, so
// that a bounded sweep still spans the sizes: 0, (count-1)/(max-1), ..., count-1.
std::vector<size_t> spread_indices(size_t count, int64_t max_cases);

// ---- The sweeps ------------------------------------------------------------------------------

// The best bf16 FLOP/s of large square products (matmul samples too).
double measure_gemm_ceiling(Sweep& sweep);

// Copy bandwidth, read + write bytes per second: cudaMemcpyAsync device to device and the copy
// kernel over every SM, at large sizes; each size's rate under "cases".
struct CopyCeilings {
  double memcpy_bytes_s = 0;
  double copy_kernel_bytes_s = 0;
  nlohmann::json cases = nlohmann::json::array();
};
CopyCeilings measure_copy_ceilings(Sweep& sweep);

// out (m,n) = inp (m,k) @ w (k,n), as matmul_op counts it: kernels/cuda's matmul_forward with
// n = m, c = k, oc = n.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  std::vector<std::string> uses;  // "llama3-8b tp2 qkv", ...
};
// Every distinct (m, n, k) of the zoo models' QKV, attention output, MLP up, MLP down and LM
// head products per TP size dividing the model's heads, key/value heads and MLP width, at each
// token count (a micro-batch of sequences up to the model's longest), in increasing FLOPs
// (options.models, tp_sizes and tokens; every zoo model when models is empty).
std::vector<GemmShape> zoo_gemm_shapes(const CudaCalibrationOptions& options);

// Every distinct product of the zoo's layers per TP size, forward, dX and dW (matmul kind).
void sweep_zoo_gemms(Sweep& sweep, const CudaCalibrationOptions& options);
// Both attention paths over the zoo's heads per rank and head sizes (attention, flash_attention).
void sweep_attention(Sweep& sweep, const CudaCalibrationOptions& options);
// Norms, activations, residual adds, the embedding, the loss and AdamW, per byte.
void sweep_memory_bound(Sweep& sweep, const CudaCalibrationOptions& options);

struct LaunchCosts {
  double launch_overhead_s = 0;  // device time per kernel of back-to-back one-element kernels
  double host_launch_s = 0;      // host time to issue one launch
  double task_issue_s = 0;       // host time to issue a task: event, launch, event
  nlohmann::json json;
};
LaunchCosts measure_launch_costs(Sweep& sweep);

// comm_slowdown f: a GEMM's time beside a communication kernel over its time alone, minus 1.
struct CommSlowdown {
  double slowdown = 0;
  nlohmann::json json;
};
CommSlowdown measure_comm_slowdown_with_copy(Sweep& sweep);

// NCCL (cuda_calibration_nccl.cpp): bus bandwidth by collective, size and group over the visible
// GPUs; {"skipped": why} with fewer than two or without NCCL. Then the slowdown of a GEMM on
// options.device beside an all-reduce over every GPU, measured only with two GPUs or more.
nlohmann::json measure_nccl_bus_bandwidth(const CudaCalibrationOptions& options);
struct NcclSlowdown {
  bool measured = false;
  CommSlowdown result;
};
NcclSlowdown measure_comm_slowdown_with_nccl(Sweep& sweep, const CudaCalibrationOptions& options);
std::string nccl_version();  // "" without NCCL

}  // namespace strata::cuda_calibration
