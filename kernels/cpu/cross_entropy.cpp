// Softmax cross-entropy over a vocabulary shard (Megatron's vocabulary-parallel loss): local
// steps around the max and sum reductions the caller runs over the shards.

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {
namespace {

// The column of the shard [vocab_start, vocab_start + v) holding target, or -1 outside it.
int64_t shard_column(int32_t target, int64_t vocab_start, int64_t v) {
  const int64_t column = static_cast<int64_t>(target) - vocab_start;
  return column >= 0 && column < v ? column : -1;
}

}  // namespace

// maxes is (N), logits (N,V).
template <typename T>
void row_max(T* maxes, const T* logits, int64_t n, int64_t v) {
  for (int64_t i = 0; i < n; ++i) {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < v; ++j) m = std::max(m, logits[i * v + j]);
    maxes[i] = m;
  }
}

// sums is (N), targets_logit (N), logits (N,V), maxes (N, the max over all shards), targets (N).
template <typename T>
void cross_entropy_partials(T* sums, T* targets_logit, const T* logits, const T* maxes,
                            const int32_t* targets, int64_t vocab_start, int64_t n, int64_t v) {
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * v;
    T sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - maxes[i]);
    sums[i] = sum;
    const int64_t column = shard_column(targets[i], vocab_start, v);
    targets_logit[i] = column >= 0 ? row[column] : T(0);
  }
}

// losses is (N), sums (N), maxes (N), targets_logit (N), all reduced over the shards:
// -log softmax(target) = log(sum_j exp(logit_j - max)) + max - logit_target.
template <typename T>
void cross_entropy_losses(T* losses, const T* sums, const T* maxes, const T* targets_logit,
                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) losses[i] = std::log(sums[i]) + maxes[i] - targets_logit[i];
}

// dlogits is (N,V), logits (N,V), maxes (N), sums (N), targets (N); scale is the weight of each
// row's loss (1 / (B*T) for the mean).
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* maxes, const T* sums,
                            const int32_t* targets, int64_t vocab_start, T scale, int64_t n,
                            int64_t v) {
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * v;
    T* drow = dlogits + i * v;
    const int64_t column = shard_column(targets[i], vocab_start, v);
    for (int64_t j = 0; j < v; ++j) {
      const T prob = std::exp(row[j] - maxes[i]) / sums[i];
      drow[j] = scale * (prob - (j == column ? T(1) : T(0)));
    }
  }
}

template void row_max<float>(float*, const float*, int64_t, int64_t);
template void row_max<double>(double*, const double*, int64_t, int64_t);
template void cross_entropy_partials<float>(float*, float*, const float*, const float*,
                                            const int32_t*, int64_t, int64_t, int64_t);
template void cross_entropy_partials<double>(double*, double*, const double*, const double*,
                                             const int32_t*, int64_t, int64_t, int64_t);
template void cross_entropy_losses<float>(float*, const float*, const float*, const float*,
                                          int64_t);
template void cross_entropy_losses<double>(double*, const double*, const double*, const double*,
                                           int64_t);
template void cross_entropy_backward<float>(float*, const float*, const float*, const float*,
                                            const int32_t*, int64_t, float, int64_t, int64_t);
template void cross_entropy_backward<double>(double*, const double*, const double*, const double*,
                                             const int32_t*, int64_t, double, int64_t, int64_t);

}  // namespace strata::cpu
