// The column-major product of the emulated cuBLAS and cuBLASLt (matrix_product.hpp).

#include "kernels/emu/matrix_product.hpp"

#include <cuda_bf16.h>

#include "kernels/emu/include/strata_emu.hpp"

namespace strata::emu {
namespace {

float widen(float value) { return value; }
float widen(__nv_bfloat16 value) { return __bfloat162float(value); }

// op(X) (rows, cols) widened to fp32 and packed column-major with leading dimension rows:
// packed[r + c * rows] = op(X)(r, c), which is X[r + c * ld], or X[c + r * ld] when transposed.
template <typename Element>
std::vector<float> pack(const ProductOperand& operand, int64_t rows, int64_t cols) {
  const auto* data = static_cast<const Element*>(operand.data);
  std::vector<float> packed(static_cast<size_t>(rows * cols));
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t index = operand.transposed ? c + r * operand.ld : r + c * operand.ld;
      packed[r + c * rows] = widen(data[index]);
    }
  }
  return packed;
}

std::vector<float> pack(const ProductOperand& operand, int64_t rows, int64_t cols) {
  if (operand.type == CUDA_R_16BF) return pack<__nv_bfloat16>(operand, rows, cols);
  return pack<float>(operand, rows, cols);
}

}  // namespace

size_t element_bytes(cudaDataType type, const std::string& what) {
  switch (type) {
    case CUDA_R_32F:
      return sizeof(float);
    case CUDA_R_16BF:
      return sizeof(__nv_bfloat16);
    default:
      fail(what + ": data type " + std::to_string(static_cast<int>(type)) +
           " is not emulated (only CUDA_R_32F and CUDA_R_16BF are)");
  }
}

bool supports_compute_32f(cudaDataType a_type, cudaDataType b_type, cudaDataType c_type) {
  if (a_type != b_type) return false;
  if (a_type == CUDA_R_32F) return c_type == CUDA_R_32F;
  return a_type == CUDA_R_16BF && (c_type == CUDA_R_16BF || c_type == CUDA_R_32F);
}

float load_element(const void* data, cudaDataType type, int64_t index) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
  return static_cast<const float*>(data)[index];
}

void store_element(void* data, cudaDataType type, int64_t index, float value) {
  if (type == CUDA_R_16BF) {
    static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16_rn(value);
  } else {
    static_cast<float*>(data)[index] = value;
  }
}

size_t matrix_bytes(cudaDataType type, int64_t rows, int64_t cols, int64_t ld) {
  if (rows <= 0 || cols <= 0) return 0;
  const size_t elements = static_cast<size_t>((cols - 1) * ld + rows);
  return elements * element_bytes(type, "matrix_bytes");
}

void check_operand(const ProductOperand& operand, int64_t rows, int64_t cols,
                   const std::string& what) {
  const int64_t stored_rows = operand.transposed ? cols : rows;
  const int64_t stored_cols = operand.transposed ? rows : cols;
  const size_t bytes = matrix_bytes(operand.type, stored_rows, stored_cols, operand.ld);
  if (bytes > 0) check_device_range(operand.data, bytes, what);
}

std::vector<float> product_fp32(const ProductOperand& a, const ProductOperand& b, int64_t m,
                                int64_t n, int64_t k) {
  const std::vector<float> packed_a = pack(a, m, k);  // op(A) (m,k), leading dimension m
  const std::vector<float> packed_b = pack(b, k, n);  // op(B) (k,n), leading dimension k
  std::vector<float> result(static_cast<size_t>(m * n), 0.0f);
  // Column j of the result gathers the columns of op(A) weighted by column j of op(B), p in
  // ascending order: the inner loop runs over i, contiguous in both arrays.
  for (int64_t j = 0; j < n; ++j) {
    float* column = result.data() + j * m;
    for (int64_t p = 0; p < k; ++p) {
      const float weight = packed_b[p + j * k];
      const float* a_column = packed_a.data() + p * m;
      for (int64_t i = 0; i < m; ++i) column[i] += a_column[i] * weight;
    }
  }
  return result;
}

}  // namespace strata::emu
