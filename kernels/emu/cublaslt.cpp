// The emulated cuBLASLt (cublasLt.h): descriptors as plain structs, a heuristic that returns the
// emulation's one algorithm or refuses where cuBLASLt does, and the product with its epilogues,
// queued on the call's stream.
//
// Refusals, each with its source (the comments of the toolkit's cublasLt.h unless noted):
//  - the epilogue's auxiliary leading dimension (GELU_AUX, GELU_AUX_BIAS, DGELU) "must be
//    divisible by 8": CUBLAS_STATUS_NOT_SUPPORTED, no algorithm (so the caller can fall back);
//    "and be no less than the number of rows in the output matrix": CUBLAS_STATUS_INVALID_VALUE;
//  - the preference's minimum alignments "exclude algorithms that can not work with" a matrix
//    less aligned than they need. The emulation's algorithm needs each matrix aligned to its
//    element size (a GPU cannot load an element across its natural alignment, CUDA C++
//    Programming Guide, device memory accesses) and assumes the preference's alignment up to
//    16 bytes (a 128-bit vector load). The heuristic answers NOT_SUPPORTED to a preference below
//    the element size; cublasLtMatmul answers CUBLAS_STATUS_INVALID_VALUE ("parameters are in
//    conflict") to a pointer less aligned than its algorithm assumed;
//  - the bias and auxiliary pointers: "cublasLtMatmulAlgoGetHeuristic() depend[s] on [their]
//    value to determine expected pointer alignment", so the algorithm assumes their alignment at
//    that call (up to 16 bytes) and cublasLtMatmul refuses a later pointer with less. A bias not
//    aligned to its element size has no algorithm (NOT_SUPPORTED). The auxiliary matrix needs 16
//    bytes: the emulation reads the multiple-of-8 rule on its leading dimension as 16-byte
//    vector access to every column, which only a 16-byte aligned start gives (an inference, not
//    a documented rule);
//  - a missing bias or auxiliary pointer for an epilogue that needs it, mismatched shapes, a
//    leading dimension below the rows, null alpha or beta: CUBLAS_STATUS_INVALID_VALUE;
//  - types outside the table of supports_compute_32f (matrix_product.hpp), or C and D of different
//    types: NOT_SUPPORTED.
// What the emulation does not implement (other compute types, data types, epilogues, attributes)
// fails with EmulationError rather than answering for a GPU.

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/gelu_tanh.hpp"
#include "kernels/emu/include/strata_emu.hpp"
#include "kernels/emu/matrix_product.hpp"

// cuBLASLt keeps no state per handle: each product names its stream.
struct cublasLtContext {};

struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (m) of D's type
  void* aux = nullptr;         // (m, n) of D's type, leading dimension aux_ld
  int64_t aux_ld = 0;
};

struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace_bytes = 0;
  uint32_t min_alignment_a_bytes = 256;
  uint32_t min_alignment_b_bytes = 256;
  uint32_t min_alignment_c_bytes = 256;
  uint32_t min_alignment_d_bytes = 256;
};

namespace {

using strata::emu::element_bytes;
using strata::emu::fail;

// The widest alignment an algorithm assumes: a 128-bit load.
constexpr uint32_t kMaxAlignmentBytes = 16;
// Marks an algorithm written by this heuristic ("STRATALT"), so that cublasLtMatmul can tell it
// from uninitialized memory.
constexpr uint64_t kAlgorithmTag = 0x5354524154414c54;

// What an emulated epilogue does to t = alpha op(A) op(B) + beta C, in this order: adds the bias
// (per row of D), writes t to aux, replaces t by gelu(t), multiplies t by gelu'(aux).
struct EpilogueSteps {
  bool adds_bias = false;
  bool writes_aux = false;
  bool applies_gelu = false;
  bool applies_gelu_derivative = false;
  bool uses_aux() const { return writes_aux || applies_gelu_derivative; }
};

EpilogueSteps epilogue_steps(cublasLtEpilogue_t epilogue, const std::string& what) {
  EpilogueSteps steps;
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return steps;
    case CUBLASLT_EPILOGUE_BIAS:
      steps.adds_bias = true;
      return steps;
    case CUBLASLT_EPILOGUE_GELU:
      steps.applies_gelu = true;
      return steps;
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      steps.adds_bias = true;
      steps.applies_gelu = true;
      return steps;
    case CUBLASLT_EPILOGUE_GELU_AUX:
      steps.writes_aux = true;
      steps.applies_gelu = true;
      return steps;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      steps.adds_bias = true;
      steps.writes_aux = true;
      steps.applies_gelu = true;
      return steps;
    case CUBLASLT_EPILOGUE_DGELU:
      steps.applies_gelu_derivative = true;
      return steps;
    default:
      fail(what + ": epilogue " + std::to_string(static_cast<int>(epilogue)) +
           " is not emulated (DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS and DGELU "
           "are)");
  }
}

// A product whose descriptors agree: D is (m,n), op(A) (m,k), op(B) (k,n).
struct Problem {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  EpilogueSteps steps;
};

Problem invalid(cublasStatus_t status) {
  Problem problem;
  problem.status = status;
  return problem;
}

bool ld_holds_rows(const cublasLtMatrixLayoutOpaque_t& layout) {
  return layout.ld >= 1 && static_cast<uint64_t>(layout.ld) >= layout.rows;
}

Problem check_problem(const cublasLtMatmulDescOpaque_t* desc, const cublasLtMatrixLayoutOpaque_t* a,
                      const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                      const cublasLtMatrixLayoutOpaque_t* d, const std::string& what) {
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) {
    return invalid(CUBLAS_STATUS_INVALID_VALUE);
  }
  Problem problem;
  problem.steps = epilogue_steps(desc->epilogue, what);
  element_bytes(a->type, what + ": A's layout");
  element_bytes(b->type, what + ": B's layout");
  element_bytes(c->type, what + ": C's layout");
  element_bytes(d->type, what + ": D's layout");
  if (!strata::emu::supports_compute_32f(a->type, b->type, d->type) || c->type != d->type) {
    return invalid(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  for (cublasOperation_t operation : {desc->trans_a, desc->trans_b}) {
    if (operation != CUBLAS_OP_N && operation != CUBLAS_OP_T && operation != CUBLAS_OP_C) {
      return invalid(CUBLAS_STATUS_INVALID_VALUE);
    }
  }
  // CUBLAS_OP_C is CUBLAS_OP_T for real types.
  const bool a_transposed = desc->trans_a != CUBLAS_OP_N;
  const bool b_transposed = desc->trans_b != CUBLAS_OP_N;
  const uint64_t a_rows = a_transposed ? a->cols : a->rows;  // op(A) is (m,k)
  const uint64_t k = a_transposed ? a->rows : a->cols;
  const uint64_t b_rows = b_transposed ? b->cols : b->rows;  // op(B) is (k,n)
  const uint64_t b_cols = b_transposed ? b->rows : b->cols;
  if (a_rows != d->rows || b_rows != k || b_cols != d->cols || c->rows != d->rows ||
      c->cols != d->cols) {
    return invalid(CUBLAS_STATUS_INVALID_VALUE);
  }
  if (!ld_holds_rows(*a) || !ld_holds_rows(*b) || !ld_holds_rows(*c) || !ld_holds_rows(*d)) {
    return invalid(CUBLAS_STATUS_INVALID_VALUE);
  }
  problem.m = static_cast<int64_t>(d->rows);
  problem.n = static_cast<int64_t>(d->cols);
  problem.k = static_cast<int64_t>(k);
  if (problem.steps.adds_bias && desc->bias == nullptr) {
    return invalid(CUBLAS_STATUS_INVALID_VALUE);
  }
  if (problem.steps.uses_aux()) {
    if (desc->aux == nullptr || desc->aux_ld < problem.m) {
      return invalid(CUBLAS_STATUS_INVALID_VALUE);
    }
    if (desc->aux_ld % 8 != 0) return invalid(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  return problem;
}

// The largest power of two up to kMaxAlignmentBytes that divides the address (null: the
// largest).
uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = kMaxAlignmentBytes;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

uint32_t capped(uint32_t alignment) {
  return alignment < kMaxAlignmentBytes ? alignment : kMaxAlignmentBytes;
}

// The alignments in bytes an algorithm assumes of each pointer of the product.
struct Alignments {
  uint32_t a = 1;
  uint32_t b = 1;
  uint32_t c = 1;
  uint32_t d = 1;
  uint32_t bias = 1;
  uint32_t aux = 1;
};

Alignments alignments_of(const void* a, const void* b, const void* c, const void* d,
                         const cublasLtMatmulDescOpaque_t& desc) {
  return {alignment_of(a), alignment_of(b),         alignment_of(c),
          alignment_of(d), alignment_of(desc.bias), alignment_of(desc.aux)};
}

// Whether the emulation's algorithm runs with pointers this aligned (see the file's comment).
bool has_algorithm(const Alignments& alignments, const Problem& problem,
                   const cublasLtMatrixLayoutOpaque_t& a, const cublasLtMatrixLayoutOpaque_t& b,
                   const cublasLtMatrixLayoutOpaque_t& c, const cublasLtMatrixLayoutOpaque_t& d) {
  const auto holds = [](uint32_t alignment, cudaDataType type) {
    return alignment >= element_bytes(type, "cublasLtMatmul");
  };
  if (!holds(alignments.a, a.type) || !holds(alignments.b, b.type) ||
      !holds(alignments.c, c.type) || !holds(alignments.d, d.type)) {
    return false;
  }
  if (problem.steps.adds_bias && !holds(alignments.bias, d.type)) return false;
  if (problem.steps.uses_aux() && alignments.aux < kMaxAlignmentBytes) return false;
  return true;
}

cublasLtMatmulAlgo_t encode(const Alignments& alignments) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[0] = kAlgorithmTag;
  algo.data[1] = alignments.a;
  algo.data[2] = alignments.b;
  algo.data[3] = alignments.c;
  algo.data[4] = alignments.d;
  algo.data[5] = alignments.bias;
  algo.data[6] = alignments.aux;
  return algo;
}

Alignments decode(const cublasLtMatmulAlgo_t& algo) {
  const auto at = [&algo](int index) { return static_cast<uint32_t>(algo.data[index]); };
  return {at(1), at(2), at(3), at(4), at(5), at(6)};
}

// Whether every pointer is at least as aligned as the algorithm assumed.
bool satisfies(const Alignments& actual, const Alignments& assumed, const Problem& problem) {
  if (actual.a < assumed.a || actual.b < assumed.b || actual.c < assumed.c ||
      actual.d < assumed.d) {
    return false;
  }
  if (problem.steps.adds_bias && actual.bias < assumed.bias) return false;
  if (problem.steps.uses_aux() && actual.aux < assumed.aux) return false;
  return true;
}

// Copies an attribute's value after the size check of cublasLt.h's SetAttribute functions.
template <typename Value>
cublasStatus_t read_attribute(Value& value, const void* buf, size_t size_in_bytes) {
  if (buf == nullptr || size_in_bytes != sizeof(Value)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&value, buf, sizeof(Value));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = std::make_unique<cublasLtContext>().release();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::unique_ptr<cublasLtContext> owned(lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (computeType != CUBLAS_COMPUTE_32F || scaleType != CUDA_R_32F) {
    fail("cublasLtMatmulDescCreate: compute type " + std::to_string(static_cast<int>(computeType)) +
         " with scale type " + std::to_string(static_cast<int>(scaleType)) +
         " is not emulated (only CUBLAS_COMPUTE_32F with CUDA_R_32F is)");
  }
  *matmulDesc = std::make_unique<cublasLtMatmulDescOpaque_t>().release();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  std::unique_ptr<cublasLtMatmulDescOpaque_t> owned(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return read_attribute(matmulDesc->trans_a, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return read_attribute(matmulDesc->trans_b, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return read_attribute(matmulDesc->epilogue, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_attribute(matmulDesc->bias, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return read_attribute(matmulDesc->aux, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return read_attribute(matmulDesc->aux_ld, buf, sizeInBytes);
  }
  fail("cublasLtMatmulDescSetAttribute: attribute " + std::to_string(static_cast<int>(attr)) +
       " is not emulated");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto layout = std::make_unique<cublasLtMatrixLayoutOpaque_t>();
  layout->type = type;
  layout->rows = rows;
  layout->cols = cols;
  layout->ld = ld;
  *matLayout = layout.release();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t> owned(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = std::make_unique<cublasLtMatmulPreferenceOpaque_t>().release();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t> owned(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attribute(pref->max_workspace_bytes, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return read_attribute(pref->min_alignment_a_bytes, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return read_attribute(pref->min_alignment_b_bytes, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return read_attribute(pref->min_alignment_c_bytes, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_attribute(pref->min_alignment_d_bytes, buf, sizeInBytes);
  }
  fail("cublasLtMatmulPreferenceSetAttribute: attribute " + std::to_string(static_cast<int>(attr)) +
       " is not emulated");
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (returnAlgoCount == nullptr || heuristicResultsArray == nullptr || preference == nullptr ||
      requestedAlgoCount <= 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returnAlgoCount = 0;
  const Problem problem =
      check_problem(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, "cublasLtMatmulAlgoGetHeuristic");
  if (problem.status != CUBLAS_STATUS_SUCCESS) return problem.status;
  const Alignments assumed{
      capped(preference->min_alignment_a_bytes), capped(preference->min_alignment_b_bytes),
      capped(preference->min_alignment_c_bytes), capped(preference->min_alignment_d_bytes),
      alignment_of(operationDesc->bias),         alignment_of(operationDesc->aux)};
  if (!has_algorithm(assumed, problem, *Adesc, *Bdesc, *Cdesc, *Ddesc)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  heuristicResultsArray[0] = cublasLtMatmulHeuristicResult_t{};
  heuristicResultsArray[0].algo = encode(assumed);
  heuristicResultsArray[0].workspaceSize = 0;
  heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
  heuristicResultsArray[0].wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  using strata::emu::ProductOperand;
  const std::string what = "cublasLtMatmul";
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const Problem problem = check_problem(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, what);
  if (problem.status != CUBLAS_STATUS_SUCCESS) return problem.status;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // Without an algorithm cuBLASLt picks one for these very pointers.
  const Alignments actual = alignments_of(A, B, C, D, *computeDesc);
  if (!has_algorithm(actual, problem, *Adesc, *Bdesc, *Cdesc, *Ddesc)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (algo != nullptr) {
    if (algo->data[0] != kAlgorithmTag) return CUBLAS_STATUS_INVALID_VALUE;
    if (!satisfies(actual, decode(*algo), problem)) return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int64_t m = problem.m;
  const int64_t n = problem.n;
  const int64_t k = problem.k;
  const EpilogueSteps steps = problem.steps;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;

  // Host pointer mode: alpha and beta are read now, as the call returns.
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const ProductOperand a{A, Adesc->type, Adesc->ld, computeDesc->trans_a != CUBLAS_OP_N};
  const ProductOperand b{B, Bdesc->type, Bdesc->ld, computeDesc->trans_b != CUBLAS_OP_N};
  const cublasLtMatrixLayoutOpaque_t c_layout = *Cdesc;
  const cublasLtMatrixLayoutOpaque_t d_layout = *Ddesc;
  const cublasLtMatmulDescOpaque_t desc = *computeDesc;
  strata::emu::enqueue(stream, what, [=] {
    strata::emu::check_operand(a, m, k, what + ": A");
    strata::emu::check_operand(b, k, n, what + ": B");
    if (beta_value != 0.0f) {
      strata::emu::check_device_range(
          C, strata::emu::matrix_bytes(c_layout.type, m, n, c_layout.ld), what + ": C");
    }
    strata::emu::check_device_range(D, strata::emu::matrix_bytes(d_layout.type, m, n, d_layout.ld),
                                    what + ": D");
    if (steps.adds_bias) {
      strata::emu::check_device_range(desc.bias, m * element_bytes(d_layout.type, what),
                                      what + ": bias");
    }
    if (steps.uses_aux()) {
      strata::emu::check_device_range(
          desc.aux, strata::emu::matrix_bytes(d_layout.type, m, n, desc.aux_ld), what + ": aux");
    }
    if (workspaceSizeInBytes > 0) {
      strata::emu::check_device_range(workspace, workspaceSizeInBytes, what + ": workspace");
    }
    const std::vector<float> product = strata::emu::product_fp32(a, b, m, n, k);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        float value = alpha_value * product[i + j * m];
        if (beta_value != 0.0f) {
          value += beta_value * strata::emu::load_element(C, c_layout.type, i + j * c_layout.ld);
        }
        if (steps.adds_bias) value += strata::emu::load_element(desc.bias, d_layout.type, i);
        const int64_t aux_index = i + j * desc.aux_ld;
        if (steps.writes_aux) strata::emu::store_element(desc.aux, d_layout.type, aux_index, value);
        if (steps.applies_gelu) value = strata::cpu::detail::gelu(value);
        if (steps.applies_gelu_derivative) {
          value *= strata::cpu::detail::gelu_derivative(
              strata::emu::load_element(desc.aux, d_layout.type, aux_index));
        }
        strata::emu::store_element(D, d_layout.type, i + j * d_layout.ld, value);
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
