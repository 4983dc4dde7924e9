// The emulated NCCL (kernels/emu/include/nccl.h) with rank threads, against the communicator
// tests' serial references (tests/exec/communicator_values.hpp): reductions in communicator rank
// order in the buffer's type (inputs where another order rounds differently), splits ordered by
// key, messages met by order, groups that post before they wait, and the failures a GPU would hang
// on (collectives that differ, a rank that never comes) reported instead. Each rank queues on a
// stream of its own. Catch2 is not thread-safe: rank threads only compute, the checks run after.

#include <cuda_runtime.h>
#include <nccl.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strata_emu.hpp"
#include "strata_emu_nccl.hpp"
#include "tests/exec/communicator_values.hpp"

namespace strata::emu {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Device arrays on a rank's own stream (the legacy default stream is every thread's).
template <typename T>
T* to_device(const std::vector<T>& values, cudaStream_t stream) {
  void* data = nullptr;
  check(cudaMalloc(&data, values.size() * sizeof(T)) == cudaSuccess, "cudaMalloc");
  check(cudaMemcpyAsync(data, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice,
                        stream) == cudaSuccess,
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize");
  return static_cast<T*>(data);
}

// The values once the work queued on the stream has run.
template <typename T>
std::vector<T> to_host(const T* data, size_t n, cudaStream_t stream) {
  std::vector<T> values(n);
  check(cudaMemcpyAsync(values.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost, stream) ==
            cudaSuccess,
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize");
  return values;
}

void release(std::initializer_list<void*> arrays, cudaStream_t stream) {
  for (void* data : arrays) cudaFreeAsync(data, stream);
  cudaStreamSynchronize(stream);
}

// Runs body(rank, world communicator, the rank's stream) on one thread per rank of a fresh world;
// returns each rank's failure message, empty when it succeeded.
std::vector<std::string> run_ranks(int ranks,
                                   const std::function<void(int, ncclComm_t, cudaStream_t)>& body) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::string> failures(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      ncclComm_t comm = nullptr;
      cudaStream_t stream = nullptr;
      try {
        check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
        check(ncclCommInitRank(&comm, ranks, id, rank) == ncclSuccess, "ncclCommInitRank");
        body(rank, comm, stream);
      } catch (const std::exception& error) {
        failures[static_cast<size_t>(rank)] = error.what();
      }
      ncclCommDestroy(comm);
      if (stream != nullptr) cudaStreamDestroy(stream);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return failures;
}

constexpr int kRanks = 4;
constexpr size_t kElements = 29;

TEST_CASE("the emulated NCCL's collectives sum in communicator rank order, in the buffer's type",
          "[emu][nccl]") {
  // Member r's inputs to call c are communicator_values(r, n, c), mixed magnitudes whose sum
  // rounds differently in another order; every result must equal the serial reduction in rank
  // order, bit for bit.
  std::vector<std::vector<float>> floats;
  std::vector<std::vector<double>> doubles;
  std::vector<std::vector<float>> scatter_inputs;
  for (int r = 0; r < kRanks; ++r) {
    floats.push_back(test::communicator_values<float>(r, kElements, 0));
    doubles.push_back(test::communicator_values<double>(r, kElements, 1));
    scatter_inputs.push_back(test::communicator_values<float>(r, kRanks * kElements, 2));
  }
  REQUIRE(test::order_matters(floats));
  REQUIRE(test::order_matters(doubles));
  struct Results {
    std::vector<float> sum, max, scattered, gathered, broadcast;
    std::vector<double> double_sum;
  };
  std::vector<Results> results(kRanks);
  const auto failures = run_ranks(kRanks, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    const auto r = static_cast<size_t>(rank);
    float* sum = to_device(floats[r], stream);
    float* max = to_device(floats[r], stream);
    double* double_sum = to_device(doubles[r], stream);
    float* scatter_send = to_device(scatter_inputs[r], stream);
    float* scattered = to_device(std::vector<float>(kElements), stream);
    float* gathered = to_device(std::vector<float>(kRanks * kElements), stream);
    float* broadcast = to_device(floats[r], stream);
    check(ncclAllReduce(sum, sum, kElements, ncclFloat32, ncclSum, comm, stream) == ncclSuccess,
          "ncclAllReduce");
    check(ncclAllReduce(max, max, kElements, ncclFloat32, ncclMax, comm, stream) == ncclSuccess,
          "ncclAllReduce max");
    check(ncclAllReduce(double_sum, double_sum, kElements, ncclFloat64, ncclSum, comm, stream) ==
              ncclSuccess,
          "ncclAllReduce double");
    check(ncclReduceScatter(scatter_send, scattered, kElements, ncclFloat32, ncclSum, comm,
                            stream) == ncclSuccess,
          "ncclReduceScatter");
    check(ncclAllGather(sum, gathered, kElements, ncclFloat32, comm, stream) == ncclSuccess,
          "ncclAllGather");
    check(
        ncclBroadcast(broadcast, broadcast, kElements, ncclFloat32, 2, comm, stream) == ncclSuccess,
        "ncclBroadcast");
    results[r] = {
        to_host(sum, kElements, stream),       to_host(max, kElements, stream),
        to_host(scattered, kElements, stream), to_host(gathered, kRanks * kElements, stream),
        to_host(broadcast, kElements, stream), to_host(double_sum, kElements, stream)};
    release({sum, max, double_sum, scatter_send, scattered, gathered, broadcast}, stream);
  });
  for (const std::string& failure : failures) REQUIRE(failure.empty());
  const std::vector<float> sum = test::serial_reduce(floats, ReduceOp::kSum);
  std::vector<float> gathered;
  for (int r = 0; r < kRanks; ++r) gathered.insert(gathered.end(), sum.begin(), sum.end());
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    const Results& got = results[static_cast<size_t>(r)];
    CHECK(got.sum == sum);
    CHECK(got.max == test::serial_reduce(floats, ReduceOp::kMax));
    CHECK(got.double_sum == test::serial_reduce(doubles, ReduceOp::kSum));
    CHECK(got.gathered == gathered);
    CHECK(got.broadcast == floats[2]);
    std::vector<std::vector<float>> chunks;
    for (const auto& input : scatter_inputs) {
      chunks.emplace_back(input.begin() + r * static_cast<std::ptrdiff_t>(kElements),
                          input.begin() + (r + 1) * static_cast<std::ptrdiff_t>(kElements));
    }
    CHECK(got.scattered == test::serial_reduce(chunks, ReduceOp::kSum));
  }
}

TEST_CASE("ncclCommSplit orders each color's members by key, and NCCL_SPLIT_NOCOLOR gets none",
          "[emu][nccl]") {
  // color = rank % 2 (rank 3: no color), key = -rank: color 0 is [2, 0], color 1 is [1]. An
  // all-gather on color 0 lays out its members' data in that order.
  clear_nccl_call_log();
  std::vector<int> sizes(kRanks, -1);
  std::vector<int> new_ranks(kRanks, -1);
  std::vector<std::vector<float>> gathered(kRanks);
  const auto failures = run_ranks(kRanks, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    ncclComm_t split = nullptr;
    const int color = rank == 3 ? NCCL_SPLIT_NOCOLOR : rank % 2;
    check(ncclCommSplit(comm, color, -rank, &split, nullptr) == ncclSuccess, "ncclCommSplit");
    if (split == nullptr) return;
    check(ncclCommCount(split, &sizes[static_cast<size_t>(rank)]) == ncclSuccess, "count");
    check(ncclCommUserRank(split, &new_ranks[static_cast<size_t>(rank)]) == ncclSuccess, "rank");
    if (color == 0) {
      float* mine = to_device(std::vector<float>{static_cast<float>(rank)}, stream);
      float* all = to_device(std::vector<float>(2), stream);
      check(ncclAllGather(mine, all, 1, ncclFloat32, split, stream) == ncclSuccess, "gather");
      gathered[static_cast<size_t>(rank)] = to_host(all, 2, stream);
      release({mine, all}, stream);
    }
    ncclCommDestroy(split);
  });
  for (const std::string& failure : failures) REQUIRE(failure.empty());
  CHECK(sizes == std::vector<int>{2, 1, 2, -1});
  CHECK(new_ranks == std::vector<int>{1, 0, 0, -1});
  CHECK(gathered[0] == std::vector<float>{2, 0});
  CHECK(gathered[2] == std::vector<float>{2, 0});
  int splits = 0;
  for (const NcclCall& call : nccl_call_log()) {
    if (call.op != NcclOp::kCommSplit) continue;
    ++splits;
    INFO("rank " << call.rank);
    CHECK(call.members == std::vector<int32_t>{0, 1, 2, 3});
    CHECK(call.key == -call.rank);
    const std::vector<std::vector<int32_t>> expected = {{2, 0}, {1}, {2, 0}, {}};
    CHECK(call.split_members == expected[static_cast<size_t>(call.rank)]);
  }
  CHECK(splits == kRanks);
}

TEST_CASE("messages meet by order between two ranks, and a group posts its sends before it waits",
          "[emu][nccl]") {
  // Rank 0 sends {1} then {2, 3} to rank 1, which receives them in that order. Then each rank
  // receives from the other before it sends, inside one group: queued one call at a time, both
  // receives would wait forever; grouped, both sends are posted first.
  std::vector<std::vector<float>> received(2);
  const auto failures = run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    float* first = to_device(std::vector<float>{1}, stream);
    float* second = to_device(std::vector<float>{2, 3}, stream);
    float* exchanged = to_device(std::vector<float>{0}, stream);
    float* mine = to_device(std::vector<float>{10.0f + static_cast<float>(rank)}, stream);
    if (rank == 0) {
      check(ncclSend(first, 1, ncclFloat32, 1, comm, stream) == ncclSuccess, "send");
      check(ncclSend(second, 2, ncclFloat32, 1, comm, stream) == ncclSuccess, "send");
    } else {
      check(ncclRecv(first, 1, ncclFloat32, 0, comm, stream) == ncclSuccess, "recv");
      check(ncclRecv(second, 2, ncclFloat32, 0, comm, stream) == ncclSuccess, "recv");
    }
    check(ncclGroupStart() == ncclSuccess, "group start");
    check(ncclRecv(exchanged, 1, ncclFloat32, 1 - rank, comm, stream) == ncclSuccess, "recv");
    check(ncclSend(mine, 1, ncclFloat32, 1 - rank, comm, stream) == ncclSuccess, "send");
    check(ncclGroupEnd() == ncclSuccess, "group end");
    std::vector<float> got = to_host(first, 1, stream);
    for (float value : to_host(second, 2, stream)) got.push_back(value);
    got.push_back(to_host(exchanged, 1, stream)[0]);
    received[static_cast<size_t>(rank)] = got;
    release({first, second, exchanged, mine}, stream);
  });
  for (const std::string& failure : failures) REQUIRE(failure.empty());
  CHECK(received[0] == std::vector<float>{1, 2, 3, 11});
  CHECK(received[1] == std::vector<float>{1, 2, 3, 10});
}

TEST_CASE("two ranks that each send before they receive, ungrouped, deadlock as on a GPU",
          "[emu][nccl]") {
  // Each rank sends to the other on one stream, then receives from it on another. NCCL runs a
  // communicator's calls in call order whatever their streams, and a send larger than its buffers
  // waits for the receive (the emulation makes every send wait): each send waits for a receive
  // queued behind the other rank's send. The emulation reports it, naming the sends, once the
  // (shortened) timeout passes; on a GPU it hangs.
  const auto previous = set_nccl_timeout(std::chrono::milliseconds(200));
  const auto failures = run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    cudaStream_t receiving = nullptr;
    check(cudaStreamCreateWithFlags(&receiving, cudaStreamNonBlocking) == cudaSuccess, "stream");
    float* mine = to_device(std::vector<float>{1}, stream);
    float* theirs = to_device(std::vector<float>{0}, stream);
    check(ncclSend(mine, 1, ncclFloat32, 1 - rank, comm, stream) == ncclSuccess, "send");
    check(ncclRecv(theirs, 1, ncclFloat32, 1 - rank, comm, receiving) == ncclSuccess, "recv");
    cudaStreamSynchronize(receiving);
  });
  set_nccl_timeout(previous);
  int failed = 0;
  for (const std::string& failure : failures) {
    if (failure.empty()) continue;
    ++failed;
    CHECK(failure.find("did not post the matching ncclRecv within 200 ms") != std::string::npos);
  }
  CHECK(failed >= 1);
}

TEST_CASE("a group of a send on one stream and a receive on another exchanges, and orders both",
          "[emu][nccl]") {
  // The pairing above inside ncclGroupStart/End (Megatron-LM's batched isend/irecv): the group
  // posts both before it waits, so it completes. A copy queued on the sending stream after the
  // group reads the received value: the group's streams wait for the whole group.
  std::vector<float> received(2);
  const auto failures = run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    cudaStream_t receiving = nullptr;
    check(cudaStreamCreateWithFlags(&receiving, cudaStreamNonBlocking) == cudaSuccess, "stream");
    float* mine = to_device(std::vector<float>{10.0f + static_cast<float>(rank)}, stream);
    float* theirs = to_device(std::vector<float>{0}, stream);
    check(ncclGroupStart() == ncclSuccess, "group start");
    check(ncclSend(mine, 1, ncclFloat32, 1 - rank, comm, stream) == ncclSuccess, "send");
    check(ncclRecv(theirs, 1, ncclFloat32, 1 - rank, comm, receiving) == ncclSuccess, "recv");
    check(ncclGroupEnd() == ncclSuccess, "group end");
    received[static_cast<size_t>(rank)] = to_host(theirs, 1, stream)[0];
    release({mine, theirs}, stream);
    cudaStreamDestroy(receiving);
  });
  for (const std::string& failure : failures) REQUIRE(failure.empty());
  CHECK(received == std::vector<float>{11, 10});
}

TEST_CASE("members calling different collectives fail instead of corrupting memory",
          "[emu][nccl]") {
  // Rank 0 all-reduces 3 elements, rank 1 4: a GPU would read past a buffer or hang. The first
  // member to see it fails; the runtime then drops the queued work (a faulted device), so the
  // other may see its call dropped rather than fail.
  const auto failures = run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    const size_t n = rank == 0 ? 3 : 4;
    float* data = to_device(std::vector<float>(n), stream);
    check(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm, stream) == ncclSuccess, "ar");
    cudaStreamSynchronize(stream);
  });
  int failed = 0;
  for (const std::string& failure : failures) {
    if (failure.empty()) continue;
    ++failed;
    CHECK(failure.find("ncclAllReduce on ranks [0, 1]") != std::string::npos);
    CHECK(failure.find("called different collectives") != std::string::npos);
  }
  CHECK(failed >= 1);
}

TEST_CASE("a collective whose members do not all arrive fails after the timeout", "[emu][nccl]") {
  // Rank 1 never calls the all-reduce: rank 0's queued call fails, naming rank 1, once the
  // (shortened) timeout passes, instead of hanging.
  const auto previous = set_nccl_timeout(std::chrono::milliseconds(200));
  const auto failures = run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    if (rank == 1) return;
    float* data = to_device(std::vector<float>(2), stream);
    check(ncclAllReduce(data, data, 2, ncclFloat32, ncclSum, comm, stream) == ncclSuccess, "ar");
    cudaStreamSynchronize(stream);
  });
  set_nccl_timeout(previous);
  CHECK(failures[0].find("ranks [1] did not arrive within 200 ms") != std::string::npos);
  CHECK(failures[1].empty());
}

TEST_CASE("arguments NCCL refuses get its result codes and messages, and are logged",
          "[emu][nccl]") {
  // NCCL answers ncclInvalidArgument to a peer outside the communicator and ncclInvalidUsage to
  // an ncclGroupEnd without ncclGroupStart; a range outside any allocation fails when it runs.
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == 22809);
  CHECK(std::string(ncclGetErrorString(ncclInvalidArgument)) ==
        "invalid argument (run with NCCL_DEBUG=WARN for details)");
  clear_nccl_call_log();
  std::vector<ncclResult_t> results;
  std::string last_error;
  std::string range_failure;
  const auto failures = run_ranks(1, [&](int, ncclComm_t comm, cudaStream_t stream) {
    float* data = to_device(std::vector<float>(4), stream);
    results.push_back(ncclSend(data, 4, ncclFloat32, 5, comm, stream));
    last_error = ncclGetLastError(comm);
    results.push_back(ncclGroupEnd());
    results.push_back(ncclAllReduce(data, data, 8, ncclFloat32, ncclSum, comm, stream));
    try {
      cudaStreamSynchronize(stream);
    } catch (const EmulationError& error) {
      range_failure = error.what();
    }
    release({data}, stream);
  });
  REQUIRE(failures[0].empty());
  CHECK(results == std::vector<ncclResult_t>{ncclInvalidArgument, ncclInvalidUsage, ncclSuccess});
  CHECK(last_error == "ncclSend: peer 5 is not a rank of a communicator of 1");
  CHECK(range_failure.find("ncclAllReduce on ranks [0] (call 0 on the communicator, rank 0): "
                           "sendbuff: ") != std::string::npos);
  const std::vector<NcclCall> log = nccl_call_log();
  REQUIRE(log.size() == 5);  // init, send, group end, all-reduce, destroy
  CHECK(log[1].op == NcclOp::kSend);
  CHECK(log[1].result == ncclInvalidArgument);
  CHECK(log[2].result == ncclInvalidUsage);
  CHECK(log[3].count == 8);
}

TEST_CASE("the call log records each call's communicator, arguments and group depth",
          "[emu][nccl]") {
  // Two ranks; a nested group around a broadcast from rank 1: ncclGroupStart records the depth
  // it opens, the broadcast the depth it was made at, with the root's world rank as its peer and
  // the rank's stream.
  clear_nccl_call_log();
  std::vector<const void*> streams(2);
  const auto failures = run_ranks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    streams[static_cast<size_t>(rank)] = stream;
    float* data = to_device(std::vector<float>{1, 2, 3}, stream);
    check(ncclGroupStart() == ncclSuccess, "start");
    check(ncclGroupStart() == ncclSuccess, "start");
    check(ncclBroadcast(data, data, 3, ncclFloat32, 1, comm, stream) == ncclSuccess, "bcast");
    check(ncclGroupEnd() == ncclSuccess, "end");
    check(ncclGroupEnd() == ncclSuccess, "end");
    release({data}, stream);
  });
  for (const std::string& failure : failures) REQUIRE(failure.empty());
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    std::vector<NcclCall> calls;
    for (const NcclCall& call : nccl_call_log()) {
      if (call.rank == rank) calls.push_back(call);
    }
    REQUIRE(calls.size() == 7);
    const std::vector<NcclOp> ops = {
        NcclOp::kCommInitRank, NcclOp::kGroupStart, NcclOp::kGroupStart, NcclOp::kBroadcast,
        NcclOp::kGroupEnd,     NcclOp::kGroupEnd,   NcclOp::kCommDestroy};
    const std::vector<int32_t> depths = {0, 1, 2, 2, 2, 1, 0};
    for (size_t i = 0; i < calls.size(); ++i) {
      CHECK(calls[i].op == ops[i]);
      CHECK(calls[i].group_depth == depths[i]);
    }
    CHECK(calls[3].members == std::vector<int32_t>{0, 1});
    CHECK(calls[3].peer == 1);
    CHECK(calls[3].count == 3);
    CHECK(calls[3].stream == streams[static_cast<size_t>(rank)]);
    CHECK(calls[0].world == calls[3].world);
  }
}

}  // namespace
}  // namespace strata::emu
