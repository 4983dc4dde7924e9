// General grouped-query attention on the GPU (kernels/cuda/gqa_attention.cu) against the CPU
// reference (kernels/cpu/attention.cpp's gqa_attention_forward/backward) in double, on the same
// inputs rounded to T: NKV < NH and NKV = NH, windows 0, under T, equal to T and past it, dropout
// off and on (with and without the dropped probabilities), odd T and a head size that is no
// multiple of 32; and the bits of window >= T against window 0, and of two runs.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
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

struct Shape {
  int64_t b, t, nh, nkv, hs;
  int64_t qkv_size() const { return b * t * (nh + 2 * nkv) * hs; }
  int64_t out_size() const { return b * t * nh * hs; }
  int64_t att_size() const { return b * nh * t * t; }
  std::string describe() const {
    return "B " + std::to_string(b) + " T " + std::to_string(t) + " NH " + std::to_string(nh) +
           " NKV " + std::to_string(nkv) + " HS " + std::to_string(hs);
  }
};

// How a case drops: not at all, with the dropped probabilities stored, or without them.
enum class Dropout { kOff, kStored, kNotStored };

const char* describe(Dropout dropout) {
  switch (dropout) {
    case Dropout::kOff:
      return "no dropout";
    case Dropout::kStored:
      return "dropout, dropped stored";
    case Dropout::kNotStored:
      return "dropout, dropped not stored";
  }
  return "";
}

constexpr double kRate = 0.2;

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// qkv and dout uniform in [-1, 1) as T stores them, and the keep mask of cpu::dropout_mask
// (rate 0.2), one row key per (batch, head, query) row of att.
template <typename T>
struct Inputs {
  std::vector<float> qkv;
  std::vector<float> dout;
  std::vector<float> keep;
  Inputs(const Shape& s, uint64_t seed)
      : qkv(rounded<T>(random_floats(s.qkv_size(), seed))),
        dout(rounded<T>(random_floats(s.out_size(), seed + 1))),
        keep(s.att_size()) {
    const int64_t rows = s.b * s.nh * s.t;
    std::vector<uint64_t> keys(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) keys[r] = cpu::dropout_key(seed, static_cast<uint64_t>(r));
    cpu::dropout_mask(keep.data(), 17, keys.data(), rows, s.t, kRate);
  }
};

struct Outputs {
  std::vector<double> out, att, dropped, dqkv;
};

// cpu::gqa_attention_forward/backward in double.
template <typename T>
Outputs reference(const Inputs<T>& in, const Shape& s, int64_t window, Dropout dropout,
                  double scale) {
  const std::vector<double> qkv = widen(in.qkv), dout = widen(in.dout), keep = widen(in.keep);
  Outputs ref{std::vector<double>(s.out_size()), std::vector<double>(s.att_size()),
              std::vector<double>(s.att_size()), std::vector<double>(s.qkv_size())};
  const double* keep_or_null = dropout == Dropout::kOff ? nullptr : keep.data();
  cpu::gqa_attention_forward(ref.out.data(), ref.att.data(), qkv.data(), s.b, s.t, s.nh, s.nkv,
                             s.hs, window, keep_or_null, scale, ref.dropped.data());
  cpu::gqa_attention_backward(ref.dqkv.data(), dout.data(), qkv.data(), ref.att.data(), s.b, s.t,
                              s.nh, s.nkv, s.hs, window, keep_or_null, scale);
  return ref;
}

// The GPU kernels, every output poisoned (NaN) first so that an element left unwritten fails.
template <typename T>
struct Result {
  std::vector<float> out, att, dropped, dqkv;
};

template <typename T>
Result<T> run(Context& ctx, const Inputs<T>& in, const Shape& s, int64_t window, Dropout dropout,
              float scale) {
  DeviceBuffer<T> qkv = upload<T>(in.qkv);
  DeviceBuffer<T> dout = upload<T>(in.dout);
  DeviceBuffer<T> keep = upload<T>(in.keep);
  DeviceBuffer<T> out(s.out_size()), att(s.att_size()), dropped(s.att_size()), dqkv(s.qkv_size());
  poison(out);
  poison(att);
  poison(dropped);
  poison(dqkv);
  const T* keep_or_null = dropout == Dropout::kOff ? nullptr : keep.data();
  T* dropped_or_null = dropout == Dropout::kStored ? dropped.data() : nullptr;
  gqa_attention_forward<T>(ctx, out.data(), att.data(), qkv.data(), s.b, s.t, s.nh, s.nkv, s.hs,
                           window, keep_or_null, scale, dropped_or_null);
  gqa_attention_backward<T>(ctx, dqkv.data(), dout.data(), qkv.data(), att.data(), s.b, s.t, s.nh,
                            s.nkv, s.hs, window, keep_or_null, scale);
  return {download(out), download(att), download(dropped), download(dqkv)};
}

TEMPLATE_TEST_CASE("gqa_attention_forward/backward match the CPU reference", "[gpu][attention]",
                   float, bf16) {
  // out = (att * keep * scale) @ v with att the softmax of q.k / sqrt(HS) over keys
  // i - window < j <= i (exact zeros elsewhere: compared with the reference's), dropped =
  // att * keep * scale, and dqkv, all as cpu::gqa_attention_forward/backward<double>. Shapes:
  // groups of 2 query heads per kv head (B 2, T 64, NH 4, NKV 2, HS 32); one kv head for 4
  // query heads at odd T (37) and HS 40 (lanes owning 2 channels and 1); multi-head (NKV = NH,
  // T 33, HS 16). Windows 0, 5, T and T + 3; dropout off, on with dropped, on without.
  using T = TestType;
  struct Case {
    Shape shape;
    std::vector<int64_t> windows;
    std::vector<Dropout> dropouts;
  };
  const std::vector<Case> cases = {
      {{2, 64, 4, 2, 32}, {0, 5, 64, 67}, {Dropout::kOff, Dropout::kStored}},
      {{1, 37, 4, 1, 40}, {0, 7}, {Dropout::kOff, Dropout::kNotStored}},
      {{2, 33, 2, 2, 16}, {0, 40}, {Dropout::kStored}}};
  const float scale = static_cast<float>(1.0 / (1.0 - kRate));
  Context ctx;
  uint64_t seed = 1900;
  for (const Case& c : cases) {
    const Shape& s = c.shape;
    const Inputs<T> in(s, seed += 2);
    for (const int64_t window : c.windows) {
      for (const Dropout dropout : c.dropouts) {
        INFO(s.describe() << ", window " << window << ", " << describe(dropout));
        const Outputs ref = reference(in, s, window, dropout, static_cast<double>(scale));
        const Result<T> got = run(ctx, in, s, window, dropout, scale);
        STRATA_REQUIRE_CLOSE(T, "out", got.out, ref.out);
        STRATA_REQUIRE_CLOSE(T, "att", got.att, ref.att);
        STRATA_REQUIRE_CLOSE(T, "dqkv", got.dqkv, ref.dqkv);
        if (dropout == Dropout::kStored) {
          STRATA_REQUIRE_CLOSE(T, "dropped", got.dropped, ref.dropped);
        }
        // Masked probabilities are exact zeros (the reference's are).
        size_t nonzero_masked = 0;
        for (size_t k = 0; k < ref.att.size(); ++k) {
          nonzero_masked += ref.att[k] == 0.0 && got.att[k] != 0.0f ? 1 : 0;
        }
        CHECK(nonzero_masked == 0);
      }
    }
  }
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST_CASE("gqa_attention: window >= T gives window 0's bits, and runs repeat bit for bit",
          "[gpu][attention]") {
  // kernels/cpu/kernels.hpp: a window w >= T is the same as no window, bit for bit; and every
  // sum runs in a fixed order (no atomics), so a second run gives the same bits, with dropout.
  using T = bf16;
  const Shape s{2, 64, 4, 2, 32};
  const Inputs<T> in(s, 2024);
  const float scale = static_cast<float>(1.0 / (1.0 - kRate));
  Context ctx;
  const Result<T> none = run(ctx, in, s, 0, Dropout::kStored, scale);
  const Result<T> wide = run(ctx, in, s, s.t, Dropout::kStored, scale);
  const Result<T> again = run(ctx, in, s, 0, Dropout::kStored, scale);
  CHECK(same_bits(none.out, wide.out));
  CHECK(same_bits(none.att, wide.att));
  CHECK(same_bits(none.dropped, wide.dropped));
  CHECK(same_bits(none.dqkv, wide.dqkv));
  CHECK(same_bits(none.out, again.out));
  CHECK(same_bits(none.dqkv, again.dqkv));
}

TEST_CASE("gqa_attention rejects NH not a multiple of NKV, a negative window and HS over 256",
          "[gpu][attention]") {
  // The reference's assertions, and the kernels' register limit, as std::invalid_argument.
  Context ctx;
  DeviceBuffer<float> x(16);
  const float* none = nullptr;
  CHECK_THROWS_WITH(gqa_attention_forward<float>(ctx, x.data(), x.data(), x.data(), 1, 1, 3, 2, 2,
                                                 0, none, 1.0f, nullptr),
                    Catch::Contains("NKV = 2"));
  CHECK_THROWS_AS(gqa_attention_backward<float>(ctx, x.data(), x.data(), x.data(), x.data(), 1, 1,
                                                2, 1, 2, -1, none, 1.0f),
                  std::invalid_argument);
  CHECK_THROWS_WITH(gqa_attention_forward<float>(ctx, x.data(), x.data(), x.data(), 1, 1, 1, 1, 512,
                                                 0, none, 1.0f, nullptr),
                    Catch::Contains("HS = 512"));
}

}  // namespace
}  // namespace strata::cuda
