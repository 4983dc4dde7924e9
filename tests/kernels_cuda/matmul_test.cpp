// The linear layer on cuBLASLt against the CPU reference (kernels/cpu/matmul.cpp) computed in
// double on the same inputs rounded to T: the forward with and without bias, the GELU epilogue
// (fused where OC % 8 == 0, two kernels where not), both backward products with dweight and
// dbias accumulated into fp32 from random starts, and DGELU. Shapes include sizes that are not
// multiples of any tile.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using test::compare;
using test::download;
using test::poison;
using test::random_floats;
using test::rounded;
using test::upload;

struct Shape {
  int64_t n;
  int64_t c;
  int64_t oc;
};

// (1,1,1); odd sizes everywhere; OC a multiple of 8 (the fused GELU) and not; a GPT-2 width.
const std::vector<Shape> kShapes = {
    {1, 1, 1}, {7, 33, 5}, {130, 67, 257}, {64, 96, 200}, {96, 768, 2304}};

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::vector<double> difference(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = double{a[i]} - double{b[i]};
  return d;
}

// out = inp @ weight^T + bias, and without the bias.
TEMPLATE_TEST_CASE("matmul_forward matches the CPU reference", "[gpu][matmul]", float, bf16) {
  using T = TestType;
  Context ctx;
  for (const Shape& s : kShapes) {
    for (const bool with_bias : {true, false}) {
      const auto inp = rounded<T>(random_floats(s.n * s.c, 1));
      const auto weight = rounded<T>(random_floats(s.oc * s.c, 2, -0.1f, 0.1f));
      const auto bias = rounded<T>(random_floats(s.oc, 3));
      std::vector<double> ref(s.n * s.oc);
      const std::vector<double> inp_d = widen(inp), weight_d = widen(weight), bias_d = widen(bias);
      cpu::matmul_forward<double>(ref.data(), inp_d.data(), weight_d.data(),
                                  with_bias ? bias_d.data() : nullptr, s.n, s.c, s.oc);

      auto d_inp = upload<T>(inp);
      auto d_weight = upload<T>(weight);
      auto d_bias = upload<T>(bias);
      test::DeviceBuffer<T> d_out(s.n * s.oc);
      poison(d_out);
      matmul_forward<T>(ctx, d_out.data(), d_inp.data(), d_weight.data(),
                        with_bias ? d_bias.data() : nullptr, s.n, s.c, s.oc);
      INFO("n " << s.n << " c " << s.c << " oc " << s.oc << " bias " << with_bias);
      STRATA_REQUIRE_CLOSE(T, "out", download(d_out), ref);
    }
  }
}

// pre_gelu = inp @ weight^T + bias and out = gelu(pre_gelu) (cuBLASLt's epilogue for bf16 where
// it fuses; the CPU's tanh-approximation formula otherwise).
TEMPLATE_TEST_CASE("matmul_gelu_forward matches the product then GELU", "[gpu][matmul]", float,
                   bf16) {
  using T = TestType;
  Context ctx;
  for (const Shape& s : kShapes) {
    const auto inp = rounded<T>(random_floats(s.n * s.c, 4));
    const auto weight = rounded<T>(random_floats(s.oc * s.c, 5, -0.2f, 0.2f));
    const auto bias = rounded<T>(random_floats(s.oc, 6));
    std::vector<double> pre(s.n * s.oc), ref(s.n * s.oc);
    const std::vector<double> inp_d = widen(inp), weight_d = widen(weight), bias_d = widen(bias);
    cpu::matmul_forward<double>(pre.data(), inp_d.data(), weight_d.data(), bias_d.data(), s.n, s.c,
                                s.oc);
    cpu::gelu_forward<double>(ref.data(), pre.data(), s.n * s.oc);

    auto d_inp = upload<T>(inp);
    auto d_weight = upload<T>(weight);
    auto d_bias = upload<T>(bias);
    test::DeviceBuffer<T> d_out(s.n * s.oc), d_pre(s.n * s.oc);
    poison(d_out);
    poison(d_pre);
    matmul_gelu_forward<T>(ctx, d_out.data(), d_pre.data(), d_inp.data(), d_weight.data(),
                           d_bias.data(), s.n, s.c, s.oc);
    INFO("n " << s.n << " c " << s.c << " oc " << s.oc);
    STRATA_REQUIRE_CLOSE(T, "pre_gelu", download(d_pre), pre);
    STRATA_REQUIRE_CLOSE(T, "out", download(d_out), ref);
  }
}

// dinp = dout @ weight (=), dweight += dout^T @ inp and dbias += column sums of dout into fp32,
// from random starts; with pre_gelu, dinp is also multiplied by gelu'(pre_gelu).
TEMPLATE_TEST_CASE("matmul_backward matches the CPU reference", "[gpu][matmul]", float, bf16) {
  using T = TestType;
  Context ctx;
  for (const Shape& s : kShapes) {
    for (const bool with_gelu : {false, true}) {
      const auto dout = rounded<T>(random_floats(s.n * s.oc, 7));
      const auto inp = rounded<T>(random_floats(s.n * s.c, 8));
      const auto weight = rounded<T>(random_floats(s.oc * s.c, 9, -0.1f, 0.1f));
      const auto pre_gelu = rounded<T>(random_floats(s.n * s.c, 10, -3.0f, 3.0f));
      const auto dweight_start = random_floats(s.oc * s.c, 11);
      const auto dbias_start = random_floats(s.oc, 12);

      std::vector<double> dinp_ref(s.n * s.c), dweight_ref(s.oc * s.c, 0.0), dbias_ref(s.oc, 0.0);
      const std::vector<double> dout_d = widen(dout), inp_d = widen(inp), weight_d = widen(weight),
                                pre_d = widen(pre_gelu);
      cpu::matmul_backward<double>(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(),
                                   dout_d.data(), inp_d.data(), weight_d.data(), s.n, s.c, s.oc);
      if (with_gelu) {
        cpu::gelu_backward<double>(dinp_ref.data(), pre_d.data(), dinp_ref.data(), s.n * s.c);
      }

      auto d_dout = upload<T>(dout);
      auto d_inp = upload<T>(inp);
      auto d_weight = upload<T>(weight);
      auto d_pre = upload<T>(pre_gelu);
      auto d_dweight = upload<float>(dweight_start);
      auto d_dbias = upload<float>(dbias_start);
      test::DeviceBuffer<T> d_dinp(s.n * s.c);
      poison(d_dinp);
      matmul_backward<T>(ctx, d_dinp.data(), d_dweight.data(), d_dbias.data(), d_dout.data(),
                         d_inp.data(), d_weight.data(), with_gelu ? d_pre.data() : nullptr, s.n,
                         s.c, s.oc);
      INFO("n " << s.n << " c " << s.c << " oc " << s.oc << " gelu " << with_gelu);
      STRATA_REQUIRE_CLOSE(T, "dinp", download(d_dinp), dinp_ref);
      // dweight and dbias are fp32 sums of exact products of T values: fp32's tolerance.
      STRATA_REQUIRE_CLOSE(float, "dweight increment",
                           difference(download(d_dweight), dweight_start), dweight_ref);
      STRATA_REQUIRE_CLOSE(float, "dbias increment", difference(download(d_dbias), dbias_start),
                           dbias_ref);
    }
  }
}

// A null dinp skips the input gradient and a null dbias the bias gradient; dweight still
// accumulates.
TEST_CASE("matmul_backward without dinp or dbias still accumulates dweight", "[gpu][matmul]") {
  Context ctx;
  const Shape s{33, 40, 24};
  const auto dout = random_floats(s.n * s.oc, 13);
  const auto inp = random_floats(s.n * s.c, 14);
  const auto weight = random_floats(s.oc * s.c, 15);
  std::vector<double> dweight_ref(s.oc * s.c, 0.0);
  const std::vector<double> dout_d = widen(dout), inp_d = widen(inp), weight_d = widen(weight);
  cpu::matmul_backward<double>(nullptr, dweight_ref.data(), nullptr, dout_d.data(), inp_d.data(),
                               weight_d.data(), s.n, s.c, s.oc);
  auto d_dout = upload<float>(dout);
  auto d_inp = upload<float>(inp);
  auto d_weight = upload<float>(weight);
  const auto start = random_floats(s.oc * s.c, 16);
  auto d_dweight = upload<float>(start);
  matmul_backward<float>(ctx, nullptr, d_dweight.data(), nullptr, d_dout.data(), d_inp.data(),
                         d_weight.data(), nullptr, s.n, s.c, s.oc);
  STRATA_REQUIRE_CLOSE(float, "dweight increment", difference(download(d_dweight), start),
                       dweight_ref);
}

// The column sums over many rows (more than one chunk of partial sums) equal the reference, and
// two runs give the same bits.
TEMPLATE_TEST_CASE("bias_backward is the column sum and deterministic", "[gpu][matmul]", float,
                   bf16) {
  using T = TestType;
  Context ctx;
  for (const auto& [n, c] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1000, 37}, {20000, 100}}) {
    const auto dout = rounded<T>(random_floats(n * c, 17));
    std::vector<double> ref(c, 0.0);
    const std::vector<double> dout_d = widen(dout);
    cpu::residual_backward<double>(ref.data(), dout_d.data(), n, c);
    const auto start = random_floats(c, 18);
    auto d_dout = upload<T>(dout);
    auto first = upload<float>(start);
    auto second = upload<float>(start);
    bias_backward<T>(ctx, first.data(), d_dout.data(), n, c);
    bias_backward<T>(ctx, second.data(), d_dout.data(), n, c);
    const std::vector<float> first_values = download(first), second_values = download(second);
    INFO("n " << n << " c " << c);
    STRATA_REQUIRE_CLOSE(float, "dbias increment", difference(first_values, start), ref);
    CHECK(std::memcmp(first_values.data(), second_values.data(), c * sizeof(float)) == 0);
  }
}

}  // namespace
}  // namespace strata::cuda
