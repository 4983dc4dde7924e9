// cuBLASLt's heuristic over the zoo's GEMMs. For every distinct product of the zoo's layers that
// strata calibrate --backend cuda times (zoo_gemm_shapes, exec/cuda_calibration_sweeps.hpp, with
// its default options: every zoo model, TP 1, 2, 4 and 8, 2048 and 8192 tokens), the heuristic
// has an algorithm for the forward, dX and dW products as kernels/cuda/matmul.cu sets them up, in
// bf16 and in fp32 (cuda::matmul_algorithms asks it without running anything). Those three have
// no fallback: a shape without one fails with a CublasError when it trains. The fused epilogues
// (BIAS, GELU_AUX_BIAS, DGELU) fall back to a second kernel, so they are counted, not required.
// On a GPU (strata_tests_cuda_calibration, tagged [gpu]) the toolkit's heuristic answers; on the
// CPU emulation of CUDA (strata_tests_cuda_calibration_emu) the emulated one
// (kernels/emu/cublaslt.cpp), which refuses where cublasLt.h documents a refusal.

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "exec/cuda_calibration.hpp"
#include "exec/cuda_calibration_sweeps.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata {
namespace {

using cuda_calibration::GemmShape;

// How many shapes had each algorithm.
struct AlgorithmCounts {
  int forward = 0;
  int forward_bias = 0;
  int forward_gelu = 0;
  int dinp = 0;
  int dinp_dgelu = 0;
  int dweight = 0;
};

// Requires the three plain products of every shape in T; counts the fused ones.
template <typename T>
AlgorithmCounts check_shapes(cuda::Context& ctx, const std::vector<GemmShape>& shapes,
                             const char* type) {
  AlgorithmCounts counts;
  for (const GemmShape& shape : shapes) {
    // out (m,n) = inp (m,k) @ w (k,n): matmul_forward's n = m, c = k, oc = n.
    const cuda::MatmulAlgorithms found = cuda::matmul_algorithms<T>(ctx, shape.m, shape.k, shape.n);
    INFO(type << " " << shape.m << "x" << shape.n << "x" << shape.k << " (" << shape.uses.front()
              << ", " << shape.uses.size() << " uses)");
    CHECK(found.forward);
    CHECK(found.dinp);
    CHECK(found.dweight);
    counts.forward += found.forward;
    counts.forward_bias += found.forward_bias;
    counts.forward_gelu += found.forward_gelu;
    counts.dinp += found.dinp;
    counts.dinp_dgelu += found.dinp_dgelu;
    counts.dweight += found.dweight;
  }
  return counts;
}

void print_row(const char* type, const AlgorithmCounts& counts, size_t shapes) {
  std::printf("| %s | %zu | %d | %d | %d | %d | %d | %d |\n", type, shapes, counts.forward,
              counts.dinp, counts.dweight, counts.forward_bias, counts.forward_gelu,
              counts.dinp_dgelu);
}

}  // namespace

TEST_CASE("cuBLASLt has an algorithm for every zoo GEMM's forward, dX and dW, in bf16 and fp32",
          "[gpu][cublaslt]") {
  const std::vector<GemmShape> shapes = cuda_calibration::zoo_gemm_shapes(CudaCalibrationOptions{});
  REQUIRE(shapes.size() > 10);  // every zoo model's five products: far more than ten shapes
  cuda::Context ctx;
  const AlgorithmCounts bf16 = check_shapes<cuda::bf16>(ctx, shapes, "bf16");
  const AlgorithmCounts fp32 = check_shapes<float>(ctx, shapes, "fp32");
  std::printf(
      "cuBLASLt's heuristic over %zu zoo GEMM shapes, shapes with an algorithm (fused epilogues "
      "fall back to a second kernel; GELU is fused in bf16 only):\n"
      "| type | shapes | forward | dX | dW | forward + bias | forward + GELU | dX + dGELU |\n"
      "|---|---|---|---|---|---|---|---|\n",
      shapes.size());
  print_row("bf16", bf16, shapes.size());
  print_row("fp32", fp32, shapes.size());
  std::fflush(stdout);
}

}  // namespace strata
