// Softmax cross-entropy on the GPU (kernels/cuda/cross_entropy.cu) against the CPU steps
// (kernels/cpu/cross_entropy.cpp) computed in double on the same logits rounded to T: the fused
// kernel out of place and in place, with rows 16-byte aligned (the vector path) and not; the
// vocabulary-parallel steps over two shards with the all-reduces done on the host; logits whose
// exp overflows fp32; and the same bits run after run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using test::download;
using test::poison;
using test::random_floats;
using test::random_tokens;
using test::rounded;
using test::upload;
using test::upload_tokens;

struct Shape {
  int64_t n;
  int64_t v;
};

// (1,1): one logit, so loss 0 and gradient 0; (1,7): shorter than a warp and odd; (5,1000):
// rows of whole 16-byte packs in fp32 and bf16; (33,50257): GPT-2's odd vocabulary, element by
// element; (4,128256): Llama 3's vocabulary in packs.
const std::vector<Shape> kShapes = {{1, 1}, {1, 7}, {5, 1000}, {33, 50257}, {4, 128256}};

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// x without its first count elements.
std::vector<float> drop_front(std::vector<float> x, int64_t count) {
  x.erase(x.begin(), x.begin() + count);
  return x;
}

// The CPU steps in double over one shard holding the whole vocabulary (vocab_start 0):
// row_max -> cross_entropy_partials -> cross_entropy_losses, and cross_entropy_backward.
struct Reference {
  std::vector<double> maxes, sums, targets_logit, losses, dlogits;
};

Reference reference(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                    double scale, int64_t n, int64_t v) {
  const std::vector<double> x = widen(logits);
  Reference r{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n),
              std::vector<double>(n), std::vector<double>(n * v)};
  cpu::row_max<double>(r.maxes.data(), x.data(), n, v);
  cpu::cross_entropy_partials<double>(r.sums.data(), r.targets_logit.data(), x.data(),
                                      r.maxes.data(), targets.data(), 0, n, v);
  cpu::cross_entropy_losses<double>(r.losses.data(), r.sums.data(), r.maxes.data(),
                                    r.targets_logit.data(), n);
  cpu::cross_entropy_backward<double>(r.dlogits.data(), x.data(), r.maxes.data(), r.sums.data(),
                                      targets.data(), 0, scale, n, v);
  return r;
}

struct FusedOutputs {
  std::vector<float> losses, dlogits;
};

// fused_cross_entropy on logits placed offset elements into their buffer (offset 1 breaks the
// 16-byte alignment of every row), writing dlogits into a buffer of its own at the same offset,
// or over the logits when in_place. Outputs are poisoned first.
template <typename T>
FusedOutputs run_fused(Context& ctx, const std::vector<float>& logits,
                       const std::vector<int32_t>& targets, float scale, int64_t n, int64_t v,
                       bool in_place, int64_t offset) {
  std::vector<float> placed(offset, 1.0f);
  placed.insert(placed.end(), logits.begin(), logits.end());
  auto d_logits = upload<T>(placed);
  auto d_targets = upload_tokens(targets);
  test::DeviceBuffer<float> d_losses(n);
  test::DeviceBuffer<T> d_dlogits(offset + n * v);
  poison(d_losses);
  poison(d_dlogits);
  T* dlogits = in_place ? d_logits.data() + offset : d_dlogits.data() + offset;
  fused_cross_entropy<T>(ctx, d_losses.data(), dlogits, d_logits.data() + offset, d_targets.data(),
                         scale, n, v);
  return {download(d_losses), drop_front(download(in_place ? d_logits : d_dlogits), offset)};
}

// losses = log(sum_j exp(logit_j)) - logit_target and dlogits = scale * (softmax - onehot), as
// the CPU steps with vocab_start 0; out of place and in place, rows aligned and not. Losses are
// fp32 whatever T is, so they meet fp32's tolerance.
TEMPLATE_TEST_CASE("fused_cross_entropy matches the CPU steps", "[gpu][cross_entropy]", float,
                   bf16) {
  using T = TestType;
  Context ctx;
  for (const Shape& s : kShapes) {
    const auto logits = rounded<T>(random_floats(s.n * s.v, 21, -4.0f, 4.0f));
    const auto targets = random_tokens(s.n, 22, static_cast<int32_t>(s.v));
    const float scale = 1.0f / static_cast<float>(s.n);
    const Reference ref = reference(logits, targets, scale, s.n, s.v);
    for (const bool in_place : {false, true}) {
      for (const int64_t offset : {0, 1}) {
        const FusedOutputs out =
            run_fused<T>(ctx, logits, targets, scale, s.n, s.v, in_place, offset);
        INFO("n " << s.n << " v " << s.v << " in place " << in_place << " offset " << offset);
        STRATA_REQUIRE_CLOSE(float, "losses", out.losses, ref.losses);
        STRATA_REQUIRE_CLOSE(T, "dlogits", out.dlogits, ref.dlogits);
      }
    }
  }
}

// Logits in [80, 100]: exp(logit) overflows fp32 (past exp(88.7)), so this passes only if the
// row max is subtracted before exp, as the reference does.
TEMPLATE_TEST_CASE("fused_cross_entropy subtracts the row max before exp", "[gpu][cross_entropy]",
                   float, bf16) {
  using T = TestType;
  Context ctx;
  const int64_t n = 3, v = 1000;
  const auto logits = rounded<T>(random_floats(n * v, 23, 80.0f, 100.0f));
  const auto targets = random_tokens(n, 24, static_cast<int32_t>(v));
  const float scale = 1.0f / static_cast<float>(n);
  const Reference ref = reference(logits, targets, scale, n, v);
  const FusedOutputs out = run_fused<T>(ctx, logits, targets, scale, n, v, false, 0);
  STRATA_REQUIRE_CLOSE(float, "losses", out.losses, ref.losses);
  STRATA_REQUIRE_CLOSE(T, "dlogits", out.dlogits, ref.dlogits);
}

// The same logits and targets give the same bits twice (fixed-order reductions, no atomics).
TEMPLATE_TEST_CASE("fused_cross_entropy is deterministic", "[gpu][cross_entropy]", float, bf16) {
  using T = TestType;
  Context ctx;
  for (const Shape& s : {Shape{33, 50257}, Shape{4, 128256}}) {
    const auto logits = rounded<T>(random_floats(s.n * s.v, 25, -4.0f, 4.0f));
    const auto targets = random_tokens(s.n, 26, static_cast<int32_t>(s.v));
    const float scale = 1.0f / static_cast<float>(s.n);
    const FusedOutputs first = run_fused<T>(ctx, logits, targets, scale, s.n, s.v, false, 0);
    const FusedOutputs second = run_fused<T>(ctx, logits, targets, scale, s.n, s.v, false, 0);
    INFO("n " << s.n << " v " << s.v);
    CHECK(std::memcmp(first.losses.data(), second.losses.data(),
                      first.losses.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(first.dlogits.data(), second.dlogits.data(),
                      first.dlogits.size() * sizeof(float)) == 0);
  }
}

// A row needs one logit at least: v = 0 has no target in [0, V) and is refused before any launch.
TEMPLATE_TEST_CASE("fused_cross_entropy refuses v = 0", "[gpu][cross_entropy]", float, bf16) {
  using T = TestType;
  Context ctx;
  CHECK_THROWS_AS(fused_cross_entropy<T>(ctx, nullptr, nullptr, nullptr, nullptr, 1.0f, 1, 0),
                  std::invalid_argument);
}

struct ShardedShape {
  int64_t n;
  int64_t v;
  int64_t split;  // shard 0 holds columns [0, split), shard 1 [split, v)
};

// Shards of 3 and 4 columns (4 is one fp32 pack); of 501 and 499 (both element by element);
// of 25000 (in packs: a multiple of 8) and 25257 (not); of 64128 each (both in packs).
const std::vector<ShardedShape> kShardedShapes = {
    {1, 7, 3}, {5, 1000, 501}, {33, 50257, 25000}, {4, 128256, 64128}};

// Two shards of one vocabulary, with the all-reduces done on the host in fp32: row_max per
// shard, max over the shards; cross_entropy_partials per shard with the global maxes, sums and
// targets_logit added over the shards; cross_entropy_losses; cross_entropy_backward per shard
// (shard 1 in place) reassembled into (N,V). Each step equals the one-shard CPU reference: the
// maxes exactly, the fp32 statistics within fp32's tolerance, dlogits within T's.
TEMPLATE_TEST_CASE("the vocabulary-parallel steps over two shards match the CPU steps",
                   "[gpu][cross_entropy]", float, bf16) {
  using T = TestType;
  Context ctx;
  for (const ShardedShape& s : kShardedShapes) {
    const auto logits = rounded<T>(random_floats(s.n * s.v, 27, -4.0f, 4.0f));
    const auto targets = random_tokens(s.n, 28, static_cast<int32_t>(s.v));
    const float scale = 1.0f / static_cast<float>(s.n);
    const Reference ref = reference(logits, targets, scale, s.n, s.v);
    INFO("n " << s.n << " v " << s.v << " split " << s.split);

    const int64_t starts[2] = {0, s.split};
    const int64_t widths[2] = {s.split, s.v - s.split};
    std::vector<float> shard[2];
    for (int k = 0; k < 2; ++k) {
      for (int64_t i = 0; i < s.n; ++i) {
        const auto row = logits.begin() + i * s.v + starts[k];
        shard[k].insert(shard[k].end(), row, row + widths[k]);
      }
    }
    test::DeviceBuffer<T> d_shard[2] = {upload<T>(shard[0]), upload<T>(shard[1])};
    auto d_targets = upload_tokens(targets);
    test::DeviceBuffer<float> d_part_a(s.n), d_part_b(s.n);

    // 1. row_max, then the max over the shards.
    std::vector<float> maxes(s.n, -INFINITY);
    for (int k = 0; k < 2; ++k) {
      poison(d_part_a);
      row_max<T>(ctx, d_part_a.data(), d_shard[k].data(), s.n, widths[k]);
      const std::vector<float> shard_maxes = download(d_part_a);
      for (int64_t i = 0; i < s.n; ++i) maxes[i] = std::max(maxes[i], shard_maxes[i]);
    }
    CHECK(widen(maxes) == ref.maxes);
    auto d_maxes = upload<float>(maxes);

    // 2. cross_entropy_partials with the global maxes, then the sums over the shards.
    std::vector<float> sums(s.n, 0.0f), targets_logit(s.n, 0.0f);
    for (int k = 0; k < 2; ++k) {
      poison(d_part_a);
      poison(d_part_b);
      cross_entropy_partials<T>(ctx, d_part_a.data(), d_part_b.data(), d_shard[k].data(),
                                d_maxes.data(), d_targets.data(), starts[k], s.n, widths[k]);
      const std::vector<float> shard_sums = download(d_part_a);
      const std::vector<float> shard_targets_logit = download(d_part_b);
      for (int64_t i = 0; i < s.n; ++i) {
        sums[i] += shard_sums[i];
        targets_logit[i] += shard_targets_logit[i];
      }
    }
    STRATA_REQUIRE_CLOSE(float, "sums", sums, ref.sums);
    STRATA_REQUIRE_CLOSE(float, "targets_logit", targets_logit, ref.targets_logit);
    auto d_sums = upload<float>(sums);
    auto d_targets_logit = upload<float>(targets_logit);

    // 3. cross_entropy_losses.
    test::DeviceBuffer<float> d_losses(s.n);
    poison(d_losses);
    cross_entropy_losses(ctx, d_losses.data(), d_sums.data(), d_maxes.data(),
                         d_targets_logit.data(), s.n);
    STRATA_REQUIRE_CLOSE(float, "losses", download(d_losses), ref.losses);

    // The backward: shard 0 into a buffer of its own, shard 1 over its logits.
    test::DeviceBuffer<T> d_dshard0(s.n * widths[0]);
    poison(d_dshard0);
    T* dlogits[2] = {d_dshard0.data(), d_shard[1].data()};
    for (int k = 0; k < 2; ++k) {
      cross_entropy_backward<T>(ctx, dlogits[k], d_shard[k].data(), d_maxes.data(), d_sums.data(),
                                d_targets.data(), starts[k], scale, s.n, widths[k]);
    }
    const std::vector<float> dshard[2] = {download(d_dshard0), download(d_shard[1])};
    std::vector<float> dlogits_out(s.n * s.v);
    for (int k = 0; k < 2; ++k) {
      for (int64_t i = 0; i < s.n; ++i) {
        std::copy_n(dshard[k].begin() + i * widths[k], widths[k],
                    dlogits_out.begin() + i * s.v + starts[k]);
      }
    }
    STRATA_REQUIRE_CLOSE(T, "dlogits", dlogits_out, ref.dlogits);
  }
}

}  // namespace
}  // namespace strata::cuda
