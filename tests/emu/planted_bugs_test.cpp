// The CPU emulation of CUDA (kernels/emu) against planted bugs: each kernel here has one defect
// that a GPU would turn into a hang, a fault or a wrong answer, and the emulation must fail on
// it with EmulationError naming the kernel (or, for a missing event, give a wrong answer in some
// order). Every test also runs the corrected program, so that a test cannot pass by failing
// everything.

#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "strata_emu.hpp"

namespace {

using strata::emu::EmulationError;
using strata::emu::Order;

// Sets the emulation's options for one test and restores them after.
class ScopedOptions {
 public:
  explicit ScopedOptions(const strata::emu::Options& options) : saved_(strata::emu::options()) {
    strata::emu::set_options(options);
  }
  ~ScopedOptions() { strata::emu::set_options(saved_); }
  ScopedOptions(const ScopedOptions&) = delete;
  ScopedOptions& operator=(const ScopedOptions&) = delete;

 private:
  strata::emu::Options saved_;
};

// n ints of device memory, freed on destruction.
class DeviceInts {
 public:
  explicit DeviceInts(size_t n) : size_(n) {
    void* memory = nullptr;
    REQUIRE(cudaMalloc(&memory, n * sizeof(int32_t)) == cudaSuccess);
    data_ = static_cast<int32_t*>(memory);
  }
  ~DeviceInts() { cudaFree(data_); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;

  int32_t* data() { return data_; }
  std::vector<int32_t> download() const {
    std::vector<int32_t> host(size_);
    REQUIRE(cudaMemcpy(host.data(), data_, size_ * sizeof(int32_t), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    return host;
  }

 private:
  int32_t* data_ = nullptr;
  size_t size_;
};

// The message of the EmulationError that run throws ("" when it throws none).
template <typename Run>
std::string emulation_error(Run&& run) {
  try {
    run();
    cudaDeviceSynchronize();
  } catch (const EmulationError& error) {
    return error.what();
  }
  return "";
}

constexpr int kThreads = 64;

__global__ void write_ramp(int32_t* x) { x[threadIdx.x] = static_cast<int32_t>(threadIdx.x) + 1; }

__global__ void double_into(int32_t* y, const int32_t* x) { y[threadIdx.x] = 2 * x[threadIdx.x]; }

// y = 2 x where x is written by a kernel on stream `producer` and read on stream `consumer`;
// with_event orders the two with cudaEventRecord / cudaStreamWaitEvent.
std::vector<int32_t> produce_and_consume(bool with_event) {
  cudaStream_t producer = nullptr;
  cudaStream_t consumer = nullptr;
  cudaEvent_t written = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreate(&written) == cudaSuccess);
  DeviceInts x(kThreads);
  DeviceInts y(kThreads);
  STRATA_EMU_LAUNCH(1, kThreads, 0, producer, write_ramp)(x.data());
  if (with_event) {
    REQUIRE(cudaEventRecord(written, producer) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(consumer, written) == cudaSuccess);
  }
  STRATA_EMU_LAUNCH(1, kThreads, 0, consumer, double_into)(y.data(), x.data());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<int32_t> result = y.download();
  cudaEventDestroy(written);
  cudaStreamDestroy(consumer);
  cudaStreamDestroy(producer);
  return result;
}

// Two streams touch the same buffer: only cudaStreamWaitEvent orders the producer's kernel
// before the consumer's. Without it the emulation may run the consumer first (reverse order runs
// the newest ready work first), which then reads x's fresh 0xFF bytes (-1): y = -2, not 2(i+1).
TEST_CASE("a missing cudaStreamWaitEvent gives a wrong answer in some order", "[emu]") {
  std::vector<int32_t> expected(kThreads);
  for (int i = 0; i < kThreads; ++i) expected[static_cast<size_t>(i)] = 2 * (i + 1);
  int wrong_orders = 0;
  for (const Order order : {Order::kForward, Order::kReverse, Order::kRandom}) {
    const ScopedOptions options({order, 7, false});
    if (produce_and_consume(/*with_event=*/false) != expected) ++wrong_orders;
    CHECK(produce_and_consume(/*with_event=*/true) == expected);
  }
  CHECK(wrong_orders >= 1);
}

__global__ void barrier_after_early_exit(int32_t* x) {
  if (threadIdx.x < 16) return;
  __syncthreads();
  x[threadIdx.x] = 1;
}

__global__ void barriers_in_two_branches(int32_t* x) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  x[threadIdx.x] = 1;
}

__global__ void barrier_for_all(int32_t* x) {
  x[threadIdx.x] = 1;
  __syncthreads();
  const int32_t next = x[(threadIdx.x + 1) % blockDim.x];
  __syncthreads();  // every thread has read its neighbour before any writes
  x[threadIdx.x] += next;
}

// __syncthreads must be reached by every thread of the block, at the same place (CUDA C++
// Programming Guide, "Synchronization Functions"): threads that returned first, or that wait at
// two different __syncthreads, hang or corrupt a GPU's barrier. Both fail; the uniform one runs.
TEST_CASE("a divergent __syncthreads fails, naming the kernel", "[emu]") {
  DeviceInts x(kThreads);
  const std::string exited = emulation_error([&] {
    STRATA_EMU_LAUNCH(1, kThreads, 0, nullptr, barrier_after_early_exit)(x.data());
  });
  CHECK(exited.find("kernel barrier_after_early_exit") != std::string::npos);
  CHECK(exited.find("divergent __syncthreads") != std::string::npos);
  CHECK(exited.find("has exited") != std::string::npos);

  const std::string two_places = emulation_error([&] {
    STRATA_EMU_LAUNCH(1, kThreads, 0, nullptr, barriers_in_two_branches)(x.data());
  });
  CHECK(two_places.find("kernel barriers_in_two_branches") != std::string::npos);
  CHECK(two_places.find("divergent __syncthreads") != std::string::npos);

  CHECK(emulation_error([&] {
          STRATA_EMU_LAUNCH(1, kThreads, 0, nullptr, barrier_for_all)(x.data());
        }) == "");
  CHECK(x.download() == std::vector<int32_t>(kThreads, 2));
}

__global__ void all_write_one_word(int32_t* x) {
  STRATA_EMU_SHARED(int32_t, word, [1]);
  word[0] = static_cast<int32_t>(threadIdx.x);  // the race: 64 writers, no barrier
  __syncthreads();
  x[threadIdx.x] = word[0];
}

__global__ void one_writer_after_barrier(int32_t* x) {
  STRATA_EMU_SHARED(int32_t, words, [kThreads]);
  words[threadIdx.x] = static_cast<int32_t>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 0; i < kThreads; ++i) words[i] = -words[i] - 1;  // ordered by the barrier
  }
  __syncthreads();
  x[threadIdx.x] = words[threadIdx.x];
}

// Threads that write the same shared-memory bytes between two barriers race: which value stays
// depends on the GPU's timing. The race detector (Options::racecheck) sees the second writer and
// fails; without it the planted race runs silently (the detector is what catches it). Writes
// ordered by a __syncthreads are not a race.
TEST_CASE("a shared-memory write-write race fails under the race detector", "[emu]") {
  DeviceInts x(kThreads);
  {
    const ScopedOptions options({Order::kForward, 1, /*racecheck=*/true});
    const std::string race = emulation_error([&] {
      STRATA_EMU_LAUNCH(1, kThreads, 0, nullptr, all_write_one_word)(x.data());
    });
    CHECK(race.find("kernel all_write_one_word") != std::string::npos);
    CHECK(race.find("write-write race") != std::string::npos);

    CHECK(emulation_error([&] {
            STRATA_EMU_LAUNCH(1, kThreads, 0, nullptr, one_writer_after_barrier)(x.data());
          }) == "");
    const std::vector<int32_t> result = x.download();
    for (int i = 0; i < kThreads; ++i) CHECK(result[static_cast<size_t>(i)] == -i - 1);
  }
  const ScopedOptions options({Order::kForward, 1, /*racecheck=*/false});
  CHECK(emulation_error([&] {
          STRATA_EMU_LAUNCH(1, kThreads, 0, nullptr, all_write_one_word)(x.data());
        }) == "");
}

__global__ void full_mask_after_half_returned(int32_t* x) {
  if (threadIdx.x >= 16) return;
  x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int32_t>(threadIdx.x), 1);
}

__global__ void shuffle_outside_mask(int32_t* x) {
  if (threadIdx.x >= 16) return;
  x[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, static_cast<int32_t>(threadIdx.x), 16);
}

__global__ void shuffle_within_mask(int32_t* x) {
  if (threadIdx.x >= 16) return;
  x[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, static_cast<int32_t>(threadIdx.x), 1);
}

// A shuffle's mask names the lanes that take part, and every one of them must execute it (CUDA
// C++ Programming Guide, "Warp Shuffle Functions"): a full mask after half the warp returned,
// or a read of a lane outside the mask, gives undefined values on a GPU and fails here. The
// same exchange with the half-warp's mask runs: lane i gets lane i ^ 1's value.
TEST_CASE("a warp shuffle with a missing lane fails", "[emu]") {
  DeviceInts x(32);
  const std::string exited = emulation_error([&] {
    STRATA_EMU_LAUNCH(1, 32, 0, nullptr, full_mask_after_half_returned)(x.data());
  });
  CHECK(exited.find("kernel full_mask_after_half_returned") != std::string::npos);
  CHECK(exited.find("has exited") != std::string::npos);

  const std::string outside = emulation_error([&] {
    STRATA_EMU_LAUNCH(1, 32, 0, nullptr, shuffle_outside_mask)(x.data());
  });
  CHECK(outside.find("not in the mask") != std::string::npos);

  CHECK(emulation_error([&] {
          STRATA_EMU_LAUNCH(1, 32, 0, nullptr, shuffle_within_mask)(x.data());
        }) == "");
  const std::vector<int32_t> result = x.download();
  for (int i = 0; i < 16; ++i) CHECK(result[static_cast<size_t>(i)] == (i ^ 1));
}

__global__ void fill_dynamic_shared(int32_t* x, int words) {
  STRATA_EMU_DYNAMIC_SHARED(int32_t, shared);
  for (int i = static_cast<int>(threadIdx.x); i < words; i += static_cast<int>(blockDim.x)) {
    shared[i] = i;
  }
  __syncthreads();
  x[threadIdx.x] = shared[words - 1 - static_cast<int>(threadIdx.x)];
}

// A launch may ask for more than 48 KiB of dynamic shared memory only after
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), and never
// for more than the 227 KiB of an H100's block (CUDA C++ Programming Guide, technical
// specifications): 64 KiB without the attribute fails at the launch, with it runs.
TEST_CASE("dynamic shared memory over 48 KiB without the attribute fails", "[emu]") {
  constexpr int kBytes = 64 * 1024;
  constexpr int kWords = kBytes / 4;
  DeviceInts x(kThreads);
  const std::string refused = emulation_error([&] {
    STRATA_EMU_LAUNCH(1, kThreads, kBytes, nullptr, fill_dynamic_shared)(x.data(), kWords);
  });
  CHECK(refused.find("the launch of fill_dynamic_shared") != std::string::npos);
  CHECK(refused.find("over 48 KiB") != std::string::npos);

  REQUIRE(cudaFuncSetAttribute(fill_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kBytes) == cudaSuccess);
  CHECK(emulation_error([&] {
          STRATA_EMU_LAUNCH(1, kThreads, kBytes, nullptr, fill_dynamic_shared)(x.data(), kWords);
        }) == "");
  const std::vector<int32_t> result = x.download();
  for (int i = 0; i < kThreads; ++i) CHECK(result[static_cast<size_t>(i)] == kWords - 1 - i);

  CHECK(cudaFuncSetAttribute(fill_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             228 * 1024) == cudaErrorInvalidValue);
  cudaGetLastError();
}

// More than 1024 threads in a block is an invalid configuration on every GPU.
TEST_CASE("a block of more than 1024 threads fails", "[emu]") {
  DeviceInts x(2048);
  const std::string refused = emulation_error([&] {
    STRATA_EMU_LAUNCH(1, 2048, 0, nullptr, write_ramp)
    (x.data());
  });
  CHECK(refused.find("has 2048 threads") != std::string::npos);
}

}  // namespace
