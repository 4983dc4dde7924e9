// LayerNorm (Ba et al. 2016) on the GPU, as kernels/cpu/layernorm.cpp and llm.c's
// layernorm_forward_kernel3 / layernorm_backward: the forward is one warp (or, for wide rows, one
// block) per row with fp32 statistics (norm_rows.cuh); the backward writes dinp row by row and
// sums dweight and dbias per block, then per channel in block order (norm_backward.cuh).

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/norm_backward.cuh"
#include "kernels/cuda/norm_rows.cuh"

namespace strata::cuda {
namespace {

// out is (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C) or null.
// Per row: mean = sum(inp) / C, var = sum((inp - mean)^2) / C, rstd = 1 / sqrt(var + 1e-5),
// out = (inp - mean) * rstd * weight + bias.
template <typename T, bool kVec, typename Rows>
__global__ void __launch_bounds__(norm::kMaxThreads)
    layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                             const T* bias, int64_t n, int64_t c) {
  STRATA_SHARED(float, reduce_shared, [kWarpSize]);
  for (int64_t row = Rows::first_row(); row < n; row += Rows::row_stride()) {
    norm::layernorm_row<T, kVec, Rows>(out + row * c, mean + row, rstd + row, inp + row * c, weight,
                                       bias, c, reduce_shared);
  }
}

}  // namespace

template <typename T>
void layernorm_forward(Context& ctx, T* out, float* mean, float* rstd, const T* inp,
                       const T* weight, const T* bias, int64_t n, int64_t c) {
  norm::check_sizes("layernorm_forward", n, c);
  if (n == 0 || c == 0) return;
  const bool aligned = is_aligned16(out) && is_aligned16(inp) && is_aligned16(weight) &&
                       (bias == nullptr || is_aligned16(bias));
  norm::dispatch_rows<T>(n, c, aligned, [&](auto vec, auto rows, norm::RowLaunch shape) {
    STRATA_LAUNCH(shape.blocks, shape.threads, 0, ctx.stream(),
                  layernorm_forward_kernel<T, decltype(vec)::value, decltype(rows)>)
    (out, mean, rstd, inp, weight, bias, n, c);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_backward(Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                        const T* inp, const T* weight, const float* mean, const float* rstd,
                        const T* dresidual, int64_t n, int64_t c) {
  norm::norm_backward<T, /*kRms=*/false>(ctx, "layernorm_backward", dinp, dweight, dbias, dout, inp,
                                         weight, mean, rstd, dresidual, n, c);
}

template void layernorm_forward<float>(Context&, float*, float*, float*, const float*, const float*,
                                       const float*, int64_t, int64_t);
template void layernorm_forward<bf16>(Context&, bf16*, float*, float*, const bf16*, const bf16*,
                                      const bf16*, int64_t, int64_t);
template void layernorm_backward<float>(Context&, float*, float*, float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        const float*, int64_t, int64_t);
template void layernorm_backward<bf16>(Context&, bf16*, float*, float*, const bf16*, const bf16*,
                                       const bf16*, const float*, const float*, const bf16*,
                                       int64_t, int64_t);

}  // namespace strata::cuda
