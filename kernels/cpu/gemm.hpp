#pragma once
// Row-major C (m,n) = alpha * op(A) @ op(B) + beta * C through BLAS, with op(A) (m,k) and op(B)
// (k,n); the overloads pick sgemm or dgemm. Internal to kernels/cpu (matmul and attention).
// OpenBLAS takes 32-bit sizes: a larger dimension is a bug of the caller, asserted here.

#include <cblas.h>

#include <cstdint>
#include <limits>

#include "common/error.hpp"

namespace strata::cpu::detail {

inline blasint blas_size(int64_t n) {
  STRATA_ASSERT(n >= 0 && n <= std::numeric_limits<blasint>::max(),
                "a BLAS dimension does not fit the library's integer type");
  return static_cast<blasint>(n);
}

inline void gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                 float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a, trans_b, blas_size(m), blas_size(n), blas_size(k), alpha, a,
              blas_size(lda), b, blas_size(ldb), beta, c, blas_size(ldc));
}

inline void gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
                 double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                 double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a, trans_b, blas_size(m), blas_size(n), blas_size(k), alpha, a,
              blas_size(lda), b, blas_size(ldb), beta, c, blas_size(ldc));
}

}  // namespace strata::cpu::detail
