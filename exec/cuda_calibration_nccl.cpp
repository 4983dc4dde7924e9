// NCCL in strata calibrate --backend cuda: bus bandwidth by collective, size and group over the
// GPUs of this process (nccl-tests' definitions, doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n for
// all-reduce, x (n-1)/n for all-gather and reduce-scatter, x 1 for broadcast, algbw the bytes of
// the whole buffer over the time), and a GEMM's slowdown beside an all-reduce. Without NCCL or
// with one GPU, the document says so.

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "exec/cuda_calibration_sweeps.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/kernels.hpp"

#if STRATA_HAVE_NCCL
#include <nccl.h>
#endif

namespace strata::cuda_calibration {

namespace {

int visible_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

}  // namespace

#if STRATA_HAVE_NCCL

namespace {

void check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  throw cuda::CudaError(
      fmt::format("NCCL call {} failed at {}:{}: {} (set NCCL_DEBUG=INFO for "
                  "NCCL's own account)",
                  call, file, line, ncclGetErrorString(result)));
}
#define STRATA_NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)

// Communicators over devices 0 .. size-1 of this process, a stream and two buffers of `bytes` on
// each (the largest size measured); the current device is restored when it is destroyed.
class NcclGroup {
 public:
  NcclGroup(int size, size_t bytes) {
    STRATA_CUDA_CHECK(cudaGetDevice(&previous_device_));
    std::vector<int> devices(static_cast<size_t>(size));
    for (int rank = 0; rank < size; ++rank) devices[static_cast<size_t>(rank)] = rank;
    comms_.resize(devices.size());
    STRATA_NCCL_CHECK(ncclCommInitAll(comms_.data(), size, devices.data()));
    for (const int device : devices) {
      STRATA_CUDA_CHECK(cudaSetDevice(device));
      cudaStream_t stream = nullptr;
      STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      streams_.push_back(stream);
      void* send = nullptr;
      void* recv = nullptr;
      STRATA_CUDA_CHECK(cudaMalloc(&send, bytes));
      STRATA_CUDA_CHECK(cudaMalloc(&recv, bytes));
      STRATA_CUDA_CHECK(cudaMemset(send, 0x3c, bytes));
      send_.push_back(send);
      recv_.push_back(recv);
    }
    STRATA_CUDA_CHECK(cudaSetDevice(previous_device_));
  }
  ~NcclGroup() {
    for (size_t rank = 0; rank < comms_.size(); ++rank) {
      cudaSetDevice(static_cast<int>(rank));
      cudaStreamSynchronize(streams_[rank]);
      cudaFree(send_[rank]);
      cudaFree(recv_[rank]);
      cudaStreamDestroy(streams_[rank]);
      ncclCommDestroy(comms_[rank]);
    }
    cudaSetDevice(previous_device_);
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  cudaStream_t stream(int rank) const { return streams_[static_cast<size_t>(rank)]; }

  // Queues one collective on every rank's stream: the whole buffer is `bytes` of bf16 (the
  // all-reduced data, the gathered output, the scattered input, the broadcast data).
  void queue(const std::string& collective, size_t bytes) {
    const size_t count = bytes / sizeof(cuda::bf16);
    const size_t shard = count / static_cast<size_t>(size());
    STRATA_NCCL_CHECK(ncclGroupStart());
    for (int rank = 0; rank < size(); ++rank) {
      const auto r = static_cast<size_t>(rank);
      ncclComm_t comm = comms_[r];
      if (collective == "all_reduce") {
        STRATA_NCCL_CHECK(
            ncclAllReduce(send_[r], recv_[r], count, ncclBfloat16, ncclSum, comm, streams_[r]));
      } else if (collective == "all_gather") {
        STRATA_NCCL_CHECK(
            ncclAllGather(send_[r], recv_[r], shard, ncclBfloat16, comm, streams_[r]));
      } else if (collective == "reduce_scatter") {
        STRATA_NCCL_CHECK(
            ncclReduceScatter(send_[r], recv_[r], shard, ncclBfloat16, ncclSum, comm, streams_[r]));
      } else {
        STRATA_NCCL_CHECK(
            ncclBroadcast(send_[r], recv_[r], count, ncclBfloat16, 0, comm, streams_[r]));
      }
    }
    STRATA_NCCL_CHECK(ncclGroupEnd());
  }
  void synchronize() const {
    for (const cudaStream_t stream : streams_) STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 private:
  int previous_device_ = 0;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<void*> send_, recv_;
};

// nccl-tests' bus bandwidth factor of a collective over n ranks.
double bus_factor(const std::string& collective, int n) {
  const double ranks = n;
  if (collective == "all_reduce") return 2 * (ranks - 1) / ranks;
  if (collective == "broadcast") return 1;
  return (ranks - 1) / ranks;
}

}  // namespace

nlohmann::json measure_nccl_bus_bandwidth(const CudaCalibrationOptions& options) {
  const int devices = visible_devices();
  if (devices < 2) {
    return {
        {"skipped",
         fmt::format("{} GPU visible: bus bandwidth needs two or more in this process", devices)}};
  }
  std::vector<int> groups;
  for (int size = 2; size <= devices; size *= 2) groups.push_back(size);
  if (groups.back() != devices) groups.push_back(devices);
  const std::vector<size_t> sizes =
      options.quick
          ? std::vector<size_t>{size_t{1} << 20}
          : std::vector<size_t>{size_t{1} << 20, size_t{1} << 24, size_t{1} << 28, size_t{1} << 30};
  const int iterations = options.quick ? 1 : 20;
  nlohmann::json cases = nlohmann::json::array();
  for (const int group_size : groups) {
    NcclGroup group(group_size, sizes.back());
    for (const std::string collective :
         {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}) {
      for (const size_t bytes : sizes) {
        group.queue(collective, bytes);  // warm-up: NCCL sets up its channels on first use
        group.synchronize();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) group.queue(collective, bytes);
        group.synchronize();
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        const double seconds = elapsed.count() / iterations;
        const double algbw = static_cast<double>(bytes) / seconds / 1e9;
        cases.push_back({{"collective", collective},
                         {"group_size", group_size},
                         {"bytes", bytes},
                         {"seconds", seconds},
                         {"algbw_gbps", algbw},
                         {"busbw_gbps", algbw * bus_factor(collective, group_size)}});
      }
    }
  }
  return {{"dtype", "bf16"},
          {"devices", devices},
          {"groups", "devices 0 .. n-1 of this process (ncclCommInitAll)"},
          {"cases", cases}};
}

NcclSlowdown measure_comm_slowdown_with_nccl(Sweep& sweep, const CudaCalibrationOptions& options) {
  const int devices = visible_devices();
  if (devices < 2 || options.device >= devices) return {};
  cuda::Context& ctx = sweep.ctx();
  const int64_t size = sweep.quick() ? 128 : 8192;
  const size_t reduce_bytes = sweep.quick() ? size_t{1} << 20 : size_t{1} << 30;
  const auto square = static_cast<size_t>(size * size) * sizeof(cuda::bf16);
  const DeviceBuffer a(square);
  const DeviceBuffer b(square);
  const DeviceBuffer c(square);
  const auto gemm = [&] {
    cuda::matmul_forward<cuda::bf16>(ctx, c.as<cuda::bf16>(), a.as<cuda::bf16>(),
                                     b.as<cuda::bf16>(), nullptr, size, size, size);
  };
  NcclGroup group(devices, reduce_bytes);
  const double alone_s = best_seconds(ctx.stream(), gemm, sweep.timing());
  group.queue("all_reduce", reduce_bytes);
  group.synchronize();
  const auto start_reduce = std::chrono::steady_clock::now();
  group.queue("all_reduce", reduce_bytes);
  group.synchronize();
  const std::chrono::duration<double> reduce_s = std::chrono::steady_clock::now() - start_reduce;
  const int64_t calls =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(sweep.timing().min_seconds / alone_s)), 1,
                          sweep.timing().max_calls);
  const auto reduces = static_cast<int64_t>(
      std::ceil(3 * static_cast<double>(calls) * alone_s / std::max(reduce_s.count(), 1e-9)) + 1);
  for (int64_t i = 0; i < reduces; ++i) group.queue("all_reduce", reduce_bytes);
  const Event start;
  const Event end;
  STRATA_CUDA_CHECK(cudaEventRecord(start.get(), ctx.stream()));
  for (int64_t i = 0; i < calls; ++i) gemm();
  STRATA_CUDA_CHECK(cudaEventRecord(end.get(), ctx.stream()));
  STRATA_CUDA_CHECK(cudaEventSynchronize(end.get()));
  group.synchronize();
  const double beside_s = elapsed_seconds(start, end) / static_cast<double>(calls);
  NcclSlowdown result;
  result.measured = true;
  result.result.slowdown = std::max(0.0, beside_s / alone_s - 1);
  result.result.json = {
      {"communication",
       fmt::format("NCCL all-reduces of {} MiB of bf16 over the {} GPUs of this process",
                   reduce_bytes >> 20, devices)},
      {"gemm", fmt::format("matmul_forward<bf16> {0}x{0}x{0} on device {1}", size, options.device)},
      {"gemm_alone_us", alone_s * 1e6},
      {"gemm_beside_us", beside_s * 1e6},
      {"comm_slowdown", result.result.slowdown}};
  return result;
}

std::string nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "";
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

#else  // without NCCL

nlohmann::json measure_nccl_bus_bandwidth(const CudaCalibrationOptions&) {
  return {{"skipped", fmt::format("built without NCCL ({} GPU visible): install NCCL where "
                                  "cmake/cuda.cmake finds it and rebuild",
                                  visible_devices())}};
}

NcclSlowdown measure_comm_slowdown_with_nccl(Sweep&, const CudaCalibrationOptions&) { return {}; }

std::string nccl_version() { return ""; }

#endif

}  // namespace strata::cuda_calibration
