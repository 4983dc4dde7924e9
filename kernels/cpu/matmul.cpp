// The linear layer: a matrix product through BLAS, plus a bias.

#include <cblas.h>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {
namespace {

// Row-major C (m,n) = alpha * op(A) @ op(B) + beta * C, with op(A) (m,k) and op(B) (k,n); the
// overloads pick sgemm or dgemm. BLAS wants leading dimensions of at least 1.
void gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a, trans_b, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
          double alpha, const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
          double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a, trans_b, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace

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
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t);

}  // namespace strata::cpu
