// Rotary position embedding on the GPU (kernels/cuda/rotary.cu) against the CPU reference
// (kernels/cpu/rotary.cpp) in double, on the same inputs rounded to T: the queries and the keys
// of a fused QKV row, a layout with copied columns on both sides of odd-sized heads, in place and
// not, forward and backward.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using test::DeviceBuffer;
using test::download;
using test::poison;
using test::random_floats;
using test::rounded;
using test::upload;

// The rotated heads of rows of width W = row_stride, and the base.
struct Layout {
  int64_t b, t, heads, hs, row_stride, first_col;
  double theta;
  std::string describe() const {
    return "B " + std::to_string(b) + " T " + std::to_string(t) + " heads " +
           std::to_string(heads) + " HS " + std::to_string(hs) + " W " +
           std::to_string(row_stride) + " first_col " + std::to_string(first_col) + " theta " +
           std::to_string(theta);
  }
};

// A fused QKV row of NH 4, NKV 2, HS 32 (W = 256): its queries (heads 4 from column 0) and its
// keys (heads 2 from column 128, Llama 3's base); and heads of HS 6 (3 pairs, no multiple of
// anything) from column 3 of a row of 25, with columns to copy before (3) and after (4).
const std::vector<Layout> kLayouts = {{2, 64, 4, 32, 256, 0, 10000.0},
                                      {2, 64, 2, 32, 256, 128, 500000.0},
                                      {3, 17, 3, 6, 25, 3, 10000.0}};

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

TEMPLATE_TEST_CASE("rotary_forward/backward on the GPU match the float64 CPU reference",
                   "[gpu][rotary]", float, bf16) {
  // out[i] = x[i] cos - x[i + HS/2] sin, out[i + HS/2] = x[i + HS/2] cos + x[i] sin with
  // angle = pos * theta^(-2i/HS) (cpu::rotary_forward), the backward by -angle, every other
  // column copied: the whole row is compared, poisoned first, so a column left unwritten fails.
  // In place (out == inp), the rotated columns change and the others keep the input. The angles
  // are computed in double as the reference does, so fp32 agrees to 1e-6, not just 1e-5.
  using T = TestType;
  Context ctx;
  uint64_t seed = 900;
  for (const Layout& l : kLayouts) {
    for (const bool in_place : {false, true}) {
      INFO(l.describe() << (in_place ? ", in place" : ""));
      const size_t count = static_cast<size_t>(l.b * l.t * l.row_stride);
      const std::vector<float> inp = rounded<T>(random_floats(count, seed += 2, -2.0f, 2.0f));
      const std::vector<double> x = to_double(inp);
      std::vector<double> ref_out(count);
      std::vector<double> ref_back(count);
      cpu::rotary_forward(ref_out.data(), x.data(), l.b, l.t, l.heads, l.hs, l.row_stride,
                          l.first_col, l.theta);
      cpu::rotary_backward(ref_back.data(), x.data(), l.b, l.t, l.heads, l.hs, l.row_stride,
                           l.first_col, l.theta);

      DeviceBuffer<T> forward_in = upload<T>(inp);
      DeviceBuffer<T> backward_in = upload<T>(inp);
      DeviceBuffer<T> forward_out(count);
      DeviceBuffer<T> backward_out(count);
      poison(forward_out);
      poison(backward_out);
      T* out = in_place ? forward_in.data() : forward_out.data();
      T* dinp = in_place ? backward_in.data() : backward_out.data();
      rotary_forward(ctx, out, forward_in.data(), l.b, l.t, l.heads, l.hs, l.row_stride,
                     l.first_col, l.theta);
      rotary_backward(ctx, dinp, backward_in.data(), l.b, l.t, l.heads, l.hs, l.row_stride,
                      l.first_col, l.theta);
      const std::vector<float> got_out = download(in_place ? forward_in : forward_out);
      const std::vector<float> got_back = download(in_place ? backward_in : backward_out);
      STRATA_REQUIRE_CLOSE(T, "rotary out", got_out, ref_out);
      STRATA_REQUIRE_CLOSE(T, "rotary dinp", got_back, ref_back);
      if constexpr (std::is_same_v<T, float>) {
        CHECK(test::compare(got_out, ref_out).rel_l2 < 1e-6);
        CHECK(test::compare(got_back, ref_back).rel_l2 < 1e-6);
      }
    }
  }
}

TEST_CASE("rotary_backward undoes rotary_forward", "[gpu][rotary]") {
  // A rotation's transpose is its inverse: rotary_backward(rotary_forward(x)) = x up to fp32
  // rounding, here in place on the keys of a fused QKV row, positions up to 63.
  Context ctx;
  const Layout l = kLayouts[1];
  const size_t count = static_cast<size_t>(l.b * l.t * l.row_stride);
  const std::vector<float> inp = random_floats(count, 77);
  DeviceBuffer<float> x = upload<float>(inp);
  rotary_forward(ctx, x.data(), x.data(), l.b, l.t, l.heads, l.hs, l.row_stride, l.first_col,
                 l.theta);
  rotary_backward(ctx, x.data(), x.data(), l.b, l.t, l.heads, l.hs, l.row_stride, l.first_col,
                  l.theta);
  CHECK(test::compare(download(x), inp).rel_l2 < 1e-6);
}

TEST_CASE("rotary embedding rejects an odd head size and heads outside the row", "[gpu][rotary]") {
  // kernels/cuda/kernels.hpp: HS must be even (pairs i and i + HS/2) and the rotated columns
  // [first_col, first_col + heads*HS) must lie within the row; both throw std::invalid_argument.
  Context ctx;
  DeviceBuffer<float> x(64);
  CHECK_THROWS_WITH(rotary_forward(ctx, x.data(), x.data(), 1, 2, 2, 5, 32, 0, 10000.0),
                    Catch::Contains("HS = 5"));
  CHECK_THROWS_AS(rotary_backward(ctx, x.data(), x.data(), 1, 2, 2, 16, 32, 8, 10000.0),
                  std::invalid_argument);
}

}  // namespace
}  // namespace strata::cuda
