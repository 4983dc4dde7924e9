// The in-process communicator (exec/inprocess_communicator.hpp) with 8 rank threads, against
// serial results computed here: reductions are ((x0 + x1) + x2) + ... in group order, bit for bit
// (exec/communicator.hpp), with inputs where another order rounds differently
// (tests/exec/communicator_values.hpp). The groups are those of tp = 2, dp = 4: tp pairs {0,1},
// {2,3}, {4,5}, {6,7}, dp groups {0,2,4,6} and {1,3,5,7}, and the world; ranks of different
// groups run their collectives at the same time. The collectives' facts are checked on the
// loopback and staged communicators too (exec/loopback_communicator.hpp), over the CPU backend,
// whose device memory is the host's: the loopback one posts the buffers and reduces with
// Backend::reduce_in_order, the staged one copies them through the in-process one.

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exec/backend.hpp"
#include "exec/inprocess_communicator.hpp"
#include "exec/loopback_communicator.hpp"
#include "tests/exec/communicator_values.hpp"

namespace strata {
namespace {

using test::bitwise_equal;
using test::communicator_values;
using test::order_matters;
using test::serial_reduce;

constexpr int32_t kWorld = 8;
constexpr size_t kElements = 37;

using Group = std::vector<int32_t>;

Group tp_group(int32_t rank) { return {rank - rank % 2, rank - rank % 2 + 1}; }
Group dp_group(int32_t rank) { return rank % 2 == 0 ? Group{0, 2, 4, 6} : Group{1, 3, 5, 7}; }
Group world_group() { return {0, 1, 2, 3, 4, 5, 6, 7}; }

std::vector<Group> all_groups() {
  return {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2, 4, 6}, {1, 3, 5, 7}, world_group()};
}

// Which communicator a test's ranks call: the in-process one, or the loopback or staged one over a
// CPU backend per rank.
enum class Kind { kInProcess, kLoopback, kStaged };

const char* name(Kind kind) {
  return kind == Kind::kInProcess ? "in-process" : kind == Kind::kLoopback ? "loopback" : "staged";
}

// Runs body(comm) on one thread per rank of a fresh world of kWorld ranks, each having registered
// all_groups(), comm being of `kind`. A rank that throws aborts the world (as the trainer does),
// so the others return; the first exception is rethrown here once every thread has joined.
void run_ranks(const std::function<void(Communicator&)>& body, Kind kind = Kind::kInProcess) {
  InProcessWorld world(kWorld);
  std::vector<std::exception_ptr> errors(kWorld);
  std::atomic<int32_t> first_failed{-1};
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        const std::unique_ptr<Communicator> host = world.communicator(rank);
        const std::unique_ptr<Backend> cpu = make_cpu_backend();
        std::unique_ptr<Communicator> device;
        if (kind == Kind::kLoopback) device = make_loopback_communicator(world, rank, *cpu);
        if (kind == Kind::kStaged) device = make_staged_communicator(*host, *cpu);
        Communicator& comm = device ? *device : *host;
        host->register_groups(all_groups());
        comm.register_groups(all_groups());
        body(comm);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
        int32_t none = -1;
        first_failed.compare_exchange_strong(none, rank);
        world.abort();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (first_failed.load() >= 0) std::rethrow_exception(errors[static_cast<size_t>(first_failed)]);
}

// Every member's input of call `call` over `group`.
template <typename T>
std::vector<std::vector<T>> inputs(const Group& group, size_t n, uint64_t call) {
  std::vector<std::vector<T>> members;
  for (int32_t rank : group) members.push_back(communicator_values<T>(rank, n, call));
  return members;
}

// results[rank][i]: what `rank` held after its i-th call (written by that rank's thread alone).
template <typename T>
using PerRank = std::vector<std::vector<std::vector<T>>>;

// The sum over three kinds of group at once, several rounds: even ranks reduce over dp first,
// odd ranks over tp first, so tp pairs and dp groups are in flight at the same time. Call
// numbers: round * 3 + {0: tp, 1: dp, 2: world}.
template <typename T>
void check_concurrent_sums(Kind kind) {
  INFO(name(kind));
  constexpr uint64_t kRounds = 6;
  PerRank<T> results(kWorld);
  run_ranks(
      [&](Communicator& comm) {
        const int32_t rank = comm.rank();
        auto& mine = results[static_cast<size_t>(rank)];
        mine.resize(kRounds * 3);
        for (uint64_t round = 0; round < kRounds; ++round) {
          const auto reduce = [&](const Group& group, uint64_t which) {
            std::vector<T> data = communicator_values<T>(rank, kElements, round * 3 + which);
            comm.all_reduce(std::span<T>(data), group, ReduceOp::kSum);
            mine[round * 3 + which] = data;
          };
          if (rank % 2 == 0) {
            reduce(dp_group(rank), 1);
            reduce(tp_group(rank), 0);
          } else {
            reduce(tp_group(rank), 0);
            reduce(dp_group(rank), 1);
          }
          reduce(world_group(), 2);
        }
      },
      kind);
  for (uint64_t round = 0; round < kRounds; ++round) {
    for (int32_t rank = 0; rank < kWorld; ++rank) {
      const Group groups[] = {tp_group(rank), dp_group(rank), world_group()};
      for (uint64_t which = 0; which < 3; ++which) {
        const auto members = inputs<T>(groups[which], kElements, round * 3 + which);
        if (groups[which].size() > 2) REQUIRE(order_matters(members));
        const std::vector<T> expected = serial_reduce(members, ReduceOp::kSum);
        INFO("round " << round << ", rank " << rank << ", group kind " << which);
        CHECK(bitwise_equal<T>(results[static_cast<size_t>(rank)][round * 3 + which], expected));
      }
    }
  }
}

// Fact: all_reduce kSum in float is ((x0 + x1) + x2) + ... in group order, bitwise, on tp pairs,
// dp groups and the world in flight together (inputs where the reverse order rounds otherwise).
TEST_CASE(
    "in-process, loopback and staged all_reduce float sum over concurrent tp, dp and world groups "
    "equals the "
    "serial sum in group order bitwise",
    "[communicator]") {
  check_concurrent_sums<float>(GENERATE(Kind::kInProcess, Kind::kLoopback, Kind::kStaged));
}

// Fact: the same in double (inputs of 1e17 next to 1, where double rounds).
TEST_CASE(
    "in-process, loopback and staged all_reduce double sum over concurrent tp, dp and world groups "
    "equals the "
    "serial sum in group order bitwise",
    "[communicator]") {
  check_concurrent_sums<double>(GENERATE(Kind::kInProcess, Kind::kLoopback, Kind::kStaged));
}

// Fact: the same in bf16, each step rounded to bf16 (common/bf16.hpp): ((x0 + x1) + x2) + ...
TEST_CASE(
    "in-process, loopback and staged all_reduce bf16 sum over concurrent tp, dp and world groups "
    "equals the "
    "serial sum in group order bitwise",
    "[communicator]") {
  check_concurrent_sums<Bf16>(GENERATE(Kind::kInProcess, Kind::kLoopback, Kind::kStaged));
}

// Fact: in bf16, reduce_scatter gives member i the group-order sum of chunk i, all_gather the
// concatenation, broadcast the root's data and send/recv the message, bit for bit; directly and
// through the loopback and staged communicators.
TEST_CASE("in-process, loopback and staged bf16 collectives and messages equal the serial results",
          "[communicator]") {
  for (const Kind kind : {Kind::kInProcess, Kind::kLoopback, Kind::kStaged}) {
    INFO(name(kind));
    PerRank<Bf16> results(kWorld);
    run_ranks(
        [&](Communicator& comm) {
          const int32_t rank = comm.rank();
          auto& mine = results[static_cast<size_t>(rank)];
          const Group group = world_group();
          const std::vector<Bf16> send = communicator_values<Bf16>(rank, kWorld * kElements, 60);
          std::vector<Bf16> recv(kElements);
          comm.reduce_scatter(send, recv, group);
          mine.push_back(recv);
          const std::vector<Bf16> piece = communicator_values<Bf16>(rank, kElements, 61);
          std::vector<Bf16> gathered(kWorld * kElements);
          comm.all_gather(piece, gathered, group);
          mine.push_back(gathered);
          std::vector<Bf16> broadcast = communicator_values<Bf16>(rank, kElements, 62);
          comm.broadcast(std::span(broadcast), 5, group);
          mine.push_back(broadcast);
          comm.send(std::span<const Bf16>(piece), (rank + 1) % kWorld, 3);
          std::vector<Bf16> message(kElements);
          comm.recv(std::span(message), (rank + kWorld - 1) % kWorld, 3);
          mine.push_back(message);
        },
        kind);
    std::vector<std::vector<Bf16>> pieces;
    std::vector<Bf16> concatenated;
    for (int32_t member = 0; member < kWorld; ++member) {
      pieces.push_back(communicator_values<Bf16>(member, kElements, 61));
      concatenated.insert(concatenated.end(), pieces.back().begin(), pieces.back().end());
    }
    for (int32_t rank = 0; rank < kWorld; ++rank) {
      INFO("rank " << rank);
      std::vector<std::vector<Bf16>> chunks;
      for (int32_t member = 0; member < kWorld; ++member) {
        const auto send = communicator_values<Bf16>(member, kWorld * kElements, 60);
        const auto first = send.begin() + static_cast<std::ptrdiff_t>(rank * kElements);
        chunks.emplace_back(first, first + static_cast<std::ptrdiff_t>(kElements));
      }
      REQUIRE(order_matters(chunks));
      const auto& mine = results[static_cast<size_t>(rank)];
      CHECK(bitwise_equal<Bf16>(mine[0], serial_reduce(chunks, ReduceOp::kSum)));
      CHECK(bitwise_equal<Bf16>(mine[1], concatenated));
      CHECK(bitwise_equal<Bf16>(mine[2], communicator_values<Bf16>(5, kElements, 62)));
      CHECK(
          bitwise_equal<Bf16>(mine[3], pieces[static_cast<size_t>((rank + kWorld - 1) % kWorld)]));
    }
  }
}

// Fact: kMax gives each element's largest value over the group (inputs of both signs).
TEST_CASE(
    "in-process, loopback and staged all_reduce max equals the serial max over dp groups and "
    "the world, float and double",
    "[communicator]") {
  const Kind kind = GENERATE(Kind::kInProcess, Kind::kLoopback, Kind::kStaged);
  INFO(name(kind));
  PerRank<float> floats(kWorld);
  PerRank<double> doubles(kWorld);
  run_ranks(
      [&](Communicator& comm) {
        const int32_t rank = comm.rank();
        std::vector<float> f = communicator_values<float>(rank, kElements, 40);
        comm.all_reduce(std::span<float>(f), dp_group(rank), ReduceOp::kMax);
        std::vector<double> d = communicator_values<double>(rank, kElements, 41);
        comm.all_reduce(std::span<double>(d), world_group(), ReduceOp::kMax);
        floats[static_cast<size_t>(rank)] = {f};
        doubles[static_cast<size_t>(rank)] = {d};
      },
      kind);
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    INFO("rank " << rank);
    const auto float_inputs = inputs<float>(dp_group(rank), kElements, 40);
    const auto double_inputs = inputs<double>(world_group(), kElements, 41);
    CHECK(bitwise_equal<float>(floats[static_cast<size_t>(rank)][0],
                               serial_reduce(float_inputs, ReduceOp::kMax)));
    CHECK(bitwise_equal<double>(doubles[static_cast<size_t>(rank)][0],
                                serial_reduce(double_inputs, ReduceOp::kMax)));
    // Not a sum: the max is one of the inputs.
    CHECK(doubles[static_cast<size_t>(rank)][0][0] >= double_inputs[0][0]);
  }
}

// Fact: reduce_scatter gives member i the group-order sum of every member's chunk i (n
// elements); all_gather gives every member the concatenation of the members' sends in group
// order. On dp groups (4 members) and the world (8).
TEST_CASE(
    "in-process, loopback and staged reduce_scatter and all_gather equal the serial chunked "
    "sum and concatenation on dp groups and the world",
    "[communicator]") {
  const Kind kind = GENERATE(Kind::kInProcess, Kind::kLoopback, Kind::kStaged);
  INFO(name(kind));
  PerRank<float> results(kWorld);
  run_ranks(
      [&](Communicator& comm) {
        const int32_t rank = comm.rank();
        auto& mine = results[static_cast<size_t>(rank)];
        for (const Group& group : {dp_group(rank), world_group()}) {
          const std::vector<float> send =
              communicator_values<float>(rank, group.size() * kElements, 50);
          std::vector<float> recv(kElements);
          comm.reduce_scatter(send, recv, group);
          mine.push_back(recv);
          const std::vector<float> piece = communicator_values<float>(rank, kElements, 51);
          std::vector<float> gathered(group.size() * kElements);
          comm.all_gather(piece, gathered, group);
          mine.push_back(gathered);
        }
      },
      kind);
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    const Group groups[] = {dp_group(rank), world_group()};
    for (size_t g = 0; g < 2; ++g) {
      const Group& group = groups[g];
      const size_t index = static_cast<size_t>(std::ranges::find(group, rank) - group.begin());
      std::vector<std::vector<float>> chunks;
      std::vector<float> concatenated;
      for (int32_t member : group) {
        const auto send = communicator_values<float>(member, group.size() * kElements, 50);
        chunks.emplace_back(send.begin() + static_cast<std::ptrdiff_t>(index * kElements),
                            send.begin() + static_cast<std::ptrdiff_t>((index + 1) * kElements));
        const auto piece = communicator_values<float>(member, kElements, 51);
        concatenated.insert(concatenated.end(), piece.begin(), piece.end());
      }
      REQUIRE(order_matters(chunks));
      INFO("rank " << rank << ", group of " << group.size());
      CHECK(bitwise_equal<float>(results[static_cast<size_t>(rank)][g * 2],
                                 serial_reduce(chunks, ReduceOp::kSum)));
      CHECK(bitwise_equal<float>(results[static_cast<size_t>(rank)][g * 2 + 1], concatenated));
    }
  }
}

// Fact: in place (NCCL's in-place forms: reduce_scatter's recv is chunk i of member i's send,
// all_gather's send is chunk i of its recv), the results are the out-of-place ones: the loopback
// communicator computes them apart (its peers read the buffer it writes) and writes them once
// every member has read.
TEST_CASE(
    "in-process, loopback and staged reduce_scatter and all_gather in place equal the serial "
    "chunked sum and concatenation",
    "[communicator]") {
  const Kind kind = GENERATE(Kind::kInProcess, Kind::kLoopback, Kind::kStaged);
  INFO(name(kind));
  const Group group = world_group();
  PerRank<float> results(kWorld);
  run_ranks(
      [&](Communicator& comm) {
        const int32_t rank = comm.rank();
        const auto chunk = static_cast<std::ptrdiff_t>(rank * kElements);
        std::vector<float> scattered = communicator_values<float>(rank, kWorld * kElements, 52);
        comm.reduce_scatter(std::span<const float>(scattered),
                            std::span(scattered).subspan(static_cast<size_t>(chunk), kElements),
                            group);
        std::vector<float> gathered(kWorld * kElements);
        const std::vector<float> piece = communicator_values<float>(rank, kElements, 53);
        std::ranges::copy(piece, gathered.begin() + chunk);
        comm.all_gather(
            std::span<const float>(gathered).subspan(static_cast<size_t>(chunk), kElements),
            gathered, group);
        results[static_cast<size_t>(rank)] = {
            {scattered.begin() + chunk, scattered.begin() + chunk + kElements}, gathered};
      },
      kind);
  std::vector<float> concatenated;
  for (int32_t member = 0; member < kWorld; ++member) {
    const auto piece = communicator_values<float>(member, kElements, 53);
    concatenated.insert(concatenated.end(), piece.begin(), piece.end());
  }
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    INFO("rank " << rank);
    std::vector<std::vector<float>> chunks;
    for (int32_t member = 0; member < kWorld; ++member) {
      const auto send = communicator_values<float>(member, kWorld * kElements, 52);
      const auto first = send.begin() + static_cast<std::ptrdiff_t>(rank * kElements);
      chunks.emplace_back(first, first + static_cast<std::ptrdiff_t>(kElements));
    }
    REQUIRE(order_matters(chunks));
    CHECK(bitwise_equal<float>(results[static_cast<size_t>(rank)][0],
                               serial_reduce(chunks, ReduceOp::kSum)));
    CHECK(bitwise_equal<float>(results[static_cast<size_t>(rank)][1], concatenated));
  }
}

// Fact: broadcast gives every member the root's data, the root being any member (here the third
// of a dp group and rank 5 of the world), and leaves the root's own data as it was.
TEST_CASE(
    "in-process, loopback and staged broadcast copies a non-first root's data to every member",
    "[communicator]") {
  const Kind kind = GENERATE(Kind::kInProcess, Kind::kLoopback, Kind::kStaged);
  INFO(name(kind));
  PerRank<float> results(kWorld);
  run_ranks(
      [&](Communicator& comm) {
        const int32_t rank = comm.rank();
        std::vector<float> dp = communicator_values<float>(rank, kElements, 60);
        comm.broadcast(dp, dp_group(rank)[2], dp_group(rank));
        std::vector<float> world = communicator_values<float>(rank, kElements, 61);
        comm.broadcast(world, 5, world_group());
        results[static_cast<size_t>(rank)] = {dp, world};
      },
      kind);
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    INFO("rank " << rank);
    CHECK(bitwise_equal<float>(results[static_cast<size_t>(rank)][0],
                               communicator_values<float>(dp_group(rank)[2], kElements, 60)));
    CHECK(bitwise_equal<float>(results[static_cast<size_t>(rank)][1],
                               communicator_values<float>(5, kElements, 61)));
  }
}

// Fact: messages between two ranks with the same tag arrive in the order sent; a receiver may
// take tags in another order than they were sent (send never waits for the receiver). Each rank
// sends to the next around the ring: three messages of tag 7 (sizes 1, 2, 3, first element the
// message number), then tag 1 and tag 2; the receiver takes tag 7 three times, then tag 2 before
// tag 1.
TEST_CASE("in-process send/recv keeps FIFO order per tag and lets tags be received out of order",
          "[communicator]") {
  PerRank<float> results(kWorld);
  run_ranks([&](Communicator& comm) {
    const int32_t rank = comm.rank();
    const int32_t next = (rank + 1) % kWorld;
    const int32_t previous = (rank + kWorld - 1) % kWorld;
    for (size_t m = 0; m < 3; ++m) {
      std::vector<float> message(m + 1, static_cast<float>(rank));
      message[0] = static_cast<float>(m);
      comm.send(message, next, 7);
    }
    comm.send(std::vector<float>{100.0f + static_cast<float>(rank)}, next, 1);
    comm.send(std::vector<float>{200.0f + static_cast<float>(rank)}, next, 2);
    auto& mine = results[static_cast<size_t>(rank)];
    for (size_t m = 0; m < 3; ++m) {
      std::vector<float> message(m + 1);
      comm.recv(message, previous, 7);
      mine.push_back(message);
    }
    std::vector<float> two(1);
    comm.recv(two, previous, 2);
    std::vector<float> one(1);
    comm.recv(one, previous, 1);
    mine.push_back(two);
    mine.push_back(one);
  });
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    INFO("rank " << rank);
    const auto previous = static_cast<float>((rank + kWorld - 1) % kWorld);
    const auto& mine = results[static_cast<size_t>(rank)];
    CHECK(mine[0] == std::vector<float>{0});
    CHECK(mine[1] == std::vector<float>{1, previous});
    CHECK(mine[2] == std::vector<float>{2, previous, previous});
    CHECK(mine[3] == std::vector<float>{200 + previous});
    CHECK(mine[4] == std::vector<float>{100 + previous});
  }
}

// Fact: no rank leaves the barrier before every rank has entered it: each rank counts itself in
// before the barrier and reads the count after; every read is the world size.
TEST_CASE("in-process barrier releases no rank before all have arrived", "[communicator]") {
  std::atomic<int32_t> arrived{0};
  std::vector<int32_t> seen(kWorld);
  run_ranks([&](Communicator& comm) {
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    arrived.fetch_add(1);
    comm.barrier();
    seen[static_cast<size_t>(comm.rank())] = arrived.load();
  });
  CHECK(seen == std::vector<int32_t>(kWorld, kWorld));
}

// Fact: abort() wakes a rank blocked in a collective whose other members never come and a rank
// blocked in recv of a message never sent; both throw std::runtime_error("another rank failed"),
// as does every later call.
TEST_CASE(
    "in-process abort releases ranks blocked in a collective and in recv, and fails later "
    "calls",
    "[communicator]") {
  InProcessWorld world(3);
  const std::vector<Group> groups = {{0, 1, 2}};
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      const std::unique_ptr<Communicator> comm = world.communicator(rank);
      comm->register_groups(groups);
      std::vector<float> data(4, 1.0f);
      try {
        if (rank == 0) {
          comm->all_reduce(std::span<float>(data), groups[0], ReduceOp::kSum);
        } else {
          comm->recv(data, 2, 0);
        }
        errors[static_cast<size_t>(rank)] = "returned";
      } catch (const std::runtime_error& error) {
        errors[static_cast<size_t>(rank)] = error.what();
      }
    });
  }
  // Long enough for both ranks to be waiting; were they not yet, they would throw on entry.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(world.aborted());
  world.abort();
  for (std::thread& thread : threads) thread.join();
  CHECK(errors == std::vector<std::string>{"another rank failed", "another rank failed"});
  const std::unique_ptr<Communicator> late = world.communicator(2);
  CHECK_THROWS_WITH(late->barrier(), "another rank failed");
  CHECK_THROWS_WITH(late->send(std::vector<float>{1}, 0, 0), "another rank failed");
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// When a collective's data began to move is when its last member arrived, known here by
// construction: rank 1 sleeps 30 ms before the all-reduce that rank 0 calls at once, so rank 0
// notes a transfer at least 30 ms after its call (the wait for its peer, which the measured trace
// does not count as communication), rank 1 one between its own call and return; a receive notes
// when its message was sent (before the receiver's late call), and a new window answers -1.
TEST_CASE("in-process transfers begin when the last member arrives or the message was sent",
          "[communicator]") {
  constexpr int64_t kLateNs = 30'000'000;
  InProcessWorld world(2);
  std::vector<int64_t> call_ns(2), transfer_ns(2), return_ns(2), recv_call_ns(2), sent_ns(2);
  std::vector<int64_t> empty_window(2);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Communicator> comm = world.communicator(rank);
      const std::vector<int32_t> pair = {0, 1};
      comm->register_groups({pair});
      std::vector<float> data(16, 1.0f);
      if (rank == 1) std::this_thread::sleep_for(std::chrono::nanoseconds(kLateNs));
      comm->mark_transfers();
      call_ns[rank] = steady_ns();
      comm->all_reduce(std::span(data), pair, ReduceOp::kSum);
      return_ns[rank] = steady_ns();
      transfer_ns[rank] = comm->first_transfer_ns();
      comm->mark_transfers();
      empty_window[rank] = comm->first_transfer_ns();
      if (rank == 0) {
        sent_ns[0] = steady_ns();
        comm->send(std::span<const float>(data), 1, 7);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        recv_call_ns[1] = steady_ns();
        comm->recv(std::span(data), 0, 7);
        sent_ns[1] = comm->first_transfer_ns();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(transfer_ns[0] - call_ns[0] >= kLateNs);
  CHECK(transfer_ns[0] <= return_ns[0]);
  CHECK(transfer_ns[1] >= call_ns[1]);
  CHECK(transfer_ns[1] <= return_ns[1]);
  CHECK(empty_window[0] == -1);
  CHECK(empty_window[1] == -1);
  CHECK(sent_ns[1] >= sent_ns[0]);
  CHECK(sent_ns[1] < recv_call_ns[1]);
}

}  // namespace
}  // namespace strata
