// The MPI communicator's check, run by CTest as `mpirun -np 4 strata_mpi_communicator_check`
// (label mpi): each rank runs one script of collectives and messages through MpiCommunicator, and
// the same script on an in-process world of 4 threads, and checks both against the serial,
// closed-form results (tests/exec/communicator_values.hpp), bit for bit. So the two communicators
// agree exactly, as exec/communicator.hpp requires. Groups: tp pairs {0,1} {2,3}, dp pairs {0,2}
// {1,3}, the world {0,1,2,3}. Rank 0 prints OK when every rank passed; any mismatch exits 1.

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exec/inprocess_communicator.hpp"
#include "exec/mpi_check.hpp"
#include "exec/mpi_communicator.hpp"
#include "tests/exec/communicator_values.hpp"

namespace strata {
namespace {

using test::bitwise_equal;
using test::communicator_values;
using test::order_matters;
using test::serial_reduce;

constexpr int32_t kWorld = 4;
constexpr size_t kElements = 29;

using Group = std::vector<int32_t>;

Group tp_group(int32_t rank) { return {rank - rank % 2, rank - rank % 2 + 1}; }
Group dp_group(int32_t rank) { return rank % 2 == 0 ? Group{0, 2} : Group{1, 3}; }
Group world_group() { return {0, 1, 2, 3}; }
std::vector<Group> all_groups() { return {{0, 1}, {2, 3}, {0, 2}, {1, 3}, world_group()}; }

// What one rank holds after each step of the script, in order.
struct Results {
  std::vector<std::vector<float>> floats;
  std::vector<std::vector<double>> doubles;
  std::vector<std::vector<Bf16>> bf16s;
};

template <typename T>
std::vector<std::vector<T>> inputs(const Group& group, size_t n, uint64_t call) {
  std::vector<std::vector<T>> members;
  for (int32_t rank : group) members.push_back(communicator_values<T>(rank, n, call));
  return members;
}

size_t index_in(const Group& group, int32_t rank) {
  return static_cast<size_t>(std::ranges::find(group, rank) - group.begin());
}

// The script every rank runs, on either communicator.
Results run_script(Communicator& comm) {
  const int32_t rank = comm.rank();
  comm.register_groups(all_groups());
  Results results;
  // Sums and maxima: float over tp, dp and the world, double over the world.
  uint64_t call = 0;
  for (const Group& group : {tp_group(rank), dp_group(rank), world_group()}) {
    std::vector<float> data = communicator_values<float>(rank, kElements, call++);
    comm.all_reduce(std::span<float>(data), group, ReduceOp::kSum);
    results.floats.push_back(data);
  }
  std::vector<double> sum = communicator_values<double>(rank, kElements, 10);
  comm.all_reduce(std::span<double>(sum), world_group(), ReduceOp::kSum);
  results.doubles.push_back(sum);
  std::vector<float> max = communicator_values<float>(rank, kElements, 11);
  comm.all_reduce(std::span<float>(max), world_group(), ReduceOp::kMax);
  results.floats.push_back(max);
  std::vector<double> double_max = communicator_values<double>(rank, kElements, 12);
  comm.all_reduce(std::span<double>(double_max), dp_group(rank), ReduceOp::kMax);
  results.doubles.push_back(double_max);
  // reduce_scatter and all_gather over the world, broadcast from rank 2.
  const std::vector<float> send = communicator_values<float>(rank, kWorld * kElements, 20);
  std::vector<float> chunk(kElements);
  comm.reduce_scatter(send, chunk, world_group());
  results.floats.push_back(chunk);
  const std::vector<float> piece = communicator_values<float>(rank, kElements, 21);
  std::vector<float> gathered(kWorld * kElements);
  comm.all_gather(piece, gathered, world_group());
  results.floats.push_back(gathered);
  std::vector<float> broadcast = communicator_values<float>(rank, kElements, 22);
  comm.broadcast(broadcast, 2, world_group());
  results.floats.push_back(broadcast);
  // Around the ring: three messages with tag 7 in order, then tags 1 and 2 taken as 2, 1.
  const int32_t next = (rank + 1) % kWorld;
  const int32_t previous = (rank + kWorld - 1) % kWorld;
  for (uint64_t m = 0; m < 3; ++m)
    comm.send(communicator_values<float>(rank, m + 1, 30 + m), next, 7);
  comm.send(communicator_values<float>(rank, 5, 34), next, 1);
  comm.send(communicator_values<float>(rank, 6, 35), next, 2);
  for (uint64_t m = 0; m < 3; ++m) {
    std::vector<float> message(m + 1);
    comm.recv(message, previous, 7);
    results.floats.push_back(message);
  }
  std::vector<float> two(6);
  comm.recv(two, previous, 2);
  std::vector<float> one(5);
  comm.recv(one, previous, 1);
  results.floats.push_back(two);
  results.floats.push_back(one);
  // bf16 (moved as 16-bit words, summed in group order): a sum over the world, reduce_scatter,
  // all_gather, broadcast from rank 1, and a message around the ring.
  std::vector<Bf16> bf16_sum = communicator_values<Bf16>(rank, kElements, 40);
  comm.all_reduce(std::span<Bf16>(bf16_sum), world_group(), ReduceOp::kSum);
  results.bf16s.push_back(bf16_sum);
  const std::vector<Bf16> bf16_send = communicator_values<Bf16>(rank, kWorld * kElements, 41);
  std::vector<Bf16> bf16_chunk(kElements);
  comm.reduce_scatter(bf16_send, bf16_chunk, world_group());
  results.bf16s.push_back(bf16_chunk);
  const std::vector<Bf16> bf16_piece = communicator_values<Bf16>(rank, kElements, 42);
  std::vector<Bf16> bf16_gathered(kWorld * kElements);
  comm.all_gather(bf16_piece, bf16_gathered, world_group());
  results.bf16s.push_back(bf16_gathered);
  std::vector<Bf16> bf16_broadcast = communicator_values<Bf16>(rank, kElements, 43);
  comm.broadcast(std::span<Bf16>(bf16_broadcast), 1, world_group());
  results.bf16s.push_back(bf16_broadcast);
  comm.send(std::span<const Bf16>(bf16_piece), next, 9);
  std::vector<Bf16> bf16_message(kElements);
  comm.recv(std::span<Bf16>(bf16_message), previous, 9);
  results.bf16s.push_back(bf16_message);
  comm.barrier();
  return results;
}

// The script's results on `rank`, from the inputs alone.
Results expected(int32_t rank) {
  Results results;
  uint64_t call = 0;
  for (const Group& group : {tp_group(rank), dp_group(rank), world_group()}) {
    results.floats.push_back(
        serial_reduce(inputs<float>(group, kElements, call++), ReduceOp::kSum));
  }
  results.doubles.push_back(
      serial_reduce(inputs<double>(world_group(), kElements, 10), ReduceOp::kSum));
  results.floats.push_back(
      serial_reduce(inputs<float>(world_group(), kElements, 11), ReduceOp::kMax));
  results.doubles.push_back(
      serial_reduce(inputs<double>(dp_group(rank), kElements, 12), ReduceOp::kMax));
  std::vector<std::vector<float>> chunks;
  const size_t index = index_in(world_group(), rank);
  for (int32_t member : world_group()) {
    const auto send = communicator_values<float>(member, kWorld * kElements, 20);
    chunks.emplace_back(send.begin() + static_cast<std::ptrdiff_t>(index * kElements),
                        send.begin() + static_cast<std::ptrdiff_t>((index + 1) * kElements));
  }
  results.floats.push_back(serial_reduce(chunks, ReduceOp::kSum));
  std::vector<float> gathered;
  for (int32_t member : world_group()) {
    const auto piece = communicator_values<float>(member, kElements, 21);
    gathered.insert(gathered.end(), piece.begin(), piece.end());
  }
  results.floats.push_back(gathered);
  results.floats.push_back(communicator_values<float>(2, kElements, 22));
  const int32_t previous = (rank + kWorld - 1) % kWorld;
  for (uint64_t m = 0; m < 3; ++m) {
    results.floats.push_back(communicator_values<float>(previous, m + 1, 30 + m));
  }
  results.floats.push_back(communicator_values<float>(previous, 6, 35));
  results.floats.push_back(communicator_values<float>(previous, 5, 34));
  const auto world_bf16 = inputs<Bf16>(world_group(), kElements, 40);
  if (!order_matters(world_bf16)) throw std::logic_error("the bf16 inputs cannot tell the order");
  results.bf16s.push_back(serial_reduce(world_bf16, ReduceOp::kSum));
  std::vector<std::vector<Bf16>> bf16_chunks;
  std::vector<Bf16> bf16_gathered;
  for (int32_t member : world_group()) {
    const auto send = communicator_values<Bf16>(member, kWorld * kElements, 41);
    bf16_chunks.emplace_back(send.begin() + static_cast<std::ptrdiff_t>(index * kElements),
                             send.begin() + static_cast<std::ptrdiff_t>((index + 1) * kElements));
    const auto piece = communicator_values<Bf16>(member, kElements, 42);
    bf16_gathered.insert(bf16_gathered.end(), piece.begin(), piece.end());
  }
  results.bf16s.push_back(serial_reduce(bf16_chunks, ReduceOp::kSum));
  results.bf16s.push_back(bf16_gathered);
  results.bf16s.push_back(communicator_values<Bf16>(1, kElements, 43));
  results.bf16s.push_back(communicator_values<Bf16>(previous, kElements, 42));
  return results;
}

// Prints each mismatch; true when `got` is `want` bit for bit.
bool same(const Results& got, const Results& want, int32_t rank, const char* communicator) {
  bool ok = got.floats.size() == want.floats.size() && got.doubles.size() == want.doubles.size() &&
            got.bf16s.size() == want.bf16s.size();
  for (size_t i = 0; ok && i < got.floats.size(); ++i) {
    if (bitwise_equal<float>(got.floats[i], want.floats[i])) continue;
    std::fprintf(stderr, "rank %d, %s: float result %zu differs from the serial one\n", rank,
                 communicator, i);
    ok = false;
  }
  for (size_t i = 0; ok && i < got.doubles.size(); ++i) {
    if (bitwise_equal<double>(got.doubles[i], want.doubles[i])) continue;
    std::fprintf(stderr, "rank %d, %s: double result %zu differs from the serial one\n", rank,
                 communicator, i);
    ok = false;
  }
  for (size_t i = 0; ok && i < got.bf16s.size(); ++i) {
    if (bitwise_equal<Bf16>(got.bf16s[i], want.bf16s[i])) continue;
    std::fprintf(stderr, "rank %d, %s: bf16 result %zu differs from the serial one\n", rank,
                 communicator, i);
    ok = false;
  }
  return ok;
}

// The script on an in-process world of kWorld threads; `rank`'s results.
Results run_in_process(int32_t rank) {
  InProcessWorld world(kWorld);
  std::vector<Results> results(kWorld);
  std::vector<std::exception_ptr> errors(kWorld);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        results[static_cast<size_t>(r)] = run_script(*world.communicator(r));
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        world.abort();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return results[static_cast<size_t>(rank)];
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  STRATA_MPI_CHECK(MPI_Init(&argc, &argv));
  int rank = 0;
  int size = 0;
  STRATA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  STRATA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  int ok = 1;
  if (size != strata::kWorld) {
    if (rank == 0)
      std::fprintf(stderr, "run me under mpirun -np %d (got %d)\n", strata::kWorld, size);
    ok = 0;
  } else {
    // The inputs tell a wrong order from the group's (the reverse rounds otherwise).
    if (!strata::test::order_matters(
            strata::inputs<float>(strata::world_group(), strata::kElements, 2))) {
      std::fprintf(stderr, "the world's float inputs sum the same in reverse order\n");
      ok = 0;
    }
    const strata::Results want = strata::expected(rank);
    strata::Results mpi;
    {
      strata::MpiCommunicator comm;
      mpi = strata::run_script(comm);
    }
    if (!strata::same(mpi, want, rank, "MpiCommunicator")) ok = 0;
    if (!strata::same(strata::run_in_process(rank), want, rank, "in-process")) ok = 0;
  }
  int all_ok = 0;
  STRATA_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  STRATA_MPI_CHECK(MPI_Finalize());
  if (all_ok == 0) return 1;
  if (rank == 0) std::printf("OK\n");
  return 0;
}
