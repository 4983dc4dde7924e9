// The NCCL communicator on the toolkit's NCCL and a real GPU: a 1-rank world (tagged [gpu]:
// without a device, tests/kernels_cuda/gpu_main.cpp exits 77 and CTest reports it skipped). It
// checks the setup (the unique id over the in-process bootstrap, ncclCommInitRank, the splits of
// register_groups), that the library is the version the header names, and that each collective
// queued on the stream has completed, with a 1-member group's answer, when the host reads back.

#include <nccl.h>
#include <catch2/catch.hpp>

#include <vector>

#include "exec/cuda_backend.hpp"
#include "exec/inprocess_communicator.hpp"
#include "exec/nccl_communicator.hpp"

namespace strata {
namespace {

TEST_CASE("the NCCL communicator runs each collective of a 1-rank world on the GPU", "[gpu]") {
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  InProcessWorld world(1);
  const std::unique_ptr<Communicator> bootstrap = world.communicator(0);
  const std::unique_ptr<Backend> device = make_cuda_backend(0);
  Backend& backend = *device;
  const std::unique_ptr<Communicator> nccl = make_nccl_communicator(*bootstrap, backend);
  const std::vector<int32_t> group = {0};
  nccl->register_groups({group});

  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  DeviceTensor data(backend, 3, DType::kFp32);
  DeviceTensor gathered(backend, 3, DType::kFp32);
  backend.upload(data.data<float>(), values);
  nccl->all_reduce(std::span(data.data<float>(), 3), group, ReduceOp::kSum);
  nccl->all_reduce(std::span(data.data<float>(), 3), group, ReduceOp::kMax);
  nccl->broadcast(std::span(data.data<float>(), 3), 0, group);
  nccl->all_gather(std::span<const float>(data.data<float>(), 3),
                   std::span(gathered.data<float>(), 3), group);
  nccl->reduce_scatter(std::span<const float>(gathered.data<float>(), 3),
                       std::span(data.data<float>(), 3), group);
  // Doubles are device memory too (the squared gradient norm).
  const DeviceScalar device_scalar(backend);
  std::vector<double> scalar = {0.125};
  backend.upload(device_scalar.data(), scalar);
  nccl->all_reduce(std::span(device_scalar.data(), 1), group, ReduceOp::kSum);
  backend.download(std::span(scalar), device_scalar.data());
  std::vector<float> result(3);
  backend.download(std::span(result), data.data<float>());
  CHECK(result == values);
  CHECK(scalar == std::vector<double>{0.125});
  nccl->barrier();
}

}  // namespace
}  // namespace strata
