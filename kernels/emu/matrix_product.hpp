#pragma once
// The CPU emulation of CUDA: the column-major matrix product behind the emulated cuBLAS
// (kernels/emu/cublas.cpp) and cuBLASLt (kernels/emu/cublaslt.cpp), over the element types the
// emulation stores (CUDA_R_32F and CUDA_R_16BF) with fp32 accumulation in a fixed order.
//
// Column-major as BLAS: element (i, j) of a matrix with leading dimension ld lies at i + j * ld.

#include <library_types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::emu {

// The bytes of one element: 4 for CUDA_R_32F, 2 for CUDA_R_16BF. Fails (EmulationError) for a
// type the emulation does not store, naming `what`.
size_t element_bytes(cudaDataType type, const std::string& what);

// Whether cuBLAS and cuBLASLt multiply A and B of these types into C and D of c_type with
// CUBLAS_COMPUTE_32F and fp32 alpha and beta, among the emulated types: A and B of one type, and
// fp32 -> fp32, bf16 -> bf16 or bf16 -> fp32 (the cuBLAS documentation's tables of the types of
// cublasGemmEx and cublasLtMatmul). A real GPU answers CUBLAS_STATUS_NOT_SUPPORTED to the others.
bool supports_compute_32f(cudaDataType a_type, cudaDataType b_type, cudaDataType c_type);

// Element index of a matrix of the given type, widened to fp32.
float load_element(const void* data, cudaDataType type, int64_t index);

// Stores value into element index, rounded to the type once (to nearest even for bf16).
void store_element(void* data, cudaDataType type, int64_t index, float value);

// The bytes a column-major (rows, cols) matrix with leading dimension ld spans, from its first
// element to its last: ((cols - 1) ld + rows) elements; 0 when it has no element.
size_t matrix_bytes(cudaDataType type, int64_t rows, int64_t cols, int64_t ld);

// One operand of a product as BLAS names it: X stored column-major with leading dimension ld,
// and op(X) = X, or X^T when transposed.
struct ProductOperand {
  const void* data = nullptr;
  cudaDataType type = CUDA_R_32F;
  int64_t ld = 0;
  bool transposed = false;
};

// Fails unless the stored matrix behind op(X) (rows, cols) lies inside one device allocation:
// X is (rows, cols) when not transposed, (cols, rows) when transposed.
void check_operand(const ProductOperand& operand, int64_t rows, int64_t cols,
                   const std::string& what);

// op(A) (m,k) times op(B) (k,n) in fp32, returned column-major (m,n) with leading dimension m.
// Element (i, j) is acc = 0; acc += op(A)(i,p) * op(B)(p,j) for p = 0, 1, ..., k-1, every
// product and sum rounded to fp32, so the bits depend only on the inputs (as a GPU reduction in
// a fixed order). The operands are read as they are when it is called.
std::vector<float> product_fp32(const ProductOperand& a, const ProductOperand& b, int64_t m,
                                int64_t n, int64_t k);

}  // namespace strata::emu
