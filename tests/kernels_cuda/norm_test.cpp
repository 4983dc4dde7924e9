// The normalization kernels on the GPU (kernels/cuda/layernorm.cu, rmsnorm.cu, residual.cu)
// against the CPU references in double (kernels/cpu), on the same inputs rounded to T: forwards,
// backwards with and without the fused residual gradient (also in place), the residual add (also
// with a dropout mask) and its fusion with the norms, accumulate, unaligned buffers (the scalar
// path), and bit-for-bit repeatability.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
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
  int64_t n;
  int64_t c;
};

// Every kind of row the kernels tell apart: a single element; widths that are not multiples of
// 8 or 32 (the scalar path); rows of one warp (C <= 1024) and of one block; 16-byte chunks;
// C past 4096 (the backward's accumulators in global memory instead of shared); N past the
// backward's 1024 blocks (several rows per block, with shared and with global accumulators).
const std::vector<Shape> kShapes = {{1, 1},     {7, 33},   {33, 768},  {257, 773},  {64, 1600},
                                    {16, 4096}, {5, 4099}, {2053, 96}, {600, 8200}, {3, 20000}};

std::vector<double> to_double(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

std::vector<float> as_floats(const std::vector<double>& x) {
  return std::vector<float>(x.begin(), x.end());
}

// a - b: what an accumulated (+=) gradient added to its start.
std::vector<double> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = static_cast<double>(a[i]) - b[i];
  return d;
}

std::vector<double> plus(const std::vector<double>& a, const std::vector<float>& b) {
  std::vector<double> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

// The device values as stored, for bit-for-bit comparisons.
template <typename T>
std::vector<T> download_raw(const DeviceBuffer<T>& buffer) {
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> raw(buffer.size());
  STRATA_CUDA_CHECK(
      cudaMemcpy(raw.data(), buffer.data(), buffer.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return raw;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The values of x after an offset of one element: a buffer uploaded from this and read from
// data() + 1 has rows that are never 16-byte aligned.
std::vector<float> padded(const std::vector<float>& x) {
  std::vector<float> p(x.size() + 1, 1.0f);
  std::copy(x.begin(), x.end(), p.begin() + 1);
  return p;
}
std::vector<float> unpadded(const std::vector<float>& p) {
  return std::vector<float>(p.begin() + 1, p.end());
}

// The inputs of a norm over (N,C), rounded to T (what the kernels read), and the fp32 starts of
// the accumulated gradients.
template <typename T>
struct NormInputs {
  NormInputs(Shape shape, uint64_t seed)
      : n(shape.n),
        c(shape.c),
        inp(rounded<T>(random_floats(n * c, seed, -2.0f, 3.0f))),  // rows with a nonzero mean
        weight(rounded<T>(random_floats(c, seed + 1, 0.5f, 1.5f))),
        bias(rounded<T>(random_floats(c, seed + 2))),
        dout(rounded<T>(random_floats(n * c, seed + 3))),
        dresidual(rounded<T>(random_floats(n * c, seed + 4))),
        dweight(random_floats(c, seed + 5)),
        dbias(random_floats(c, seed + 6)) {}
  int64_t n, c;
  std::vector<float> inp, weight, bias, dout, dresidual;
  std::vector<float> dweight, dbias;  // the starts of the accumulated gradients (fp32)
};

struct LayerNormReference {
  std::vector<double> out, mean, rstd, dinp, dweight, dbias;  // dweight, dbias: the increments
};

LayerNormReference layernorm_reference(const std::vector<float>& inp_f,
                                       const std::vector<float>& weight_f,
                                       const std::vector<float>& bias_f,
                                       const std::vector<float>& dout_f, bool with_bias, int64_t n,
                                       int64_t c) {
  const std::vector<double> inp = to_double(inp_f), weight = to_double(weight_f),
                            bias = to_double(bias_f), dout = to_double(dout_f);
  LayerNormReference r;
  r.out.resize(n * c);
  r.mean.resize(n);
  r.rstd.resize(n);
  r.dinp.resize(n * c);
  r.dweight.assign(c, 0.0);
  r.dbias.assign(c, 0.0);
  cpu::layernorm_forward(r.out.data(), r.mean.data(), r.rstd.data(), inp.data(), weight.data(),
                         with_bias ? bias.data() : nullptr, n, c);
  cpu::layernorm_backward(r.dinp.data(), r.dweight.data(), r.dbias.data(), dout.data(), inp.data(),
                          weight.data(), r.mean.data(), r.rstd.data(), n, c);
  return r;
}

struct RmsNormReference {
  std::vector<double> out, rstd, dinp, dweight;  // dweight: the increment
};

RmsNormReference rmsnorm_reference(const std::vector<float>& inp_f,
                                   const std::vector<float>& weight_f,
                                   const std::vector<float>& dout_f, int64_t n, int64_t c) {
  const std::vector<double> inp = to_double(inp_f), weight = to_double(weight_f),
                            dout = to_double(dout_f);
  RmsNormReference r;
  r.out.resize(n * c);
  r.rstd.resize(n);
  r.dinp.resize(n * c);
  r.dweight.assign(c, 0.0);
  cpu::rmsnorm_forward(r.out.data(), r.rstd.data(), inp.data(), weight.data(), n, c);
  cpu::rmsnorm_backward(r.dinp.data(), r.dweight.data(), dout.data(), inp.data(), weight.data(),
                        r.rstd.data(), n, c);
  return r;
}

// How a backward receives the residual stream's gradient.
enum class Residual { kNone, kSeparate, kInPlace };

const char* describe(Residual residual) {
  switch (residual) {
    case Residual::kNone:
      return "no dresidual";
    case Residual::kSeparate:
      return "dresidual";
    case Residual::kInPlace:
      return "dinp = dresidual in place";
  }
  return "";
}

TEMPLATE_TEST_CASE("layernorm_forward matches the CPU reference: out, mean and rstd", "[gpu][norm]",
                   float, bf16) {
  // out = (inp - mean) * rstd * weight + bias, mean and rstd = 1/sqrt(var + 1e-5) per row, as
  // cpu::layernorm_forward<double> on the same rounded inputs; with and without a bias.
  using T = TestType;
  Context ctx;
  uint64_t seed = 1000;
  for (const Shape& shape : kShapes) {
    for (const bool with_bias : {true, false}) {
      INFO("N = " << shape.n << ", C = " << shape.c << (with_bias ? ", bias" : ", no bias"));
      const NormInputs<T> in(shape, seed += 10);
      const LayerNormReference ref =
          layernorm_reference(in.inp, in.weight, in.bias, in.dout, with_bias, in.n, in.c);
      DeviceBuffer<T> inp = upload<T>(in.inp), weight = upload<T>(in.weight),
                      bias = upload<T>(in.bias);
      DeviceBuffer<T> out(in.n * in.c);
      DeviceBuffer<float> mean(in.n), rstd(in.n);
      poison(out);
      poison(mean);
      poison(rstd);
      layernorm_forward(ctx, out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                        with_bias ? bias.data() : nullptr, in.n, in.c);
      STRATA_REQUIRE_CLOSE(T, "out", download(out), ref.out);
      STRATA_REQUIRE_CLOSE(T, "mean", download(mean), ref.mean);
      STRATA_REQUIRE_CLOSE(T, "rstd", download(rstd), ref.rstd);
    }
  }
}

TEMPLATE_TEST_CASE(
    "layernorm_backward matches the CPU reference: dinp written, dweight and dbias accumulated, "
    "with the residual gradient added, separate or in place",
    "[gpu][norm]", float, bf16) {
  // dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) [+ dresidual], and what was
  // added to dweight (dout * norm) and dbias (dout) from random starts, as
  // cpu::layernorm_backward<double> given the reference's mean and rstd; also with dbias null.
  using T = TestType;
  Context ctx;
  uint64_t seed = 2000;
  struct Case {
    Residual residual;
    bool with_dbias;
  };
  for (const Shape& shape : kShapes) {
    for (const Case& run : {Case{Residual::kNone, true}, Case{Residual::kSeparate, true},
                            Case{Residual::kInPlace, true}, Case{Residual::kNone, false}}) {
      INFO("N = " << shape.n << ", C = " << shape.c << ", " << describe(run.residual)
                  << (run.with_dbias ? ", dbias" : ", no dbias"));
      const NormInputs<T> in(shape, seed += 10);
      const LayerNormReference ref =
          layernorm_reference(in.inp, in.weight, in.bias, in.dout, true, in.n, in.c);
      DeviceBuffer<T> inp = upload<T>(in.inp), weight = upload<T>(in.weight),
                      dout = upload<T>(in.dout), dresidual = upload<T>(in.dresidual);
      DeviceBuffer<float> mean = upload<float>(as_floats(ref.mean)),
                          rstd = upload<float>(as_floats(ref.rstd));
      DeviceBuffer<float> dweight = upload<float>(in.dweight), dbias = upload<float>(in.dbias);
      DeviceBuffer<T> dinp = upload<T>(in.dresidual);  // dresidual itself when in place
      if (run.residual != Residual::kInPlace) poison(dinp);
      const T* residual_grad = run.residual == Residual::kNone       ? nullptr
                               : run.residual == Residual::kSeparate ? dresidual.data()
                                                                     : dinp.data();
      layernorm_backward(ctx, dinp.data(), dweight.data(), run.with_dbias ? dbias.data() : nullptr,
                         dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(),
                         residual_grad, in.n, in.c);
      STRATA_REQUIRE_CLOSE(
          T, "dinp", download(dinp),
          run.residual == Residual::kNone ? ref.dinp : plus(ref.dinp, in.dresidual));
      STRATA_REQUIRE_CLOSE(T, "dweight increment", minus(download(dweight), in.dweight),
                           ref.dweight);
      if (run.with_dbias) {
        STRATA_REQUIRE_CLOSE(T, "dbias increment", minus(download(dbias), in.dbias), ref.dbias);
      } else {
        CHECK(download(dbias) == in.dbias);
      }
    }
  }
}

TEMPLATE_TEST_CASE("rmsnorm_forward matches the CPU reference: out and rstd", "[gpu][norm]", float,
                   bf16) {
  // out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + 1e-5) per row, as
  // cpu::rmsnorm_forward<double> on the same rounded inputs.
  using T = TestType;
  Context ctx;
  uint64_t seed = 3000;
  for (const Shape& shape : kShapes) {
    INFO("N = " << shape.n << ", C = " << shape.c);
    const NormInputs<T> in(shape, seed += 10);
    const RmsNormReference ref = rmsnorm_reference(in.inp, in.weight, in.dout, in.n, in.c);
    DeviceBuffer<T> inp = upload<T>(in.inp), weight = upload<T>(in.weight);
    DeviceBuffer<T> out(in.n * in.c);
    DeviceBuffer<float> rstd(in.n);
    poison(out);
    poison(rstd);
    rmsnorm_forward(ctx, out.data(), rstd.data(), inp.data(), weight.data(), in.n, in.c);
    STRATA_REQUIRE_CLOSE(T, "out", download(out), ref.out);
    STRATA_REQUIRE_CLOSE(T, "rstd", download(rstd), ref.rstd);
  }
}

TEMPLATE_TEST_CASE(
    "rmsnorm_backward matches the CPU reference: dinp written, dweight accumulated, with the "
    "residual gradient added, separate or in place",
    "[gpu][norm]", float, bf16) {
  // dinp = rstd * (dnorm - norm * mean(dnorm * norm)) [+ dresidual], and what was added to
  // dweight (dout * norm) from a random start, as cpu::rmsnorm_backward<double> given the
  // reference's rstd. With C = 1, dinp = rstd^3 * 1e-5 * dnorm is the difference of two terms
  // that nearly cancel (norm^2 = x^2 / (x^2 + 1e-5)) unless x^2 is near 1e-5: that shape's
  // inputs are drawn from [0.002, 0.005) so that fp32 can resolve it.
  using T = TestType;
  Context ctx;
  uint64_t seed = 4000;
  for (const Shape& shape : kShapes) {
    for (const Residual residual : {Residual::kNone, Residual::kSeparate, Residual::kInPlace}) {
      INFO("N = " << shape.n << ", C = " << shape.c << ", " << describe(residual));
      NormInputs<T> in(shape, seed += 10);
      if (in.c == 1) in.inp = rounded<T>(random_floats(in.n, seed + 9, 0.002f, 0.005f));
      const RmsNormReference ref = rmsnorm_reference(in.inp, in.weight, in.dout, in.n, in.c);
      DeviceBuffer<T> inp = upload<T>(in.inp), weight = upload<T>(in.weight),
                      dout = upload<T>(in.dout), dresidual = upload<T>(in.dresidual);
      DeviceBuffer<float> rstd = upload<float>(as_floats(ref.rstd));
      DeviceBuffer<float> dweight = upload<float>(in.dweight);
      DeviceBuffer<T> dinp = upload<T>(in.dresidual);  // dresidual itself when in place
      if (residual != Residual::kInPlace) poison(dinp);
      const T* residual_grad = residual == Residual::kNone       ? nullptr
                               : residual == Residual::kSeparate ? dresidual.data()
                                                                 : dinp.data();
      rmsnorm_backward(ctx, dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                       rstd.data(), residual_grad, in.n, in.c);
      STRATA_REQUIRE_CLOSE(T, "dinp", download(dinp),
                           residual == Residual::kNone ? ref.dinp : plus(ref.dinp, in.dresidual));
      STRATA_REQUIRE_CLOSE(T, "dweight increment", minus(download(dweight), in.dweight),
                           ref.dweight);
    }
  }
}

TEMPLATE_TEST_CASE("residual_forward matches the CPU reference, with and without a bias",
                   "[gpu][norm]", float, bf16) {
  // out = residual + branch + bias, as cpu::residual_forward<double> on the same rounded inputs.
  using T = TestType;
  Context ctx;
  uint64_t seed = 5000;
  for (const Shape& shape : kShapes) {
    for (const bool with_bias : {true, false}) {
      INFO("N = " << shape.n << ", C = " << shape.c << (with_bias ? ", bias" : ", no bias"));
      const int64_t n = shape.n, c = shape.c;
      const std::vector<float> residual = rounded<T>(random_floats(n * c, seed += 10)),
                               branch = rounded<T>(random_floats(n * c, seed + 1)),
                               bias = rounded<T>(random_floats(c, seed + 2));
      const std::vector<double> residual_d = to_double(residual), branch_d = to_double(branch),
                                bias_d = to_double(bias);
      std::vector<double> ref(n * c);
      cpu::residual_forward(ref.data(), residual_d.data(), branch_d.data(),
                            with_bias ? bias_d.data() : nullptr, n, c,
                            static_cast<const double*>(nullptr), 1.0);
      DeviceBuffer<T> d_residual = upload<T>(residual), d_branch = upload<T>(branch),
                      d_bias = upload<T>(bias);
      DeviceBuffer<T> out(n * c);
      poison(out);
      residual_forward(ctx, out.data(), d_residual.data(), d_branch.data(),
                       with_bias ? d_bias.data() : nullptr, n, c);
      STRATA_REQUIRE_CLOSE(T, "out", download(out), ref);
    }
  }
}

TEMPLATE_TEST_CASE("residual_forward with a dropout mask matches the CPU reference",
                   "[gpu][norm][dropout]", float, bf16) {
  // Megatron-LM's bias_dropout_add: out = residual + (branch + bias) * mask * dropout_scale, the
  // bias added before the dropout, as cpu::residual_forward<double> with the mask of
  // cpu::dropout_mask (rate 0.3, scale 1 / 0.7). C = 1, 37 (the scalar path) and 64, 264 (16-byte
  // chunks for both types), with and without a bias; a dropped element's out is its residual.
  using T = TestType;
  Context ctx;
  constexpr double kRate = 0.3;
  const float scale = static_cast<float>(1.0 / (1.0 - kRate));
  uint64_t seed = 5500;
  for (const Shape& shape : {Shape{3, 1}, Shape{7, 37}, Shape{5, 64}, Shape{4, 264}}) {
    for (const bool with_bias : {true, false}) {
      INFO("N = " << shape.n << ", C = " << shape.c << (with_bias ? ", bias" : ", no bias"));
      const int64_t n = shape.n, c = shape.c;
      const std::vector<float> residual = rounded<T>(random_floats(n * c, seed += 10)),
                               branch = rounded<T>(random_floats(n * c, seed + 1)),
                               bias = rounded<T>(random_floats(c, seed + 2));
      std::vector<uint64_t> keys(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) keys[i] = cpu::dropout_key(seed, static_cast<uint64_t>(i));
      std::vector<float> mask(n * c);
      cpu::dropout_mask(mask.data(), 4, keys.data(), n, c, kRate);
      const std::vector<double> residual_d = to_double(residual), branch_d = to_double(branch),
                                bias_d = to_double(bias), mask_d = to_double(mask);
      std::vector<double> ref(n * c);
      cpu::residual_forward(ref.data(), residual_d.data(), branch_d.data(),
                            with_bias ? bias_d.data() : nullptr, n, c, mask_d.data(),
                            static_cast<double>(scale));
      DeviceBuffer<T> d_residual = upload<T>(residual), d_branch = upload<T>(branch),
                      d_bias = upload<T>(bias), d_mask = upload<T>(mask);
      DeviceBuffer<T> out(n * c);
      poison(out);
      residual_forward(ctx, out.data(), d_residual.data(), d_branch.data(),
                       with_bias ? d_bias.data() : nullptr, n, c, d_mask.data(), scale);
      const std::vector<float> got = download(out);
      STRATA_REQUIRE_CLOSE(T, "out", got, ref);
      for (int64_t k = 0; k < n * c; ++k) {
        if (mask[k] == 0.0f) CHECK(got[k] == residual[k]);
      }
    }
  }
}

TEMPLATE_TEST_CASE("accumulate adds src into dst", "[gpu][norm]", float, bf16) {
  // dst += src (a residual stream's gradient picking up a branch's): dst - start equals src up to
  // T's rounding of the sum, for n = 1, 7, 1029 (a scalar tail after the 16-byte packs) and
  // offset 1 (every pointer misaligned: the scalar kernel); the element past the range is left
  // as it was.
  using T = TestType;
  Context ctx;
  for (const int64_t n : {1, 7, 1029}) {
    for (const size_t offset : {0, 1}) {
      INFO("n = " << n << ", offset = " << offset);
      const std::vector<float> start = rounded<T>(random_floats(n + 1, 6000 + n)),
                               src = rounded<T>(random_floats(n + 1, 6100 + n));
      DeviceBuffer<T> d_dst = upload<T>(start), d_src = upload<T>(src);
      accumulate(ctx, d_dst.data() + offset, d_src.data() + offset, n);
      const std::vector<float> got = download(d_dst);
      std::vector<double> ref(n);
      std::vector<float> sum(n);
      for (int64_t k = 0; k < n; ++k) {
        ref[k] = static_cast<double>(start[k + offset]) + src[k + offset];
        sum[k] = got[k + offset];
      }
      STRATA_REQUIRE_CLOSE(T, "dst", sum, ref);
      const size_t outside = offset == 0 ? static_cast<size_t>(n) : 0;
      CHECK(got[outside] == start[outside]);
    }
  }
}

TEMPLATE_TEST_CASE(
    "residual_layernorm_forward equals residual_forward then layernorm_forward of the rounded "
    "residual",
    "[gpu][norm]", float, bf16) {
  // residual_out has the bits of residual_forward's out (the same per-element code); out, mean
  // and rstd are those of layernorm_forward reading that stored residual_out, and of
  // cpu::layernorm_forward<double> on it. The statistics are compared within fp32's 1e-5 even
  // for bf16: normalizing the unrounded fp32 sums instead would move them by 2e-5 (C = 20000)
  // to 1e-3 (C = 33) relative.
  using T = TestType;
  Context ctx;
  uint64_t seed = 6000;
  for (const Shape& shape : kShapes) {
    for (const bool with_biases : {true, false}) {
      INFO("N = " << shape.n << ", C = " << shape.c << (with_biases ? ", biases" : ", no biases"));
      const NormInputs<T> in(shape, seed += 10);
      const int64_t n = in.n, c = in.c;
      const std::vector<float> branch = rounded<T>(random_floats(n * c, seed + 7)),
                               residual_bias = rounded<T>(random_floats(c, seed + 8));
      DeviceBuffer<T> residual = upload<T>(in.inp), d_branch = upload<T>(branch),
                      d_residual_bias = upload<T>(residual_bias), weight = upload<T>(in.weight),
                      norm_bias = upload<T>(in.bias);
      const T* bias_or_null = with_biases ? d_residual_bias.data() : nullptr;
      const T* norm_bias_or_null = with_biases ? norm_bias.data() : nullptr;

      DeviceBuffer<T> residual_out(n * c), out(n * c);
      DeviceBuffer<float> mean(n), rstd(n);
      for (auto* buffer : {&residual_out, &out}) poison(*buffer);
      poison(mean);
      poison(rstd);
      residual_layernorm_forward(ctx, residual_out.data(), out.data(), mean.data(), rstd.data(),
                                 residual.data(), d_branch.data(), bias_or_null, weight.data(),
                                 norm_bias_or_null, n, c);

      DeviceBuffer<T> unfused_residual(n * c), unfused_out(n * c);
      DeviceBuffer<float> unfused_mean(n), unfused_rstd(n);
      residual_forward(ctx, unfused_residual.data(), residual.data(), d_branch.data(), bias_or_null,
                       n, c);
      layernorm_forward(ctx, unfused_out.data(), unfused_mean.data(), unfused_rstd.data(),
                        unfused_residual.data(), weight.data(), norm_bias_or_null, n, c);

      CHECK(same_bits(download_raw(residual_out), download_raw(unfused_residual)));
      STRATA_REQUIRE_CLOSE(T, "out against the unfused kernels", download(out),
                           to_double(download(unfused_out)));
      STRATA_REQUIRE_CLOSE(float, "mean against the unfused kernels", download(mean),
                           to_double(download(unfused_mean)));
      STRATA_REQUIRE_CLOSE(float, "rstd against the unfused kernels", download(rstd),
                           to_double(download(unfused_rstd)));

      const LayerNormReference ref = layernorm_reference(download(unfused_residual), in.weight,
                                                         in.bias, in.dout, with_biases, n, c);
      STRATA_REQUIRE_CLOSE(T, "out", download(out), ref.out);
      STRATA_REQUIRE_CLOSE(T, "mean", download(mean), ref.mean);
      STRATA_REQUIRE_CLOSE(T, "rstd", download(rstd), ref.rstd);
    }
  }
}

TEMPLATE_TEST_CASE(
    "residual_rmsnorm_forward equals residual_forward then rmsnorm_forward of the rounded "
    "residual",
    "[gpu][norm]", float, bf16) {
  // As the LayerNorm case: residual_out bit for bit, out and rstd as rmsnorm_forward of the stored
  // residual_out and as cpu::rmsnorm_forward<double> on it; rstd within fp32's 1e-5.
  using T = TestType;
  Context ctx;
  uint64_t seed = 7000;
  for (const Shape& shape : kShapes) {
    for (const bool with_bias : {true, false}) {
      INFO("N = " << shape.n << ", C = " << shape.c << (with_bias ? ", bias" : ", no bias"));
      const NormInputs<T> in(shape, seed += 10);
      const int64_t n = in.n, c = in.c;
      const std::vector<float> branch = rounded<T>(random_floats(n * c, seed + 7)),
                               residual_bias = rounded<T>(random_floats(c, seed + 8));
      DeviceBuffer<T> residual = upload<T>(in.inp), d_branch = upload<T>(branch),
                      d_residual_bias = upload<T>(residual_bias), weight = upload<T>(in.weight);
      const T* bias_or_null = with_bias ? d_residual_bias.data() : nullptr;

      DeviceBuffer<T> residual_out(n * c), out(n * c);
      DeviceBuffer<float> rstd(n);
      poison(residual_out);
      poison(out);
      poison(rstd);
      residual_rmsnorm_forward(ctx, residual_out.data(), out.data(), rstd.data(), residual.data(),
                               d_branch.data(), bias_or_null, weight.data(), n, c);

      DeviceBuffer<T> unfused_residual(n * c), unfused_out(n * c);
      DeviceBuffer<float> unfused_rstd(n);
      residual_forward(ctx, unfused_residual.data(), residual.data(), d_branch.data(), bias_or_null,
                       n, c);
      rmsnorm_forward(ctx, unfused_out.data(), unfused_rstd.data(), unfused_residual.data(),
                      weight.data(), n, c);

      CHECK(same_bits(download_raw(residual_out), download_raw(unfused_residual)));
      STRATA_REQUIRE_CLOSE(T, "out against the unfused kernels", download(out),
                           to_double(download(unfused_out)));
      STRATA_REQUIRE_CLOSE(float, "rstd against the unfused kernels", download(rstd),
                           to_double(download(unfused_rstd)));

      const RmsNormReference ref =
          rmsnorm_reference(download(unfused_residual), in.weight, in.dout, n, c);
      STRATA_REQUIRE_CLOSE(T, "out", download(out), ref.out);
      STRATA_REQUIRE_CLOSE(T, "rstd", download(rstd), ref.rstd);
    }
  }
}

TEMPLATE_TEST_CASE(
    "the norms on buffers that are not 16-byte aligned (the scalar path) match the CPU reference",
    "[gpu][norm]", float, bf16) {
  // Every buffer starts one element past a cudaMalloc'd address, so that no row is 16-byte
  // aligned although C is a multiple of 8: the forwards, backwards (with dresidual) and fused
  // forwards fall back to one element per load and must still match the CPU references.
  using T = TestType;
  Context ctx;
  uint64_t seed = 8000;
  for (const Shape& shape : {Shape{33, 768}, Shape{16, 4096}}) {
    INFO("N = " << shape.n << ", C = " << shape.c);
    const NormInputs<T> in(shape, seed += 10);
    const int64_t n = in.n, c = in.c;
    const std::vector<float> zeros(n * c, 0.0f);
    const T* no_bias = nullptr;
    DeviceBuffer<T> inp = upload<T>(padded(in.inp)), weight = upload<T>(padded(in.weight)),
                    bias = upload<T>(padded(in.bias)), dout = upload<T>(padded(in.dout)),
                    dresidual = upload<T>(padded(in.dresidual)), zero = upload<T>(padded(zeros));
    DeviceBuffer<T> out(n * c + 1), residual_out(n * c + 1), dinp(n * c + 1);
    DeviceBuffer<float> mean(n + 1), rstd(n + 1);
    DeviceBuffer<float> dweight = upload<float>(padded(in.dweight)),
                        dbias = upload<float>(padded(in.dbias));

    const LayerNormReference ln =
        layernorm_reference(in.inp, in.weight, in.bias, in.dout, true, n, c);
    poison(out);
    poison(mean);
    poison(rstd);
    layernorm_forward(ctx, out.data() + 1, mean.data() + 1, rstd.data() + 1, inp.data() + 1,
                      weight.data() + 1, bias.data() + 1, n, c);
    STRATA_REQUIRE_CLOSE(T, "layernorm out", unpadded(download(out)), ln.out);
    STRATA_REQUIRE_CLOSE(T, "layernorm mean", unpadded(download(mean)), ln.mean);
    STRATA_REQUIRE_CLOSE(T, "layernorm rstd", unpadded(download(rstd)), ln.rstd);
    poison(dinp);
    layernorm_backward(ctx, dinp.data() + 1, dweight.data() + 1, dbias.data() + 1, dout.data() + 1,
                       inp.data() + 1, weight.data() + 1, mean.data() + 1, rstd.data() + 1,
                       dresidual.data() + 1, n, c);
    STRATA_REQUIRE_CLOSE(T, "layernorm dinp", unpadded(download(dinp)),
                         plus(ln.dinp, in.dresidual));
    STRATA_REQUIRE_CLOSE(T, "layernorm dweight increment",
                         minus(unpadded(download(dweight)), in.dweight), ln.dweight);
    STRATA_REQUIRE_CLOSE(T, "layernorm dbias increment", minus(unpadded(download(dbias)), in.dbias),
                         ln.dbias);
    // residual + 0 + no bias = inp: the fused forward must give the same statistics.
    poison(residual_out);
    poison(out);
    poison(mean);
    poison(rstd);
    residual_layernorm_forward(ctx, residual_out.data() + 1, out.data() + 1, mean.data() + 1,
                               rstd.data() + 1, inp.data() + 1, zero.data() + 1, no_bias,
                               weight.data() + 1, bias.data() + 1, n, c);
    STRATA_REQUIRE_CLOSE(T, "fused residual_out", unpadded(download(residual_out)),
                         to_double(in.inp));
    STRATA_REQUIRE_CLOSE(T, "fused layernorm out", unpadded(download(out)), ln.out);
    STRATA_REQUIRE_CLOSE(T, "fused layernorm mean", unpadded(download(mean)), ln.mean);

    const RmsNormReference rms = rmsnorm_reference(in.inp, in.weight, in.dout, n, c);
    DeviceBuffer<float> rms_dweight = upload<float>(padded(in.dweight));
    poison(out);
    poison(rstd);
    rmsnorm_forward(ctx, out.data() + 1, rstd.data() + 1, inp.data() + 1, weight.data() + 1, n, c);
    STRATA_REQUIRE_CLOSE(T, "rmsnorm out", unpadded(download(out)), rms.out);
    STRATA_REQUIRE_CLOSE(T, "rmsnorm rstd", unpadded(download(rstd)), rms.rstd);
    poison(dinp);
    rmsnorm_backward(ctx, dinp.data() + 1, rms_dweight.data() + 1, dout.data() + 1, inp.data() + 1,
                     weight.data() + 1, rstd.data() + 1, dresidual.data() + 1, n, c);
    STRATA_REQUIRE_CLOSE(T, "rmsnorm dinp", unpadded(download(dinp)), plus(rms.dinp, in.dresidual));
    STRATA_REQUIRE_CLOSE(T, "rmsnorm dweight increment",
                         minus(unpadded(download(rms_dweight)), in.dweight), rms.dweight);
    poison(residual_out);
    poison(out);
    poison(rstd);
    residual_rmsnorm_forward(ctx, residual_out.data() + 1, out.data() + 1, rstd.data() + 1,
                             inp.data() + 1, zero.data() + 1, no_bias, weight.data() + 1, n, c);
    STRATA_REQUIRE_CLOSE(T, "fused rmsnorm out", unpadded(download(out)), rms.out);
    STRATA_REQUIRE_CLOSE(T, "fused rmsnorm rstd", unpadded(download(rstd)), rms.rstd);

    poison(out);
    residual_forward(ctx, out.data() + 1, inp.data() + 1, dresidual.data() + 1, bias.data() + 1, n,
                     c);
    std::vector<double> sum(n * c);
    for (int64_t k = 0; k < n * c; ++k) {
      sum[k] = static_cast<double>(in.inp[k]) + in.dresidual[k] + in.bias[k % c];
    }
    STRATA_REQUIRE_CLOSE(T, "residual out", unpadded(download(out)), sum);
  }
}

TEST_CASE("the norms reject a negative size and launch nothing for N = 0", "[gpu][norm]") {
  // kernels/cuda/kernels.hpp: a shape a kernel cannot run throws std::invalid_argument naming
  // the size; an empty batch is a no-op that leaves the outputs and accumulators as they were.
  Context ctx;
  const std::vector<float> start = random_floats(8, 1);
  DeviceBuffer<float> x = upload<float>(start), stats = upload<float>(start),
                      grad = upload<float>(start);
  CHECK_THROWS_AS(layernorm_forward(ctx, x.data(), stats.data(), stats.data(), x.data(), x.data(),
                                    x.data(), -1, 8),
                  std::invalid_argument);
  CHECK_THROWS_WITH(rmsnorm_backward(ctx, x.data(), grad.data(), x.data(), x.data(), x.data(),
                                     stats.data(), x.data(), 1, -8),
                    Catch::Contains("c = -8"));
  CHECK_THROWS_AS(residual_forward(ctx, x.data(), x.data(), x.data(), x.data(), -2, 4),
                  std::invalid_argument);
  const float* none = nullptr;
  layernorm_forward(ctx, x.data(), stats.data(), stats.data(), x.data(), x.data(), none, 0, 8);
  layernorm_backward(ctx, x.data(), grad.data(), grad.data(), x.data(), x.data(), x.data(),
                     stats.data(), stats.data(), none, 0, 8);
  rmsnorm_forward(ctx, x.data(), stats.data(), x.data(), x.data(), 0, 8);
  rmsnorm_backward(ctx, x.data(), grad.data(), x.data(), x.data(), x.data(), stats.data(), none, 0,
                   8);
  residual_layernorm_forward(ctx, x.data(), x.data(), stats.data(), stats.data(), x.data(),
                             x.data(), none, x.data(), none, 0, 8);
  residual_rmsnorm_forward(ctx, x.data(), x.data(), stats.data(), x.data(), x.data(), none,
                           x.data(), 0, 8);
  CHECK(download(x) == start);
  CHECK(download(stats) == start);
  CHECK(download(grad) == start);
}

TEMPLATE_TEST_CASE("the norm backwards give the same bits run after run", "[gpu][norm]", float,
                   bf16) {
  // Determinism (kernels/cuda/kernels.hpp): no float atomics, and partial sums added in a fixed
  // order, so two runs from the same inputs and the same dweight/dbias starts leave identical
  // dinp, dweight and dbias. N past 1024 puts several rows in each block.
  using T = TestType;
  Context ctx;
  uint64_t seed = 9000;
  for (const Shape& shape : {Shape{2053, 96}, Shape{257, 773}, Shape{600, 8200}}) {
    INFO("N = " << shape.n << ", C = " << shape.c);
    const NormInputs<T> in(shape, seed += 10);
    const int64_t n = in.n, c = in.c;
    const LayerNormReference ln =
        layernorm_reference(in.inp, in.weight, in.bias, in.dout, true, n, c);
    DeviceBuffer<T> inp = upload<T>(in.inp), weight = upload<T>(in.weight),
                    dout = upload<T>(in.dout), dresidual = upload<T>(in.dresidual);
    DeviceBuffer<float> mean = upload<float>(as_floats(ln.mean)),
                        rstd = upload<float>(as_floats(ln.rstd));

    std::vector<std::vector<T>> dinps;
    std::vector<std::vector<float>> dweights, dbiases;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<T> dinp(n * c);
      DeviceBuffer<float> dweight = upload<float>(in.dweight), dbias = upload<float>(in.dbias);
      poison(dinp);
      layernorm_backward(ctx, dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                         weight.data(), mean.data(), rstd.data(), dresidual.data(), n, c);
      dinps.push_back(download_raw(dinp));
      dweights.push_back(download_raw(dweight));
      dbiases.push_back(download_raw(dbias));
    }
    CHECK(same_bits(dinps[0], dinps[1]));
    CHECK(same_bits(dweights[0], dweights[1]));
    CHECK(same_bits(dbiases[0], dbiases[1]));
    CHECK(dweights[0] != in.dweight);  // the runs did add something

    const RmsNormReference rms = rmsnorm_reference(in.inp, in.weight, in.dout, n, c);
    DeviceBuffer<float> rms_rstd = upload<float>(as_floats(rms.rstd));
    dinps.clear();
    dweights.clear();
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<T> dinp(n * c);
      DeviceBuffer<float> dweight = upload<float>(in.dweight);
      poison(dinp);
      rmsnorm_backward(ctx, dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                       rms_rstd.data(), dresidual.data(), n, c);
      dinps.push_back(download_raw(dinp));
      dweights.push_back(download_raw(dweight));
    }
    CHECK(same_bits(dinps[0], dinps[1]));
    CHECK(same_bits(dweights[0], dweights[1]));
    CHECK(dweights[0] != in.dweight);
  }
}

}  // namespace
}  // namespace strata::cuda
