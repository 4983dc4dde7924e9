// RMSNorm (Zhang & Sennrich 2019, Llama's norm) on the GPU, as kernels/cpu/rmsnorm.cpp: the
// forward is one warp (or, for wide rows, one block) per row with an fp32 rstd (norm_rows.cuh);
// the backward is LayerNorm's kernel with mean = 0 and no bias (norm_backward.cuh).

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/norm_backward.cuh"
#include "kernels/cuda/norm_rows.cuh"

namespace strata::cuda {
namespace {

// out is (N,C), rstd (N), inp (N,C), weight (C).
// Per row: rstd = 1 / sqrt(sum(inp^2) / C + 1e-5), out = inp * rstd * weight.
template <typename T, bool kVec, typename Rows>
__global__ void __launch_bounds__(norm::kMaxThreads)
    rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight, int64_t n,
                           int64_t c) {
  STRATA_SHARED(float, reduce_shared, [kWarpSize]);
  for (int64_t row = Rows::first_row(); row < n; row += Rows::row_stride()) {
    norm::rmsnorm_row<T, kVec, Rows>(out + row * c, rstd + row, inp + row * c, weight, c,
                                     reduce_shared);
  }
}

}  // namespace

template <typename T>
void rmsnorm_forward(Context& ctx, T* out, float* rstd, const T* inp, const T* weight, int64_t n,
                     int64_t c) {
  norm::check_sizes("rmsnorm_forward", n, c);
  if (n == 0 || c == 0) return;
  const bool aligned = is_aligned16(out) && is_aligned16(inp) && is_aligned16(weight);
  norm::dispatch_rows<T>(n, c, aligned, [&](auto vec, auto rows, norm::RowLaunch shape) {
    STRATA_LAUNCH(shape.blocks, shape.threads, 0, ctx.stream(),
                  rmsnorm_forward_kernel<T, decltype(vec)::value, decltype(rows)>)
    (out, rstd, inp, weight, n, c);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_backward(Context& ctx, T* dinp, float* dweight, const T* dout, const T* inp,
                      const T* weight, const float* rstd, const T* dresidual, int64_t n,
                      int64_t c) {
  norm::norm_backward<T, /*kRms=*/true>(ctx, "rmsnorm_backward", dinp, dweight,
                                        /*dbias=*/nullptr, dout, inp, weight, /*mean=*/nullptr,
                                        rstd, dresidual, n, c);
}

template void rmsnorm_forward<float>(Context&, float*, float*, const float*, const float*, int64_t,
                                     int64_t);
template void rmsnorm_forward<bf16>(Context&, bf16*, float*, const bf16*, const bf16*, int64_t,
                                    int64_t);
template void rmsnorm_backward<float>(Context&, float*, float*, const float*, const float*,
                                      const float*, const float*, const float*, int64_t, int64_t);
template void rmsnorm_backward<bf16>(Context&, bf16*, float*, const bf16*, const bf16*, const bf16*,
                                     const float*, const bf16*, int64_t, int64_t);

}  // namespace strata::cuda
