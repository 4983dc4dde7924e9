// Grouped-query attention (kernels/cpu/attention.cpp, Ainslie et al. 2023): against multi-head
// attention on K and V heads repeated per group, backward against central differences, float
// against double. attention_forward and attention_backward are the NKV = NH case, so the
// multi-head tests (attention_test.cpp) check that case against the softmax formula; that it is
// bit for bit the multi-head kernel it replaced was checked when the two were merged.

#include <catch2/catch.hpp>

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

// B = 2 sequences of T = 5 tokens, NH = 4 query heads of HS = 4; NKV varies (4, 2 or 1).
constexpr int64_t kB = 2;
constexpr int64_t kT = 5;
constexpr int64_t kNH = 4;
constexpr int64_t kHS = 4;
constexpr int64_t kC = kNH * kHS;

// A qkv row: [q (NH*HS) | k (NKV*HS) | v (NKV*HS)].
int64_t row_width(int64_t nkv) { return (kNH + 2 * nkv) * kHS; }

// The index in qkv (B,T,(NH+2*NKV)*HS) of q (part 0), k (1) or v (2) of head h, channel d.
int64_t qkv_index(int64_t nkv, int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
  const int64_t part_start = part == 0 ? 0 : part == 1 ? kNH * kHS : (kNH + nkv) * kHS;
  return (b * kT + t) * row_width(nkv) + part_start + h * kHS + d;
}

// Hugging Face's repeat_kv: the multi-head qkv (B,T,3*NH*HS) whose k and v heads h are the
// grouped qkv's kv head h / (NH/NKV).
std::vector<double> repeat_kv(const std::vector<double>& qkv, int64_t nkv) {
  const int64_t group = kNH / nkv;
  std::vector<double> repeated(kB * kT * row_width(kNH));
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t h = 0; h < kNH; ++h) {
        for (int64_t d = 0; d < kHS; ++d) {
          repeated[qkv_index(kNH, b, t, 0, h, d)] = qkv[qkv_index(nkv, b, t, 0, h, d)];
          for (int64_t part = 1; part < 3; ++part) {
            repeated[qkv_index(kNH, b, t, part, h, d)] =
                qkv[qkv_index(nkv, b, t, part, h / group, d)];
          }
        }
      }
    }
  }
  return repeated;
}

struct GqaInputs {
  explicit GqaInputs(int64_t nkv_in) : nkv(nkv_in) {}
  int64_t nkv;
  std::vector<double> qkv = random_values(kB * kT * row_width(nkv), 41, -2.0, 2.0);
  std::vector<double> dout = random_values(kB * kT * kC, 42);  // R of L = sum(out * R)
};

struct GqaOutputs {
  std::vector<double> out, att, dqkv;
};

template <typename T>
GqaOutputs run_gqa(const std::vector<double>& qkv_in, const std::vector<double>& dout_in,
                   int64_t nkv) {
  const auto qkv = cast_to<T>(qkv_in);
  const auto dout = cast_to<T>(dout_in);
  std::vector<T> out(kB * kT * kC), att(kB * kNH * kT * kT);
  std::vector<T> dqkv(qkv.size(), T(1e3));  // poisoned: every entry must be written
  gqa_attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kNH, nkv, kHS);
  gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), kB, kT, kNH, nkv, kHS);
  return {widen(out), widen(att), widen(dqkv)};
}

GqaOutputs run_mha(const std::vector<double>& qkv, const std::vector<double>& dout) {
  std::vector<double> out(kB * kT * kC), att(kB * kNH * kT * kT);
  std::vector<double> dqkv(qkv.size(), 1e3);
  attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kNH, kHS);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), kB, kT, kNH, kHS);
  return {out, att, dqkv};
}

TEST_CASE(
    "gqa with NKV < NH equals multi-head attention on K and V repeated per group (HF repeat_kv): "
    "out and att bit for bit",
    "[gqa]") {
  // Query head h reads kv head h / (NH/NKV) (Ainslie et al. 2023; HF's repeat_kv, Megatron's
  // grouping), and each head's products see the same values in both layouts.
  const int64_t nkv = GENERATE(2, 1);
  const GqaInputs in(nkv);
  const GqaOutputs grouped = run_gqa<double>(in.qkv, in.dout, nkv);
  const GqaOutputs multi_head = run_mha(repeat_kv(in.qkv, nkv), in.dout);
  INFO("NKV = " << nkv);
  CHECK(grouped.out == multi_head.out);
  CHECK(grouped.att == multi_head.att);
}

TEST_CASE(
    "gqa backward with NKV < NH: dq equals multi-head attention's on the repeated K and V, and "
    "a kv head's dk and dv are the sums of the multi-head dk and dv over the heads of its group",
    "[gqa]") {
  // k and v of kv head g feed every query head of its group, so by the chain rule through
  // repeat_kv their gradients are the sums of the repeated heads' gradients.
  const int64_t nkv = GENERATE(2, 1);
  const int64_t group = kNH / nkv;
  const GqaInputs in(nkv);
  const GqaOutputs grouped = run_gqa<double>(in.qkv, in.dout, nkv);
  const GqaOutputs multi_head = run_mha(repeat_kv(in.qkv, nkv), in.dout);
  INFO("NKV = " << nkv);
  std::vector<double> dq, expected_dq;
  std::vector<double> dkv[2], expected_dkv[2];
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t h = 0; h < kNH; ++h) {
        for (int64_t d = 0; d < kHS; ++d) {
          dq.push_back(grouped.dqkv[qkv_index(nkv, b, t, 0, h, d)]);
          expected_dq.push_back(multi_head.dqkv[qkv_index(kNH, b, t, 0, h, d)]);
        }
      }
      for (int64_t part = 1; part < 3; ++part) {
        for (int64_t g = 0; g < nkv; ++g) {
          for (int64_t d = 0; d < kHS; ++d) {
            double sum = 0;
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
              sum += multi_head.dqkv[qkv_index(kNH, b, t, part, h, d)];
            }
            dkv[part - 1].push_back(grouped.dqkv[qkv_index(nkv, b, t, part, g, d)]);
            expected_dkv[part - 1].push_back(sum);
          }
        }
      }
    }
  }
  CHECK(dq == expected_dq);
  // The kernel adds the heads of a group in BLAS (beta 1), which may fuse the scale into the
  // addition: equal up to rounding, not bit for bit.
  check_close("dk", dkv[0], expected_dkv[0], 1e-14);
  check_close("dv", dkv[1], expected_dkv[1], 1e-14);
}

TEST_CASE(
    "gqa backward (float64) equals central differences of sum(out * R) for all of qkv (q, k "
    "and v), written, for NKV = 4, 2 and 1",
    "[gqa]") {
  const int64_t nkv = GENERATE(4, 2, 1);
  GqaInputs in(nkv);
  const GqaOutputs analytic = run_gqa<double>(in.qkv, in.dout, nkv);
  std::vector<double> out(kB * kT * kC), att(kB * kNH * kT * kT);
  const auto loss = [&] {
    gqa_attention_forward(out.data(), att.data(), in.qkv.data(), kB, kT, kNH, nkv, kHS);
    return test::weighted_sum(out, in.dout);
  };
  const std::vector<double> numeric = test::numeric_gradient(in.qkv, loss);
  INFO("NKV = " << nkv);
  check_close("dqkv", analytic.dqkv, numeric, kGradientTolerance);
  // The q, k and v parts separately, so that a small part cannot hide behind a large one.
  const int64_t widths[3] = {kNH * kHS, nkv * kHS, nkv * kHS};
  const int64_t starts[3] = {0, kNH * kHS, (kNH + nkv) * kHS};
  for (int64_t part = 0; part < 3; ++part) {
    std::vector<double> got, want;
    for (int64_t row = 0; row < kB * kT; ++row) {
      for (int64_t c = 0; c < widths[part]; ++c) {
        got.push_back(analytic.dqkv[row * row_width(nkv) + starts[part] + c]);
        want.push_back(numeric[row * row_width(nkv) + starts[part] + c]);
      }
    }
    check_close(part == 0 ? "dq" : part == 1 ? "dk" : "dv", got, want, kGradientTolerance);
  }
}

TEST_CASE("gqa float agrees with double within 1e-5 relative", "[gqa]") {
  const int64_t nkv = GENERATE(2, 1);
  GqaInputs in(nkv);
  in.qkv = test::float_representable(in.qkv);
  in.dout = test::float_representable(in.dout);
  const GqaOutputs f = run_gqa<float>(in.qkv, in.dout, nkv);
  const GqaOutputs d = run_gqa<double>(in.qkv, in.dout, nkv);
  INFO("NKV = " << nkv);
  check_close("out", f.out, d.out, kFloatTolerance);
  check_close("att", f.att, d.att, kFloatTolerance);
  check_close("dqkv", f.dqkv, d.dqkv, kFloatTolerance);
}

}  // namespace
}  // namespace strata::cpu
