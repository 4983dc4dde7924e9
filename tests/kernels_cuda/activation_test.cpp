// The activations on the GPU (kernels/cuda/gelu.cu, swiglu.cu, geglu.cu) against the CPU
// references in float64, on the same inputs rounded to T: sizes that are not multiples of the
// 16-byte pack, and pointers one element past alignment (the scalar path), with guard elements
// around each output that must stay as poisoned.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/kernels.hpp"
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

// Elements of room after each buffer: a kernel given data() + offset, n must leave the elements
// outside [offset, offset + n) alone.
constexpr size_t kGuard = 8;

std::vector<double> to_double(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// x placed at element offset of a buffer of x.size() + kGuard elements. Offset 0 is 16-byte
// aligned (cudaMalloc's 256 bytes), offset 1 is not.
template <typename T>
DeviceBuffer<T> upload_at(const std::vector<float>& x, size_t offset) {
  std::vector<float> padded(x.size() + kGuard, 1.0f);
  std::copy(x.begin(), x.end(), padded.begin() + static_cast<std::ptrdiff_t>(offset));
  return upload<T>(padded);
}

// A poisoned output buffer for n elements at offset, with kGuard elements of room.
template <typename T>
DeviceBuffer<T> poisoned_output(size_t n) {
  DeviceBuffer<T> buffer(n + kGuard);
  poison(buffer);
  return buffer;
}

// The n elements at offset, after checking that the elements around them are still poisoned
// (NaN): the kernel wrote nothing outside its range.
template <typename T>
std::vector<float> download_at(const DeviceBuffer<T>& buffer, size_t offset, size_t n) {
  const std::vector<float> all = download(buffer);
  for (size_t i = 0; i < all.size(); ++i) {
    if (i < offset || i >= offset + n) {
      INFO("element " << i << " outside [" << offset << ", " << offset + n << ")");
      CHECK(std::isnan(all[i]));
    }
  }
  return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(offset),
                            all.begin() + static_cast<std::ptrdiff_t>(offset + n));
}

TEMPLATE_TEST_CASE("gelu forward and backward on the GPU match the float64 CPU reference",
                   "[gpu][gelu]", float, bf16) {
  // out = inp * sigmoid(2u), dinp = dout * gelu'(inp) (kernels/cpu/gelu.cpp), inp in [-4, 4]
  // for both tails; n = 1, 7, 1023, 4097 leave a scalar tail after the 16-byte packs, and
  // offset 1 misaligns every pointer (the scalar kernel).
  Context ctx;
  for (const int64_t n : {1, 7, 1023, 4097}) {
    for (const size_t offset : {0, 1}) {
      INFO("n = " << n << ", offset = " << offset);
      const size_t count = static_cast<size_t>(n);
      const std::vector<float> inp = rounded<TestType>(random_floats(count, 100 + n, -4.0f, 4.0f));
      const std::vector<float> dout = rounded<TestType>(random_floats(count, 200 + n));
      const DeviceBuffer<TestType> d_inp = upload_at<TestType>(inp, offset);
      const DeviceBuffer<TestType> d_dout = upload_at<TestType>(dout, offset);
      DeviceBuffer<TestType> d_out = poisoned_output<TestType>(count);
      DeviceBuffer<TestType> d_dinp = poisoned_output<TestType>(count);

      gelu_forward(ctx, d_out.data() + offset, d_inp.data() + offset, n);
      gelu_backward(ctx, d_dinp.data() + offset, d_inp.data() + offset, d_dout.data() + offset, n);

      const std::vector<double> x = to_double(inp);
      const std::vector<double> dy = to_double(dout);
      std::vector<double> ref_out(count);
      std::vector<double> ref_dinp(count);
      cpu::gelu_forward(ref_out.data(), x.data(), n);
      cpu::gelu_backward(ref_dinp.data(), x.data(), dy.data(), n);
      STRATA_REQUIRE_CLOSE(TestType, "gelu out", download_at(d_out, offset, count), ref_out);
      STRATA_REQUIRE_CLOSE(TestType, "gelu dinp", download_at(d_dinp, offset, count), ref_dinp);
    }
  }
}

TEMPLATE_TEST_CASE("swiglu forward and backward on the GPU match the float64 CPU reference",
                   "[gpu][swiglu]", float, bf16) {
  // out = silu(gate) * up, dinp = [dout * up * silu'(gate) | dout * silu(gate)] over rows
  // [gate | up] (kernels/cpu/swiglu.cpp). H = 5 is no multiple of a pack (scalar); H = 12 is of
  // fp32's 4 but not of bf16's 8; H = 1000 and 4104 are of both (16-byte packs); offset 1
  // misaligns every pointer (scalar).
  struct Shape {
    int64_t n, h;
  };
  Context ctx;
  for (const Shape shape : {Shape{3, 5}, Shape{4, 12}, Shape{65, 1000}, Shape{8, 4104}}) {
    for (const size_t offset : {0, 1}) {
      INFO("(N,H) = (" << shape.n << "," << shape.h << "), offset = " << offset);
      const size_t in_count = static_cast<size_t>(shape.n * 2 * shape.h);
      const size_t out_count = static_cast<size_t>(shape.n * shape.h);
      const uint64_t seed = static_cast<uint64_t>(shape.n * 10000 + shape.h);
      const std::vector<float> inp = rounded<TestType>(random_floats(in_count, seed, -4.0f, 4.0f));
      const std::vector<float> dout = rounded<TestType>(random_floats(out_count, seed + 1));
      const DeviceBuffer<TestType> d_inp = upload_at<TestType>(inp, offset);
      const DeviceBuffer<TestType> d_dout = upload_at<TestType>(dout, offset);
      DeviceBuffer<TestType> d_out = poisoned_output<TestType>(out_count);
      DeviceBuffer<TestType> d_dinp = poisoned_output<TestType>(in_count);

      swiglu_forward(ctx, d_out.data() + offset, d_inp.data() + offset, shape.n, shape.h);
      swiglu_backward(ctx, d_dinp.data() + offset, d_inp.data() + offset, d_dout.data() + offset,
                      shape.n, shape.h);

      const std::vector<double> x = to_double(inp);
      const std::vector<double> dy = to_double(dout);
      std::vector<double> ref_out(out_count);
      std::vector<double> ref_dinp(in_count);
      cpu::swiglu_forward(ref_out.data(), x.data(), shape.n, shape.h);
      cpu::swiglu_backward(ref_dinp.data(), x.data(), dy.data(), shape.n, shape.h);
      STRATA_REQUIRE_CLOSE(TestType, "swiglu out", download_at(d_out, offset, out_count), ref_out);
      STRATA_REQUIRE_CLOSE(TestType, "swiglu dinp", download_at(d_dinp, offset, in_count),
                           ref_dinp);
    }
  }
}

TEMPLATE_TEST_CASE("geglu forward and backward on the GPU match the float64 CPU reference",
                   "[gpu][geglu]", float, bf16) {
  // out = gelu(gate) * up, dinp = [dout * up * gelu'(gate) | dout * gelu(gate)] over rows
  // [gate | up] (kernels/cpu/geglu.cpp), gate in [-4, 4] for both tails of gelu. H = 5 and 13
  // are no multiple of a pack (scalar); H = 12 is of fp32's 4 but not of bf16's 8; H = 136 is of
  // both (16-byte packs); offset 1 misaligns every pointer (scalar). Guard elements stay poisoned.
  struct Shape {
    int64_t n, h;
  };
  Context ctx;
  for (const Shape shape : {Shape{3, 5}, Shape{7, 13}, Shape{4, 12}, Shape{9, 136}}) {
    for (const size_t offset : {0, 1}) {
      INFO("(N,H) = (" << shape.n << "," << shape.h << "), offset = " << offset);
      const size_t in_count = static_cast<size_t>(shape.n * 2 * shape.h);
      const size_t out_count = static_cast<size_t>(shape.n * shape.h);
      const uint64_t seed = static_cast<uint64_t>(shape.n * 10000 + shape.h + 7);
      const std::vector<float> inp = rounded<TestType>(random_floats(in_count, seed, -4.0f, 4.0f));
      const std::vector<float> dout = rounded<TestType>(random_floats(out_count, seed + 1));
      const DeviceBuffer<TestType> d_inp = upload_at<TestType>(inp, offset);
      const DeviceBuffer<TestType> d_dout = upload_at<TestType>(dout, offset);
      DeviceBuffer<TestType> d_out = poisoned_output<TestType>(out_count);
      DeviceBuffer<TestType> d_dinp = poisoned_output<TestType>(in_count);

      geglu_forward(ctx, d_out.data() + offset, d_inp.data() + offset, shape.n, shape.h);
      geglu_backward(ctx, d_dinp.data() + offset, d_inp.data() + offset, d_dout.data() + offset,
                     shape.n, shape.h);

      const std::vector<double> x = to_double(inp);
      const std::vector<double> dy = to_double(dout);
      std::vector<double> ref_out(out_count);
      std::vector<double> ref_dinp(in_count);
      cpu::geglu_forward(ref_out.data(), x.data(), shape.n, shape.h);
      cpu::geglu_backward(ref_dinp.data(), x.data(), dy.data(), shape.n, shape.h);
      STRATA_REQUIRE_CLOSE(TestType, "geglu out", download_at(d_out, offset, out_count), ref_out);
      STRATA_REQUIRE_CLOSE(TestType, "geglu dinp", download_at(d_dinp, offset, in_count), ref_dinp);
    }
  }
}

}  // namespace
}  // namespace strata::cuda
