// Grouped-query attention (kernels/cpu/attention.cpp, Ainslie et al. 2023): against multi-head
// attention on K and V heads repeated per group, backward against central differences, float
// against double. attention_forward and attention_backward are the NKV = NH case, so the
// multi-head tests (attention_test.cpp) check that case against the softmax formula; that it is
// bit for bit the multi-head kernel it replaced was checked when the two were merged. The sliding
// window (Mistral's, Jiang et al. 2023): against a direct masked softmax written here, the masked
// probabilities exactly 0, a window of T or more the same bits as none, backward against central
// differences. Attention dropout (GPT-2's attn_pdrop, on the probabilities after the softmax): out
// against the dropped probabilities times V, the dropped probabilities against their closed form,
// backward against central differences, an all-ones mask of scale 1 the same bits as none.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
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
// No dropout: the keep mask and the dropped probabilities null.
constexpr const double* kNoKeep = nullptr;
constexpr double* kNoDropped = nullptr;

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
  gqa_attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kNH, nkv, kHS, 0,
                        static_cast<const T*>(nullptr), T(1), static_cast<T*>(nullptr));
  gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), kB, kT, kNH, nkv, kHS, 0,
                         static_cast<const T*>(nullptr), T(1));
  return {widen(out), widen(att), widen(dqkv)};
}

GqaOutputs run_mha(const std::vector<double>& qkv, const std::vector<double>& dout) {
  std::vector<double> out(kB * kT * kC), att(kB * kNH * kT * kT);
  std::vector<double> dqkv(qkv.size(), 1e3);
  attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kNH, kHS);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), kB, kT, kNH, kHS);
  return {out, att, dqkv};
}

// Checks an analytic dqkv against the numeric one, whole and then the q, k and v parts separately
// (so that a small part cannot hide behind a large one); rows of (NH+2*NKV)*HS.
void check_dqkv(const std::vector<double>& analytic, const std::vector<double>& numeric, int64_t nh,
                int64_t nkv, int64_t hs) {
  check_close("dqkv", analytic, numeric, kGradientTolerance);
  const int64_t width = (nh + 2 * nkv) * hs;
  const int64_t rows = static_cast<int64_t>(analytic.size()) / width;
  const int64_t widths[3] = {nh * hs, nkv * hs, nkv * hs};
  const int64_t starts[3] = {0, nh * hs, (nh + nkv) * hs};
  for (int64_t part = 0; part < 3; ++part) {
    std::vector<double> got, want;
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = 0; c < widths[part]; ++c) {
        got.push_back(analytic[row * width + starts[part] + c]);
        want.push_back(numeric[row * width + starts[part] + c]);
      }
    }
    check_close(part == 0 ? "dq" : part == 1 ? "dk" : "dv", got, want, kGradientTolerance);
  }
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
    gqa_attention_forward(out.data(), att.data(), in.qkv.data(), kB, kT, kNH, nkv, kHS, 0, kNoKeep,
                          1.0, kNoDropped);
    return test::weighted_sum(out, in.dout);
  };
  INFO("NKV = " << nkv);
  check_dqkv(analytic.dqkv, test::numeric_gradient(in.qkv, loss), kNH, nkv, kHS);
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

// The sliding-window tests use their own sizes: B = 2 sequences of T = 8 tokens, NH = 4 query heads
// of HS = 4 and NKV = 2, so that windows of 1 to 7 all mask some keys.
struct WindowShape {
  int64_t b = 2;
  int64_t t = 8;
  int64_t nh = 4;
  int64_t nkv = 2;
  int64_t hs = 4;
  int64_t row() const { return (nh + 2 * nkv) * hs; }
  int64_t c() const { return nh * hs; }
  int64_t att_size() const { return b * nh * t * t; }
};

struct WindowInputs {
  WindowShape shape;
  std::vector<double> qkv = random_values(shape.b * shape.t * shape.row(), 61, -2.0, 2.0);
  std::vector<double> dout = random_values(shape.b * shape.t * shape.c(), 62);
};

GqaOutputs run_windowed(const WindowInputs& in, int64_t window) {
  const WindowShape& s = in.shape;
  std::vector<double> out(s.b * s.t * s.c(), 1e3), att(s.att_size(), 1e3);
  std::vector<double> dqkv(in.qkv.size(), 1e3);  // poisoned: every entry must be written
  gqa_attention_forward(out.data(), att.data(), in.qkv.data(), s.b, s.t, s.nh, s.nkv, s.hs, window,
                        kNoKeep, 1.0, kNoDropped);
  gqa_attention_backward(dqkv.data(), in.dout.data(), in.qkv.data(), att.data(), s.b, s.t, s.nh,
                         s.nkv, s.hs, window, kNoKeep, 1.0);
  return {out, att, dqkv};
}

// Sliding-window attention written directly: the query at position i of head h sees keys
// max(0, i - w + 1) <= j <= i of kv head h / (NH/NKV) (all j <= i when w is 0); att is the softmax
// of q.k / sqrt(HS) over those keys and 0 elsewhere, out = sum_j att[i][j] v_j.
GqaOutputs reference_windowed(const WindowInputs& in, int64_t window) {
  const WindowShape& s = in.shape;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  std::vector<double> out(s.b * s.t * s.c(), 0.0), att(s.att_size(), 0.0);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.nh; ++h) {
      const int64_t kv = h / (s.nh / s.nkv);
      for (int64_t i = 0; i < s.t; ++i) {
        const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        const double* q = in.qkv.data() + (b * s.t + i) * s.row() + h * s.hs;
        double* a = att.data() + ((b * s.nh + h) * s.t + i) * s.t;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = first; j <= i; ++j) {
          const double* k = in.qkv.data() + (b * s.t + j) * s.row() + (s.nh + kv) * s.hs;
          double dot = 0;
          for (int64_t d = 0; d < s.hs; ++d) dot += q[d] * k[d];
          a[j] = scale * dot;
          max = std::max(max, a[j]);
        }
        double sum = 0;
        for (int64_t j = first; j <= i; ++j) {
          a[j] = std::exp(a[j] - max);
          sum += a[j];
        }
        for (int64_t j = first; j <= i; ++j) {
          a[j] /= sum;
          const double* v = in.qkv.data() + (b * s.t + j) * s.row() + (s.nh + s.nkv + kv) * s.hs;
          for (int64_t d = 0; d < s.hs; ++d)
            out[(b * s.t + i) * s.c() + h * s.hs + d] += a[j] * v[d];
        }
      }
    }
  }
  return {out, att, {}};
}

TEST_CASE(
    "gqa with a sliding window w equals a direct softmax over keys i - w < j <= i; att rows are "
    "exactly 0 outside them and sum to 1",
    "[gqa][window]") {
  // Mistral's sliding_window (Jiang et al. 2023), as models/ops.hpp's causal_pairs counts it: each
  // query attends to itself and the w - 1 keys before it.
  const int64_t window = GENERATE(1, 3, 7);
  const WindowInputs in;
  const WindowShape& s = in.shape;
  const GqaOutputs got = run_windowed(in, window);
  const GqaOutputs want = reference_windowed(in, window);
  INFO("window = " << window);
  // BLAS adds the products in another order than the loops above: equal up to rounding.
  check_close("out", got.out, want.out, 1e-13);
  check_close("att", got.att, want.att, 1e-13);
  for (int64_t row = 0; row < s.b * s.nh * s.t; ++row) {
    const int64_t i = row % s.t;
    const int64_t first = std::max<int64_t>(0, i - window + 1);
    const double* a = got.att.data() + row * s.t;
    INFO("att row " << row << ", query " << i);
    double sum = 0;
    for (int64_t j = 0; j < s.t; ++j) {
      if (j < first || j > i) {
        CHECK(a[j] == 0.0);
      } else {
        CHECK(a[j] > 0.0);
        sum += a[j];
      }
    }
    CHECK(sum == Approx(1.0).epsilon(1e-14));
  }
}

TEST_CASE("gqa with a window of 1: each query sees only itself, att = I and out = its own v",
          "[gqa][window]") {
  // One key: the softmax is exp(0) / exp(0) = 1 exactly, and att @ V picks v_i (1 * v + 0 * ...).
  const WindowInputs in;
  const WindowShape& s = in.shape;
  const GqaOutputs got = run_windowed(in, 1);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.nh; ++h) {
      const int64_t kv = h / (s.nh / s.nkv);
      for (int64_t i = 0; i < s.t; ++i) {
        for (int64_t j = 0; j < s.t; ++j) {
          CHECK(got.att[((b * s.nh + h) * s.t + i) * s.t + j] == (i == j ? 1.0 : 0.0));
        }
        for (int64_t d = 0; d < s.hs; ++d) {
          CHECK(got.out[(b * s.t + i) * s.c() + h * s.hs + d] ==
                in.qkv[(b * s.t + i) * s.row() + (s.nh + s.nkv + kv) * s.hs + d]);
        }
      }
    }
  }
}

TEST_CASE("gqa with a window of T or more gives the same bits as no window (window 0)",
          "[gqa][window]") {
  // A window w >= T masks no key j <= i < T (i - w < 0 <= j), so the kernel runs the same loops.
  const WindowInputs in;
  const int64_t window = GENERATE(8, 9, 100);
  const GqaOutputs full = run_windowed(in, 0);
  const GqaOutputs windowed = run_windowed(in, window);
  INFO("window = " << window);
  CHECK(windowed.out == full.out);
  CHECK(windowed.att == full.att);
  CHECK(windowed.dqkv == full.dqkv);
}

TEST_CASE(
    "gqa backward with a window of 3 (float64) equals central differences of sum(out * R) for "
    "all of qkv (q, k and v), written",
    "[gqa][window]") {
  // B 2, T 8, NH 4, NKV 2, HS 4, window 3: the masked keys get no gradient through the query
  // rows that do not see them, and the backward must not send any.
  constexpr int64_t kWindow = 3;
  WindowInputs in;
  const WindowShape& s = in.shape;
  const GqaOutputs analytic = run_windowed(in, kWindow);
  std::vector<double> out(s.b * s.t * s.c()), att(s.att_size());
  const auto loss = [&] {
    gqa_attention_forward(out.data(), att.data(), in.qkv.data(), s.b, s.t, s.nh, s.nkv, s.hs,
                          kWindow, kNoKeep, 1.0, kNoDropped);
    return test::weighted_sum(out, in.dout);
  };
  check_dqkv(analytic.dqkv, test::numeric_gradient(in.qkv, loss), s.nh, s.nkv, s.hs);
}

TEST_CASE("gqa with a window: float agrees with double within 1e-5 relative", "[gqa][window]") {
  WindowInputs in;
  in.qkv = test::float_representable(in.qkv);
  in.dout = test::float_representable(in.dout);
  const WindowShape& s = in.shape;
  constexpr int64_t kWindow = 3;
  const auto qkv = cast_to<float>(in.qkv);
  const auto dout = cast_to<float>(in.dout);
  std::vector<float> out(s.b * s.t * s.c()), att(s.att_size()), dqkv(qkv.size(), 1e3f);
  gqa_attention_forward(out.data(), att.data(), qkv.data(), s.b, s.t, s.nh, s.nkv, s.hs, kWindow,
                        static_cast<const float*>(nullptr), 1.0f, static_cast<float*>(nullptr));
  gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.b, s.t, s.nh, s.nkv,
                         s.hs, kWindow, static_cast<const float*>(nullptr), 1.0f);
  const GqaOutputs d = run_windowed(in, kWindow);
  check_close("out", widen(out), d.out, kFloatTolerance);
  check_close("att", widen(att), d.att, kFloatTolerance);
  check_close("dqkv", widen(dqkv), d.dqkv, kFloatTolerance);
}

// Attention dropout on the window shape (B 2, T 8, NH 4, NKV 2, HS 4): a keep mask (B,NH,T,T) of
// rate 0.3 from dropout_mask, one row key per (batch, head, query), and its scale 1 / (1 - 0.3).
struct AttentionDropout {
  static constexpr double kRate = 0.3;
  double scale = 1.0 / (1.0 - kRate);
  std::vector<double> keep;
  explicit AttentionDropout(const WindowShape& s) : keep(s.att_size()) {
    const int64_t rows = s.b * s.nh * s.t;
    std::vector<uint64_t> row_keys(rows);
    for (int64_t r = 0; r < rows; ++r) row_keys[r] = dropout_key(5, static_cast<uint64_t>(r));
    dropout_mask(keep.data(), 17, row_keys.data(), rows, s.t, kRate);
  }
};

struct DroppedOutputs {
  std::vector<double> out, att, dropped, dqkv;
};

// The forward (storing the dropped probabilities) and the backward with a keep mask.
DroppedOutputs run_dropped(const WindowInputs& in, int64_t window, const std::vector<double>& keep,
                           double scale) {
  const WindowShape& s = in.shape;
  DroppedOutputs r{std::vector<double>(s.b * s.t * s.c(), 1e3),
                   std::vector<double>(s.att_size(), 1e3), std::vector<double>(s.att_size(), 1e3),
                   std::vector<double>(in.qkv.size(), 1e3)};  // poisoned: every entry written
  gqa_attention_forward(r.out.data(), r.att.data(), in.qkv.data(), s.b, s.t, s.nh, s.nkv, s.hs,
                        window, keep.data(), scale, r.dropped.data());
  gqa_attention_backward(r.dqkv.data(), in.dout.data(), in.qkv.data(), r.att.data(), s.b, s.t, s.nh,
                         s.nkv, s.hs, window, keep.data(), scale);
  return r;
}

TEST_CASE(
    "gqa with attention dropout: att is the undropped softmax, dropped = att * keep * scale, and "
    "out = dropped @ V",
    "[gqa][dropout]") {
  // Dropout after the softmax (GPT-2's attn_dropout, Megatron-LM's attention_dropout):
  // out_i = sum_j att[i][j] keep[i][j] / (1 - rate) v_j. The stored dropped probabilities are
  // the kernel's product of the same two factors, so they match bit for bit; out is checked
  // against the loop below up to BLAS's summation order. Without `dropped` (a scratch instead),
  // out has the same bits.
  const int64_t window = GENERATE(0, 3);
  const WindowInputs in;
  const WindowShape& s = in.shape;
  const AttentionDropout dropout(s);
  const DroppedOutputs got = run_dropped(in, window, dropout.keep, dropout.scale);
  const GqaOutputs undropped = run_windowed(in, window);
  INFO("window = " << window);
  CHECK(got.att == undropped.att);
  std::vector<double> want_dropped(s.att_size());
  for (int64_t e = 0; e < s.att_size(); ++e) {
    want_dropped[e] = got.att[e] * dropout.keep[e] * dropout.scale;
  }
  CHECK(got.dropped == want_dropped);
  std::vector<double> want_out(s.b * s.t * s.c(), 0.0);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.nh; ++h) {
      const int64_t kv = h / (s.nh / s.nkv);
      for (int64_t i = 0; i < s.t; ++i) {
        for (int64_t j = 0; j < s.t; ++j) {
          const double p = want_dropped[((b * s.nh + h) * s.t + i) * s.t + j];
          const double* v = in.qkv.data() + (b * s.t + j) * s.row() + (s.nh + s.nkv + kv) * s.hs;
          for (int64_t d = 0; d < s.hs; ++d)
            want_out[(b * s.t + i) * s.c() + h * s.hs + d] += p * v[d];
        }
      }
    }
  }
  check_close("out", got.out, want_out, 1e-13);
  CHECK(got.out != undropped.out);
  std::vector<double> out_scratch(got.out.size()), att_scratch(s.att_size());
  gqa_attention_forward(out_scratch.data(), att_scratch.data(), in.qkv.data(), s.b, s.t, s.nh,
                        s.nkv, s.hs, window, dropout.keep.data(), dropout.scale, kNoDropped);
  CHECK(out_scratch == got.out);
}

TEST_CASE(
    "gqa backward with attention dropout (float64) equals central differences of sum(out * R) for "
    "all of qkv, without and with a window of 3",
    "[gqa][dropout]") {
  // A fixed keep mask makes out a smooth function of qkv, so central differences apply; the
  // gradient flows only through the kept probabilities (datt = dout @ V^T * keep * scale) and dV
  // reads the dropped ones.
  const int64_t window = GENERATE(0, 3);
  WindowInputs in;
  const WindowShape& s = in.shape;
  const AttentionDropout dropout(s);
  const DroppedOutputs analytic = run_dropped(in, window, dropout.keep, dropout.scale);
  std::vector<double> out(s.b * s.t * s.c()), att(s.att_size());
  const auto loss = [&] {
    gqa_attention_forward(out.data(), att.data(), in.qkv.data(), s.b, s.t, s.nh, s.nkv, s.hs,
                          window, dropout.keep.data(), dropout.scale, kNoDropped);
    return test::weighted_sum(out, in.dout);
  };
  INFO("window = " << window);
  check_dqkv(analytic.dqkv, test::numeric_gradient(in.qkv, loss), s.nh, s.nkv, s.hs);
}

TEST_CASE("gqa with a keep mask of ones and scale 1 gives the same bits as no dropout",
          "[gqa][dropout]") {
  // att * 1 * 1 = att and datt * 1 * 1 = datt exactly, and the products read the same values.
  const int64_t window = GENERATE(0, 3);
  const WindowInputs in;
  const WindowShape& s = in.shape;
  const DroppedOutputs ones = run_dropped(in, window, std::vector<double>(s.att_size(), 1.0), 1.0);
  const GqaOutputs none = run_windowed(in, window);
  INFO("window = " << window);
  CHECK(ones.out == none.out);
  CHECK(ones.att == none.att);
  CHECK(ones.dropped == none.att);
  CHECK(ones.dqkv == none.dqkv);
}

}  // namespace
}  // namespace strata::cpu
