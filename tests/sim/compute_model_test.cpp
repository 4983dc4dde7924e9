// The compute cost model: roofline times from FLOPs and bytes, efficiency curves and calibration
// files.

#include <catch2/catch.hpp>

#include <cmath>
#include "common/error.hpp"
#include "sim/compute_model.hpp"
#include "tests/input_error.hpp"
#include "tests/temp_file.hpp"

namespace strata {
namespace {

// Piecewise linear in log10(size): halfway between 1e8 (0.3) and 1e10 (0.7) in log space, at
// 1e9, the efficiency is 0.5; beyond the ends it is flat.
TEST_CASE("efficiency curves interpolate in log size and clamp", "[sim][compute]") {
  const EfficiencyCurve curve{{{1e8, 0.3}, {1e10, 0.7}}};
  CHECK(curve.at(1e9) == Approx(0.5));
  CHECK(curve.at(1e7) == Approx(0.3));
  CHECK(curve.at(1e12) == Approx(0.7));
  CHECK(curve.at(std::sqrt(1e8 * 1e9)) == Approx(0.4));
}

// time = max(flops / (peak * eff_flops), bytes / (bw * eff_mem)) + launch overhead (rounded up
// to whole ns), worked by hand for an A100 (312 TFLOP/s bf16, 2039 GB/s) with flat curves.
TEST_CASE("op time is the roofline plus launch overhead", "[sim][compute]") {
  const DeviceSpec a100 = load_device("a100-80gb");
  DeviceEfficiency eff = default_efficiency(a100);
  eff.launch_overhead_ns = 1000;
  eff.ops[static_cast<size_t>(OpKind::kMatmul)] = {EfficiencyCurve{{{1, 0.5}}},
                                                   EfficiencyCurve{{{1, 0.8}}}};
  eff.ops[static_cast<size_t>(OpKind::kNorm)] = {EfficiencyCurve{{{1, 1.0}}},
                                                 EfficiencyCurve{{{1, 0.8}}}};
  // 8192 x 8192 x 8192 bf16: 2 * 8192^3 = 1.0995e12 FLOPs at 156 TFLOP/s = 7.0482 ms; its
  // 402.7 MB at 1631.2 GB/s take 0.247 ms, so compute binds.
  const OpShape matmul = matmul_op(8192, 8192, 8192, Direction::kForward, DType::kBf16);
  const double matmul_ns = 2.0 * 8192 * 8192 * 8192 / (312e12 * 0.5) * 1e9;
  CHECK(static_cast<double>(compute_time_ns(a100, eff, matmul)) ==
        Approx(matmul_ns + 1000).margin(1.0));
  // A norm over 8192 x 8192 bf16: reads and writes 2 * 134.2 MB at 0.8 * 2039 GB/s = 164.6 us;
  // its 537 MFLOPs at 312 TFLOP/s take 1.7 us, so memory binds.
  const OpShape norm = norm_op(8192, 8192, Direction::kForward, DType::kBf16);
  const double norm_ns = 2.0 * 2 * 8192 * 8192 / (2039e9 * 0.8) * 1e9;
  CHECK(static_cast<double>(compute_time_ns(a100, eff, norm)) ==
        Approx(norm_ns + 1000).margin(1.0));
}

// A grouped GEMM (Megatron's --moe-grouped-gemm) of G groups of m / G rows each does the work of
// one m-row product with G weight matrices, in one kernel: its FLOPs are 2mnk, its bytes the
// m-row product's plus G - 1 more weights read (forward) or read and their gradients written
// (backward), and each group's tiles run at the efficiency of a product of the group's FLOPs
// (2mnk / G): on the A100's default curve, 8 groups of 512 x 4096 x 4096 (2.1e10 FLOPs each)
// take the time of 8 such products less 7 launches, longer than one 4096-row product.
TEST_CASE("a grouped GEMM prices each group at its own size, in one launch", "[sim][compute]") {
  const DeviceSpec a100 = load_device("a100-80gb");
  const DeviceEfficiency eff = default_efficiency(a100);
  const auto fwd = Direction::kForward;
  const auto bwd = Direction::kBackward;
  const OpShape grouped = grouped_matmul_op(8, 4096, 4096, 4096, fwd, DType::kBf16);
  const OpShape whole = matmul_op(4096, 4096, 4096, fwd, DType::kBf16);
  CHECK(grouped.flops == whole.flops);
  CHECK(grouped.bytes == whole.bytes + 7 * 4096 * 4096 * 2);
  CHECK(grouped_matmul_op(8, 4096, 4096, 4096, bwd, DType::kBf16).bytes ==
        matmul_op(4096, 4096, 4096, bwd, DType::kBf16).bytes + 7 * 4096 * 4096 * (2 + 2));
  const OpShape group = matmul_op(512, 4096, 4096, fwd, DType::kBf16);
  const double launch = static_cast<double>(a100.launch_overhead_ns);
  const double groups_ns = static_cast<double>(compute_time_ns(a100, eff, group)) - launch;
  CHECK(static_cast<double>(compute_time_ns(a100, eff, grouped)) ==
        Approx(8 * groups_ns + launch).margin(8.0));
  CHECK(compute_time_ns(a100, eff, grouped) > compute_time_ns(a100, eff, whole));
}

// The built-in tables of other devices scale the A100's compute-bound curves by their measured
// matmul maximum over peak (hardware.csv): H100 794.5/989 against A100 271.2/312.
TEST_CASE("H100 defaults scale the A100 matmul curve by the measured maxima", "[sim][compute]") {
  const DeviceEfficiency a100 = default_efficiency(load_device("a100-80gb"));
  const DeviceEfficiency h100 = default_efficiency(load_device("h100-sxm"));
  const double ratio = (794.5 / 989.0) / (271.2 / 312.0);
  CHECK(h100.op(OpKind::kMatmul).flops.at(1e11) ==
        Approx(a100.op(OpKind::kMatmul).flops.at(1e11) * ratio));
  CHECK(h100.op(OpKind::kNorm).memory.at(1e8) == Approx(a100.op(OpKind::kNorm).memory.at(1e8)));
  const DeviceEfficiency h200 = default_efficiency(load_device("h200"));
  CHECK(h200.op(OpKind::kMatmul).flops.at(1e11) == Approx(h100.op(OpKind::kMatmul).flops.at(1e11)));
}

// FP8 on H100: a compute-bound FP8 GEMM reaches 0.72 of the share of the measured FP8 maximum
// (hardware.csv: 1402.6 TFLOP/s) that the bf16 GEMM of that shape reaches of the bf16 one (794.5)
// (sim/default_efficiency.cpp: the factor set from the NeMo H100 FP8 runs), so a GEMM-only layer
// runs 0.72 x 1402.6 / 794.5 = 1.27x faster in FP8.
TEST_CASE("FP8 GEMMs on H100 run against the FP8 roof", "[sim][compute][fp8]") {
  const DeviceSpec h100 = load_device("h100-sxm");
  DeviceEfficiency eff = default_efficiency(h100);
  eff.launch_overhead_ns = 0;
  const auto fwd = Direction::kForward;
  for (const int64_t n : {int64_t{8192}, int64_t{16384}}) {
    const OpShape bf16 = matmul_op(n, n, n, fwd, DType::kBf16);
    const OpShape fp8 = matmul_op(n, n, n, fwd, DType::kFp8);
    const double bf16_ns = static_cast<double>(compute_time_ns(h100, eff, bf16));
    const double fp8_ns = static_cast<double>(compute_time_ns(h100, eff, fp8));
    CHECK(bf16_ns / fp8_ns == Approx(0.72 * 1402.6 / 794.5).epsilon(1e-4));
    const double bf16_share = static_cast<double>(bf16.flops) / (bf16_ns * 1e-9) / 794.5e12;
    const double fp8_share = static_cast<double>(fp8.flops) / (fp8_ns * 1e-9) / 1402.6e12;
    CHECK(fp8_share == Approx(0.72 * bf16_share).epsilon(1e-4));
  }
}

// A calibration file replaces the tables it names and keeps the built-in ones for the rest.
TEST_CASE("a calibration file overrides the named tables", "[sim][compute][calibration]") {
  const test::TempFile file(R"({"devices": [{"device": "a100-80gb", "comm_slowdown": 0.2,
      "launch_overhead_us": 2.5,
      "ops": {"matmul": {"flops_efficiency": [[1e9, 0.4], [1e11, 0.9]]}}}]})",
                            "strata_calibration");
  const Calibration calibration = load_calibration(file.path());
  const DeviceSpec a100 = load_device("a100-80gb");
  const DeviceEfficiency eff = efficiency_for(a100, calibration);
  CHECK(eff.comm_slowdown == Approx(0.2));
  CHECK(eff.launch_overhead_ns == 2500);
  CHECK(eff.op(OpKind::kMatmul).flops.at(1e10) == Approx(0.65));
  CHECK(eff.op(OpKind::kNorm).memory.at(1e8) ==
        Approx(default_efficiency(a100).op(OpKind::kNorm).memory.at(1e8)));
  // Another device falls back to its built-in tables.
  const DeviceSpec h100 = load_device("h100-sxm");
  CHECK(efficiency_for(h100, calibration).op(OpKind::kMatmul).flops.at(1e10) ==
        Approx(default_efficiency(h100).op(OpKind::kMatmul).flops.at(1e10)));
}

// Bad calibration files are refused naming the file and the field.
TEST_CASE("bad calibration files name the field at fault", "[sim][compute][calibration]") {
  const auto field_of = [](const std::string& text) {
    const test::TempFile file(text, "strata_calibration");
    const auto error = test::input_error_of([&] { load_calibration(file.path()); });
    return error ? error->field() : std::string("(accepted)");
  };
  CHECK(field_of(R"({"devices": []})") == "devices");
  CHECK(field_of(R"({"devices": [{"device": "a100-80gb", "ops": {"matmull": {}}}]})") ==
        "devices[0].ops.matmull");
  CHECK(field_of(R"({"devices": [{"device": "a100-80gb", "ops": {"matmul":
      {"flops_efficiency": [[1e9, 1.5]]}}}]})") == "devices[0].ops.matmul.flops_efficiency");
  CHECK(field_of(R"({"devices": [{"device": "a100-80gb", "ops": {"matmul":
      {"flops_efficiency": [[1e9, 0.5], [1e8, 0.6]]}}}]})") ==
        "devices[0].ops.matmul.flops_efficiency");
  CHECK(field_of(R"({"device": "a100-80gb"})") == "device");
}

}  // namespace
}  // namespace strata
