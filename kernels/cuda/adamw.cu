// AdamW with gradient clipping on the GPU, and the fp64 sum of squares behind the global
// gradient norm: the contracts of kernels/cpu/adamw.cpp.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

// ---- Sum of squares -----------------------------------------------------------------------

constexpr int kSumBlockSize = 512;
// Elements each thread loads per loop step (independent loads in flight).
constexpr int kSumUnroll = 4;
// The grid is min(ceil(n / (512 * 4)), 1024) blocks whatever the device, so the order of the
// additions, and the bits of the result, depend on n alone. The final kernel is one block of
// kSumMaxBlocks threads, one partial each.
constexpr int64_t kSumMaxBlocks = 1024;

// partials is (gridDim.x), x (n): partials[b] = the sum of x[i]^2 over the elements block b
// owns, in fp64. A float's square is exact in double (24-bit mantissas, a 48-bit product), so
// only the additions round. Thread t of the grid (stride threads in all) owns
// i = t + k * stride; it loads kSumUnroll of them per step, adding 0 past the end.
__global__ void sum_of_squares_partials_kernel(double* partials, const float* x, int64_t n) {
  STRATA_SHARED(double, shared, [kWarpSize]);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  double sum = 0.0;
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; base < n;
       base += stride * kSumUnroll) {
    float values[kSumUnroll];
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {
      const int64_t i = base + u * stride;
      values[u] = i < n ? x[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {
      const double xi = values[u];
      sum += xi * xi;
    }
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// total is (1), partials (count): *total += the sum of the partials, in one block's fixed order.
__global__ void sum_of_squares_total_kernel(double* total, const double* partials, int count) {
  STRATA_SHARED(double, shared, [kWarpSize]);
  double sum = 0.0;
  for (int b = threadIdx.x; b < count; b += blockDim.x) sum += partials[b];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *total += sum;
}

// ---- AdamW --------------------------------------------------------------------------------

constexpr int kAdamWBlockSize = 512;
constexpr int64_t kAdamWMaxBlocks = 65536;

// The step's coefficients, computed on the host in double and rounded to fp32 once.
struct AdamWCoefficients {
  float lr;
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps;
  float weight_decay;
  float m_correction;  // 1 - beta1^step
  float v_correction;  // 1 - beta2^step
};

// param (n, or null), master (n), grad (n), m (n), v (n); norm_squared (1) is the squared global
// gradient norm, null when the clip factor comes from the host (host_grad_scale). As
// cpu::adamw_update in fp32, with grad_scale = cpu::clip_factor(sqrt(*norm_squared), max_norm) =
// 1 if max_norm <= 0, else min(1, max_norm / (sqrt(norm_squared) + 1e-6)) (PyTorch's
// clip_grad_norm_), and param = the updated master rounded to T:
//   g = grad * grad_scale, m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
//   master -= lr * (m / (1-b1^step) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * master).
template <typename T>
__global__ void adamw_kernel(T* param, float* master, const float* grad, float* m, float* v,
                             int64_t n, AdamWCoefficients c, const double* norm_squared,
                             double max_norm, float host_grad_scale) {
  float grad_scale = host_grad_scale;
  if (norm_squared != nullptr) {
    grad_scale = max_norm <= 0.0
                     ? 1.0f
                     : static_cast<float>(fmin(1.0, max_norm / (sqrt(*norm_squared) + 1e-6)));
  }
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grad[i] * grad_scale;
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = master[i];
    const float update =
        (mi / c.m_correction) / (sqrtf(vi / c.v_correction) + c.eps) + c.weight_decay * p;
    const float updated = p - c.lr * update;
    master[i] = updated;
    if (param != nullptr) param[i] = from_float<T>(updated);
  }
}

}  // namespace

void sum_of_squares(Context& ctx, double* total, const float* x, int64_t n) {
  if (n < 0) throw std::invalid_argument("n = " + std::to_string(n) + ": a size is not negative");
  if (n == 0) return;
  const int blocks =
      static_cast<int>(std::min(ceil_div(n, int64_t{kSumBlockSize} * kSumUnroll), kSumMaxBlocks));
  auto* partials = reinterpret_cast<double*>(ctx.scratch(sizeof(double) * blocks));
  STRATA_LAUNCH(blocks, kSumBlockSize, 0, ctx.stream(), sum_of_squares_partials_kernel)
  (partials, x, n);
  STRATA_CUDA_CHECK_LAUNCH();
  STRATA_LAUNCH(1, static_cast<int>(kSumMaxBlocks), 0, ctx.stream(), sum_of_squares_total_kernel)
  (total, partials, blocks);
  STRATA_CUDA_CHECK_LAUNCH();
}

namespace {

// Both entry points: the clip factor from *norm_squared on the device, or host_grad_scale when
// norm_squared is null.
template <typename T>
void launch_adamw(Context& ctx, T* param, float* master, const float* grad, float* m, float* v,
                  int64_t n, const AdamWConfig& config, int64_t step, const double* norm_squared,
                  double max_norm, float host_grad_scale) {
  if (n < 0) throw std::invalid_argument("n = " + std::to_string(n) + ": a size is not negative");
  if (step < 1) {
    throw std::invalid_argument("step = " + std::to_string(step) +
                                ": AdamW counts steps from 1 (the bias corrections divide by "
                                "1 - beta^step)");
  }
  if (n == 0) return;
  const double b1 = config.beta1;
  const double b2 = config.beta2;
  const AdamWCoefficients c{
      static_cast<float>(config.lr),
      static_cast<float>(b1),
      static_cast<float>(1.0 - b1),
      static_cast<float>(b2),
      static_cast<float>(1.0 - b2),
      static_cast<float>(config.eps),
      static_cast<float>(config.weight_decay),
      static_cast<float>(1.0 - std::pow(b1, static_cast<double>(step))),
      static_cast<float>(1.0 - std::pow(b2, static_cast<double>(step))),
  };
  const int blocks = static_cast<int>(std::min(ceil_div(n, kAdamWBlockSize), kAdamWMaxBlocks));
  STRATA_LAUNCH(blocks, kAdamWBlockSize, 0, ctx.stream(), adamw_kernel<T>)
  (param, master, grad, m, v, n, c, norm_squared, max_norm, host_grad_scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void adamw_update(Context& ctx, T* param, float* master, const float* grad, float* m, float* v,
                  int64_t n, const AdamWConfig& config, int64_t step, const double* norm_squared,
                  double max_norm) {
  if (max_norm > 0 && norm_squared == nullptr) {
    throw std::invalid_argument("max_norm = " + std::to_string(max_norm) +
                                " clips, but norm_squared is null: pass the squared gradient norm");
  }
  launch_adamw(ctx, param, master, grad, m, v, n, config, step, norm_squared, max_norm, 1.0f);
}

template <typename T>
void adamw_update(Context& ctx, T* param, float* master, const float* grad, float* m, float* v,
                  int64_t n, const AdamWConfig& config, int64_t step, float grad_scale) {
  launch_adamw(ctx, param, master, grad, m, v, n, config, step, nullptr, 0.0, grad_scale);
}

template void adamw_update<float>(Context&, float*, float*, const float*, float*, float*, int64_t,
                                  const AdamWConfig&, int64_t, const double*, double);
template void adamw_update<bf16>(Context&, bf16*, float*, const float*, float*, float*, int64_t,
                                 const AdamWConfig&, int64_t, const double*, double);
template void adamw_update<float>(Context&, float*, float*, const float*, float*, float*, int64_t,
                                  const AdamWConfig&, int64_t, float);
template void adamw_update<bf16>(Context&, bf16*, float*, const float*, float*, float*, int64_t,
                                 const AdamWConfig&, int64_t, float);

}  // namespace strata::cuda
