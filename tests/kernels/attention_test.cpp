// Causal multi-head attention (kernels/cpu/attention.cpp): forward against the softmax formula
// and two closed forms, backward against central differences, float against double.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace strata::cpu {
namespace {

using test::cast_to;
using test::check_close;
using test::kFloatTolerance;
using test::kGradientTolerance;
using test::random_values;
using test::widen;

// B = 2 sequences of T = 5 tokens, NH = 2 heads of HS = 3: C = 6, qkv rows of 18.
constexpr int64_t kB = 2;
constexpr int64_t kT = 5;
constexpr int64_t kNH = 2;
constexpr int64_t kHS = 3;
constexpr int64_t kC = kNH * kHS;

// The index in qkv (B,T,3C) of q (part 0), k (1) or v (2) of head h, channel d.
int64_t qkv_index(int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
  return (b * kT + t) * 3 * kC + part * kC + h * kHS + d;
}

struct AttentionInputs {
  std::vector<double> qkv = random_values(kB * kT * 3 * kC, 31, -2.0, 2.0);
  std::vector<double> dout = random_values(kB * kT * kC, 32);  // R of L = sum(out * R)
};

struct AttentionOutputs {
  std::vector<double> out, att, dqkv;
};

template <typename T>
AttentionOutputs run_attention(const AttentionInputs& in) {
  const auto qkv = cast_to<T>(in.qkv);
  const auto dout = cast_to<T>(in.dout);
  std::vector<T> out(kB * kT * kC), att(kB * kNH * kT * kT);
  std::vector<T> dqkv(kB * kT * 3 * kC, T(1e3));
  attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kNH, kHS);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), kB, kT, kNH, kHS);
  return {widen(out), widen(att), widen(dqkv)};
}

TEST_CASE(
    "attention att[t][u] = exp(q_t.k_u/sqrt(HS)) / sum_{w<=t} exp(q_t.k_w/sqrt(HS)) for "
    "u <= t and 0 above, rows sum to 1, and out = att @ v") {
  const AttentionInputs in;
  const AttentionOutputs result = run_attention<double>(in);
  const double scale = 1 / std::sqrt(static_cast<double>(kHS));
  std::vector<double> expected_att(result.att.size());
  std::vector<double> expected_out(result.out.size());
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kNH; ++h) {
      double* att = expected_att.data() + (b * kNH + h) * kT * kT;
      for (int64_t t = 0; t < kT; ++t) {
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < kHS; ++d) {
            dot += in.qkv[qkv_index(b, t, 0, h, d)] * in.qkv[qkv_index(b, u, 1, h, d)];
          }
          att[t * kT + u] = std::exp(scale * dot);
          sum += att[t * kT + u];
        }
        double row_sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          att[t * kT + u] /= sum;
          row_sum += result.att[(b * kNH + h) * kT * kT + t * kT + u];
        }
        CHECK(row_sum == Approx(1.0).epsilon(1e-14));
        for (int64_t d = 0; d < kHS; ++d) {
          double y = 0;
          for (int64_t u = 0; u <= t; ++u) y += att[t * kT + u] * in.qkv[qkv_index(b, u, 2, h, d)];
          expected_out[(b * kT + t) * kC + h * kHS + d] = y;
        }
      }
    }
  }
  // expected_att is 0 above the diagonal (value-initialized); an exact match there is required.
  for (size_t i = 0; i < expected_att.size(); ++i) {
    if (expected_att[i] == 0.0) CHECK(result.att[i] == 0.0);
  }
  check_close("att", result.att, expected_att, 1e-13);
  check_close("out", result.out, expected_out, 1e-13);
}

TEST_CASE("attention over one token (T = 1) returns its v, with att = 1") {
  // softmax over a single score is 1, so out = v.
  const std::vector<double> qkv = random_values(kB * 3 * kC, 33);
  std::vector<double> out(kB * kC), att(kB * kNH);
  attention_forward(out.data(), att.data(), qkv.data(), kB, 1, kNH, kHS);
  for (double a : att) CHECK(a == Approx(1.0).epsilon(1e-15));
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t c = 0; c < kC; ++c) {
      CHECK(out[b * kC + c] == Approx(qkv[b * 3 * kC + 2 * kC + c]).epsilon(1e-15));
    }
  }
}

TEST_CASE(
    "attention with zero queries averages v over the tokens so far: out_t = mean_{u<=t} "
    "v_u, att[t][u] = 1/(t+1)") {
  // Equal scores give a uniform causal softmax.
  AttentionInputs in;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t c = 0; c < kC; ++c) in.qkv[qkv_index(b, t, 0, 0, c)] = 0.0;
    }
  }
  const AttentionOutputs result = run_attention<double>(in);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kNH; ++h) {
      for (int64_t t = 0; t < kT; ++t) {
        for (int64_t u = 0; u < kT; ++u) {
          const double expected = u <= t ? 1.0 / static_cast<double>(t + 1) : 0.0;
          CHECK(result.att[(b * kNH + h) * kT * kT + t * kT + u] ==
                Approx(expected).epsilon(1e-14));
        }
        for (int64_t d = 0; d < kHS; ++d) {
          double mean = 0;
          for (int64_t u = 0; u <= t; ++u) mean += in.qkv[qkv_index(b, u, 2, h, d)];
          mean /= static_cast<double>(t + 1);
          CHECK(result.out[(b * kT + t) * kC + h * kHS + d] == Approx(mean).epsilon(1e-13));
        }
      }
    }
  }
}

TEST_CASE(
    "attention backward (float64) equals central differences of sum(out * R) for all of "
    "qkv (q, k and v), written") {
  AttentionInputs in;
  const AttentionOutputs analytic = run_attention<double>(in);
  std::vector<double> out(kB * kT * kC), att(kB * kNH * kT * kT);
  const auto loss = [&] {
    attention_forward(out.data(), att.data(), in.qkv.data(), kB, kT, kNH, kHS);
    return test::weighted_sum(out, in.dout);
  };
  const std::vector<double> numeric = test::numeric_gradient(in.qkv, loss);
  check_close("dqkv", analytic.dqkv, numeric, kGradientTolerance);
  // The q, k and v parts separately, so that a small part cannot hide behind a large one.
  for (int64_t part = 0; part < 3; ++part) {
    std::vector<double> got, want;
    for (int64_t row = 0; row < kB * kT; ++row) {
      for (int64_t c = 0; c < kC; ++c) {
        got.push_back(analytic.dqkv[row * 3 * kC + part * kC + c]);
        want.push_back(numeric[row * 3 * kC + part * kC + c]);
      }
    }
    check_close(part == 0 ? "dq" : part == 1 ? "dk" : "dv", got, want, kGradientTolerance);
  }
}

TEST_CASE("attention float agrees with double within 1e-5 relative") {
  AttentionInputs in;
  in.qkv = test::float_representable(in.qkv);
  in.dout = test::float_representable(in.dout);
  const AttentionOutputs f = run_attention<float>(in);
  const AttentionOutputs d = run_attention<double>(in);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("att", f.att, d.att, kFloatTolerance);
  check_close("dqkv", f.dqkv, d.dqkv, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
