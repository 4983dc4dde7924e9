// The emulated cuBLASLt (kernels/emu/cublaslt.cpp) against the cuBLASLt documentation
// (the toolkit's cublasLt.h): D = epilogue(alpha op(A) op(B) + beta C) column-major, the bias
// added per row of D before GELU, GELU's input written to aux, DGELU multiplying by gelu'(aux),
// with GELU in the tanh form of kernels/cpu/gelu_tanh.hpp; and the refusals the emulation
// implements, each with its source in cublaslt.cpp's header comment.

#include <cublasLt.h>
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/gelu_tanh.hpp"
#include "kernels/emu/include/strata_emu.hpp"
#include "tests/emu/library_memory.hpp"

namespace strata::emu {
namespace {

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

// One product as kernels/cuda/matmul.cu describes it: D (m,n) with A stored (m,k) or (k,m) when
// transposed, B (k,n) or (n,k); C is D.
struct Product {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  cudaDataType ab_type = CUDA_R_32F;
  cudaDataType d_type = CUDA_R_32F;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  uint32_t min_alignment_bytes = 256;  // the preference's, for A, B, C and D
};

// The descriptors of one product, destroyed with it.
class Descriptors {
 public:
  explicit Descriptors(const Product& p) {
    REQUIRE(cublasLtMatmulDescCreate(&operation, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
            CUBLAS_STATUS_SUCCESS);
    set(CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a);
    set(CUBLASLT_MATMUL_DESC_TRANSB, p.trans_b);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld);
    const bool a_t = p.trans_a == CUBLAS_OP_T;
    const bool b_t = p.trans_b == CUBLAS_OP_T;
    REQUIRE(cublasLtMatrixLayoutCreate(&a, p.ab_type, a_t ? p.k : p.m, a_t ? p.m : p.k, p.lda) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&b, p.ab_type, b_t ? p.n : p.k, b_t ? p.k : p.n, p.ldb) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&d, p.d_type, p.m, p.n, p.ldd) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&preference) == CUBLAS_STATUS_SUCCESS);
    const uint64_t workspace_bytes = 0;
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(
                preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                sizeof(workspace_bytes)) == CUBLAS_STATUS_SUCCESS);
    for (cublasLtMatmulPreferenceAttributes_t attribute :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      REQUIRE(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &p.min_alignment_bytes,
                                                   sizeof(p.min_alignment_bytes)) ==
              CUBLAS_STATUS_SUCCESS);
    }
  }
  ~Descriptors() {
    cublasLtMatmulPreferenceDestroy(preference);
    for (cublasLtMatrixLayout_t layout : {a, b, d}) cublasLtMatrixLayoutDestroy(layout);
    cublasLtMatmulDescDestroy(operation);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;

 private:
  template <typename Value>
  void set(cublasLtMatmulDescAttributes_t attribute, const Value& value) {
    REQUIRE(cublasLtMatmulDescSetAttribute(operation, attribute, &value, sizeof(value)) ==
            CUBLAS_STATUS_SUCCESS);
  }
};

class Handle {
 public:
  Handle() { REQUIRE(cublasLtCreate(&handle_) == CUBLAS_STATUS_SUCCESS); }
  ~Handle() { cublasLtDestroy(handle_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  cublasLtHandle_t raw() const { return handle_; }

  // The heuristic's status for the product; on success, its one algorithm in algo.
  cublasStatus_t heuristic(const Descriptors& descriptors, cublasLtMatmulAlgo_t& algo) const {
    cublasLtMatmulHeuristicResult_t result{};
    int found = -1;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle_, descriptors.operation, descriptors.a, descriptors.b, descriptors.d, descriptors.d,
        descriptors.preference, 1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS) {
      REQUIRE(found == 0);
      return status;
    }
    REQUIRE(found == 1);
    REQUIRE(result.state == CUBLAS_STATUS_SUCCESS);
    REQUIRE(result.workspaceSize == 0);
    algo = result.algo;
    return status;
  }

  // cublasLtMatmul with C = D, as kernels/cuda/matmul.cu calls it.
  cublasStatus_t matmul(const Descriptors& descriptors, const void* a, const void* b, void* d,
                        const cublasLtMatmulAlgo_t* algo, float alpha, float beta) const {
    return cublasLtMatmul(handle_, descriptors.operation, &alpha, a, descriptors.a, b,
                          descriptors.b, &beta, d, descriptors.d, d, descriptors.d, algo, nullptr,
                          0, nullptr);
  }

  // The heuristic then the product; requires both to succeed.
  void run(const Product& p, const void* a, const void* b, void* d, float alpha = 1.0f,
           float beta = 0.0f) const {
    const Descriptors descriptors(p);
    cublasLtMatmulAlgo_t algo{};
    REQUIRE(heuristic(descriptors, algo) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(matmul(descriptors, a, b, d, &algo, alpha, beta) == CUBLAS_STATUS_SUCCESS);
  }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// Small integers, every sum below exact in fp32 and every value exact in bf16.
std::vector<float> small_integers(size_t count, int seed) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>((i * 7 + seed * 3) % 9) - 4.0f;
  return values;
}

// out (N,OC) = inp (N,C) @ weight^T + bias, row-major, as kernels/cpu's matmul_forward: the
// column-major product D (OC,N) = op_T(weight' (C,OC)) inp' (C,N) + bias per row of D.
std::vector<float> linear_forward(const std::vector<float>& inp, const std::vector<float>& weight,
                                  const std::vector<float>& bias, int64_t n, int64_t c,
                                  int64_t oc) {
  std::vector<float> out(n * oc);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t o = 0; o < oc; ++o) {
      float sum = 0.0f;
      for (int64_t i = 0; i < c; ++i) sum += inp[row * c + i] * weight[o * c + i];
      out[row * oc + o] = sum + (bias.empty() ? 0.0f : bias[o]);
    }
  }
  return out;
}

// The forward product of matmul.cu: m = OC, n = N, k = C, the weight transposed.
Product forward_product(int64_t n, int64_t c, int64_t oc, cudaDataType type) {
  Product p;
  p.trans_a = CUBLAS_OP_T;
  p.m = oc;
  p.n = n;
  p.k = c;
  p.ab_type = type;
  p.d_type = type;
  p.lda = c;
  p.ldb = c;
  p.ldd = oc;
  return p;
}

constexpr int64_t kN = 5, kC = 7, kOC = 16;

TEST_CASE(
    "cublasLtMatmul in fp32 with the BIAS epilogue: the linear layer's forward, the bias "
    "added per row of D",
    "[emu]") {
  // cublasLt.h, CUBLASLT_EPILOGUE_BIAS: the bias vector has D's rows and is broadcast to all
  // columns. With integers the expected values are exact.
  Handle lt;
  const auto inp = small_integers(kN * kC, 1);
  const auto weight = small_integers(kOC * kC, 2);
  const auto bias = small_integers(kOC, 3);
  DeviceArray<float> inp_device(inp), weight_device(weight), bias_device(bias);
  DeviceArray<float> out_device(std::vector<float>(kN * kOC, 0.0f));
  Product p = forward_product(kN, kC, kOC, CUDA_R_32F);
  p.epilogue = CUBLASLT_EPILOGUE_BIAS;
  p.bias = bias_device.data();
  lt.run(p, weight_device.data(), inp_device.data(), out_device.data());
  REQUIRE(out_device.to_host() == linear_forward(inp, weight, bias, kN, kC, kOC));
}

TEST_CASE(
    "cublasLtMatmul with bf16 A and B into fp32 D accumulates with beta 1, as the weight "
    "gradient of matmul.cu",
    "[emu]") {
  // dweight' (C,OC) += inp' (C,N) op_T(dout' (OC,N)): m = C, n = OC, k = N, B transposed. The
  // expected update is the naive loop dweight[o][i] += sum over rows of dout[row][o] inp[row][i].
  Handle lt;
  const auto inp = small_integers(kN * kC, 4);
  const auto dout = small_integers(kN * kOC, 5);
  auto dweight = small_integers(kOC * kC, 6);
  DeviceArray<__nv_bfloat16> inp_device(to_bf16(inp)), dout_device(to_bf16(dout));
  DeviceArray<float> dweight_device(dweight);
  Product p;
  p.trans_b = CUBLAS_OP_T;
  p.m = kC;
  p.n = kOC;
  p.k = kN;
  p.ab_type = CUDA_R_16BF;
  p.d_type = CUDA_R_32F;
  p.lda = kC;
  p.ldb = kOC;
  p.ldd = kC;
  lt.run(p, inp_device.data(), dout_device.data(), dweight_device.data(), 1.0f, 1.0f);
  for (int64_t o = 0; o < kOC; ++o) {
    for (int64_t i = 0; i < kC; ++i) {
      for (int64_t row = 0; row < kN; ++row)
        dweight[o * kC + i] += dout[row * kOC + o] * inp[row * kC + i];
    }
  }
  REQUIRE(dweight_device.to_host() == dweight);
}

TEST_CASE(
    "cublasLtMatmul in bf16 with GELU_AUX_BIAS writes the pre-activation to aux and "
    "gelu_tanh of it to D, each rounded once",
    "[emu]") {
  // cublasLt.h: GELU_AUX_BIAS applies the bias, then GELU, and outputs GELU's input as aux. The
  // pre-activation is an exact integer in fp32; D is bf16(gelu(pre)) with kernels/cpu's tanh
  // formula in fp32, aux is bf16(pre). GELU_AUX (no bias) is the same without the bias.
  Handle lt;
  const auto inp = small_integers(kN * kC, 7);
  const auto weight = small_integers(kOC * kC, 8);
  const auto bias = small_integers(kOC, 9);
  DeviceArray<__nv_bfloat16> inp_device(to_bf16(inp)), weight_device(to_bf16(weight));
  DeviceArray<__nv_bfloat16> bias_device(to_bf16(bias));
  for (bool with_bias : {true, false}) {
    INFO("bias " << with_bias);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    DeviceArray<__nv_bfloat16> out_device(to_bf16(std::vector<float>(kN * kOC, nan)));
    DeviceArray<__nv_bfloat16> aux_device(to_bf16(std::vector<float>(kN * kOC, nan)));
    Product p = forward_product(kN, kC, kOC, CUDA_R_16BF);
    p.epilogue = with_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    p.bias = with_bias ? bias_device.data() : nullptr;
    p.aux = aux_device.data();
    p.aux_ld = kOC;
    lt.run(p, weight_device.data(), inp_device.data(), out_device.data());
    const auto pre =
        linear_forward(inp, weight, with_bias ? bias : std::vector<float>{}, kN, kC, kOC);
    std::vector<float> expected_out, expected_aux;
    for (float x : pre) {
      expected_aux.push_back(__bfloat162float(__float2bfloat16_rn(x)));
      expected_out.push_back(__bfloat162float(__float2bfloat16_rn(cpu::detail::gelu(x))));
    }
    REQUIRE(to_float(aux_device.to_host()) == expected_aux);
    REQUIRE(to_float(out_device.to_host()) == expected_out);
  }
}

TEST_CASE(
    "cublasLtMatmul in bf16 with DGELU multiplies the product by gelu'(aux), aux laid out "
    "as D",
    "[emu]") {
  // cublasLt.h: DGELU applies the GELU gradient to the matmul output, reading GELU's input from
  // aux. matmul.cu's backward: dinp' (C,N) = weight' (C,OC) dout' (OC,N), m = C, n = N, k = OC,
  // aux = pre_gelu (N,C) row-major with leading dimension C. The expected value is
  // bf16(product * gelu'(aux)) with kernels/cpu's derivative in fp32.
  constexpr int64_t kInner = 16;  // C, a multiple of 8 as the aux leading dimension must be
  Handle lt;
  const auto weight = small_integers(kOC * kInner, 10);
  const auto dout = small_integers(kN * kOC, 11);
  std::vector<float> pre_gelu(kN * kInner);
  for (size_t i = 0; i < pre_gelu.size(); ++i) pre_gelu[i] = static_cast<float>(i % 13) / 4 - 1.5f;
  DeviceArray<__nv_bfloat16> weight_device(to_bf16(weight)), dout_device(to_bf16(dout));
  DeviceArray<__nv_bfloat16> aux_device(to_bf16(pre_gelu));
  DeviceArray<__nv_bfloat16> dinp_device(to_bf16(std::vector<float>(kN * kInner, 0.0f)));
  Product p;
  p.m = kInner;
  p.n = kN;
  p.k = kOC;
  p.ab_type = CUDA_R_16BF;
  p.d_type = CUDA_R_16BF;
  p.lda = kInner;
  p.ldb = kOC;
  p.ldd = kInner;
  p.epilogue = CUBLASLT_EPILOGUE_DGELU;
  p.aux = aux_device.data();
  p.aux_ld = kInner;
  lt.run(p, weight_device.data(), dout_device.data(), dinp_device.data());
  std::vector<float> expected;
  for (int64_t row = 0; row < kN; ++row) {
    for (int64_t i = 0; i < kInner; ++i) {
      float sum = 0.0f;
      for (int64_t o = 0; o < kOC; ++o) sum += weight[o * kInner + i] * dout[row * kOC + o];
      const float derivative = cpu::detail::gelu_derivative(pre_gelu[row * kInner + i]);
      expected.push_back(__bfloat162float(__float2bfloat16_rn(sum * derivative)));
    }
  }
  REQUIRE(to_float(dinp_device.to_host()) == expected);
}

TEST_CASE("cublasLtMatmul with beta 0 does not read C, and reads alpha during the call", "[emu]") {
  // cuBLAS's convention that C is not read when beta is 0 (D = C here holds NaNs, as the kernel
  // tests poison outputs); host pointer mode, the default of CUBLASLT_MATMUL_DESC_POINTER_MODE.
  Handle lt;
  DeviceArray<float> a_device(std::vector<float>{3.0f});
  DeviceArray<float> b_device(std::vector<float>{5.0f});
  DeviceArray<float> d_device(std::vector<float>{std::numeric_limits<float>::quiet_NaN()});
  Product p;
  p.m = p.n = p.k = 1;
  p.lda = p.ldb = p.ldd = 1;
  const Descriptors descriptors(p);
  cublasLtMatmulAlgo_t algo{};
  REQUIRE(lt.heuristic(descriptors, algo) == CUBLAS_STATUS_SUCCESS);
  float alpha = 2.0f;
  const float beta = 0.0f;
  REQUIRE(cublasLtMatmul(nullptr, descriptors.operation, &alpha, a_device.data(), descriptors.a,
                         b_device.data(), descriptors.b, &beta, d_device.data(), descriptors.d,
                         d_device.data(), descriptors.d, &algo, nullptr, 0,
                         nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
  REQUIRE(lt.matmul(descriptors, a_device.data(), b_device.data(), d_device.data(), &algo, alpha,
                    beta) == CUBLAS_STATUS_SUCCESS);
  alpha = 100.0f;
  REQUIRE(d_device.to_host()[0] == 30.0f);
}

TEST_CASE(
    "cublasLtMatmulAlgoGetHeuristic refuses the GELU epilogues' aux leading dimension "
    "unless a multiple of 8 and at least D's rows",
    "[emu]") {
  // cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: "Must be divisible by 8 and be no less than
  // the number of rows in the output matrix." Not a multiple of 8: no algorithm (NOT_SUPPORTED,
  // the fallback of matmul.cu); fewer than the rows: INVALID_VALUE.
  Handle lt;
  DeviceArray<__nv_bfloat16> aux_device(to_bf16(std::vector<float>(kN * 24, 0.0f)));
  const auto status_for = [&](cublasLtEpilogue_t epilogue, int64_t m, int64_t aux_ld) {
    Product p = forward_product(kN, kC, m, CUDA_R_16BF);
    p.epilogue = epilogue;
    p.aux = aux_device.data();
    p.aux_ld = aux_ld;
    cublasLtMatmulAlgo_t algo{};
    return lt.heuristic(Descriptors(p), algo);
  };
  for (cublasLtEpilogue_t epilogue : {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_DGELU}) {
    CHECK(status_for(epilogue, 16, 16) == CUBLAS_STATUS_SUCCESS);
    CHECK(status_for(epilogue, 12, 12) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(status_for(epilogue, 12, 16) == CUBLAS_STATUS_SUCCESS);
    CHECK(status_for(epilogue, 24, 16) == CUBLAS_STATUS_INVALID_VALUE);
  }
}

TEST_CASE(
    "cublasLtMatmul refuses pointers less aligned than the algorithm the heuristic picked "
    "for the preference's alignments",
    "[emu]") {
  // cublasLt.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*: a smaller value excludes algorithms that
  // need more. The emulation's algorithm assumes the preference's alignment up to 16 bytes, so A
  // 4 bytes past a 256-byte boundary fails with an algorithm picked for 256 (INVALID_VALUE:
  // "parameters are in conflict") and runs with one picked for 4. A preference under the element
  // size has no algorithm: a GPU cannot load an fp32 across its 4-byte alignment.
  Handle lt;
  DeviceArray<float> a_device(std::vector<float>(5, 1.0f));
  DeviceArray<float> b_device(std::vector<float>{2.0f});
  DeviceArray<float> d_device(std::vector<float>(4, 0.0f));
  Product p;
  p.m = 4;
  p.n = p.k = 1;
  p.lda = p.ldd = 4;
  p.ldb = 1;
  const float* a_offset = a_device.data() + 1;
  cublasLtMatmulAlgo_t algo{};
  {
    const Descriptors descriptors(p);
    REQUIRE(lt.heuristic(descriptors, algo) == CUBLAS_STATUS_SUCCESS);
    CHECK(lt.matmul(descriptors, a_offset, b_device.data(), d_device.data(), &algo, 1.0f, 0.0f) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(d_device.to_host() == std::vector<float>(4, 0.0f));
  }
  p.min_alignment_bytes = 4;
  {
    const Descriptors descriptors(p);
    REQUIRE(lt.heuristic(descriptors, algo) == CUBLAS_STATUS_SUCCESS);
    CHECK(lt.matmul(descriptors, a_offset, b_device.data(), d_device.data(), &algo, 1.0f, 0.0f) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK(d_device.to_host() == std::vector<float>(4, 2.0f));
  }
  p.min_alignment_bytes = 2;
  CHECK(lt.heuristic(Descriptors(p), algo) == CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_CASE(
    "cublasLtMatmulAlgoGetHeuristic refuses a bias below its element's alignment and an "
    "aux below 16 bytes",
    "[emu]") {
  // cublasLt.h: the heuristic reads the bias and aux pointers "to determine expected pointer
  // alignment". A bf16 bias one byte off has no algorithm; an aux 2 bytes past a 16-byte
  // boundary has none either (the emulation's reading of the aux rules, cublaslt.cpp).
  Handle lt;
  DeviceArray<__nv_bfloat16> buffer_device(to_bf16(std::vector<float>(kN * kOC + 16, 0.0f)));
  auto* bytes = reinterpret_cast<std::byte*>(buffer_device.data());
  cublasLtMatmulAlgo_t algo{};
  Product p = forward_product(kN, kC, kOC, CUDA_R_16BF);
  p.epilogue = CUBLASLT_EPILOGUE_BIAS;
  p.bias = bytes + 2;
  CHECK(lt.heuristic(Descriptors(p), algo) == CUBLAS_STATUS_SUCCESS);
  p.bias = bytes + 1;
  CHECK(lt.heuristic(Descriptors(p), algo) == CUBLAS_STATUS_NOT_SUPPORTED);
  p.bias = nullptr;
  CHECK(lt.heuristic(Descriptors(p), algo) == CUBLAS_STATUS_INVALID_VALUE);
  p.epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
  p.aux_ld = kOC;
  p.aux = bytes + 16;
  CHECK(lt.heuristic(Descriptors(p), algo) == CUBLAS_STATUS_SUCCESS);
  p.aux = bytes + 2;
  CHECK(lt.heuristic(Descriptors(p), algo) == CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_CASE(
    "cuBLASLt answers types outside its table, bad attribute sizes and zero requested "
    "algorithms with the documented statuses, and fails what it does not emulate",
    "[emu]") {
  // cuBLAS documentation, cublasLtMatmul's type table: fp32 A and B into bf16 D is not listed
  // (NOT_SUPPORTED). cublasLt.h: SetAttribute answers INVALID_VALUE when the size does not match
  // the attribute's, GetHeuristic when requestedAlgoCount <= 0. A RELU epilogue or a 64-bit
  // compute type is not emulated: EmulationError.
  Handle lt;
  cublasLtMatmulAlgo_t algo{};
  Product p = forward_product(kN, kC, kOC, CUDA_R_32F);
  p.d_type = CUDA_R_16BF;
  CHECK(lt.heuristic(Descriptors(p), algo) == CUBLAS_STATUS_NOT_SUPPORTED);

  p.d_type = CUDA_R_32F;
  const Descriptors descriptors(p);
  const int32_t aux_ld_too_narrow = 16;  // the attribute is an int64_t
  CHECK(cublasLtMatmulDescSetAttribute(descriptors.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                       &aux_ld_too_narrow,
                                       sizeof(aux_ld_too_narrow)) == CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulHeuristicResult_t result{};
  int found = -1;
  CHECK(cublasLtMatmulAlgoGetHeuristic(lt.raw(), descriptors.operation, descriptors.a,
                                       descriptors.b, descriptors.d, descriptors.d,
                                       descriptors.preference, 0, &result,
                                       &found) == CUBLAS_STATUS_INVALID_VALUE);

  const cublasLtEpilogue_t relu = CUBLASLT_EPILOGUE_RELU;
  REQUIRE(cublasLtMatmulDescSetAttribute(descriptors.operation, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                         &relu, sizeof(relu)) == CUBLAS_STATUS_SUCCESS);
  CHECK_THROWS_AS(lt.heuristic(descriptors, algo), EmulationError);
  cublasLtMatmulDesc_t double_precision = nullptr;
  CHECK_THROWS_AS(cublasLtMatmulDescCreate(&double_precision, CUBLAS_COMPUTE_64F, CUDA_R_64F),
                  EmulationError);
}

}  // namespace
}  // namespace strata::emu
