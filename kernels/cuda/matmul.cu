// The linear layer on cuBLASLt: the forward product with its bias (and GELU) as epilogues, the
// two backward products (the weight gradient accumulated into fp32, as Megatron-LM's
// gradient_accumulation_fusion), and the bias gradient as a deterministic column sum.
//
// Row-major through column-major: cuBLASLt is column-major, and a row-major (R,C) matrix is the
// column-major (C,R) matrix with the same bytes. So out (N,OC) = inp (N,C) @ weight^T is, in
// column-major terms, out' (OC,N) = op_T(weight' (C,OC)) @ inp' (C,N): m = OC, n = N, k = C,
// the weight transposed, as llm.c's matmul_forward_cublaslt.

#include <optional>
#include <type_traits>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

template <typename T>
constexpr cudaDataType_t kDataType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;

// One column-major product D (m,n) = alpha op(A) op(B) + beta D with an epilogue. A is stored
// (m,k) when trans_a is N and (k,m) when T; B (k,n) or (n,k) likewise.
struct Product {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const void* a = nullptr;
  cudaDataType_t a_type = CUDA_R_32F;
  int64_t lda = 0;
  const void* b = nullptr;
  cudaDataType_t b_type = CUDA_R_32F;
  int64_t ldb = 0;
  void* d = nullptr;
  cudaDataType_t d_type = CUDA_R_32F;
  int64_t ldd = 0;
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (m), for the BIAS epilogues
  void* aux = nullptr;         // (m,n) with leading dimension aux_ld, for the GELU epilogues
  int64_t aux_ld = 0;
};

template <typename Value>
void set_attribute(cublasLtMatmulDesc_t operation, cublasLtMatmulDescAttributes_t attribute,
                   const Value& value) {
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(operation, attribute, &value, sizeof(value)));
}

template <typename Value>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, const Value& value) {
  STRATA_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

// The largest power of two up to 256 that divides the address: what cuBLASLt may assume of a
// pointer's alignment when it picks an algorithm (an algorithm picked for 16-byte alignment
// fails on a pointer that has less).
uint32_t alignment_bytes(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// The cuBLASLt descriptors of one product (operation, layouts of A, B and D, the preference:
// workspace and the pointers' alignments), destroyed with it. The constructor delegates to the
// default one so that, should a call in its body throw, the destructor frees what was made.
class MatmulDescriptors {
 public:
  explicit MatmulDescriptors(const Product& product) : MatmulDescriptors() {
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&operation_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_attribute(operation_, CUBLASLT_MATMUL_DESC_TRANSA, product.trans_a);
    set_attribute(operation_, CUBLASLT_MATMUL_DESC_TRANSB, product.trans_b);
    set_attribute(operation_, CUBLASLT_MATMUL_DESC_EPILOGUE, product.epilogue);
    if (product.bias != nullptr) {
      set_attribute(operation_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, product.bias);
    }
    if (product.aux != nullptr) {
      set_attribute(operation_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, product.aux);
      set_attribute(operation_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, product.aux_ld);
    }
    const bool a_transposed = product.trans_a == CUBLAS_OP_T;
    const bool b_transposed = product.trans_b == CUBLAS_OP_T;
    STRATA_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&a_, product.a_type, a_transposed ? product.k : product.m,
                                   a_transposed ? product.m : product.k, product.lda));
    STRATA_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&b_, product.b_type, b_transposed ? product.n : product.k,
                                   b_transposed ? product.k : product.n, product.ldb));
    STRATA_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&d_, product.d_type, product.m, product.n, product.ldd));

    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference_));
    set_preference(preference_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                   uint64_t{Context::kCublasLtWorkspaceBytes});
    set_preference(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                   alignment_bytes(product.a));
    set_preference(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   alignment_bytes(product.b));
    set_preference(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                   alignment_bytes(product.d));
    set_preference(preference_, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                   alignment_bytes(product.d));
  }
  ~MatmulDescriptors() {
    if (preference_ != nullptr) cublasLtMatmulPreferenceDestroy(preference_);
    for (cublasLtMatrixLayout_t layout : {a_, b_, d_}) {
      if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
    }
    if (operation_ != nullptr) cublasLtMatmulDescDestroy(operation_);
  }
  MatmulDescriptors(const MatmulDescriptors&) = delete;
  MatmulDescriptors& operator=(const MatmulDescriptors&) = delete;

  cublasLtMatmulDesc_t operation() const { return operation_; }
  cublasLtMatrixLayout_t a() const { return a_; }
  cublasLtMatrixLayout_t b() const { return b_; }
  cublasLtMatrixLayout_t d() const { return d_; }
  cublasLtMatmulPreference_t preference() const { return preference_; }

 private:
  MatmulDescriptors() = default;

  cublasLtMatmulDesc_t operation_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr;
  cublasLtMatrixLayout_t b_ = nullptr;
  cublasLtMatrixLayout_t d_ = nullptr;
  cublasLtMatmulPreference_t preference_ = nullptr;
};

// cuBLASLt heuristic's first algorithm for the product (C is D: beta accumulates into it), or
// nothing where it has none (an epilogue it cannot fuse at this type, shape or alignment).
std::optional<cublasLtMatmulAlgo_t> find_algorithm(Context& ctx,
                                                   const MatmulDescriptors& descriptors) {
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.cublaslt(), descriptors.operation(), descriptors.a(), descriptors.b(), descriptors.d(),
      descriptors.d(), descriptors.preference(), 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return std::nullopt;
  }
  STRATA_CUBLAS_CHECK(status);
  return heuristic.algo;
}

// Runs the product and returns true, or returns false without running anything when cuBLASLt
// has no algorithm for it.
bool try_run(Context& ctx, const Product& product) {
  const MatmulDescriptors descriptors(product);
  const std::optional<cublasLtMatmulAlgo_t> algorithm = find_algorithm(ctx, descriptors);
  if (!algorithm) return false;
  const float alpha = 1.0f;
  STRATA_CUBLAS_CHECK(cublasLtMatmul(
      ctx.cublaslt(), descriptors.operation(), &alpha, product.a, descriptors.a(), product.b,
      descriptors.b(), &product.beta, product.d, descriptors.d(), product.d, descriptors.d(),
      &*algorithm, ctx.cublaslt_workspace(), Context::kCublasLtWorkspaceBytes, ctx.stream()));
  return true;
}

// The product without a fallback: cuBLASLt supports every plain product of these types, so no
// algorithm is an error.
void run(Context& ctx, const Product& product) {
  if (!try_run(ctx, product)) {
    STRATA_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

// out is (N,OC), bias (OC): out += bias on every row. The fallback when the BIAS epilogue has no
// algorithm.
template <typename T>
__global__ void add_bias_kernel(T* out, const T* bias, int64_t n, int64_t oc) {
  const int64_t total = n * oc;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(to_float(out[i]) + to_float(bias[i % oc]));
  }
}

template <typename T>
void add_bias(Context& ctx, T* out, const T* bias, int64_t n, int64_t oc) {
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(ceil_div(n * oc, kThreads), 65536);
  STRATA_LAUNCH(blocks, kThreads, 0, ctx.stream(), add_bias_kernel)(out, bias, n, oc);
  STRATA_CUDA_CHECK_LAUNCH();
}

// The forward product out (N,OC) = inp (N,C) @ weight^T: out' (OC,N) = op_T(weight' (C,OC)) @
// inp' (C,N) column-major, m = OC, n = N, k = C; no epilogue yet.
template <typename T>
Product forward_product(T* out, const T* inp, const T* weight, int64_t n, int64_t c, int64_t oc) {
  Product product;
  product.trans_a = CUBLAS_OP_T;
  product.m = oc;
  product.n = n;
  product.k = c;
  product.a = weight;
  product.a_type = kDataType<T>;
  product.lda = c;
  product.b = inp;
  product.b_type = kDataType<T>;
  product.ldb = c;
  product.d = out;
  product.d_type = kDataType<T>;
  product.ldd = oc;
  return product;
}

// The epilogues matmul_forward, matmul_gelu_forward and matmul_backward ask cuBLASLt for, each
// with its fallback when it has no algorithm. BIAS adds bias (m) to every column of D', i.e. to
// every row of the row-major output.
Product with_bias(Product product, const void* bias) {
  product.epilogue = CUBLASLT_EPILOGUE_BIAS;
  product.bias = bias;
  return product;
}

// GELU_AUX(_BIAS): D = gelu(product + bias), the pre-GELU values written to pre_gelu, laid out as
// D.
Product with_gelu_aux(Product product, const void* bias, void* pre_gelu) {
  product.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  product.bias = bias;
  product.aux = pre_gelu;
  product.aux_ld = product.ldd;
  return product;
}

// DGELU: D = product * gelu'(pre_gelu), pre_gelu laid out as D (read, not written).
Product with_dgelu(Product product, const void* pre_gelu) {
  product.epilogue = CUBLASLT_EPILOGUE_DGELU;
  product.aux = const_cast<void*>(pre_gelu);
  product.aux_ld = product.ldd;
  return product;
}

// dinp (N,C) = dout (N,OC) @ weight: dinp' (C,N) = weight' (C,OC) @ dout' (OC,N) column-major,
// m = C, n = N, k = OC, neither transposed; no epilogue yet.
template <typename T>
Product dinp_product(T* dinp, const T* dout, const T* weight, int64_t n, int64_t c, int64_t oc) {
  Product product;
  product.m = c;
  product.n = n;
  product.k = oc;
  product.a = weight;
  product.a_type = kDataType<T>;
  product.lda = c;
  product.b = dout;
  product.b_type = kDataType<T>;
  product.ldb = oc;
  product.d = dinp;
  product.d_type = kDataType<T>;
  product.ldd = c;
  return product;
}

// dweight (OC,C) += dout^T @ inp: dweight' (C,OC) += inp' (C,N) @ op_T(dout' (OC,N)), m = C,
// n = OC, k = N, into fp32 with beta = 1.
template <typename T>
Product dweight_product(float* dweight, const T* dout, const T* inp, int64_t n, int64_t c,
                        int64_t oc) {
  Product product;
  product.trans_b = CUBLAS_OP_T;
  product.m = c;
  product.n = oc;
  product.k = n;
  product.a = inp;
  product.a_type = kDataType<T>;
  product.lda = c;
  product.b = dout;
  product.b_type = kDataType<T>;
  product.ldb = oc;
  product.d = dweight;
  product.d_type = CUDA_R_32F;
  product.ldd = c;
  product.beta = 1.0f;
  return product;
}

// out (N,OC) = inp (N,C) @ weight^T, with the bias as an epilogue where cuBLASLt fuses it.
template <typename T>
void product_with_bias(Context& ctx, T* out, const T* inp, const T* weight, const T* bias,
                       int64_t n, int64_t c, int64_t oc) {
  const Product product = forward_product(out, inp, weight, n, c, oc);
  if (bias != nullptr) {
    if (try_run(ctx, with_bias(product, bias))) return;
    run(ctx, product);
    add_bias(ctx, out, bias, n, oc);
    return;
  }
  run(ctx, product);
}

// Column sums of dout (N,C) in two deterministic steps. kColumns columns per block, kRowGroups
// rows at a time: thread (x, y) adds rows y, y + kRowGroups, ... of its chunk for column x, the
// block adds the kRowGroups sums in order, and chunk r writes partials[r][column]. Then
// sum_partials_kernel adds the chunks of each column in order into dbias. The number of chunks
// depends only on N, so every GPU gives the same bits.
constexpr int kColumns = 32;
constexpr int kRowGroups = 8;
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 512;

// partials is (chunks, C), dout (N,C).
template <typename T>
__global__ void column_partials_kernel(float* partials, const T* dout, int64_t n, int64_t c,
                                       int64_t rows_per_chunk) {
  STRATA_SHARED(float, sums, [kRowGroups][kColumns]);
  const int64_t column = blockIdx.x * int64_t{kColumns} + threadIdx.x;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = std::min(n, begin + rows_per_chunk);
  float sum = 0.0f;
  if (column < c) {
    for (int64_t row = begin + threadIdx.y; row < end; row += kRowGroups) {
      sum += to_float(dout[row * c + column]);
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < c) {
    float total = 0.0f;
    for (int group = 0; group < kRowGroups; ++group) total += sums[group][threadIdx.x];
    partials[blockIdx.y * c + column] = total;
  }
}

// dbias is (C), partials (chunks, C).
__global__ void sum_partials_kernel(float* dbias, const float* partials, int64_t chunks,
                                    int64_t c) {
  const int64_t column = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (column >= c) return;
  float total = 0.0f;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * c + column];
  dbias[column] += total;
}

}  // namespace

template <typename T>
void matmul_forward(Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int64_t n,
                    int64_t c, int64_t oc) {
  if (n <= 0 || oc <= 0) return;
  if (c <= 0) {
    // An empty product: out is the bias, or zero.
    STRATA_CUDA_CHECK(cudaMemsetAsync(out, 0, n * oc * sizeof(T), ctx.stream()));
    if (bias != nullptr) add_bias(ctx, out, bias, n, oc);
    return;
  }
  product_with_bias(ctx, out, inp, weight, bias, n, c, oc);
}

// The GELU_AUX epilogue writes pre_gelu as its auxiliary output and out = gelu(pre_gelu). Only
// bf16 uses it: the float variant is the parity variant, and runs GELU as its own kernel so that
// it is the CPU reference's formula to the last bits, whatever GELU cuBLASLt computes inside.
template <typename T>
void matmul_gelu_forward(Context& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                         const T* bias, int64_t n, int64_t c, int64_t oc) {
  if (n <= 0 || oc <= 0) return;
  if (std::is_same_v<T, bf16> && c > 0) {
    const Product product = forward_product(out, inp, weight, n, c, oc);
    if (try_run(ctx, with_gelu_aux(product, bias, pre_gelu))) return;
  }
  matmul_forward(ctx, pre_gelu, inp, weight, bias, n, c, oc);
  gelu_forward(ctx, out, pre_gelu, n * oc);
}

template <typename T>
void matmul_backward(Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                     const T* inp, const T* weight, const T* pre_gelu, int64_t n, int64_t c,
                     int64_t oc) {
  if (n <= 0 || c <= 0) return;
  if (oc <= 0) {
    // Nothing flows back through an empty product (and gelu'(x) * 0 = 0).
    if (dinp != nullptr) {
      STRATA_CUDA_CHECK(cudaMemsetAsync(dinp, 0, n * c * sizeof(T), ctx.stream()));
    }
    return;
  }
  if (dinp != nullptr) {
    const Product product = dinp_product(dinp, dout, weight, n, c, oc);
    // Float runs the CPU's formula for gelu' instead of DGELU, as in matmul_gelu_forward.
    const bool fused = pre_gelu != nullptr && std::is_same_v<T, bf16> &&
                       try_run(ctx, with_dgelu(product, pre_gelu));
    if (!fused) {
      run(ctx, product);
      if (pre_gelu != nullptr) gelu_backward(ctx, dinp, pre_gelu, dinp, n * c);
    }
  }
  run(ctx, dweight_product(dweight, dout, inp, n, c, oc));
  if (dbias != nullptr) bias_backward(ctx, dbias, dout, n, oc);
}

template <typename T>
void bias_backward(Context& ctx, float* dbias, const T* dout, int64_t n, int64_t c) {
  if (n <= 0 || c <= 0) return;
  const int64_t rows_per_chunk = std::max(kRowsPerChunk, ceil_div(n, kMaxChunks));
  const int64_t chunks = ceil_div(n, rows_per_chunk);
  const int64_t column_blocks = ceil_div(c, kColumns);
  checked_int(column_blocks, "bias_backward column blocks");
  float* partials = reinterpret_cast<float*>(ctx.scratch(chunks * c * sizeof(float)));
  STRATA_LAUNCH(dim3(column_blocks, chunks), dim3(kColumns, kRowGroups), 0, ctx.stream(),
                column_partials_kernel)
  (partials, dout, n, c, rows_per_chunk);
  STRATA_CUDA_CHECK_LAUNCH();
  constexpr int kThreads = 256;
  STRATA_LAUNCH(ceil_div(c, kThreads), kThreads, 0, ctx.stream(), sum_partials_kernel)
  (dbias, partials, chunks, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
MatmulAlgorithms matmul_algorithms(Context& ctx, int64_t n, int64_t c, int64_t oc) {
  // Every pointer is the workspace's: cudaMalloc'd, so aligned as the buffers the products run
  // on are (256 bytes). The heuristic reads only the pointers' alignment; nothing runs.
  T* any = reinterpret_cast<T*>(ctx.cublaslt_workspace());
  float* any_float = reinterpret_cast<float*>(ctx.cublaslt_workspace());
  const auto has_algorithm = [&ctx](const Product& product) {
    return find_algorithm(ctx, MatmulDescriptors(product)).has_value();
  };
  constexpr bool kFusesGelu = std::is_same_v<T, bf16>;  // as matmul_gelu_forward
  const Product forward = forward_product(any, any, any, n, c, oc);
  const Product dinp = dinp_product(any, any, any, n, c, oc);
  MatmulAlgorithms algorithms;
  algorithms.forward = has_algorithm(forward);
  algorithms.forward_bias = has_algorithm(with_bias(forward, any));
  algorithms.forward_gelu = kFusesGelu && has_algorithm(with_gelu_aux(forward, any, any));
  algorithms.dinp = has_algorithm(dinp);
  algorithms.dinp_dgelu = kFusesGelu && has_algorithm(with_dgelu(dinp, any));
  algorithms.dweight = has_algorithm(dweight_product(any_float, any, any, n, c, oc));
  return algorithms;
}

#define STRATA_INSTANTIATE_MATMUL(T)                                                            \
  template void matmul_forward<T>(Context&, T*, const T*, const T*, const T*, int64_t, int64_t, \
                                  int64_t);                                                     \
  template void matmul_gelu_forward<T>(Context&, T*, T*, const T*, const T*, const T*, int64_t, \
                                       int64_t, int64_t);                                       \
  template void matmul_backward<T>(Context&, T*, float*, float*, const T*, const T*, const T*,  \
                                   const T*, int64_t, int64_t, int64_t);                        \
  template void bias_backward<T>(Context&, float*, const T*, int64_t, int64_t);                 \
  template MatmulAlgorithms matmul_algorithms<T>(Context&, int64_t, int64_t, int64_t);
STRATA_INSTANTIATE_MATMUL(float)
STRATA_INSTANTIATE_MATMUL(bf16)

}  // namespace strata::cuda
