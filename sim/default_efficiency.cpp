// The built-in efficiency tables of the compute model, and how each number was set.
//
// A100 (the reference): set so that the simulator reproduces Korthikanti et al. 2022 on
// A100-SXM4-80GB: the per-layer forward and backward times of the 22B model
// (data/reference/korthikanti2022_layer_time.csv) and the iteration times of the 22B, 175B,
// 530B and 1T configurations in both recompute modes (data/reference/korthikanti2022.csv);
// `bench/reference_compare` prints the comparison. The matmul curve's ceiling stays below the
// measured matmul maximum of hardware.csv (271.2 of 312 TFLOP/s, 86.9%).
//
// FP8 matmuls (Transformer Engine's GEMMs under --fp8) follow the same rule with the device's
// measured FP8 maximum over its FP8 peak (hardware.csv: H100 1402.6 / 1979 = 70.9%, H200
// 1453.4 / 1979 = 73.4%, B200 3432.5 / 4500 = 76.3%), times kFp8InTraining: in training an FP8
// GEMM reaches a smaller share of its measured maximum than a bf16 one. That factor is set from
// the NeMo 24.07 H100 FP8 pre-training runs (data/reference/nemo_h100_perf.csv): 0.72 gives the
// least mean absolute error of tokens/s over its ten modelled runs, 7.7% (scanned 0.70 to 0.82 by
// 0.02: 8.5, 7.7, 7.9, 8.4, 8.8, 9.7, 10.9%; 22.7% without the factor); `strata validate
// --dataset nemo-h100` prints it. The torchtitan H200 Float8 runs
// (data/reference/torchtitan_runs.csv) check it, and stay too fast (+35 to +40%) for reasons of
// that stack the factor does not stand for (their memory is over-predicted too).
//
// H100, H200, B200 and devices read from files: no end-to-end measurement in data/reference
// covers them, so their tables are the A100's with the compute-bound curves (matmul, attention)
// scaled by the ratio of the device's measured matmul maximum to its dense peak over the A100's
// ratio (hardware.csv: H100 794.5 / 989 = 80.3%, B200 1745 / 2250 = 77.6%; H200 has no bf16
// figure there, and its note says it is the same as H100's, so H200 uses 794.5 / 989 too; flash
// attention scales alike: FlashAttention-3, Shah et al. 2024, runs at up to 75% of H100's bf16
// peak, where FlashAttention-2 reached 73% of A100's);
// memory-bound curves are kept as fractions of HBM bandwidth. Any other device without a measured
// maximum keeps the A100's fractions.

#include "sim/compute_model.hpp"

namespace strata {

namespace {

// Measured matmul maximum over dense peak on A100-SXM4-80GB (hardware.csv): 271.2 / 312.
constexpr double kA100MatmulFraction = 271.2 / 312.0;

// FP8 GEMMs in training reach this share of what bf16 GEMMs reach of their measured maximum
// (set from the NeMo H100 FP8 runs, see the top of this file).
constexpr double kFp8InTraining = 0.72;

// Compute stream slowdown while NCCL kernels run beside it: an assumption (NCCL occupies one
// CTA per channel, typically 8-32 of 108-132 SMs, and competes for HBM bandwidth), to be
// replaced by calibration: compute runs at 1 / (1 + 0.1) of its rate meanwhile.
constexpr double kCommSlowdown = 0.1;

EfficiencyCurve curve(std::vector<std::pair<double, double>> points) {
  return EfficiencyCurve{std::move(points)};
}

// Memory-bound kernels (norms, elementwise, embedding, loss, optimizer): achieved fraction of
// HBM bandwidth by bytes moved; small kernels do not fill the GPU.
EfficiencyCurve streaming_memory() {
  return curve({{1e5, 0.05}, {1e6, 0.30}, {1e7, 0.60}, {1e8, 0.80}, {1e9, 0.85}});
}

DeviceEfficiency a100_efficiency() {
  DeviceEfficiency eff;
  eff.device = "a100-80gb";
  eff.comm_slowdown = kCommSlowdown;
  const EfficiencyCurve memory = streaming_memory();
  const EfficiencyCurve flops_unbound = curve({{1.0, 1.0}});  // never the binding roof
  // Matmul: fraction of dense bf16 peak by the product's FLOPs (2mnk forward).
  eff.ops[static_cast<size_t>(OpKind::kMatmul)] = {
      curve({{1e7, 0.10}, {1e8, 0.30}, {1e9, 0.55}, {1e10, 0.68}, {1e11, 0.74}, {1e12, 0.78}}),
      curve({{1.0, 0.85}})};
  // Attention core as Megatron-LM ran it in 2022: batched products around a fused
  // scale-mask-softmax and a dropout; its bytes count every pass of the (b, heads, s, s) scores
  // through HBM (models/op_shape.cpp), so the memory roof binds at the streaming efficiency.
  eff.ops[static_cast<size_t>(OpKind::kAttention)] = {
      curve({{1e8, 0.20}, {1e10, 0.45}, {1e11, 0.50}}), streaming_memory()};
  // Fused (flash) attention: compute-bound; its FLOPs are the causal pairs it evaluates
  // (models/op_shape.cpp), as FlashAttention's own benchmarks count them. FlashAttention-2 (Dao
  // 2023, arXiv:2307.08691, Sec. 4.1) reports 50-73% of the A100's peak for forward and backward
  // kernels with head dimension 64-128 at sequence lengths 512-16k, the backward at the low end
  // and short sequences below it; one curve stands for both directions, by the kernel's FLOPs
  // (1e10: GPT-3's 12 heads per rank at s 2048; 5e11: Llama 3 8B's 32 heads at s 8192).
  eff.ops[static_cast<size_t>(OpKind::kFlashAttention)] = {
      curve({{1e8, 0.15}, {1e9, 0.35}, {1e10, 0.50}, {1e11, 0.58}, {1e12, 0.62}}),
      streaming_memory()};
  for (const OpKind kind : {OpKind::kNorm, OpKind::kElementwise, OpKind::kEmbedding, OpKind::kLoss,
                            OpKind::kOptimizer, OpKind::kHost}) {
    eff.ops[static_cast<size_t>(kind)] = {flops_unbound, memory};
  }
  return eff;
}

EfficiencyCurve scaled(EfficiencyCurve curve, double factor) {
  for (auto& point : curve.points) point.second *= factor;
  return curve;
}

// The device's measured matmul maximum over its dense bf16 peak, or 0 when unknown.
double matmul_fraction(const DeviceSpec& device) {
  if (device.measured_matmul_bf16_flops > 0 && device.peak_bf16_flops > 0) {
    return device.measured_matmul_bf16_flops / device.peak_bf16_flops;
  }
  if (device.name == "h200") return 794.5 / 989.0;  // hardware.csv's H200 note: as H100
  return 0;
}

}  // namespace

DeviceEfficiency default_efficiency(const DeviceSpec& device) {
  DeviceEfficiency eff = a100_efficiency();
  eff.device = device.name;
  const OpEfficiency& a100_matmul = eff.ops[static_cast<size_t>(OpKind::kMatmul)];
  eff.fp8_matmul = a100_matmul;
  if (device.measured_matmul_fp8_flops > 0 && device.peak_fp8_flops > 0) {
    const double fp8 = device.measured_matmul_fp8_flops / device.peak_fp8_flops;
    eff.fp8_matmul.flops = scaled(a100_matmul.flops, kFp8InTraining * fp8 / kA100MatmulFraction);
  }
  if (const double fraction = matmul_fraction(device); fraction > 0) {
    const double factor = fraction / kA100MatmulFraction;
    for (const OpKind kind : {OpKind::kMatmul, OpKind::kAttention, OpKind::kFlashAttention}) {
      OpEfficiency& op = eff.ops[static_cast<size_t>(kind)];
      op.flops = scaled(op.flops, factor);
    }
  }
  return eff;
}

}  // namespace strata
