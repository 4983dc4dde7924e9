// Conversion between the storage types on the GPU (kernels.hpp, convert): a grid-stride loop of
// one element per thread and step, memory-bound like the copy it replaces.

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kConvertThreads = 256;
constexpr int64_t kConvertMaxBlocks = 65536;

template <typename To, typename From>
__global__ void convert_kernel(To* dst, const From* src, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = from_float<To>(to_float(src[i]));
  }
}

}  // namespace

template <typename To, typename From>
void convert(Context& ctx, To* dst, const From* src, int64_t n) {
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(
      std::clamp(ceil_div(n, kConvertThreads), int64_t{1}, kConvertMaxBlocks));
  STRATA_LAUNCH(blocks, kConvertThreads, 0, ctx.stream(), convert_kernel<To, From>)(dst, src, n);
  STRATA_CUDA_CHECK_LAUNCH();
}

template void convert<float, bf16>(Context&, float*, const bf16*, int64_t);
template void convert<bf16, float>(Context&, bf16*, const float*, int64_t);

}  // namespace strata::cuda
