// The GEMMs of strata calibrate --backend cuda: the bf16 ceiling (large square products) and
// every distinct product of the zoo's layers per TP size, forward, dX and dW, with the shapes
// plan_op_shapes gives the plan compiler's tasks (plan/op_shapes.cpp).

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "exec/cuda_calibration_sweeps.hpp"
#include "kernels/cuda/kernels.hpp"
#include "models/model_reader.hpp"
#include "plan/op_shapes.hpp"

namespace strata::cuda_calibration {

namespace {

using cuda::bf16;
constexpr size_t kBf16Bytes = sizeof(bf16);

// One forward sample, the backward as the plan prices it (dX and dW, one op), and dX and dW
// apart (recorded, not tabled: dX is the backward's time less dW's).
void time_gemm(Sweep& sweep, const GemmShape& shape, bool backward) {
  // Named variables, not a structured binding, for the lambdas' sake (exec/cpu_calibration.cpp).
  const int64_t m = shape.m;
  const int64_t n = shape.n;
  const int64_t k = shape.k;
  const std::string dims = fmt::format("{}x{}x{}", m, n, k);
  const auto count = [](int64_t a, int64_t b) { return static_cast<size_t>(a * b); };
  const size_t bytes = kBf16Bytes * (2 * count(m, k) + count(n, k) + count(m, n)) +
                       (backward ? sizeof(float) * count(n, k) : 0);
  if (!sweep.fits(bytes, "matmul " + dims)) return;
  const DeviceBuffer inp(kBf16Bytes * count(m, k));
  const DeviceBuffer weight(kBf16Bytes * count(n, k));
  const DeviceBuffer out(kBf16Bytes * count(m, n));
  cuda::Context& ctx = sweep.ctx();
  const auto fwd = Direction::kForward;
  const auto bwd = Direction::kBackward;
  const auto dt = DType::kBf16;
  sweep.time({OpKind::kMatmul, Roof::kFlops, matmul_op(m, n, k, fwd, dt), 0, "fwd " + dims,
              "matmul_forward<bf16>", shape.uses},
             [&] {
               cuda::matmul_forward<bf16>(ctx, out.as<bf16>(), inp.as<bf16>(), weight.as<bf16>(),
                                          nullptr, m, k, n);
             });
  if (!backward) return;
  const DeviceBuffer dinp(kBf16Bytes * count(m, k));
  const DeviceBuffer dweight(sizeof(float) * count(n, k), 0);
  // The forward's output stands in for the output gradient: same shape, finite values.
  const double both_s =
      sweep.time({OpKind::kMatmul, Roof::kFlops, matmul_op(m, n, k, bwd, dt), 0, "bwd " + dims,
                  "matmul_backward<bf16> (dX and dW)", shape.uses},
                 [&] {
                   cuda::matmul_backward<bf16>(ctx, dinp.as<bf16>(), dweight.as<float>(), nullptr,
                                               out.as<bf16>(), inp.as<bf16>(), weight.as<bf16>(),
                                               nullptr, m, k, n);
                 });
  // dW alone: matmul_backward skips dX when dinp is null. Each is 2mnk FLOPs; bytes as each
  // product moves them (dW reads and writes its fp32 accumulator).
  OpShape dw_op = matmul_op(m, n, k, bwd, dt);
  dw_op.flops = dw_op.model_flops = 2 * m * n * k;
  dw_op.bytes = static_cast<int64_t>(kBf16Bytes * (count(m, n) + count(m, k)) +
                                     2 * sizeof(float) * count(n, k));
  Sample dw{OpKind::kMatmul, Roof::kFlops,
            dw_op,           0,
            "dW " + dims,    "matmul_backward<bf16> (dW: dinp null)",
            shape.uses,      false};
  const double dw_s = sweep.time(dw, [&] {
    cuda::matmul_backward<bf16>(ctx, nullptr, dweight.as<float>(), nullptr, out.as<bf16>(),
                                inp.as<bf16>(), weight.as<bf16>(), nullptr, m, k, n);
  });
  if (both_s <= 0 || dw_s <= 0) return;
  OpShape dx_op = dw_op;
  dx_op.bytes = static_cast<int64_t>(kBf16Bytes * (count(m, n) + count(n, k) + count(m, k)));
  sweep.add({OpKind::kMatmul, Roof::kFlops, dx_op, std::max(both_s - dw_s, 0.01 * both_s),
             "dX " + dims, "matmul_backward<bf16> (dX: the backward less dW)", shape.uses, false});
}

}  // namespace

std::vector<GemmShape> zoo_gemm_shapes(const CudaCalibrationOptions& options) {
  std::map<std::array<int64_t, 3>, std::vector<std::string>> uses;
  const std::vector<std::string> names =
      options.models.empty() ? zoo_model_names() : options.models;
  for (const std::string& name : names) {
    const ModelSpec model = load_model(name);
    for (const int64_t tp : options.tp_sizes) {
      if (tp < 1 || model.heads % tp != 0 || model.kv_heads % tp != 0 ||
          model.ffn_hidden % tp != 0) {
        continue;
      }
      for (const int64_t tokens : options.tokens) {
        ParallelPlan plan;
        plan.tp = tp;
        plan.dtype = DType::kBf16;
        plan.seq_len = model.max_seq > 0 ? std::min(tokens, model.max_seq) : tokens;
        plan.micro_batch = std::max<int64_t>(1, tokens / plan.seq_len);
        plan.global_batch = plan.micro_batch;
        const PlanOpShapes ops = plan_op_shapes(model, plan);
        const std::pair<const char*, const OpShapePair*> products[] = {
            {"qkv", &ops.qkv},
            {"attention output", &ops.attn_out},
            {"mlp up", &ops.mlp_up},
            {"mlp down", &ops.mlp_down},
            {"lm head", &ops.lm_head}};
        for (const auto& [product, pair] : products) {
          const OpShape& op = pair->forward;
          if (op.kind != OpKind::kMatmul || op.flops == 0) continue;  // latent attention's qkv
          uses[{op.dims[0], op.dims[1], op.dims[2]}].push_back(
              fmt::format("{} tp{} {} tokens {}", name, tp, tokens, product));
        }
      }
    }
  }
  std::vector<GemmShape> shapes;
  for (auto& [dims, names_of_use] : uses) {
    shapes.push_back({dims[0], dims[1], dims[2], std::move(names_of_use)});
  }
  std::stable_sort(shapes.begin(), shapes.end(), [](const GemmShape& a, const GemmShape& b) {
    return static_cast<double>(a.m) * a.n * a.k < static_cast<double>(b.m) * b.n * b.k;
  });
  return shapes;
}

double measure_gemm_ceiling(Sweep& sweep) {
  const std::vector<int64_t> sizes =
      sweep.quick() ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{4096, 8192, 16384};
  double best = 0;
  for (const int64_t size : sizes) {
    const size_t before = sweep.samples().size();
    time_gemm(sweep, {size, size, size, {"ceiling: square product"}}, false);
    if (sweep.samples().size() == before) continue;
    const Sample& sample = sweep.samples().back();
    best = std::max(best, static_cast<double>(sample.op.flops) / sample.seconds);
  }
  return best;
}

void sweep_zoo_gemms(Sweep& sweep, const CudaCalibrationOptions& options) {
  const std::vector<GemmShape> shapes = zoo_gemm_shapes(options);
  for (const size_t i : spread_indices(shapes.size(), options.max_cases)) {
    time_gemm(sweep, shapes[i], true);
  }
}

}  // namespace strata::cuda_calibration
