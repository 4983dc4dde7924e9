// Token and position embeddings over a vocabulary shard (Megatron's vocabulary-parallel
// embedding: the caller sums the shards' outputs).

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {
namespace {

// The row of the shard [vocab_start, vocab_start + v) holding token, or -1 outside it.
int64_t shard_row(int32_t token, int64_t vocab_start, int64_t v) {
  const int64_t row = static_cast<int64_t>(token) - vocab_start;
  return row >= 0 && row < v ? row : -1;
}

}  // namespace

// out is (B*T,C), tokens (B*T), wte (V,C), wpe (T,C) or null.
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                       int64_t vocab_start, int64_t v, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ti = 0; ti < t; ++ti) {
      const int64_t i = bi * t + ti;
      const int64_t row = shard_row(tokens[i], vocab_start, v);
      T* y = out + i * c;
      for (int64_t j = 0; j < c; ++j) {
        const T token_part = row >= 0 ? wte[row * c + j] : T(0);
        y[j] = token_part + (wpe != nullptr ? wpe[ti * c + j] : T(0));
      }
    }
  }
}

// dwte is (V,C), dwpe (T,C) or null, dout (B*T,C), tokens (B*T).
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t vocab_start,
                        int64_t v, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ti = 0; ti < t; ++ti) {
      const int64_t i = bi * t + ti;
      const int64_t row = shard_row(tokens[i], vocab_start, v);
      const T* dy = dout + i * c;
      if (row >= 0) {
        for (int64_t j = 0; j < c; ++j) dwte[row * c + j] += dy[j];
      }
      if (dwpe != nullptr) {
        for (int64_t j = 0; j < c; ++j) dwpe[ti * c + j] += dy[j];
      }
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int64_t,
                                       int64_t, int64_t, int64_t, int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int64_t,
                                        int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int64_t,
                                         int64_t, int64_t, int64_t, int64_t);

}  // namespace strata::cpu
