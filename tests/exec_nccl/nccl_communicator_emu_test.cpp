// The NCCL communicator (exec/nccl_communicator.hpp) on the CPU emulation's fake NCCL
// (kernels/emu/include/nccl.h), whose sums are in group order: with 8 rank threads it must give
// the in-process communicator's bits call for call, a training run must match the loopback
// communicator's, and the fake's call log must show what real NCCL needs: the same splits derived
// on every rank (colors and keys that make exactly the registered groups), each communicator's
// collectives in the same order on every member, the messages between two ranks sent and received
// in the same order, collectives never grouped, and sends and receives grouped in pairs that match
// across the two ranks (Megatron-LM's batched pipeline exchange: each rank's group of calls with
// a peer meets one group of the peer's). The loopback communicator (exec/loopback_communicator.hpp)
// must give the in-process bits call for call as well.
// Each rank's buffers and streams are the CUDA backend's (exec/cuda_backend.hpp) on the
// emulation. Catch2 is not thread-safe: rank threads only compute, the checks run after they join.

#include <catch2/catch.hpp>

#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "exec/cuda_backend.hpp"
#include "exec/inprocess_communicator.hpp"
#include "exec/loopback_communicator.hpp"
#include "exec/nccl_check.hpp"
#include "exec/nccl_communicator.hpp"
#include "exec/trainer.hpp"
#include "plan/compile.hpp"
#include "strata_emu.hpp"
#include "strata_emu_nccl.hpp"
#include "tests/exec/communicator_values.hpp"
#include "tests/exec/parity_plans.hpp"

namespace strata {
namespace {

using emu::NcclCall;
using emu::NcclOp;
using Group = std::vector<int32_t>;
using test::communicator_values;

constexpr int32_t kWorld = 8;
constexpr size_t kElements = 23;

// dp2 x tp2 x pp2 with rank = pp * 4 + dp * 2 + tp: tp pairs, dp pairs, pp pairs, the world.
std::vector<Group> layout_groups() {
  return {{0, 1},
          {2, 3},
          {4, 5},
          {6, 7},
          {0, 2},
          {1, 3},
          {4, 6},
          {5, 7},
          {0, 4},
          {1, 5},
          {2, 6},
          {3, 7},
          {0, 1, 2, 3, 4, 5, 6, 7}};
}

// The checks of the call log of one world (the file's header comment).
// Returns how many groups hold both a send and a receive.
size_t check_call_log(const std::vector<NcclCall>& log, const std::vector<Group>& registered) {
  REQUIRE(!log.empty());
  const uint64_t world = log.front().world;
  std::map<int32_t, std::vector<NcclCall>> splits;  // by rank, in call order
  // By communicator (its members), then rank: (op, count, datatype, reduction, root).
  using Signature = std::tuple<NcclOp, size_t, ncclDataType_t, ncclRedOp_t, int32_t>;
  std::map<Group, std::map<int32_t, std::vector<Signature>>> collectives;
  std::map<std::pair<int32_t, int32_t>, std::vector<size_t>> sent, received;  // (from, to)
  // Each message as (sender, receiver, index between them) -> the group of the sender's send and
  // of the receiver's receive, by (rank, the rank's group number); -1: not grouped.
  using MessageKey = std::tuple<int32_t, int32_t, size_t>;
  std::map<MessageKey, std::pair<int64_t, int64_t>> groups_of;
  std::map<int32_t, int64_t> groups_opened;  // by rank
  std::map<int32_t, bool> in_group;
  size_t calls = 0;
  size_t paired = 0;  // groups holding a send and a receive
  for (const NcclCall& call : log) {
    if (call.op == NcclOp::kGroupStart || call.op == NcclOp::kGroupEnd) {
      CHECK(call.group_depth == 1);
      in_group[call.rank] = call.op == NcclOp::kGroupStart;
      if (call.op == NcclOp::kGroupStart) ++groups_opened[call.rank];
      continue;
    }
    if (call.world != world) continue;
    INFO("rank " << call.rank << " " << emu::to_string(call.op));
    CHECK(call.result == ncclSuccess);
    const int64_t group = in_group[call.rank] ? groups_opened[call.rank] : -1;
    CHECK((group < 0 || call.op == NcclOp::kSend || call.op == NcclOp::kRecv));
    switch (call.op) {
      case NcclOp::kCommSplit:
        splits[call.rank].push_back(call);
        break;
      case NcclOp::kAllReduce:
      case NcclOp::kReduceScatter:
      case NcclOp::kAllGather:
      case NcclOp::kBroadcast:
        collectives[call.members][call.rank].emplace_back(call.op, call.count, call.datatype,
                                                          call.redop, call.peer);
        ++calls;
        break;
      case NcclOp::kSend: {
        std::vector<size_t>& messages = sent[{call.rank, call.peer}];
        groups_of[{call.rank, call.peer, messages.size()}].first = group;
        messages.push_back(call.count);
        ++calls;
        break;
      }
      case NcclOp::kRecv: {
        std::vector<size_t>& messages = received[{call.peer, call.rank}];
        groups_of[{call.peer, call.rank, messages.size()}].second = group;
        messages.push_back(call.count);
        ++calls;
        break;
      }
      default:
        break;
    }
  }
  CHECK(calls > 0);
  // Splits: every rank made the same number; in each, the ranks of one color ordered by key are
  // the communicator each of them recorded, key = rank; together they make the registered groups.
  REQUIRE(splits.size() == static_cast<size_t>(kWorld));
  const size_t rounds = splits.begin()->second.size();
  std::set<Group> made;
  for (size_t k = 0; k < rounds; ++k) {
    std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> by_color;  // (key, rank)
    for (const auto& [rank, records] : splits) {
      REQUIRE(records.size() == rounds);
      CHECK(records[k].key == rank);
      if (records[k].color != NCCL_SPLIT_NOCOLOR) {
        by_color[records[k].color].emplace_back(records[k].key, rank);
      }
    }
    for (auto& [color, members] : by_color) {
      std::ranges::sort(members);
      Group group;
      for (const auto& [key, rank] : members) group.push_back(rank);
      for (const auto& [key, rank] : members) {
        CHECK(splits[rank][k].split_members == group);
      }
      CHECK(made.insert(group).second);
    }
  }
  CHECK(made == std::set<Group>(registered.begin(), registered.end()));
  // Each communicator's collectives: the same sequence on every member.
  for (const auto& [members, by_rank] : collectives) {
    INFO("communicator of ranks " << ::Catch::Detail::stringify(members));
    CHECK(by_rank.size() == members.size());
    for (const auto& [rank, sequence] : by_rank) CHECK(sequence == by_rank.begin()->second);
  }
  // Messages: a's sends to b in the order and sizes of b's receives from a.
  CHECK(sent == received);
  // Groups: between two ranks a and b, the messages of one group of a's are those of one group
  // of b's (a send grouped with a receive on one side is on the other too).
  std::map<std::tuple<int32_t, int64_t, int32_t>, std::set<std::pair<int32_t, int64_t>>> meets;
  std::map<std::pair<int32_t, int64_t>, std::set<bool>> directions;  // sends, receives per group
  for (const auto& [message, groups] : groups_of) {
    const auto [from, to, index] = message;
    CHECK((groups.first < 0) == (groups.second < 0));
    if (groups.first < 0) continue;
    meets[{from, groups.first, to}].insert({to, groups.second});
    meets[{to, groups.second, from}].insert({from, groups.first});
    directions[{from, groups.first}].insert(true);
    directions[{to, groups.second}].insert(false);
  }
  for (const auto& [group, peer_groups] : meets) {
    INFO("rank " << std::get<0>(group) << " group " << std::get<1>(group) << " with rank "
                 << std::get<2>(group));
    CHECK(peer_groups.size() == 1);
  }
  for (const auto& [group, both] : directions) paired += both.size() == 2 ? 1 : 0;
  return paired;
}

// The device communicator under test: NCCL (the fake), or the loopback communicator.
enum class Device { kNccl, kLoopback };

// Runs body(rank, device, reference, backend) on one thread per rank: `device` over the fake NCCL
// bootstrapped on one in-process world, or the loopback communicator on that world; `reference`
// the in-process communicator of another; both registered `groups`. A failing rank aborts both
// worlds so that the others return; the first failure is rethrown.
void run_ranks(const std::vector<Group>& groups,
               const std::function<void(int32_t, Communicator&, Communicator&, Backend&)>& body,
               Device kind = Device::kNccl) {
  InProcessWorld bootstrap_world(kWorld);
  InProcessWorld reference_world(kWorld);
  std::vector<std::exception_ptr> errors(kWorld);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        const std::unique_ptr<Backend> backend = make_cuda_backend(0);
        const std::unique_ptr<Communicator> bootstrap = bootstrap_world.communicator(rank);
        const std::unique_ptr<Communicator> reference = reference_world.communicator(rank);
        const std::unique_ptr<Communicator> device =
            kind == Device::kNccl ? make_nccl_communicator(*bootstrap, *backend)
                                  : make_loopback_communicator(bootstrap_world, rank, *backend);
        device->register_groups(groups);
        reference->register_groups(groups);
        body(rank, *device, *reference, *backend);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
        bootstrap_world.abort();
        reference_world.abort();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

// A device copy of host values, read back after the calls queued on it. The values arrive by a
// device copy queued on the current stream (the upload beside it completes before it returns):
// like a task's output, they are there in stream order only, and on the emulator, which runs
// queued work late and in the chosen order, only for a reader that waited for them.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& backend, const std::vector<T>& values)
      : backend_(backend),
        source_(backend, static_cast<int64_t>(values.size()), dtype_of<T>()),
        tensor_(backend, static_cast<int64_t>(values.size()), dtype_of<T>()) {
    backend.upload(source_.data<T>(), values);
    backend.copy(tensor_.data<T>(), source_.data<T>(), tensor_.size());
  }
  std::span<T> span() { return {tensor_.data<T>(), static_cast<size_t>(tensor_.size())}; }
  std::vector<T> host() {
    std::vector<T> values(static_cast<size_t>(tensor_.size()));
    backend_.download(std::span(values), tensor_.data<T>());
    return values;
  }

 private:
  Backend& backend_;
  DeviceTensor source_;
  DeviceTensor tensor_;
};

template <typename T>
void check_against_inprocess(Device kind = Device::kNccl) {
  // On each of its groups (tp, dp, pp pair, world) every rank all-reduces T (sum, max) and
  // doubles (in device memory, as the squared gradient norm), reduce-scatters, all-gathers and
  // broadcasts from the group's last rank, then each first-stage rank sends two messages to its pp
  // peer and gets one back. Inputs where another order rounds differently
  // (tests/exec/communicator_values.hpp); every result must equal the in-process communicator's bit
  // for bit.
  emu::clear_nccl_call_log();
  std::vector<std::vector<std::vector<T>>> got(kWorld), expected(kWorld);
  std::vector<std::vector<double>> got_doubles(kWorld), expected_doubles(kWorld);
  run_ranks(
      layout_groups(),
      [&](int32_t rank, Communicator& comm, Communicator& reference, Backend& backend) {
        auto& mine = got[static_cast<size_t>(rank)];
        auto& theirs = expected[static_cast<size_t>(rank)];
        uint64_t call = 0;
        for (const Group& group : layout_groups()) {
          if (!std::ranges::binary_search(group, rank)) continue;
          const size_t n = kElements;
          for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
            std::vector<T> host = communicator_values<T>(rank, n, call++);
            DeviceBuffer<T> device(backend, host);
            comm.all_reduce(device.span(), group, op);
            reference.all_reduce(std::span(host), group, op);
            mine.push_back(device.host());
            theirs.push_back(host);
          }
          std::vector<double> scalars = communicator_values<double>(rank, 2, call++);
          std::vector<double> reference_scalars = scalars;
          double* device_scalars = backend.allocate<double>(2);
          backend.upload(device_scalars, scalars);
          comm.all_reduce(std::span(device_scalars, 2), group, ReduceOp::kSum);
          backend.download(std::span(scalars), device_scalars);
          backend.release(device_scalars);
          reference.all_reduce(std::span(reference_scalars), group, ReduceOp::kSum);
          auto& doubles = got_doubles[static_cast<size_t>(rank)];
          doubles.insert(doubles.end(), scalars.begin(), scalars.end());
          auto& reference_doubles = expected_doubles[static_cast<size_t>(rank)];
          reference_doubles.insert(reference_doubles.end(), reference_scalars.begin(),
                                   reference_scalars.end());

          const std::vector<T> scatter = communicator_values<T>(rank, group.size() * n, call++);
          DeviceBuffer<T> scatter_send(backend, scatter);
          DeviceBuffer<T> scattered(backend, std::vector<T>(n));
          std::vector<T> reference_scattered(n);
          comm.reduce_scatter(scatter_send.span(), scattered.span(), group);
          reference.reduce_scatter(scatter, std::span(reference_scattered), group);
          mine.push_back(scattered.host());
          theirs.push_back(reference_scattered);

          const std::vector<T> piece = communicator_values<T>(rank, n, call++);
          DeviceBuffer<T> gather_send(backend, piece);
          DeviceBuffer<T> gathered(backend, std::vector<T>(group.size() * n));
          std::vector<T> reference_gathered(group.size() * n);
          comm.all_gather(gather_send.span(), gathered.span(), group);
          reference.all_gather(piece, std::span(reference_gathered), group);
          mine.push_back(gathered.host());
          theirs.push_back(reference_gathered);

          std::vector<T> broadcast = communicator_values<T>(rank, n, call++);
          DeviceBuffer<T> device_broadcast(backend, broadcast);
          comm.broadcast(device_broadcast.span(), group.back(), group);
          reference.broadcast(std::span(broadcast), group.back(), group);
          mine.push_back(device_broadcast.host());
          theirs.push_back(broadcast);
        }
        const int32_t peer = rank < 4 ? rank + 4 : rank - 4;
        if (rank < 4) {
          for (uint64_t m = 0; m < 2; ++m) {
            const std::vector<T> message = communicator_values<T>(rank, 3 + m, 100 + m);
            DeviceBuffer<T> device(backend, message);
            comm.send(device.span(), peer, static_cast<int32_t>(m));
            backend.synchronize();  // the message is copied out before its buffer is freed
          }
          DeviceBuffer<T> reply(backend, std::vector<T>(5));
          comm.recv(reply.span(), peer, 7);
          mine.push_back(reply.host());
          theirs.push_back(communicator_values<T>(peer, 5, 200));
        } else {
          for (uint64_t m = 0; m < 2; ++m) {
            DeviceBuffer<T> device(backend, std::vector<T>(3 + m));
            comm.recv(device.span(), peer, static_cast<int32_t>(m));
            mine.push_back(device.host());
            theirs.push_back(communicator_values<T>(peer, 3 + m, 100 + m));
          }
          DeviceBuffer<T> reply(backend, communicator_values<T>(rank, 5, 200));
          comm.send(reply.span(), peer, 7);
          backend.synchronize();
        }
        comm.barrier();
      },
      kind);
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    INFO("rank " << rank);
    const auto r = static_cast<size_t>(rank);
    REQUIRE(got[r].size() == expected[r].size());
    for (size_t i = 0; i < got[r].size(); ++i) {
      INFO("result " << i);
      CHECK(test::bitwise_equal<T>(got[r][i], expected[r][i]));
    }
    CHECK(test::bitwise_equal<double>(got_doubles[r], expected_doubles[r]));
  }
  if (kind == Device::kNccl) check_call_log(emu::nccl_call_log(), layout_groups());
}

TEST_CASE("the NCCL communicator on the emulated NCCL gives the in-process communicator's bits",
          "[emu][nccl]") {
  check_against_inprocess<float>();
}

// The same in bf16 (ncclBfloat16): each step of a sum rounded to bf16, in group order.
TEST_CASE("the NCCL communicator in bf16 gives the in-process communicator's bits", "[emu][nccl]") {
  check_against_inprocess<Bf16>();
}

// The loopback communicator on the CUDA backend (device buffers of 8 thread-ranks on one device,
// reduced by kernels/cuda's reduce_in_order) gives the same bits, fp32 and bf16, in each of the
// emulator's orders: its streams wait for the peers' buffers and for the peers' reads only
// through the events it exchanges, so a missing wait reads or writes a buffer out of turn in
// some order.
TEST_CASE(
    "the loopback communicator on the CUDA backend gives the in-process communicator's bits in "
    "every emulator order",
    "[emu][loopback]") {
  const emu::Options previous = emu::options();
  for (const emu::Order order : {emu::Order::kForward, emu::Order::kReverse, emu::Order::kRandom}) {
    emu::Options options = previous;
    options.order = order;
    emu::set_options(options);
    INFO("emulator order " << static_cast<int>(order));
    check_against_inprocess<float>(Device::kLoopback);
    check_against_inprocess<Bf16>(Device::kLoopback);
  }
  emu::set_options(previous);
}

TEST_CASE("register_groups splits the same rounds on every rank: here tp, the world, dp, pp",
          "[emu][nccl]") {
  // The greedy rounds of exec/nccl_communicator.hpp on the dp2 x tp2 x pp2 groups, in ascending
  // order [0, 1] < [0, 1, ..., 7] < [0, 2] < [0, 4] < [1, 3] < ...: [0, 1] opens the tp round,
  // the world meets it and opens its own, [0, 2] opens the dp round and [0, 4] the pp round; each
  // later pair joins its family's round. Four ncclCommSplit calls, every rank in one group of each.
  emu::clear_nccl_call_log();
  run_ranks(layout_groups(), [](int32_t, Communicator&, Communicator&, Backend&) {});
  std::map<int32_t, std::vector<Group>> per_rank;
  for (const NcclCall& call : emu::nccl_call_log()) {
    if (call.op == NcclOp::kCommSplit) per_rank[call.rank].push_back(call.split_members);
  }
  for (const auto& [rank, groups] : per_rank) {
    INFO("rank " << rank);
    const int32_t tp_base = rank - rank % 2;
    const int32_t dp_base = rank - rank % 4 + rank % 2;
    const std::vector<Group> expected = {{tp_base, tp_base + 1},
                                         {0, 1, 2, 3, 4, 5, 6, 7},
                                         {dp_base, dp_base + 2},
                                         {rank % 4, rank % 4 + 4}};
    CHECK(groups == expected);
  }
  CHECK(per_rank.size() == static_cast<size_t>(kWorld));
}

TEST_CASE("a failed NCCL call names the call, the file and line, NCCL's reason and a hint",
          "[emu][nccl]") {
  // STRATA_NCCL_CHECK (exec/nccl_check.hpp) on a refused ncclSend: peer 5 of a 1-rank world.
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  std::string message;
  const int line = __LINE__ + 2;
  try {
    STRATA_NCCL_CHECK(ncclSend(nullptr, 0, ncclFloat32, 5, comm, nullptr));
  } catch (const NcclError& error) {
    message = error.what();
  }
  ncclCommDestroy(comm);
  CHECK(message.find("NCCL call ncclSend(nullptr, 0, ncclFloat32, 5, comm, nullptr) failed at ") !=
        std::string::npos);
  CHECK(message.find("nccl_communicator_emu_test.cpp:" + std::to_string(line) +
                     ": invalid argument (run with NCCL_DEBUG=WARN for details) [ncclSend: peer "
                     "5 is not a rank of a communicator of 1]") != std::string::npos);
  CHECK(message.find("NCCL_DEBUG=WARN for NCCL's reason") != std::string::npos);
}

// A tiny GPT trained for 2 steps on 8 rank threads with the CUDA backend on the emulation, its
// collectives through the NCCL communicator or the loopback one (tests/exec/loopback_*).
struct TrainedRun {
  TrainResult result;
  std::vector<NcclCall> log;
  std::vector<Group> groups;
};

// The NCCL communicator with its pipeline batches turned off: every call forwarded, sends and
// receives one at a time (a planted bug: the runtime without Communicator::batches_p2p).
class Unbatched : public Communicator {
 public:
  explicit Unbatched(std::unique_ptr<Communicator> nccl) : nccl_(std::move(nccl)) {}
  int32_t rank() const override { return nccl_->rank(); }
  int32_t world_size() const override { return nccl_->world_size(); }
  void register_groups(const std::vector<std::vector<int32_t>>& groups) override {
    nccl_->register_groups(groups);
  }
  void all_reduce(std::span<float> data, RankGroup group, ReduceOp op) override {
    nccl_->all_reduce(data, group, op);
  }
  void all_reduce(std::span<double> data, RankGroup group, ReduceOp op) override {
    nccl_->all_reduce(data, group, op);
  }
  void reduce_scatter(std::span<const float> send, std::span<float> recv,
                      RankGroup group) override {
    nccl_->reduce_scatter(send, recv, group);
  }
  void all_gather(std::span<const float> send, std::span<float> recv, RankGroup group) override {
    nccl_->all_gather(send, recv, group);
  }
  void broadcast(std::span<float> data, int32_t root, RankGroup group) override {
    nccl_->broadcast(data, root, group);
  }
  void send(std::span<const float> data, int32_t peer, int32_t tag) override {
    nccl_->send(data, peer, tag);
  }
  void recv(std::span<float> data, int32_t peer, int32_t tag) override {
    nccl_->recv(data, peer, tag);
  }
  void all_reduce(std::span<Bf16> data, RankGroup group, ReduceOp op) override {
    nccl_->all_reduce(data, group, op);
  }
  void reduce_scatter(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    nccl_->reduce_scatter(send, recv, group);
  }
  void all_gather(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    nccl_->all_gather(send, recv, group);
  }
  void broadcast(std::span<Bf16> data, int32_t root, RankGroup group) override {
    nccl_->broadcast(data, root, group);
  }
  void send(std::span<const Bf16> data, int32_t peer, int32_t tag) override {
    nccl_->send(data, peer, tag);
  }
  void recv(std::span<Bf16> data, int32_t peer, int32_t tag) override {
    nccl_->recv(data, peer, tag);
  }
  void barrier() override { nccl_->barrier(); }

 private:
  std::unique_ptr<Communicator> nccl_;
};

enum class Collectives { kLoopback, kNccl, kNcclUnbatched };

// `p` in fp32, or in bf16 with the gradients reduced in fp32 or (fp32_grads false) in bf16.
TrainedRun train(const test::ParityPlan& p, Collectives collectives, DType dtype = DType::kFp32,
                 bool fp32_grads = true) {
  // The parity model with 4 layers: these plans split it over 2 stages at most.
  ModelSpec model = test::parity_model();
  model.layers = 4;
  ParallelPlan plan = test::parity_plan(p, 1, 8, 16);
  plan.dtype = dtype;
  plan.precision.fp32_grads = fp32_grads;
  const CompiledPlan compiled =
      compile_plan(model, cpu_host_cluster(plan.gpus(), int64_t{1} << 32), plan, GraphMode::kFull);
  REQUIRE(compiled.validation.ok());
  TrainOptions options;
  options.steps = 2;
  options.data_path = std::string(STRATA_SOURCE_DIR) + "/scenarios/data/kjv-genesis-exodus.txt";
  options.seed = 7;
  options.device_backend = [](int32_t) { return make_cuda_backend(0); };
  if (collectives == Collectives::kNccl) options.device_communicator = make_nccl_communicator;
  if (collectives == Collectives::kNcclUnbatched) {
    options.device_communicator = [](Communicator& bootstrap, Backend& backend) {
      return std::make_unique<Unbatched>(make_nccl_communicator(bootstrap, backend));
    };
  }
  emu::clear_nccl_call_log();
  TrainedRun run{train_in_process(compiled, options, {}), emu::nccl_call_log(), {}};
  for (const CommGroup& group : compiled.graph.groups()) run.groups.push_back(group.ranks);
  run.groups.push_back({0, 1, 2, 3, 4, 5, 6, 7});
  return run;
}

// The losses and gradient norms of 2 steps match the loopback communicator's run within 1e-5
// (both sum in group order here, so they agree to the bit unless the emulator's orders change a
// kernel's; a GPU's NCCL would agree within rounding only), and the call log passes
// check_call_log, whose count of paired groups it returns.
size_t check_training_in_order(const test::ParityPlan& p) {
  const TrainedRun loopback = train(p, Collectives::kLoopback);
  const TrainedRun device = train(p, Collectives::kNccl);
  CHECK(loopback.log.empty());
  REQUIRE(loopback.result.steps.size() == device.result.steps.size());
  for (size_t i = 0; i < loopback.result.steps.size(); ++i) {
    INFO("step " << i << ": loopback loss " << loopback.result.steps[i].loss << ", nccl "
                 << device.result.steps[i].loss);
    CHECK(device.result.steps[i].loss ==
          Approx(loopback.result.steps[i].loss).epsilon(0).margin(1e-5));
    CHECK(device.result.steps[i].grad_norm ==
          Approx(loopback.result.steps[i].grad_norm).epsilon(1e-5));
  }
  return check_call_log(device.log, device.groups);
}

// check_training_in_order in each of the emulator's orders; the paired groups of the last.
size_t check_training_matches_loopback(const test::ParityPlan& p) {
  const emu::Options previous = emu::options();
  size_t paired = 0;
  for (const emu::Order order : {emu::Order::kForward, emu::Order::kReverse, emu::Order::kRandom}) {
    emu::Options options = previous;
    options.order = order;
    emu::set_options(options);
    INFO("emulator order " << static_cast<int>(order));
    paired = check_training_in_order(p);
  }
  emu::set_options(previous);
  return paired;
}

TEST_CASE(
    "training dp4 x tp2 ZeRO 3 with the CUDA backend and NCCL on the emulation matches the "
    "loopback run",
    "[emu][nccl][train]") {
  // All-reduces, reduce-scatters and all-gathers of parameters and gradients.
  CHECK(check_training_matches_loopback(test::kParityPlans[3]) == 0);
}

TEST_CASE(
    "training dp2 x tp2 x pp2 1F1B with the CUDA backend and NCCL on the emulation matches "
    "the loopback run",
    "[emu][nccl][train]") {
  // All-reduces, the data-parallel gradient reduction, and pipeline sends and receives: in the
  // steady state each stage sends to its peer before it receives from it, which deadlocks
  // ungrouped (the emulated send waits for its receive, as a large one does on a GPU); the
  // runtime's batches pair them (Communicator::batches_p2p).
  CHECK(check_training_matches_loopback(test::kParityPlans[0]) > 0);
}

TEST_CASE(
    "a bf16 step's NCCL calls carry bf16 where the plan says: pipeline messages always, the "
    "data-parallel gradient reduction with gradients reduced in bf16",
    "[emu][nccl][train][bf16]") {
  // dp2 x tp2 x pp2 in bf16 (Megatron-LM's defaults, then --grad-reduce-in-bf16): the pipeline
  // carries bf16 activations; the DP groups ({0, 2}, {1, 3}, {4, 6}, {5, 7}: layout_groups) move
  // only the gradients, fp32 or bf16 as the plan says. Both runs match the loopback
  // communicator's, which sums bf16 in group order as the emulated NCCL does.
  const std::set<Group> dp_groups = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  for (const bool fp32_grads : {true, false}) {
    INFO("gradients reduced in " << (fp32_grads ? "fp32" : "bf16"));
    const TrainedRun loopback =
        train(test::kParityPlans[0], Collectives::kLoopback, DType::kBf16, fp32_grads);
    const TrainedRun device =
        train(test::kParityPlans[0], Collectives::kNccl, DType::kBf16, fp32_grads);
    REQUIRE(loopback.result.steps.size() == device.result.steps.size());
    for (size_t i = 0; i < device.result.steps.size(); ++i) {
      CHECK(device.result.steps[i].loss ==
            Approx(loopback.result.steps[i].loss).epsilon(0).margin(1e-5));
    }
    CHECK(check_call_log(device.log, device.groups) > 0);
    const ncclDataType_t gradients = fp32_grads ? ncclFloat32 : ncclBfloat16;
    size_t messages = 0;
    size_t reductions = 0;
    for (const NcclCall& call : device.log) {
      INFO("rank " << call.rank << " " << emu::to_string(call.op));
      if (call.op == NcclOp::kSend || call.op == NcclOp::kRecv) {
        CHECK(call.datatype == ncclBfloat16);
        ++messages;
      } else if (call.op == NcclOp::kAllReduce && dp_groups.count(call.members) != 0) {
        CHECK(call.datatype == gradients);
        ++reductions;
      }
    }
    CHECK(messages > 0);
    CHECK(reductions > 0);
  }
}

TEST_CASE("the same run with its pipeline sends and receives unbatched deadlocks, and says so",
          "[emu][nccl][train]") {
  // Each stage sends to its peer before it receives from it, one call at a time: both sends wait
  // for receives queued behind them on the communicator. The emulation fails once the
  // (shortened) timeout passes, naming the sends; on a GPU the step hangs.
  const auto previous = emu::set_nccl_timeout(std::chrono::milliseconds(2000));
  std::string failure;
  try {
    train(test::kParityPlans[0], Collectives::kNcclUnbatched);
  } catch (const std::exception& error) {
    failure = error.what();
  }
  emu::set_nccl_timeout(previous);
  CHECK(failure.find("did not post the matching ncclRecv within 2000 ms") != std::string::npos);
}

}  // namespace
}  // namespace strata
