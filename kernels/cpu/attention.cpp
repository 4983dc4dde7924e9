// Causal multi-head self-attention (Vaswani et al. 2017, GPT-2's masked variant), as llm.c's
// attention_forward and attention_backward, with the two products of each (batch, head) through
// BLAS: q, k and v are strided views of qkv (row stride 3*NH*HS), so no copies are made.

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

using detail::gemm;

// out is (B,T,NH*HS), att (B,NH,T,T), qkv (B,T,3*NH*HS). Per (batch, head), with Q, K, V the
// (T,HS) views: att = causal_softmax(Q @ K^T / sqrt(HS)), out = att @ V.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t hs) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  const int64_t c = nh * hs;
  const int64_t c3 = 3 * c;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const T* q = qkv + bi * t * c3 + h * hs;
      const T* k = q + c;
      const T* v = q + 2 * c;
      T* a = att + (bi * nh + h) * t * t;
      T* y = out + bi * t * c + h * hs;
      // The full (T,T) score matrix; the causal softmax below zeroes the part above the diagonal.
      gemm(CblasNoTrans, CblasTrans, t, t, hs, scale, q, c3, k, c3, T(0), a, t);
      for (int64_t i = 0; i < t; ++i) {
        T* row = a + i * t;
        T max = row[0];
        for (int64_t j = 1; j <= i; ++j) max = std::max(max, row[j]);
        T sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        const T inv_sum = T(1) / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv_sum;
        for (int64_t j = i + 1; j < t; ++j) row[j] = T(0);
      }
      gemm(CblasNoTrans, CblasNoTrans, t, hs, t, T(1), a, t, v, c3, T(0), y, c);
    }
  }
}

// dqkv is (B,T,3*NH*HS), dout (B,T,NH*HS), qkv (B,T,3*NH*HS), att (B,NH,T,T). Per (batch, head):
//   datt = dout @ V^T,  dV = att^T @ dout,
//   dpre[i][j] = att[i][j] * (datt[i][j] - sum_l att[i][l] datt[i][l])   (softmax backward),
//   dQ = scale * dpre @ K,  dK = scale * dpre^T @ Q.
// The three products write (beta 0) disjoint column blocks that cover all of dqkv.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b, int64_t t,
                        int64_t nh, int64_t hs) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  const int64_t c = nh * hs;
  const int64_t c3 = 3 * c;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  std::vector<T> dpre(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const T* q = qkv + bi * t * c3 + h * hs;
      const T* k = q + c;
      const T* v = q + 2 * c;
      T* dq = dqkv + bi * t * c3 + h * hs;
      T* dk = dq + c;
      T* dv = dq + 2 * c;
      const T* a = att + (bi * nh + h) * t * t;
      const T* dy = dout + bi * t * c + h * hs;
      // datt, then the softmax backward in place; entries above the diagonal end at 0 since
      // att is 0 there.
      gemm(CblasNoTrans, CblasTrans, t, t, hs, T(1), dy, c, v, c3, T(0), dpre.data(), t);
      for (int64_t i = 0; i < t; ++i) {
        const T* a_row = a + i * t;
        T* d_row = dpre.data() + i * t;
        T dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += a_row[j] * d_row[j];
        for (int64_t j = 0; j <= i; ++j) d_row[j] = a_row[j] * (d_row[j] - dot);
        for (int64_t j = i + 1; j < t; ++j) d_row[j] = T(0);
      }
      gemm(CblasTrans, CblasNoTrans, t, hs, t, T(1), a, t, dy, c, T(0), dv, c3);
      gemm(CblasNoTrans, CblasNoTrans, t, hs, t, scale, dpre.data(), t, k, c3, T(0), dq, c3);
      gemm(CblasTrans, CblasNoTrans, t, hs, t, scale, dpre.data(), t, q, c3, T(0), dk, c3);
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t,
                                       int64_t);
template void attention_forward<double>(double*, double*, const double*, int64_t, int64_t, int64_t,
                                        int64_t);
template void attention_backward<float>(float*, const float*, const float*, const float*, int64_t,
                                        int64_t, int64_t, int64_t);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         int64_t, int64_t, int64_t, int64_t);

}  // namespace strata::cpu
