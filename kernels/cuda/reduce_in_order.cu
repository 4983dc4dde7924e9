// The communicators' group-order reduction on the GPU (kernels.hpp, reduce_in_order): the
// loopback communicator's sum over the buffers of the thread-ranks on one device. A grid-stride
// loop of one element per thread and step reads that element of every input in order; the
// pointers travel by value in the kernel's parameters, kMaxInputs at a time, and a longer list
// continues from out (out holds the partial reduction, rounded to T as every step is).

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kReduceThreads = 256;
constexpr int64_t kReduceMaxBlocks = 65536;
// 32 pointers: 256 bytes of the 4 KiB of a kernel's parameters (CUDA C++ Programming Guide,
// "Function Parameters"), more than the thread-ranks of a group on one GPU in practice.
constexpr int kMaxInputs = 32;

template <typename T>
struct InputList {
  const T* x[kMaxInputs];
  int count;
};

// One step, as the host's reduce_step (exec/communicator.hpp): a sum in T's arithmetic, or the
// larger (the accumulated value unless the next compares greater).
template <typename T>
__device__ __forceinline__ T reduce_step(T accumulated, T next, bool maximum) {
  if (maximum) return next > accumulated ? next : accumulated;
  return accumulated + next;
}
template <>
__device__ __forceinline__ bf16 reduce_step<bf16>(bf16 accumulated, bf16 next, bool maximum) {
  const float a = __bfloat162float(accumulated);
  const float b = __bfloat162float(next);
  if (maximum) return b > a ? next : accumulated;
  return __float2bfloat16_rn(a + b);
}

template <typename T>
__global__ void reduce_in_order_kernel(T* out, InputList<T> inputs, int64_t n, bool maximum) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    T accumulated = inputs.x[0][i];
    for (int j = 1; j < inputs.count; ++j)
      accumulated = reduce_step(accumulated, inputs.x[j][i], maximum);
    out[i] = accumulated;
  }
}

}  // namespace

template <typename T>
void reduce_in_order(Context& ctx, T* out, const T* const* inputs, int count, int64_t n,
                     bool maximum) {
  if (n <= 0 || count <= 0) return;
  const auto blocks =
      static_cast<unsigned>(std::clamp(ceil_div(n, kReduceThreads), int64_t{1}, kReduceMaxBlocks));
  // The first launch takes up to kMaxInputs inputs; each next one out and kMaxInputs - 1 more.
  InputList<T> list{};
  int next = 0;
  while (next < count) {
    list.count = 0;
    if (next > 0) list.x[list.count++] = out;
    while (list.count < kMaxInputs && next < count) list.x[list.count++] = inputs[next++];
    STRATA_LAUNCH(blocks, kReduceThreads, 0, ctx.stream(), reduce_in_order_kernel<T>)
    (out, list, n, maximum);
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

template void reduce_in_order<float>(Context&, float*, const float* const*, int, int64_t, bool);
template void reduce_in_order<double>(Context&, double*, const double* const*, int, int64_t, bool);
template void reduce_in_order<bf16>(Context&, bf16*, const bf16* const*, int, int64_t, bool);

}  // namespace strata::cuda
