// AdamW and the gradient norm's sum of squares on the GPU (kernels/cuda/adamw.cu) against the
// CPU reference (kernels/cpu/adamw.cpp) in double: ten steps with weight decay on and off and
// clipping on and off, param null, and sum_of_squares over tensors of odd lengths accumulated
// into one fp64 total, exactly where the sum is exact and with the same bits run after run.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using test::download;
using test::poison;
using test::random_floats;
using test::upload;

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// One double on the device, and back (download converts to float, too coarse here).
void write_double(test::DeviceBuffer<double>& buffer, double value) {
  STRATA_CUDA_CHECK(cudaMemcpy(buffer.data(), &value, sizeof(double), cudaMemcpyHostToDevice));
}
double read_double(const test::DeviceBuffer<double>& buffer) {
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  double value = 0;
  STRATA_CUDA_CHECK(cudaMemcpy(&value, buffer.data(), sizeof(double), cudaMemcpyDeviceToHost));
  return value;
}

// Odd, so that no block or vector size divides it.
constexpr int64_t kN = 10007;

// Steps 1 to 10, each with a new gradient, on the GPU and in cpu::adamw_update<double> side by
// side from the same master, m and v; after steps 1, 2 and 10, master, m and v (fp32 whatever T
// is) meet fp32's tolerance and param (master rounded to T) meets T's. Clipping on sets
// max_norm to half the gradient's norm, so the factor read from *norm_squared on the device is
// about 0.5; clipping off passes max_norm 0 and no norm at all.
TEMPLATE_TEST_CASE("adamw_update matches cpu::adamw_update over ten steps", "[gpu][adamw]", float,
                   bf16) {
  using T = TestType;
  Context ctx;
  for (const double weight_decay : {0.0, 0.1}) {
    for (const bool clip : {false, true}) {
      AdamWConfig config;
      config.lr = 1e-2;
      config.weight_decay = weight_decay;
      const auto master0 = random_floats(kN, 31);
      const auto m0 = random_floats(kN, 32, -0.01f, 0.01f);
      const auto v0 = random_floats(kN, 33, 1e-6f, 1e-4f);
      std::vector<double> master_ref = widen(master0), m_ref = widen(m0), v_ref = widen(v0);
      auto d_master = upload<float>(master0);
      auto d_m = upload<float>(m0);
      auto d_v = upload<float>(v0);
      test::DeviceBuffer<T> d_param(kN);
      test::DeviceBuffer<double> d_norm_squared(1);
      for (int64_t step = 1; step <= 10; ++step) {
        const auto grad = random_floats(kN, 40 + static_cast<uint64_t>(step));
        const double norm_squared = cpu::sum_of_squares(grad.data(), kN);
        const double max_norm = clip ? 0.5 * std::sqrt(norm_squared) : 0.0;
        const double grad_scale = cpu::clip_factor(std::sqrt(norm_squared), max_norm);
        REQUIRE((grad_scale < 1.0) == clip);
        const std::vector<double> grad_ref = widen(grad);
        cpu::adamw_update<double>(master_ref.data(), grad_ref.data(), m_ref.data(), v_ref.data(),
                                  kN, config, step, grad_scale);

        auto d_grad = upload<float>(grad);
        write_double(d_norm_squared, norm_squared);
        poison(d_param);
        adamw_update<T>(ctx, d_param.data(), d_master.data(), d_grad.data(), d_m.data(), d_v.data(),
                        kN, config, step, clip ? d_norm_squared.data() : nullptr, max_norm);
        if (step == 1 || step == 2 || step == 10) {
          INFO("step " << step << " weight decay " << weight_decay << " clip " << clip);
          STRATA_REQUIRE_CLOSE(float, "master", download(d_master), master_ref);
          STRATA_REQUIRE_CLOSE(float, "m", download(d_m), m_ref);
          STRATA_REQUIRE_CLOSE(float, "v", download(d_v), v_ref);
          STRATA_REQUIRE_CLOSE(T, "param", download(d_param), master_ref);
        }
      }
    }
  }
}

// With param null (and clipping off, norm_squared null too) the kernel updates master, m and v
// as cpu::adamw_update does; a write or read through either null pointer would fault, and the
// fault would fail the download.
TEMPLATE_TEST_CASE("adamw_update with param null updates master, m and v", "[gpu][adamw]", float,
                   bf16) {
  using T = TestType;
  Context ctx;
  AdamWConfig config;
  config.lr = 1e-2;
  config.weight_decay = 0.1;
  const auto master0 = random_floats(kN, 51);
  const auto grad = random_floats(kN, 52);
  std::vector<double> master_ref = widen(master0), m_ref(kN, 0.0), v_ref(kN, 0.0);
  const std::vector<double> grad_ref = widen(grad);
  cpu::adamw_update<double>(master_ref.data(), grad_ref.data(), m_ref.data(), v_ref.data(), kN,
                            config, 1, 1.0);
  auto d_master = upload<float>(master0);
  auto d_grad = upload<float>(grad);
  auto d_m = upload<float>(std::vector<float>(kN, 0.0f));
  auto d_v = upload<float>(std::vector<float>(kN, 0.0f));
  adamw_update<T>(ctx, static_cast<T*>(nullptr), d_master.data(), d_grad.data(), d_m.data(),
                  d_v.data(), kN, config, 1, nullptr, 0.0);
  STRATA_REQUIRE_CLOSE(float, "master", download(d_master), master_ref);
  STRATA_REQUIRE_CLOSE(float, "m", download(d_m), m_ref);
  STRATA_REQUIRE_CLOSE(float, "v", download(d_v), v_ref);
}

// The sum of x^2 in long double (64-bit mantissa or more): the reference to 1e-12. The CPU's
// sequential double sum (cpu::sum_of_squares) is itself 5.5e-13 off after the 2^20 + 3 terms
// below, too close to that tolerance to serve as the only reference.
long double exact_sum_of_squares(const std::vector<float>& x) {
  long double sum = 0;
  for (const float xi : x) sum += static_cast<long double>(xi) * static_cast<long double>(xi);
  return sum;
}

// *total += sum x^2 over tensors of 1, 1000 and 2^20 + 3 floats (each starting 4 bytes past a
// 16-byte boundary), into one total starting at 0.75; after each call the total is within 1e-12
// (relative) of the long double sum, and of cpu::sum_of_squares's. A float's square is exact in
// double, so only the fp64 additions round.
TEST_CASE("sum_of_squares accumulates tensors of odd lengths into one fp64 total", "[gpu][adamw]") {
  Context ctx;
  test::DeviceBuffer<double> d_total(1);
  write_double(d_total, 0.75);
  long double exact = 0.75L;
  double cpu_total = 0.75;
  uint64_t seed = 61;
  for (const int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
    const auto x = random_floats(n, seed++);
    // One float in front, so the tensor starts 4 bytes past the allocation's alignment.
    std::vector<float> placed = {2.0f};
    placed.insert(placed.end(), x.begin(), x.end());
    auto d_x = upload<float>(placed);
    sum_of_squares(ctx, d_total.data(), d_x.data() + 1, n);
    exact += exact_sum_of_squares(x);
    cpu_total += cpu::sum_of_squares(x.data(), n);
    const double total = read_double(d_total);
    INFO("after n " << n << ": total " << total << ", exact " << static_cast<double>(exact)
                    << ", cpu " << cpu_total);
    CHECK(std::abs(total - static_cast<double>(exact)) <= 1e-12 * static_cast<double>(exact));
    CHECK(std::abs(total - cpu_total) <= 1e-12 * cpu_total);
  }
}

// float {1e7, 1, 3, 4} gives 1e14 + 26 exactly: every square and partial sum is an integer
// below 2^53, which fp32 accumulation (1e14 + 1 rounds to 1e14) would lose.
TEST_CASE("sum_of_squares accumulates in fp64: {1e7, 1, 3, 4} gives 1e14 + 26 exactly",
          "[gpu][adamw]") {
  Context ctx;
  test::DeviceBuffer<double> d_total(1);
  write_double(d_total, 0.0);
  auto d_x = upload<float>({1e7f, 1.0f, 3.0f, 4.0f});
  sum_of_squares(ctx, d_total.data(), d_x.data(), 4);
  CHECK(read_double(d_total) == 1e14 + 26.0);
}

// The same tensor gives the same bits twice: a grid fixed by n, partials added in a fixed order.
// 2^22 + 7 floats fill the largest grid (1024 blocks) with more than one loop step per thread.
TEST_CASE("sum_of_squares is deterministic", "[gpu][adamw]") {
  Context ctx;
  const int64_t n = (int64_t{1} << 22) + 7;
  const auto x = random_floats(n, 71);
  auto d_x = upload<float>(x);
  double totals[2];
  for (double& total : totals) {
    test::DeviceBuffer<double> d_total(1);
    write_double(d_total, 0.0);
    sum_of_squares(ctx, d_total.data(), d_x.data(), n);
    total = read_double(d_total);
  }
  CHECK(std::memcmp(&totals[0], &totals[1], sizeof(double)) == 0);
  const double exact = static_cast<double>(exact_sum_of_squares(x));
  CHECK(std::abs(totals[0] - exact) <= 1e-12 * exact);
}

}  // namespace
}  // namespace strata::cuda
