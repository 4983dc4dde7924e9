// The linear layer: a matrix product through BLAS, plus a bias.

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

using detail::gemm;

// out is (N,OC), inp (N,C), weight (OC,C), bias (OC) or null.
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t n, int64_t c,
                    int64_t oc) {
  if (n <= 0 || oc <= 0) return;
  if (c > 0) {
    gemm(CblasNoTrans, CblasTrans, n, oc, c, T(1), inp, c, weight, c, T(0), out, oc);
  } else {
    for (int64_t i = 0; i < n * oc; ++i) out[i] = T(0);
  }
  if (bias == nullptr) return;
  for (int64_t i = 0; i < n; ++i) {
    T* out_row = out + i * oc;
    for (int64_t o = 0; o < oc; ++o) out_row[o] += bias[o];
  }
}

// out is (N,OC), read and added to; inp (N,C), weight (OC,C).
template <typename T>
void matmul_forward_accumulate(T* out, const T* inp, const T* weight, int64_t n, int64_t c,
                               int64_t oc) {
  if (n <= 0 || oc <= 0 || c <= 0) return;
  gemm(CblasNoTrans, CblasTrans, n, oc, c, T(1), inp, c, weight, c, T(1), out, oc);
}

// dinp is (N,C) or null, dweight (OC,C), dbias (OC) or null, dout (N,OC), inp (N,C),
// weight (OC,C).
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t n, int64_t c, int64_t oc) {
  if (n <= 0 || c <= 0) return;
  if (dinp != nullptr) {
    if (oc > 0) {
      gemm(CblasNoTrans, CblasNoTrans, n, c, oc, T(1), dout, oc, weight, c, T(0), dinp, c);
    } else {
      for (int64_t i = 0; i < n * c; ++i) dinp[i] = T(0);
    }
  }
  if (oc <= 0) return;
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C).
  gemm(CblasTrans, CblasNoTrans, oc, c, n, T(1), dout, oc, inp, c, T(1), dweight, c);
  if (dbias == nullptr) return;
  for (int64_t i = 0; i < n; ++i) {
    const T* dout_row = dout + i * oc;
    for (int64_t o = 0; o < oc; ++o) dbias[o] += dout_row[o];
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int64_t,
                                    int64_t, int64_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int64_t, int64_t);
template void matmul_forward_accumulate<float>(float*, const float*, const float*, int64_t, int64_t,
                                               int64_t);
template void matmul_forward_accumulate<double>(double*, const double*, const double*, int64_t,
                                                int64_t, int64_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t);

}  // namespace strata::cpu
