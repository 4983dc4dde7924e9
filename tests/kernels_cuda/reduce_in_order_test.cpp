// The group-order reduction on the GPU (kernels/cuda/reduce_in_order.cu), the loopback
// communicator's, against the communicators' serial reference (tests/exec/communicator_values.hpp):
// element k is ((x0[k] op x1[k]) op x2[k]) op ..., each step in the element's type, bit for bit.
// The inputs mix magnitudes so that another order of the sum rounds differently; the input
// counts cross the kernel's 32 pointers per launch (33 and 70 inputs continue from the output).

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/bf16.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/exec/communicator_values.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using strata::test::communicator_values;
using strata::test::order_matters;
using strata::test::serial_reduce;
using test::DeviceBuffer;

// The kernels' element type: Bf16 is __nv_bfloat16's layout (common/bf16.hpp).
template <typename T>
using Device = std::conditional_t<std::is_same_v<T, Bf16>, bf16, T>;

template <typename T>
void check_reduce_in_order(int count, ReduceOp op) {
  INFO(count << " inputs, " << (op == ReduceOp::kSum ? "sum" : "max") << ", " << sizeof(T)
             << "-byte elements");
  constexpr size_t kElements = 1001;  // odd: no whole number of blocks or vectors
  Context ctx;
  std::vector<std::vector<T>> members;
  std::vector<DeviceBuffer<T>> buffers;
  std::vector<const Device<T>*> inputs;
  for (int j = 0; j < count; ++j) {
    members.push_back(communicator_values<T>(j, kElements, 90));
    buffers.emplace_back(kElements);
    STRATA_CUDA_CHECK(cudaMemcpy(buffers.back().data(), members.back().data(),
                                 kElements * sizeof(T), cudaMemcpyHostToDevice));
    inputs.push_back(reinterpret_cast<const Device<T>*>(buffers.back().data()));
  }
  if (count >= 3 && op == ReduceOp::kSum) REQUIRE(order_matters(members));
  DeviceBuffer<T> out(kElements);
  test::poison(out);
  reduce_in_order(ctx, reinterpret_cast<Device<T>*>(out.data()), inputs.data(), count,
                  static_cast<int64_t>(kElements), op == ReduceOp::kMax);
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> got(kElements);
  STRATA_CUDA_CHECK(
      cudaMemcpy(got.data(), out.data(), kElements * sizeof(T), cudaMemcpyDeviceToHost));
  const std::vector<T> want = serial_reduce(members, op);
  CHECK(std::memcmp(got.data(), want.data(), kElements * sizeof(T)) == 0);
}

TEST_CASE(
    "reduce_in_order on the GPU sums and maxes in group order, bit for bit, fp32, fp64 and "
    "bf16, over 1 to 70 inputs",
    "[gpu][reduce_in_order]") {
  for (const int count : {1, 2, 7, 32, 33, 70}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      check_reduce_in_order<float>(count, op);
      check_reduce_in_order<double>(count, op);
      check_reduce_in_order<Bf16>(count, op);
    }
  }
}

}  // namespace
}  // namespace strata::cuda
