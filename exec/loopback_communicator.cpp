#include "exec/loopback_communicator.hpp"

#include <vector>

namespace strata {

namespace {

class LoopbackCommunicator final : public Communicator {
 public:
  LoopbackCommunicator(Communicator& host, Backend& backend) : host_(host), backend_(backend) {}

  int32_t rank() const override { return host_.rank(); }
  int32_t world_size() const override { return host_.world_size(); }
  void register_groups(const std::vector<std::vector<int32_t>>& groups) override {
    host_.register_groups(groups);
  }

  void all_reduce(std::span<float> data, RankGroup group, ReduceOp op) override {
    all_reduce_staged(data, group, op);
  }
  void all_reduce(std::span<Bf16> data, RankGroup group, ReduceOp op) override {
    all_reduce_staged(data, group, op);
  }
  void all_reduce(std::span<double> data, RankGroup group, ReduceOp op) override {
    all_reduce_staged(data, group, op);
  }
  void reduce_scatter(std::span<const float> send, std::span<float> recv,
                      RankGroup group) override {
    reduce_scatter_staged(send, recv, group);
  }
  void reduce_scatter(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    reduce_scatter_staged(send, recv, group);
  }
  void all_gather(std::span<const float> send, std::span<float> recv, RankGroup group) override {
    all_gather_staged(send, recv, group);
  }
  void all_gather(std::span<const Bf16> send, std::span<Bf16> recv, RankGroup group) override {
    all_gather_staged(send, recv, group);
  }
  void broadcast(std::span<float> data, int32_t root, RankGroup group) override {
    broadcast_staged(data, root, group);
  }
  void broadcast(std::span<Bf16> data, int32_t root, RankGroup group) override {
    broadcast_staged(data, root, group);
  }
  void send(std::span<const float> data, int32_t peer, int32_t tag) override {
    host_.send(std::span<const float>(to_host(data)), peer, tag);
  }
  void send(std::span<const Bf16> data, int32_t peer, int32_t tag) override {
    host_.send(std::span<const Bf16>(to_host(data)), peer, tag);
  }
  void recv(std::span<float> data, int32_t peer, int32_t tag) override {
    recv_staged(data, peer, tag);
  }
  void recv(std::span<Bf16> data, int32_t peer, int32_t tag) override {
    recv_staged(data, peer, tag);
  }
  void barrier() override { host_.barrier(); }

 private:
  // The host communicator's view of when the data began to move is this one's (the runtime
  // measures the wait for peers through it).
  void note_host_transfer() {
    if (host_.first_transfer_ns() >= 0) note_transfer(host_.first_transfer_ns());
  }

  template <typename T>
  std::vector<T> to_host(std::span<const T> device) {
    std::vector<T> host(device.size());
    backend_.download(std::span(host), device.data());
    return host;
  }

  // Each call: the device buffer to the host, the host communicator's call, the result back.
  template <typename T>
  void all_reduce_staged(std::span<T> data, RankGroup group, ReduceOp op) {
    std::vector<T> staged = to_host(std::span<const T>(data));
    host_.mark_transfers();
    host_.all_reduce(std::span(staged), group, op);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }
  template <typename T>
  void reduce_scatter_staged(std::span<const T> send, std::span<T> recv, RankGroup group) {
    const std::vector<T> staged = to_host(send);
    std::vector<T> result(recv.size());
    host_.mark_transfers();
    host_.reduce_scatter(std::span<const T>(staged), std::span(result), group);
    note_host_transfer();
    backend_.upload(recv.data(), result);
  }
  template <typename T>
  void all_gather_staged(std::span<const T> send, std::span<T> recv, RankGroup group) {
    const std::vector<T> staged = to_host(send);
    std::vector<T> result(recv.size());
    host_.mark_transfers();
    host_.all_gather(std::span<const T>(staged), std::span(result), group);
    note_host_transfer();
    backend_.upload(recv.data(), result);
  }
  template <typename T>
  void broadcast_staged(std::span<T> data, int32_t root, RankGroup group) {
    std::vector<T> staged = to_host(std::span<const T>(data));
    host_.mark_transfers();
    host_.broadcast(std::span(staged), root, group);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }
  template <typename T>
  void recv_staged(std::span<T> data, int32_t peer, int32_t tag) {
    std::vector<T> staged(data.size());
    host_.mark_transfers();
    host_.recv(std::span(staged), peer, tag);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }

  Communicator& host_;
  Backend& backend_;
};

}  // namespace

std::unique_ptr<Communicator> make_loopback_communicator(Communicator& host, Backend& backend) {
  return std::make_unique<LoopbackCommunicator>(host, backend);
}

}  // namespace strata
