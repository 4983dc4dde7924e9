// The attention ops with value heads of their own width (models/op_shape.cpp), which latent
// attention has: each product counted at its width, and with equal widths the ops every other
// model gets.

#include <catch2/catch.hpp>

#include "models/ops.hpp"

namespace strata {
namespace {

// FlashAttention with value heads narrower than the query and key heads (models/op_shape.cpp):
// over the P = s(s+1)/2 causal pairs, the forward's two products q k^T (d wide) and scores v (dv
// wide) execute 2 P b heads (d + dv) FLOPs, the backward's five (q k^T again, dQ, dK over d; dV,
// dP over dv) 2 P b heads (3d + 2dv); the model counts 2 b s^2 heads (d + dv) forward. With dv = d
// its FLOPs and bytes are those of the op every other model gets.
TEST_CASE("attention with a value width of its own counts each product at its width",
          "[ops][mla]") {
  const int64_t b = 2;
  const int64_t s = 256;
  const int64_t heads = 8;
  const int64_t d = 192;
  const int64_t dv = 128;
  const int64_t pairs = s * (s + 1) / 2;
  const auto fwd = Direction::kForward;
  const auto bwd = Direction::kBackward;
  const auto flash = flash_attention_op_with_value_dim;
  const OpShape forward = flash(b, s, heads, d, heads, 0, fwd, DType::kBf16, dv);
  const OpShape backward = flash(b, s, heads, d, heads, 0, bwd, DType::kBf16, dv);
  CHECK(forward.flops == 2 * pairs * b * heads * (d + dv));
  CHECK(backward.flops == 2 * pairs * b * heads * (3 * d + 2 * dv));
  CHECK(forward.model_flops == 2 * b * s * s * heads * (d + dv));
  CHECK(backward.model_flops == 2 * forward.model_flops);
  // q, k, v and the output once each forward: 2 bytes x b s heads (d + d + dv + dv), and the
  // fp32 log-sum-exp.
  CHECK(forward.bytes == 2 * b * s * heads * (2 * d + 2 * dv) + 4 * b * heads * s);
  const OpShape unfused =
      attention_op_with_value_dim(b, s, heads, d, heads, 0, fwd, DType::kBf16, dv);
  CHECK(unfused.flops == 2 * b * s * s * heads * (d + dv));
  for (const Direction dir : {fwd, bwd}) {
    const OpShape flash_as_wide = flash(b, s, heads, d, 2, 64, dir, DType::kBf16, d);
    const OpShape flash_plain = flash_attention_op(b, s, heads, d, 2, 64, dir, DType::kBf16);
    CHECK(flash_as_wide.flops == flash_plain.flops);
    CHECK(flash_as_wide.model_flops == flash_plain.model_flops);
    CHECK(flash_as_wide.bytes == flash_plain.bytes);
    const OpShape as_wide =
        attention_op_with_value_dim(b, s, heads, d, 2, 64, dir, DType::kBf16, d);
    const OpShape plain = attention_op(b, s, heads, d, 2, 64, dir, DType::kBf16);
    CHECK(as_wide.flops == plain.flops);
    CHECK(as_wide.model_flops == plain.model_flops);
    CHECK(as_wide.bytes == plain.bytes);
  }
}

}  // namespace
}  // namespace strata
