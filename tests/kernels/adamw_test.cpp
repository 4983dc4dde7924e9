// AdamW, gradient clipping and the gradient norm's sum of squares (kernels/cpu/adamw.cpp)
// against hand-computed values.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace strata::cpu {
namespace {

TEST_CASE(
    "adamw one step from m = v = 0 matches the hand-computed update, with a clipping "
    "factor and weight decay") {
  // g = 0.5 * 0.5 = 0.25; m = 0.1 * 0.25 = 0.025; v = 0.05 * 0.0625 = 0.003125;
  // m_hat = 0.025 / 0.1 = 0.25; v_hat = 0.003125 / 0.05 = 0.0625, sqrt 0.25;
  // param = 1 - 0.1 * (0.25 / (0.25 + 1e-8) + 0.1 * 1) = 0.89000000399999984...
  AdamWConfig config;
  config.lr = 0.1;
  config.weight_decay = 0.1;
  std::vector<double> param = {1.0}, grad = {0.5}, m = {0.0}, v = {0.0};
  adamw_update(param.data(), grad.data(), m.data(), v.data(), 1, config, 1, 0.5);
  CHECK(m[0] == Approx(0.025).epsilon(1e-15));
  CHECK(v[0] == Approx(0.003125).epsilon(1e-15));
  CHECK(param[0] == Approx(0.89000000399999984).epsilon(1e-15));
}

TEST_CASE("adamw's first step without weight decay moves each parameter by lr * g / (|g| + eps)") {
  // At step 1 the bias corrections give m_hat = g and v_hat = g^2.
  AdamWConfig config;
  config.lr = 0.01;
  const std::vector<double> grad = {3.0, -0.25, 1e-3, -40.0};
  std::vector<double> param = {0.5, -1.0, 2.0, 0.0};
  const std::vector<double> start = param;
  std::vector<double> m(grad.size(), 0.0), v(grad.size(), 0.0);
  adamw_update(param.data(), grad.data(), m.data(), v.data(), 4, config, 1, 1.0);
  for (size_t i = 0; i < grad.size(); ++i) {
    const double step = config.lr * grad[i] / (std::abs(grad[i]) + config.eps);
    CHECK(start[i] - param[i] == Approx(step).epsilon(1e-12));
  }
}

TEST_CASE("adamw float agrees with double within 1e-5 relative over three steps") {
  AdamWConfig config;
  config.lr = 0.01;
  config.weight_decay = 0.1;
  const std::vector<double> start = test::float_representable(test::random_values(13, 71));
  std::vector<double> pd = start, md(13, 0.0), vd(13, 0.0);
  std::vector<float> pf(start.begin(), start.end()), mf(13, 0.0f), vf(13, 0.0f);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<double> grad =
        test::float_representable(test::random_values(13, 71 + static_cast<uint64_t>(step)));
    const std::vector<float> grad_f(grad.begin(), grad.end());
    adamw_update(pd.data(), grad.data(), md.data(), vd.data(), 13, config, step, 0.7);
    adamw_update(pf.data(), grad_f.data(), mf.data(), vf.data(), 13, config, step, 0.7);
  }
  test::check_close("param", test::widen(pf), pd, test::kFloatTolerance);
  test::check_close("m", test::widen(mf), md, test::kFloatTolerance);
  test::check_close("v", test::widen(vf), vd, test::kFloatTolerance);
}

TEST_CASE("clip_factor = min(1, max_norm / (norm + 1e-6)), and 1 when clipping is off") {
  CHECK(clip_factor(10.0, 1.0) == Approx(1.0 / (10.0 + 1e-6)).epsilon(1e-15));
  CHECK(clip_factor(0.5, 1.0) == 1.0);
  CHECK(clip_factor(10.0, 0.0) == 1.0);
  CHECK(clip_factor(10.0, -1.0) == 1.0);
}

TEST_CASE("sum_of_squares accumulates in double: float {1e7, 1, 3, 4} gives 1e14 + 26 exactly") {
  // In float, 1e14 + 1 would round back to 1e14.
  const std::vector<float> x = {1e7f, 1.0f, 3.0f, 4.0f};
  CHECK(sum_of_squares(x.data(), 4) == 1e14 + 26.0);
  const std::vector<double> xd = {3.0, 4.0};
  CHECK(sum_of_squares(xd.data(), 2) == 25.0);
}

}  // namespace
}  // namespace strata::cpu
