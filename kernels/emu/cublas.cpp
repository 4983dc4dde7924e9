// The emulated cuBLAS (cublas_api.h): handles bound to a stream, the status names, and the
// strided-batched product, queued on the handle's stream.

#include <cublas_v2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/emu/include/strata_emu.hpp"
#include "kernels/emu/matrix_product.hpp"

// A cuBLAS handle: the stream its calls queue work on. The math mode is the default one, so no
// fp32 product runs in TF32.
struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

// The largest of 1 and value, for the leading-dimension rules of the cuBLAS documentation.
int at_least_one(int value) { return value > 1 ? value : 1; }

bool is_operation(cublasOperation_t operation) {
  return operation == CUBLAS_OP_N || operation == CUBLAS_OP_T || operation == CUBLAS_OP_C;
}

// CUBLAS_OP_C is CUBLAS_OP_T for real types (cuBLAS documentation, cublasOperation_t).
bool is_transposed(cublasOperation_t operation) { return operation != CUBLAS_OP_N; }

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = std::make_unique<cublasContext>().release();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::unique_ptr<cublasContext> owned(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t streamId) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "an error was detected when checking the current licensing";
  }
  return "an unknown internal error has occurred";
}

// The statuses follow the cuBLAS documentation of cublasGemmStridedBatchedEx: NOT_INITIALIZED for
// no handle; INVALID_VALUE for a negative size or batch count, an unknown operation, null alpha
// or beta, or a leading dimension below the rows of the matrix it holds (at least 1);
// NOT_SUPPORTED for a type combination outside the table (supports_compute_32f). A compute type
// other than CUBLAS_COMPUTE_32F, or a data type other than fp32 and bf16, is not emulated: the
// call fails (EmulationError) instead of answering what a GPU would.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  using strata::emu::ProductOperand;
  const std::string what = "cublasGemmStridedBatchedEx";
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (computeType != CUBLAS_COMPUTE_32F) {
    strata::emu::fail(what + ": compute type " + std::to_string(static_cast<int>(computeType)) +
                      " is not emulated (only CUBLAS_COMPUTE_32F is)");
  }
  if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!is_operation(transa) || !is_operation(transb)) return CUBLAS_STATUS_INVALID_VALUE;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const bool a_transposed = is_transposed(transa);
  const bool b_transposed = is_transposed(transb);
  if (lda < at_least_one(a_transposed ? k : m) || ldb < at_least_one(b_transposed ? n : k) ||
      ldc < at_least_one(m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const size_t a_element = strata::emu::element_bytes(Atype, what + ": Atype");
  const size_t b_element = strata::emu::element_bytes(Btype, what + ": Btype");
  const size_t c_element = strata::emu::element_bytes(Ctype, what + ": Ctype");
  if (!strata::emu::supports_compute_32f(Atype, Btype, Ctype)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;

  // Host pointer mode: alpha and beta are read now, as the call returns.
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  strata::emu::enqueue(handle->stream, what, [=] {
    for (int batch = 0; batch < batchCount; ++batch) {
      const std::string batch_name = " (batch " + std::to_string(batch) + ")";
      const ProductOperand a{static_cast<const std::byte*>(A) + batch * strideA * a_element, Atype,
                             lda, a_transposed};
      const ProductOperand b{static_cast<const std::byte*>(B) + batch * strideB * b_element, Btype,
                             ldb, b_transposed};
      void* c = static_cast<std::byte*>(C) + batch * strideC * c_element;
      strata::emu::check_operand(a, m, k, what + ": A" + batch_name);
      strata::emu::check_operand(b, k, n, what + ": B" + batch_name);
      strata::emu::check_device_range(c, strata::emu::matrix_bytes(Ctype, m, n, ldc),
                                      what + ": C" + batch_name);
      const std::vector<float> product = strata::emu::product_fp32(a, b, m, n, k);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
          float value = alpha_value * product[i + j * m];
          if (beta_value != 0.0f) {
            value += beta_value * strata::emu::load_element(c, Ctype, i + j * ldc);
          }
          strata::emu::store_element(c, Ctype, i + j * ldc, value);
        }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
