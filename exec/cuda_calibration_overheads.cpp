// The copy bandwidth ceilings, the launch and issue costs, and the compute slowdown beside a copy
// kernel standing in for a communication kernel, for strata calibrate --backend cuda.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "exec/cuda_calibration_copy.hpp"
#include "exec/cuda_calibration_sweeps.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda_calibration {

namespace {

using cuda::bf16;
using Clock = std::chrono::steady_clock;

int sm_count() {
  int device = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&device));
  int sms = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

// NCCL's ring and tree kernels move data with one block per channel; on an 8-GPU NVSwitch node
// large all-reduces run 16 to 32 channels. 16 is the stand-in's assumption.
constexpr int kCommStandInBlocks = 16;

}  // namespace

CopyCeilings measure_copy_ceilings(Sweep& sweep) {
  CopyCeilings ceilings;
  const cudaStream_t stream = sweep.stream();
  const int blocks = sm_count() * 8;  // 8 blocks of 256 threads: 2048 threads per SM
  const std::vector<size_t> sizes =
      sweep.quick() ? std::vector<size_t>{size_t{1} << 20}
                    : std::vector<size_t>{size_t{1} << 28, size_t{1} << 30, size_t{1} << 32};
  for (const size_t bytes : sizes) {
    const std::string what = fmt::format("copy {} MiB", bytes >> 20);
    if (!sweep.fits(2 * bytes, what)) continue;
    const DeviceBuffer src(bytes);
    const DeviceBuffer dst(bytes);
    // A copy reads and writes every byte: 2 x bytes of memory traffic.
    const double traffic = 2.0 * static_cast<double>(bytes);
    const double memcpy_s = best_seconds(
        stream,
        [&] {
          STRATA_CUDA_CHECK(cudaMemcpyAsync(dst.as<std::byte>(), src.as<std::byte>(), bytes,
                                            cudaMemcpyDeviceToDevice, stream));
        },
        sweep.timing());
    const double kernel_s = best_seconds(
        stream,
        [&] { copy_kernel(stream, dst.as<std::byte>(), src.as<std::byte>(), bytes, blocks); },
        sweep.timing());
    ceilings.memcpy_bytes_s = std::max(ceilings.memcpy_bytes_s, traffic / memcpy_s);
    ceilings.copy_kernel_bytes_s = std::max(ceilings.copy_kernel_bytes_s, traffic / kernel_s);
    ceilings.cases.push_back({{"bytes", bytes},
                              {"memcpy_seconds", memcpy_s},
                              {"memcpy_gbps", traffic / memcpy_s / 1e9},
                              {"copy_kernel_blocks", blocks},
                              {"copy_kernel_seconds", kernel_s},
                              {"copy_kernel_gbps", traffic / kernel_s / 1e9}});
  }
  return ceilings;
}

LaunchCosts measure_launch_costs(Sweep& sweep) {
  cuda::Context& ctx = sweep.ctx();
  const cudaStream_t stream = ctx.stream();
  const DeviceBuffer inp(16);
  const DeviceBuffer out(16);
  // The one-element GELU: a launch with next to no work.
  const auto tiny = [&] { cuda::gelu_forward<bf16>(ctx, out.as<bf16>(), inp.as<bf16>(), 1); };
  tiny();
  ctx.synchronize();
  // Fewer launches per batch than the launch queue holds (about a thousand), so that the host's
  // time is its own, not a wait for room in the queue.
  const int64_t launches = sweep.quick() ? 16 : 256;
  const int batches = sweep.quick() ? 1 : 5;
  LaunchCosts costs;
  costs.launch_overhead_s = costs.host_launch_s = costs.task_issue_s = 1e30;
  std::vector<std::unique_ptr<Event>> marks;
  for (int64_t i = 0; i < 2 * launches; ++i) marks.push_back(std::make_unique<Event>());
  for (int batch = 0; batch < batches; ++batch) {
    // Back-to-back on the device: the gap one kernel costs when the next is already queued.
    const Event start;
    const Event end;
    STRATA_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    const auto issue_start = Clock::now();
    for (int64_t i = 0; i < launches; ++i) tiny();
    const std::chrono::duration<double> issued = Clock::now() - issue_start;
    STRATA_CUDA_CHECK(cudaEventRecord(end.get(), stream));
    STRATA_CUDA_CHECK(cudaEventSynchronize(end.get()));
    const auto n = static_cast<double>(launches);
    costs.launch_overhead_s = std::min(costs.launch_overhead_s, elapsed_seconds(start, end) / n);
    costs.host_launch_s = std::min(costs.host_launch_s, issued.count() / n);
    // A task as the executor issues one: a mark (an event) before and after its kernel.
    const auto task_start = Clock::now();
    for (int64_t i = 0; i < launches; ++i) {
      STRATA_CUDA_CHECK(cudaEventRecord(marks[static_cast<size_t>(2 * i)]->get(), stream));
      tiny();
      STRATA_CUDA_CHECK(cudaEventRecord(marks[static_cast<size_t>(2 * i + 1)]->get(), stream));
    }
    const std::chrono::duration<double> tasks = Clock::now() - task_start;
    ctx.synchronize();
    costs.task_issue_s = std::min(costs.task_issue_s, tasks.count() / n);
  }
  costs.json = {
      {"kernel", "gelu_forward<bf16> of one element"},
      {"launches_per_batch", launches},
      {"launch_overhead_us", costs.launch_overhead_s * 1e6},
      {"launch_overhead_what",
       "device time per kernel of back-to-back launches (CUDA events around the batch)"},
      {"host_launch_us", costs.host_launch_s * 1e6},
      {"host_launch_what", "host time to issue one launch (the host clock, queue not full)"},
      {"task_issue_us", costs.task_issue_s * 1e6},
      {"task_issue_what",
       "host time to issue one task as the executor does: an event record, the launch, an event "
       "record; compare the plan's --host-dispatch native cost per kernel "
       "(plan/host_dispatch.hpp)"}};
  return costs;
}

CommSlowdown measure_comm_slowdown_with_copy(Sweep& sweep) {
  cuda::Context& ctx = sweep.ctx();
  const int64_t size = sweep.quick() ? 128 : 8192;
  const size_t copy_bytes = sweep.quick() ? size_t{1} << 20 : size_t{1} << 30;
  const int blocks = sweep.quick() ? 1 : kCommStandInBlocks;
  const auto square = static_cast<size_t>(size * size) * sizeof(bf16);
  CommSlowdown result;
  if (!sweep.fits(3 * square + 2 * copy_bytes, "comm slowdown")) {
    result.json = {{"skipped", "the GEMM and the copy buffers do not fit the memory budget"}};
    return result;
  }
  const DeviceBuffer a(square);
  const DeviceBuffer b(square);
  const DeviceBuffer c(square);
  const DeviceBuffer src(copy_bytes);
  const DeviceBuffer dst(copy_bytes);
  const Stream side;
  const auto gemm = [&] {
    cuda::matmul_forward<bf16>(ctx, c.as<bf16>(), a.as<bf16>(), b.as<bf16>(), nullptr, size, size,
                               size);
  };
  const auto copy = [&] {
    copy_kernel(side.get(), dst.as<std::byte>(), src.as<std::byte>(), copy_bytes, blocks);
  };
  const double alone_s = best_seconds(ctx.stream(), gemm, sweep.timing());
  const double copy_s = best_seconds(side.get(), copy, sweep.timing());
  const int64_t calls =
      sweep.quick() ? 1
                    : std::clamp<int64_t>(
                          static_cast<int64_t>(std::ceil(sweep.timing().min_seconds / alone_s)), 1,
                          sweep.timing().max_calls);
  // Enough copies queued first to outlast the GEMMs three times over.
  const auto copies = static_cast<int64_t>(
      std::ceil(3 * static_cast<double>(calls) * alone_s / std::max(copy_s, 1e-9)) + 1);
  double beside_s = 1e30;
  bool covered = true;
  for (int repeat = 0; repeat < (sweep.quick() ? 1 : 3); ++repeat) {
    const Event copies_end;
    const Event start;
    const Event end;
    for (int64_t i = 0; i < copies; ++i) copy();
    STRATA_CUDA_CHECK(cudaEventRecord(copies_end.get(), side.get()));
    STRATA_CUDA_CHECK(cudaEventRecord(start.get(), ctx.stream()));
    for (int64_t i = 0; i < calls; ++i) gemm();
    STRATA_CUDA_CHECK(cudaEventRecord(end.get(), ctx.stream()));
    STRATA_CUDA_CHECK(cudaEventSynchronize(end.get()));
    STRATA_CUDA_CHECK(cudaEventSynchronize(copies_end.get()));
    const double gemms_s = elapsed_seconds(start, end);
    // The copies must still run when the last GEMM ends, else the GEMMs ran partly alone.
    covered = covered && elapsed_seconds(start, copies_end) >= gemms_s;
    beside_s = std::min(beside_s, gemms_s / static_cast<double>(calls));
  }
  result.slowdown = std::max(0.0, beside_s / alone_s - 1);
  result.json = {
      {"communication",
       fmt::format("stand-in: a copy kernel of {} blocks x 256 threads on a second stream ({} MiB "
                   "per call), for an NCCL kernel of as many channels; one GPU, no peer",
                   blocks, copy_bytes >> 20)},
      {"gemm", fmt::format("matmul_forward<bf16> {0}x{0}x{0}", size)},
      {"gemm_alone_us", alone_s * 1e6},
      {"gemm_beside_us", beside_s * 1e6},
      {"copy_alone_gbps", 2.0 * static_cast<double>(copy_bytes) / copy_s / 1e9},
      {"copy_covered_the_gemms", covered},
      {"comm_slowdown", result.slowdown}};
  return result;
}

}  // namespace strata::cuda_calibration
