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
    std::vector<float> staged = to_host(data);
    host_.mark_transfers();
    host_.all_reduce(std::span(staged), group, op);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }
  void all_reduce(std::span<double> data, RankGroup group, ReduceOp op) override {
    host_.all_reduce(data, group, op);
  }
  void reduce_scatter(std::span<const float> send, std::span<float> recv,
                      RankGroup group) override {
    const std::vector<float> staged = to_host(send);
    std::vector<float> result(recv.size());
    host_.mark_transfers();
    host_.reduce_scatter(staged, std::span(result), group);
    note_host_transfer();
    backend_.upload(recv.data(), result);
  }
  void all_gather(std::span<const float> send, std::span<float> recv, RankGroup group) override {
    const std::vector<float> staged = to_host(send);
    std::vector<float> result(recv.size());
    host_.mark_transfers();
    host_.all_gather(staged, std::span(result), group);
    note_host_transfer();
    backend_.upload(recv.data(), result);
  }
  void broadcast(std::span<float> data, int32_t root, RankGroup group) override {
    std::vector<float> staged = to_host(data);
    host_.mark_transfers();
    host_.broadcast(std::span(staged), root, group);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }
  void send(std::span<const float> data, int32_t peer, int32_t tag) override {
    host_.send(to_host(data), peer, tag);
  }
  void recv(std::span<float> data, int32_t peer, int32_t tag) override {
    std::vector<float> staged(data.size());
    host_.mark_transfers();
    host_.recv(std::span(staged), peer, tag);
    note_host_transfer();
    backend_.upload(data.data(), staged);
  }
  void barrier() override { host_.barrier(); }

 private:
  // The host communicator's view of when the data began to move is this one's (the runtime
  // measures the wait for peers through it).
  void note_host_transfer() {
    if (host_.first_transfer_ns() >= 0) note_transfer(host_.first_transfer_ns());
  }

  std::vector<float> to_host(std::span<const float> device) {
    std::vector<float> host(device.size());
    backend_.download(std::span(host), device.data());
    return host;
  }

  Communicator& host_;
  Backend& backend_;
};

}  // namespace

std::unique_ptr<Communicator> make_loopback_communicator(Communicator& host, Backend& backend) {
  return std::make_unique<LoopbackCommunicator>(host, backend);
}

}  // namespace strata
