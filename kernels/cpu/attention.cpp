// Causal self-attention (Vaswani et al. 2017, GPT-2's masked variant), as llm.c's
// attention_forward and attention_backward, generalized to grouped-query attention (Ainslie et
// al. 2023): NKV key/value heads shared by groups of NH / NKV query heads, query head h reading
// kv head h / (NH / NKV), as Megatron-LM and Hugging Face group them. Multi-head attention is the
// case NKV = NH. A sliding window (Mistral's sliding_window, Jiang et al. 2023) narrows each
// query's keys to the last `window` positions, itself included. The two products of each (batch,
// head) go through BLAS: q, k and v are strided views of qkv (row stride (NH + 2*NKV)*HS), so no
// copies are made. The products run over the whole (T,T) block; the softmax writes the masked
// entries of att as exact zeros. Attention dropout (GPT-2's attn_pdrop) drops probabilities after
// the softmax with a given mask (dropout_mask's), keeping att itself undropped for the backward.

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

using detail::gemm;

namespace {

// Where one (batch, query head)'s views start in qkv, dqkv, att and out, for the layout
// [q (NH*HS) | k (NKV*HS) | v (NKV*HS)] per token.
struct HeadViews {
  int64_t q = 0;    // offset of q in qkv (and of dq in dqkv)
  int64_t k = 0;    // offset of the group's k
  int64_t v = 0;    // offset of the group's v
  int64_t att = 0;  // offset of the (T,T) block in att
  int64_t out = 0;  // offset in out (and dout)
};

HeadViews head_views(int64_t bi, int64_t h, int64_t t, int64_t nh, int64_t nkv, int64_t hs) {
  const int64_t row = (nh + 2 * nkv) * hs;
  const int64_t kv_head = h / (nh / nkv);
  const int64_t batch = bi * t * row;
  return {batch + h * hs, batch + (nh + kv_head) * hs, batch + (nh + nkv + kv_head) * hs,
          (bi * nh + h) * t * t, bi * t * nh * hs + h * hs};
}

void check_heads(int64_t nh, int64_t nkv) {
  STRATA_ASSERT(nkv > 0 && nh % nkv == 0,
                "grouped-query attention needs NH to be a multiple of NKV (Ainslie et al. 2023)");
}

void check_window(int64_t window) {
  STRATA_ASSERT(window >= 0, "an attention window is a number of keys >= 0 (0: no window)");
}

// The first key the query at position i sees: 0 without a window (window 0), else i - window + 1
// (keys i - window < j <= i), clamped at 0. Example: window 3, i = 5 gives 3 (keys 3, 4, 5).
int64_t first_key(int64_t i, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
}

}  // namespace

// out is (B,T,NH*HS), att (B,NH,T,T), qkv (B,T,(NH+2*NKV)*HS). Per (batch, query head h), with
// Q the (T,HS) view of head h and K, V those of kv head h / (NH/NKV):
// att = masked_softmax(Q @ K^T / sqrt(HS)), out = att @ V, row i of the softmax over keys
// [first_key(i, window), i] and 0 elsewhere. With dropout (keep (B,NH,T,T) not null), the product
// reads P' = att * keep * dropout_scale instead, made in dropped (B,NH,T,T) when it is given, else
// in a (T,T) scratch.
template <typename T>
void gqa_attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                           int64_t nkv, int64_t hs, int64_t window, const T* keep, T dropout_scale,
                           T* dropped) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  check_heads(nh, nkv);
  check_window(window);
  const int64_t c = nh * hs;
  const int64_t row = (nh + 2 * nkv) * hs;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  std::vector<T> scratch(keep != nullptr && dropped == nullptr ? static_cast<size_t>(t * t) : 0);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const HeadViews at = head_views(bi, h, t, nh, nkv, hs);
      T* a = att + at.att;
      // The full (T,T) score matrix; the masked softmax below zeroes the part above the diagonal
      // and, with a window, the keys before it.
      gemm(CblasNoTrans, CblasTrans, t, t, hs, scale, qkv + at.q, row, qkv + at.k, row, T(0), a, t);
      for (int64_t i = 0; i < t; ++i) {
        T* a_row = a + i * t;
        const int64_t first = first_key(i, window);
        T max = a_row[first];
        for (int64_t j = first + 1; j <= i; ++j) max = std::max(max, a_row[j]);
        T sum = 0;
        for (int64_t j = first; j <= i; ++j) {
          a_row[j] = std::exp(a_row[j] - max);
          sum += a_row[j];
        }
        const T inv_sum = T(1) / sum;
        for (int64_t j = first; j <= i; ++j) a_row[j] *= inv_sum;
        for (int64_t j = 0; j < first; ++j) a_row[j] = T(0);
        for (int64_t j = i + 1; j < t; ++j) a_row[j] = T(0);
      }
      const T* probabilities = a;
      if (keep != nullptr) {
        T* kept = dropped != nullptr ? dropped + at.att : scratch.data();
        // att * keep * dropout_scale, the dropped probabilities.
        apply_dropout(kept, a, keep + at.att, dropout_scale, t * t);
        probabilities = kept;
      }
      gemm(CblasNoTrans, CblasNoTrans, t, hs, t, T(1), probabilities, t, qkv + at.v, row, T(0),
           out + at.out, c);
    }
  }
}

// dqkv is (B,T,(NH+2*NKV)*HS), dout (B,T,NH*HS), qkv (B,T,(NH+2*NKV)*HS), att (B,NH,T,T). Per
// (batch, query head h), with K, V the views of its kv head, without dropout (keep null):
//   datt = dout @ V^T,  dV += att^T @ dout,
//   dpre[i][j] = att[i][j] * (datt[i][j] - sum_l att[i][l] datt[i][l])   (softmax backward),
//   dQ = scale * dpre @ K,  dK += scale * dpre^T @ Q.
// The softmax backward runs over the keys each query sees (first_key(i, window) to i); outside
// them att is 0, so dpre is 0 there and the products need no mask.
// A kv head's dK and dV sum over the query heads of its group, in head order: the group's first
// head writes them (beta 0), the others add (beta 1). With the dQ products, every column block
// of dqkv is written.
// With dropout, out = P' @ V with P' = att * keep * dropout_scale, so dV += P'^T @ dout (P'
// recomputed per head in a (T,T) scratch) and datt = (dout @ V^T) * keep * dropout_scale before
// the softmax backward; the rest is unchanged.
template <typename T>
void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b,
                            int64_t t, int64_t nh, int64_t nkv, int64_t hs, int64_t window,
                            const T* keep, T dropout_scale) {
  if (b <= 0 || t <= 0 || nh <= 0 || hs <= 0) return;
  check_heads(nh, nkv);
  check_window(window);
  const int64_t c = nh * hs;
  const int64_t row = (nh + 2 * nkv) * hs;
  const int64_t group = nh / nkv;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  std::vector<T> dpre(static_cast<size_t>(t * t));
  std::vector<T> kept(keep != nullptr ? static_cast<size_t>(t * t) : 0);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const HeadViews at = head_views(bi, h, t, nh, nkv, hs);
      const T* a = att + at.att;
      const T* dy = dout + at.out;
      const T kv_beta = h % group == 0 ? T(0) : T(1);
      // datt, then the softmax backward in place; masked entries (above the diagonal, and before
      // the window) end at 0 since att is 0 there.
      gemm(CblasNoTrans, CblasTrans, t, t, hs, T(1), dy, c, qkv + at.v, row, T(0), dpre.data(), t);
      const T* probabilities = a;
      if (keep != nullptr) {
        // P' (as the forward made it) for dV, and datt through the dropout.
        apply_dropout(kept.data(), a, keep + at.att, dropout_scale, t * t);
        apply_dropout(dpre.data(), dpre.data(), keep + at.att, dropout_scale, t * t);
        probabilities = kept.data();
      }
      for (int64_t i = 0; i < t; ++i) {
        const T* a_row = a + i * t;
        T* d_row = dpre.data() + i * t;
        const int64_t first = first_key(i, window);
        T dot = 0;
        for (int64_t j = first; j <= i; ++j) dot += a_row[j] * d_row[j];
        for (int64_t j = first; j <= i; ++j) d_row[j] = a_row[j] * (d_row[j] - dot);
        for (int64_t j = 0; j < first; ++j) d_row[j] = T(0);
        for (int64_t j = i + 1; j < t; ++j) d_row[j] = T(0);
      }
      gemm(CblasTrans, CblasNoTrans, t, hs, t, T(1), probabilities, t, dy, c, kv_beta, dqkv + at.v,
           row);
      gemm(CblasNoTrans, CblasNoTrans, t, hs, t, scale, dpre.data(), t, qkv + at.k, row, T(0),
           dqkv + at.q, row);
      gemm(CblasTrans, CblasNoTrans, t, hs, t, scale, dpre.data(), t, qkv + at.q, row, kv_beta,
           dqkv + at.k, row);
    }
  }
}

// Multi-head attention: the grouped-query kernels with one query head per kv head.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t hs) {
  gqa_attention_forward(out, att, qkv, b, t, nh, nh, hs, 0, static_cast<const T*>(nullptr), T(1),
                        static_cast<T*>(nullptr));
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b, int64_t t,
                        int64_t nh, int64_t hs) {
  gqa_attention_backward(dqkv, dout, qkv, att, b, t, nh, nh, hs, 0, static_cast<const T*>(nullptr),
                         T(1));
}

template void gqa_attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t,
                                           int64_t, int64_t, int64_t, const float*, float, float*);
template void gqa_attention_forward<double>(double*, double*, const double*, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, int64_t, const double*,
                                            double, double*);
template void gqa_attention_backward<float>(float*, const float*, const float*, const float*,
                                            int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                            const float*, float);
template void gqa_attention_backward<double>(double*, const double*, const double*, const double*,
                                             int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                             const double*, double);
template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t,
                                       int64_t);
template void attention_forward<double>(double*, double*, const double*, int64_t, int64_t, int64_t,
                                        int64_t);
template void attention_backward<float>(float*, const float*, const float*, const float*, int64_t,
                                        int64_t, int64_t, int64_t);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         int64_t, int64_t, int64_t, int64_t);

}  // namespace strata::cpu
