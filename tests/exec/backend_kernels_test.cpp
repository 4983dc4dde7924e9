// The Llama kernels and the executor's conveniences through the Backend interface
// (exec/backend.hpp): each method of make_cpu_backend() against the kernels/cpu kernel called
// directly on the same inputs, bit for bit, since the CPU backend only forwards (a wrong, swapped
// or dropped argument changes the bits); and the *_backward_from_input norms against
// forward-then-backward with the saved statistics, bit for bit, as the executor relies on.
//
// The CPU backend's device memory is host memory, so the tests hand it host vectors. Accumulated
// gradients (dweight, dbias) start from random values on both sides, so that += is checked; input
// gradients start as the same garbage on both sides and must be overwritten the same way.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "exec/backend.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata {
namespace {

// n floats uniform in [lo, hi) from a std::mt19937_64 seeded with seed.
std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& xi : x) xi = uniform(rng);
  return x;
}

// got and want hold the same bits (NaN and signed zeros included, unlike ==).
void check_bit_identical(const char* what, const std::vector<float>& got,
                         const std::vector<float>& want) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  size_t first_difference = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      first_difference = i;
      break;
    }
  }
  INFO("first differing element " << first_difference << " of " << got.size());
  CHECK(first_difference == got.size());
}

// Rows and width of the norm, matmul and SwiGLU tests: B*T = 2*5 tokens, C = 24 channels.
constexpr int64_t kN = 10;
constexpr int64_t kC = 24;

TEST_CASE("backend matmul_forward_accumulate is cpu::matmul_forward_accumulate, bit for bit") {
  // out (N,OC) += inp @ weight^T from the same random starting out.
  constexpr int64_t kOC = 12;
  const auto inp = random_floats(kN * kC, 1);
  const auto weight = random_floats(kOC * kC, 2);
  const auto start = random_floats(kN * kOC, 3);
  const auto backend = make_cpu_backend();
  auto got = start;
  backend->fp32().matmul_forward_accumulate(got.data(), inp.data(), weight.data(), kN, kC, kOC);
  auto want = start;
  cpu::matmul_forward_accumulate(want.data(), inp.data(), weight.data(), kN, kC, kOC);
  check_bit_identical("out", got, want);
  // It did add: out changed from its starting value.
  CHECK(got != start);
}

TEST_CASE("backend rmsnorm forward and backward are cpu::rmsnorm_*, bit for bit") {
  // out and rstd of the forward; dinp (written) and dweight (accumulated) of the backward.
  const auto inp = random_floats(kN * kC, 11, -2.0f, 3.0f);
  const auto weight = random_floats(kC, 12);
  const auto dout = random_floats(kN * kC, 13);
  const auto dweight_start = random_floats(kC, 14);
  const auto garbage = random_floats(kN * kC, 15, 1e3f, 2e3f);
  const auto backend = make_cpu_backend();

  std::vector<float> out(kN * kC), rstd(kN), want_out(kN * kC), want_rstd(kN);
  backend->fp32().rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), kN, kC);
  cpu::rmsnorm_forward(want_out.data(), want_rstd.data(), inp.data(), weight.data(), kN, kC);
  check_bit_identical("out", out, want_out);
  check_bit_identical("rstd", rstd, want_rstd);

  auto dinp = garbage, want_dinp = garbage;
  auto dweight = dweight_start, want_dweight = dweight_start;
  backend->fp32().rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(),
                                   weight.data(), rstd.data(), kN, kC);
  cpu::rmsnorm_backward(want_dinp.data(), want_dweight.data(), dout.data(), inp.data(),
                        weight.data(), want_rstd.data(), kN, kC);
  check_bit_identical("dinp", dinp, want_dinp);
  check_bit_identical("dweight", dweight, want_dweight);
}

TEST_CASE("backend swiglu and geglu forward and backward are cpu::swiglu_*, geglu_*, bit for bit") {
  // inp (N,2H) rows [gate | up]; out (N,H); dinp (N,2H) written over garbage.
  constexpr int64_t kH = 16;
  const auto inp = random_floats(kN * 2 * kH, 21, -4.0f, 4.0f);
  const auto dout = random_floats(kN * kH, 22);
  const auto garbage = random_floats(kN * 2 * kH, 23, 1e3f, 2e3f);
  const auto backend = make_cpu_backend();

  for (const bool swiglu : {true, false}) {
    INFO((swiglu ? "swiglu" : "geglu"));
    std::vector<float> out(kN * kH), want_out(kN * kH);
    auto dinp = garbage, want_dinp = garbage;
    if (swiglu) {
      backend->fp32().swiglu_forward(out.data(), inp.data(), kN, kH);
      cpu::swiglu_forward(want_out.data(), inp.data(), kN, kH);
      backend->fp32().swiglu_backward(dinp.data(), inp.data(), dout.data(), kN, kH);
      cpu::swiglu_backward(want_dinp.data(), inp.data(), dout.data(), kN, kH);
    } else {
      backend->fp32().geglu_forward(out.data(), inp.data(), kN, kH);
      cpu::geglu_forward(want_out.data(), inp.data(), kN, kH);
      backend->fp32().geglu_backward(dinp.data(), inp.data(), dout.data(), kN, kH);
      cpu::geglu_backward(want_dinp.data(), inp.data(), dout.data(), kN, kH);
    }
    check_bit_identical("out", out, want_out);
    check_bit_identical("dinp", dinp, want_dinp);
  }
}

TEST_CASE("backend copy_2d copies a column block of a row-major tensor") {
  // Columns 2..4 of a (3,6) tensor into a (3,3) one, and back into a zeroed (3,6) one.
  std::vector<float> src(18);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  const auto backend = make_cpu_backend();
  std::vector<float> block(9);
  backend->copy_2d(block.data(), 3, src.data() + 2, 6, 3, 3);
  CHECK(block == std::vector<float>{2, 3, 4, 8, 9, 10, 14, 15, 16});
  std::vector<float> back(18, 0.0f);
  backend->copy_2d(back.data() + 2, 6, block.data(), 3, 3, 3);
  for (size_t i = 0; i < back.size(); ++i) CHECK(back[i] == (i % 6 >= 2 && i % 6 < 5 ? src[i] : 0));
}

// Attention and rotary shapes: B = 2 sequences of T = 5 tokens, NH = 4 query heads sharing
// NKV = 2 kv heads (groups of 2, so the grouping is exercised), HS = 4; a qkv row is
// W = (NH + 2*NKV)*HS wide.
constexpr int64_t kB = 2;
constexpr int64_t kT = 5;
constexpr int64_t kNH = 4;
constexpr int64_t kNKV = 2;
constexpr int64_t kHS = 4;
constexpr int64_t kW = (kNH + 2 * kNKV) * kHS;

TEST_CASE("backend gqa attention forward and backward are cpu::gqa_attention_*, bit for bit") {
  // out (B,T,NH*HS) and att (B,NH,T,T) of the forward; dqkv (B,T,W), written over garbage; the
  // whole causal prefix and a sliding window of 3 keys.
  const auto qkv = random_floats(kB * kT * kW, 31);
  const auto dout = random_floats(kB * kT * kNH * kHS, 32);
  const auto garbage = random_floats(kB * kT * kW, 33, 1e3f, 2e3f);
  const auto backend = make_cpu_backend();

  for (const int64_t window : {0, 3}) {
    INFO("window " << window);
    std::vector<float> out(kB * kT * kNH * kHS), att(kB * kNH * kT * kT);
    auto want_out = out, want_att = att;
    backend->fp32().gqa_attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kNH, kNKV,
                                          kHS, window, nullptr, 1.0f, nullptr);
    cpu::gqa_attention_forward(want_out.data(), want_att.data(), qkv.data(), kB, kT, kNH, kNKV, kHS,
                               window, static_cast<const float*>(nullptr), 1.0f,
                               static_cast<float*>(nullptr));
    check_bit_identical("out", out, want_out);
    check_bit_identical("att", att, want_att);

    auto dqkv = garbage, want_dqkv = garbage;
    backend->fp32().gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), kB, kT,
                                           kNH, kNKV, kHS, window, nullptr, 1.0f);
    cpu::gqa_attention_backward(want_dqkv.data(), dout.data(), qkv.data(), want_att.data(), kB, kT,
                                kNH, kNKV, kHS, window, static_cast<const float*>(nullptr), 1.0f);
    check_bit_identical("dqkv", dqkv, want_dqkv);
  }
}

TEST_CASE("backend rotary forward and backward are cpu::rotary_*, bit for bit") {
  // The keys of a fused qkv row (heads = NKV from first_col = NH*HS), Llama 3's theta: the
  // rotated columns and the copied ones, out of place.
  constexpr int64_t kKeyCol = kNH * kHS;
  constexpr double kTheta = 500000.0;
  const auto inp = random_floats(kB * kT * kW, 41);
  const auto dout = random_floats(kB * kT * kW, 42);
  const auto garbage = random_floats(kB * kT * kW, 43, 1e3f, 2e3f);
  const auto backend = make_cpu_backend();

  auto out = garbage, want_out = garbage;
  backend->fp32().rotary_forward(out.data(), inp.data(), kB, kT, kNKV, kHS, kW, kKeyCol, kTheta);
  cpu::rotary_forward(want_out.data(), inp.data(), kB, kT, kNKV, kHS, kW, kKeyCol, kTheta);
  check_bit_identical("out", out, want_out);

  auto dinp = garbage, want_dinp = garbage;
  backend->fp32().rotary_backward(dinp.data(), dout.data(), kB, kT, kNKV, kHS, kW, kKeyCol, kTheta);
  cpu::rotary_backward(want_dinp.data(), dout.data(), kB, kT, kNKV, kHS, kW, kKeyCol, kTheta);
  check_bit_identical("dinp", dinp, want_dinp);
}

// Rows for the *_from_input tests: more than two of the CPU backend's 64-row recompute blocks,
// the last one partial, so that blocking cannot hide behind a single block.
constexpr int64_t kManyRows = 150;

TEST_CASE(
    "backend layernorm_backward_from_input equals layernorm forward then backward with the saved "
    "mean and rstd, bit for bit, with and without dbias") {
  // The executor runs a LayerNorm whose graph keeps only its input this way (Korthikanti et al.
  // 2022); it must give exactly the gradients of the saved-statistics path, so that the two
  // storage choices train the same model. Inputs offset from zero so the mean matters.
  const auto inp = random_floats(kManyRows * kC, 51, -2.0f, 3.0f);
  const auto weight = random_floats(kC, 52);
  const auto bias = random_floats(kC, 53);
  const auto dout = random_floats(kManyRows * kC, 54);
  const auto dweight_start = random_floats(kC, 55);
  const auto dbias_start = random_floats(kC, 56);
  const auto garbage = random_floats(kManyRows * kC, 57, 1e3f, 2e3f);
  const auto backend = make_cpu_backend();

  std::vector<float> out(kManyRows * kC), mean(kManyRows), rstd(kManyRows);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), kManyRows, kC);
  auto want_dinp = garbage;
  auto want_dweight = dweight_start, want_dbias = dbias_start;
  cpu::layernorm_backward(want_dinp.data(), want_dweight.data(), want_dbias.data(), dout.data(),
                          inp.data(), weight.data(), mean.data(), rstd.data(), kManyRows, kC);

  auto dinp = garbage;
  auto dweight = dweight_start, dbias = dbias_start;
  backend->fp32().layernorm_backward_from_input(dinp.data(), dweight.data(), dbias.data(),
                                                dout.data(), inp.data(), weight.data(), kManyRows,
                                                kC);
  check_bit_identical("dinp", dinp, want_dinp);
  check_bit_identical("dweight", dweight, want_dweight);
  check_bit_identical("dbias", dbias, want_dbias);

  // A null dbias (a norm without bias) skips only dbias.
  auto dinp_no_bias = garbage;
  auto dweight_no_bias = dweight_start;
  backend->fp32().layernorm_backward_from_input(dinp_no_bias.data(), dweight_no_bias.data(),
                                                nullptr, dout.data(), inp.data(), weight.data(),
                                                kManyRows, kC);
  check_bit_identical("dinp, null dbias", dinp_no_bias, want_dinp);
  check_bit_identical("dweight, null dbias", dweight_no_bias, want_dweight);
}

TEST_CASE(
    "backend rmsnorm_backward_from_input equals rmsnorm forward then backward with the saved "
    "rstd, bit for bit") {
  // As for LayerNorm: an RMSNorm whose graph keeps only its input recomputes rstd, and must give
  // exactly the gradients of the saved-rstd path.
  const auto inp = random_floats(kManyRows * kC, 61, -2.0f, 3.0f);
  const auto weight = random_floats(kC, 62);
  const auto dout = random_floats(kManyRows * kC, 63);
  const auto dweight_start = random_floats(kC, 64);
  const auto garbage = random_floats(kManyRows * kC, 65, 1e3f, 2e3f);
  const auto backend = make_cpu_backend();

  std::vector<float> out(kManyRows * kC), rstd(kManyRows);
  cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), kManyRows, kC);
  auto want_dinp = garbage;
  auto want_dweight = dweight_start;
  cpu::rmsnorm_backward(want_dinp.data(), want_dweight.data(), dout.data(), inp.data(),
                        weight.data(), rstd.data(), kManyRows, kC);

  auto dinp = garbage;
  auto dweight = dweight_start;
  backend->fp32().rmsnorm_backward_from_input(dinp.data(), dweight.data(), dout.data(), inp.data(),
                                              weight.data(), kManyRows, kC);
  check_bit_identical("dinp", dinp, want_dinp);
  check_bit_identical("dweight", dweight, want_dweight);
}

}  // namespace
}  // namespace strata
