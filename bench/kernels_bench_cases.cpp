// The cases of strata_bench_kernels: for each layer, every kernel of kernels/cuda/kernels.hpp in
// bf16, with the bytes (memory-bound kernels) or flops (products, attention) it counts.

#include "bench/kernels_bench_cases.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace strata::kernels_bench {

std::vector<Layer> layers() {
  return {
      {"gpt2-1.5b",
       "GPT-2 1.5B layer: B 8, T 1024, C 1600, NH 25, HS 64, MLP 6400 with GELU, LayerNorm, "
       "biases, vocabulary 50257",
       8, 1024, 1600, 25, 64, 6400, 50257, false},
      {"llama3-8b",
       "Llama 3 8B layer: B 1, T 8192, C 4096, NH 32, HS 128, run as multi-head attention (32 KV "
       "heads where Llama 3 has 8: our kernels have no GQA), MLP 14336 with SwiGLU, RMSNorm, no "
       "biases, vocabulary 128256",
       1, 8192, 4096, 32, 128, 14336, 128256, true},
  };
}

namespace {

std::string rows_shape(int64_t n, int64_t c) { return fmt::format("N {}, C {}", n, c); }

// One linear layer of the block: out (N,OC) = inp (N,C) @ weight^T (+ bias).
struct Linear {
  const char* what;
  int64_t c, oc;
  bool gelu_after;   // GPT-2's MLP up: the forward applies GELU (matmul_gelu_forward)
  bool gelu_before;  // GPT-2's MLP down: its input was gelu(pre_gelu); the backward applies dGELU
};

void add_matmul_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), c = layer.c, qkv = 3 * layer.nh * layer.hs;
  const std::vector<Linear> linears = {
      {"qkv", c, qkv, false, false},
      {"attn_proj", layer.nh * layer.hs, c, false, false},
      {layer.llama ? "mlp_gate_up" : "mlp_up", c, layer.mlp_up_oc(), !layer.llama, false},
      {"mlp_down", layer.hidden, c, false, !layer.llama},
  };
  const bool bias = !layer.llama;
  for (const Linear& linear : linears) {
    const int64_t in = linear.c, oc = linear.oc;
    const bool gelu = linear.gelu_after, dgelu = linear.gelu_before;
    const std::string shape = fmt::format("N {}, C {} -> OC {}{}", n, in, oc, bias ? ", bias" : "");
    // Forward: 2 N C OC flops (the bias and GELU epilogues are not counted).
    cases.push_back({layer.name, gelu ? "matmul_gelu_forward" : "matmul_forward", linear.what,
                     gelu ? shape + ", GELU" : shape, Bound::kCompute, 2.0 * n * in * oc, 0,
                     [=](const Timer& timer) {
                       const auto inp = random_buffer<bf16>(n * in, -1, 1);
                       const auto weight = random_buffer<bf16>(oc * in, -0.05, 0.05);
                       const auto b = random_buffer<bf16>(bias ? oc : 0, -0.05, 0.05);
                       const DeviceBuffer<bf16> out(n * oc);
                       const DeviceBuffer<bf16> pre_gelu(gelu ? n * oc : 0);
                       return timer.time([&] {
                         if (gelu) {
                           cuda::matmul_gelu_forward(timer.ctx(), out.get(), pre_gelu.get(),
                                                     inp.get(), weight.get(), b.get(), n, in, oc);
                         } else {
                           cuda::matmul_forward(timer.ctx(), out.get(), inp.get(), weight.get(),
                                                b.get(), n, in, oc);
                         }
                       });
                     }});
    // Backward: 4 N C OC flops, dinp = dout @ weight and dweight += dout^T @ inp (the bias's column
    // sums and the dGELU epilogue are not counted).
    cases.push_back({layer.name, "matmul_backward", linear.what, dgelu ? shape + ", dGELU" : shape,
                     Bound::kCompute, 4.0 * n * in * oc, 0, [=](const Timer& timer) {
                       const auto inp = random_buffer<bf16>(n * in, -1, 1);
                       const auto weight = random_buffer<bf16>(oc * in, -0.05, 0.05);
                       const auto dout = random_buffer<bf16>(n * oc, -0.01, 0.01);
                       const auto pre_gelu = random_buffer<bf16>(dgelu ? n * in : 0, -3, 3);
                       const auto dweight = random_buffer<float>(oc * in, -1e-3, 1e-3);
                       const auto dbias = random_buffer<float>(bias ? oc : 0, -1e-3, 1e-3);
                       const DeviceBuffer<bf16> dinp(n * in);
                       return timer.time([&] {
                         cuda::matmul_backward(timer.ctx(), dinp.get(), dweight.get(), dbias.get(),
                                               dout.get(), inp.get(), weight.get(), pre_gelu.get(),
                                               n, in, oc);
                       });
                     }});
  }
}

void add_norm_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), c = layer.c;
  const std::string shape = rows_shape(n, c);
  const auto add = [&](const char* kernel, double bytes, std::function<Timing(const Timer&)> run) {
    cases.push_back({layer.name, kernel, "", shape, Bound::kMemory, bytes, kMemoryTarget, run});
  };
  // residual_forward (no bias: at tp 1 the projection's bias is its product's epilogue):
  // read residual and branch 2 N C bf16; write out N C bf16.
  add("residual_forward", 3 * n * c * kBf16, [=](const Timer& timer) {
    const auto residual = random_buffer<bf16>(n * c, -1, 1);
    const auto branch = random_buffer<bf16>(n * c, -1, 1);
    const DeviceBuffer<bf16> out(n * c);
    return timer.time([&] {
      cuda::residual_forward(timer.ctx(), out.get(), residual.get(), branch.get(),
                             static_cast<const bf16*>(nullptr), n, c);
    });
  });
  if (!layer.llama) {
    // layernorm_forward: read inp N C bf16, weight and bias 2 C bf16; write out N C bf16, mean
    // and rstd 2 N fp32.
    add("layernorm_forward", (2 * n * c + 2 * c) * kBf16 + 2 * n * kF32, [=](const Timer& timer) {
      const auto inp = random_buffer<bf16>(n * c, -2, 2);
      const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
      const auto bias = random_buffer<bf16>(c, -0.5, 0.5);
      const DeviceBuffer<bf16> out(n * c);
      const DeviceBuffer<float> mean(n), rstd(n);
      return timer.time([&] {
        cuda::layernorm_forward(timer.ctx(), out.get(), mean.get(), rstd.get(), inp.get(),
                                weight.get(), bias.get(), n, c);
      });
    });
    // layernorm_backward with the residual stream's gradient added (dresidual): read dout, inp,
    // dresidual 3 N C bf16, weight C bf16, mean and rstd 2 N fp32; write dinp N C bf16; dweight
    // and dbias 2 C fp32 read and written.
    add("layernorm_backward", (4 * n * c + c) * kBf16 + 2 * n * kF32 + 4 * c * kF32,
        [=](const Timer& timer) {
          const auto inp = random_buffer<bf16>(n * c, -2, 2);
          const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
          const auto bias = random_buffer<bf16>(c, -0.5, 0.5);
          const auto dout = random_buffer<bf16>(n * c, -0.01, 0.01);
          const auto dresidual = random_buffer<bf16>(n * c, -0.01, 0.01);
          const auto dweight = random_buffer<float>(c, -1e-3, 1e-3);
          const auto dbias = random_buffer<float>(c, -1e-3, 1e-3);
          const DeviceBuffer<bf16> out(n * c), dinp(n * c);
          const DeviceBuffer<float> mean(n), rstd(n);
          cuda::layernorm_forward(timer.ctx(), out.get(), mean.get(), rstd.get(), inp.get(),
                                  weight.get(), bias.get(), n, c);
          return timer.time([&] {
            cuda::layernorm_backward(timer.ctx(), dinp.get(), dweight.get(), dbias.get(),
                                     dout.get(), inp.get(), weight.get(), mean.get(), rstd.get(),
                                     dresidual.get(), n, c);
          });
        });
    // residual_layernorm_forward (no residual bias, as residual_forward): read residual and branch
    // 2 N C bf16, weight and norm bias 2 C bf16; write residual_out and out 2 N C bf16, mean and
    // rstd 2 N fp32.
    add("residual_layernorm_forward", (4 * n * c + 2 * c) * kBf16 + 2 * n * kF32,
        [=](const Timer& timer) {
          const auto residual = random_buffer<bf16>(n * c, -1, 1);
          const auto branch = random_buffer<bf16>(n * c, -1, 1);
          const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
          const auto norm_bias = random_buffer<bf16>(c, -0.5, 0.5);
          const DeviceBuffer<bf16> residual_out(n * c), out(n * c);
          const DeviceBuffer<float> mean(n), rstd(n);
          return timer.time([&] {
            cuda::residual_layernorm_forward(timer.ctx(), residual_out.get(), out.get(), mean.get(),
                                             rstd.get(), residual.get(), branch.get(),
                                             static_cast<const bf16*>(nullptr), weight.get(),
                                             norm_bias.get(), n, c);
          });
        });
    return;
  }
  // rmsnorm_forward: read inp N C bf16, weight C bf16; write out N C bf16, rstd N fp32.
  add("rmsnorm_forward", (2 * n * c + c) * kBf16 + n * kF32, [=](const Timer& timer) {
    const auto inp = random_buffer<bf16>(n * c, -2, 2);
    const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
    const DeviceBuffer<bf16> out(n * c);
    const DeviceBuffer<float> rstd(n);
    return timer.time([&] {
      cuda::rmsnorm_forward(timer.ctx(), out.get(), rstd.get(), inp.get(), weight.get(), n, c);
    });
  });
  // rmsnorm_backward with dresidual: read dout, inp, dresidual 3 N C bf16, weight C bf16, rstd
  // N fp32; write dinp N C bf16; dweight C fp32 read and written.
  add("rmsnorm_backward", (4 * n * c + c) * kBf16 + n * kF32 + 2 * c * kF32,
      [=](const Timer& timer) {
        const auto inp = random_buffer<bf16>(n * c, -2, 2);
        const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
        const auto dout = random_buffer<bf16>(n * c, -0.01, 0.01);
        const auto dresidual = random_buffer<bf16>(n * c, -0.01, 0.01);
        const auto dweight = random_buffer<float>(c, -1e-3, 1e-3);
        const DeviceBuffer<bf16> out(n * c), dinp(n * c);
        const DeviceBuffer<float> rstd(n);
        cuda::rmsnorm_forward(timer.ctx(), out.get(), rstd.get(), inp.get(), weight.get(), n, c);
        return timer.time([&] {
          cuda::rmsnorm_backward(timer.ctx(), dinp.get(), dweight.get(), dout.get(), inp.get(),
                                 weight.get(), rstd.get(), dresidual.get(), n, c);
        });
      });
  // residual_rmsnorm_forward: read residual and branch 2 N C bf16, weight C bf16; write
  // residual_out and out 2 N C bf16, rstd N fp32.
  add("residual_rmsnorm_forward", (4 * n * c + c) * kBf16 + n * kF32, [=](const Timer& timer) {
    const auto residual = random_buffer<bf16>(n * c, -1, 1);
    const auto branch = random_buffer<bf16>(n * c, -1, 1);
    const auto weight = random_buffer<bf16>(c, 0.5, 1.5);
    const DeviceBuffer<bf16> residual_out(n * c), out(n * c);
    const DeviceBuffer<float> rstd(n);
    return timer.time([&] {
      cuda::residual_rmsnorm_forward(timer.ctx(), residual_out.get(), out.get(), rstd.get(),
                                     residual.get(), branch.get(),
                                     static_cast<const bf16*>(nullptr), weight.get(), n, c);
    });
  });
}

void add_activation_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), h = layer.hidden;
  const auto add = [&](const char* kernel, const std::string& shape, double bytes,
                       std::function<Timing(const Timer&)> run) {
    cases.push_back({layer.name, kernel, "", shape, Bound::kMemory, bytes, kMemoryTarget, run});
  };
  if (!layer.llama) {
    const int64_t count = n * h;
    const std::string shape = fmt::format("{} (N {} x {})", count, n, h);
    // gelu_forward: read inp, write out, count bf16 each.
    add("gelu_forward", shape, 2 * count * kBf16, [=](const Timer& timer) {
      const auto inp = random_buffer<bf16>(count, -3, 3);
      const DeviceBuffer<bf16> out(count);
      return timer.time([&] { cuda::gelu_forward(timer.ctx(), out.get(), inp.get(), count); });
    });
    // gelu_backward: read inp and dout, write dinp, count bf16 each.
    add("gelu_backward", shape, 3 * count * kBf16, [=](const Timer& timer) {
      const auto inp = random_buffer<bf16>(count, -3, 3);
      const auto dout = random_buffer<bf16>(count, -0.01, 0.01);
      const DeviceBuffer<bf16> dinp(count);
      return timer.time(
          [&] { cuda::gelu_backward(timer.ctx(), dinp.get(), inp.get(), dout.get(), count); });
    });
    return;
  }
  const std::string shape = fmt::format("N {}, H {}", n, h);
  // swiglu_forward: read inp (N,2H) bf16; write out (N,H) bf16.
  add("swiglu_forward", shape, 3 * n * h * kBf16, [=](const Timer& timer) {
    const auto inp = random_buffer<bf16>(n * 2 * h, -3, 3);
    const DeviceBuffer<bf16> out(n * h);
    return timer.time([&] { cuda::swiglu_forward(timer.ctx(), out.get(), inp.get(), n, h); });
  });
  // swiglu_backward: read inp (N,2H) and dout (N,H) bf16; write dinp (N,2H) bf16.
  add("swiglu_backward", shape, 5 * n * h * kBf16, [=](const Timer& timer) {
    const auto inp = random_buffer<bf16>(n * 2 * h, -3, 3);
    const auto dout = random_buffer<bf16>(n * h, -0.01, 0.01);
    const DeviceBuffer<bf16> dinp(n * 2 * h);
    return timer.time(
        [&] { cuda::swiglu_backward(timer.ctx(), dinp.get(), inp.get(), dout.get(), n, h); });
  });
}

void add_attention_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t b = layer.b, t = layer.t, nh = layer.nh, hs = layer.hs;
  const int64_t qkv_count = b * t * 3 * nh * hs, out_count = b * t * nh * hs;
  const std::string shape = fmt::format("B {}, T {}, NH {}, HS {}, causal", b, t, nh, hs);
  // Causal flops as FlashAttention-2's benchmark counts them: the two products of the forward,
  // 2 * 2 B NH T T HS, halved by the mask; the backward 2.5x that (five products).
  const double forward_flops = 2.0 * 2.0 * b * nh * t * t * hs / 2;
  const double backward_flops = 2.5 * forward_flops;
  const auto add = [&](const char* kernel, double flops, double target,
                       std::function<Timing(const Timer&)> run) {
    cases.push_back({layer.name, kernel, "", shape, Bound::kCompute, flops, target, run});
  };
  // Path 1 keeps att (B,NH,T,T) bf16: 4 GiB at the Llama layer, and its backward as much again in
  // the context's scratch.
  add("attention_forward", forward_flops, 0, [=](const Timer& timer) {
    const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
    const DeviceBuffer<bf16> out(out_count), att(b * nh * t * t);
    return timer.time([&] {
      cuda::attention_forward(timer.ctx(), out.get(), att.get(), qkv.get(), b, t, nh, hs);
    });
  });
  add("attention_backward", backward_flops, 0, [=](const Timer& timer) {
    const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
    const auto dout = random_buffer<bf16>(out_count, -0.01, 0.01);
    const DeviceBuffer<bf16> out(out_count), att(b * nh * t * t), dqkv(qkv_count);
    cuda::attention_forward(timer.ctx(), out.get(), att.get(), qkv.get(), b, t, nh, hs);
    return timer.time([&] {
      cuda::attention_backward(timer.ctx(), dqkv.get(), dout.get(), qkv.get(), att.get(), b, t, nh,
                               hs);
    });
  });
  // Path 2, tiled: the 40% target applies to its forward at T = 8192.
  add("flash_attention_forward", forward_flops, t == kAttentionTargetT ? kAttentionTarget : 0,
      [=](const Timer& timer) {
        const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
        const DeviceBuffer<bf16> out(out_count);
        const DeviceBuffer<float> lse(b * nh * t);
        return timer.time([&] {
          cuda::flash_attention_forward(timer.ctx(), out.get(), lse.get(), qkv.get(), b, t, nh, hs);
        });
      });
  add("flash_attention_backward", backward_flops, 0, [=](const Timer& timer) {
    const auto qkv = random_buffer<bf16>(qkv_count, -1, 1);
    const auto dout = random_buffer<bf16>(out_count, -0.01, 0.01);
    const DeviceBuffer<bf16> out(out_count), dqkv(qkv_count);
    const DeviceBuffer<float> lse(b * nh * t);
    cuda::flash_attention_forward(timer.ctx(), out.get(), lse.get(), qkv.get(), b, t, nh, hs);
    return timer.time([&] {
      cuda::flash_attention_backward(timer.ctx(), dqkv.get(), dout.get(), qkv.get(), out.get(),
                                     lse.get(), b, t, nh, hs);
    });
  });
}

void add_embedding_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t b = layer.b, t = layer.t, c = layer.c, v = layer.vocab, n = layer.n();
  const bool wpe = !layer.llama;  // Llama has no position table (RoPE rotates q and k)
  const std::string shape = fmt::format("B {}, T {}, C {}, V {}{}", b, t, c, v, wpe ? ", wpe" : "");
  // U: the distinct rows of the table the tokens touch (about 7,560 of 8,192 draws from 50,257).
  const std::vector<int32_t> tokens = draw_tokens(n, v, 11);
  const auto distinct = static_cast<double>(distinct_count(tokens));
  // embedding_forward: read tokens N int32, the U distinct wte rows U C bf16, wpe T C bf16
  // (GPT-2); write out N C bf16.
  cases.push_back({layer.name, "embedding_forward", "", shape, Bound::kMemory,
                   n * kI32 + (distinct * c + (wpe ? t * c : 0) + n * c) * kBf16, kMemoryTarget,
                   [=](const Timer& timer) {
                     const auto ids = upload(tokens);
                     const auto wte = random_buffer<bf16>(v * c, -0.1, 0.1);
                     const auto pos = random_buffer<bf16>(wpe ? t * c : 0, -0.1, 0.1);
                     const DeviceBuffer<bf16> out(n * c);
                     return timer.time([&] {
                       cuda::embedding_forward(timer.ctx(), out.get(), ids.get(), wte.get(),
                                               pos.get(), 0, v, b, t, c);
                     });
                   }});
  // embedding_backward: read dout N C bf16 and tokens N int32; the U distinct dwte rows U C fp32
  // and dwpe T C fp32 (GPT-2) read and written.
  cases.push_back({layer.name, "embedding_backward", "", shape, Bound::kMemory,
                   n * c * kBf16 + n * kI32 + 2 * (distinct * c + (wpe ? t * c : 0)) * kF32,
                   kMemoryTarget, [=](const Timer& timer) {
                     const auto ids = upload(tokens);
                     const auto dout = random_buffer<bf16>(n * c, -0.01, 0.01);
                     const auto dwte = random_buffer<float>(v * c, -1e-3, 1e-3);
                     const auto dwpe = random_buffer<float>(wpe ? t * c : 0, -1e-3, 1e-3);
                     return timer.time([&] {
                       cuda::embedding_backward(timer.ctx(), dwte.get(), dwpe.get(), dout.get(),
                                                ids.get(), 0, v, b, t, c);
                     });
                   }});
}

void add_loss_and_optimizer_cases(std::vector<Case>& cases, const Layer& layer) {
  const int64_t n = layer.n(), v = layer.vocab, p = layer.params();
  // fused_cross_entropy, dlogits apart from logits (the step may pass the same buffer; the bytes
  // are the same): read logits (N,V) bf16 and targets N int32; write dlogits (N,V) bf16 and
  // losses N fp32.
  cases.push_back(
      {layer.name, "fused_cross_entropy", "", fmt::format("N {}, V {}", n, v), Bound::kMemory,
       2 * n * v * kBf16 + n * kI32 + n * kF32, kMemoryTarget, [=](const Timer& timer) {
         const auto logits = random_buffer<bf16>(n * v, -4, 4);
         const auto targets = upload(draw_tokens(n, v, 13));
         const DeviceBuffer<bf16> dlogits(n * v);
         const DeviceBuffer<float> losses(n);
         return timer.time([&] {
           cuda::fused_cross_entropy(timer.ctx(), losses.get(), dlogits.get(), logits.get(),
                                     targets.get(), 1.0f / static_cast<float>(n), n, v);
         });
       }});
  const std::string shape = fmt::format("{} parameters (one layer)", p);
  // adamw_update: read master, grad, m, v 4 P fp32 and the squared norm 1 fp64; write master, m,
  // v 3 P fp32 and param P bf16.
  cases.push_back({layer.name, "adamw_update", "", shape, Bound::kMemory,
                   7 * p * kF32 + p * kBf16 + kF64, kMemoryTarget, [=](const Timer& timer) {
                     const auto master = random_buffer<float>(p, -0.05, 0.05);
                     const auto grad = random_buffer<float>(p, -1e-3, 1e-3);
                     const auto m = random_buffer<float>(p, -1e-4, 1e-4);
                     const auto second = random_buffer<float>(p, 0, 1e-7);
                     const auto norm_squared = random_buffer<double>(1, 0.5, 2);
                     const DeviceBuffer<bf16> param(p);
                     const cuda::AdamWConfig config{3e-4, 0.9, 0.95, 1e-8, 0.1};
                     return timer.time([&] {
                       cuda::adamw_update(timer.ctx(), param.get(), master.get(), grad.get(),
                                          m.get(), second.get(), p, config, 10, norm_squared.get(),
                                          1.0);
                     });
                   }});
  // sum_of_squares: read x P fp32; the total 1 fp64 read and written.
  cases.push_back({layer.name, "sum_of_squares", "", shape, Bound::kMemory, p * kF32 + 2 * kF64,
                   kMemoryTarget, [=](const Timer& timer) {
                     const auto grad = random_buffer<float>(p, -1e-3, 1e-3);
                     const auto total = random_buffer<double>(1, 0, 1);
                     return timer.time(
                         [&] { cuda::sum_of_squares(timer.ctx(), total.get(), grad.get(), p); });
                   }});
}

}  // namespace

std::vector<Case> layer_cases(const Layer& layer) {
  std::vector<Case> cases;
  add_matmul_cases(cases, layer);
  add_norm_cases(cases, layer);
  add_activation_cases(cases, layer);
  add_attention_cases(cases, layer);
  add_embedding_cases(cases, layer);
  add_loss_and_optimizer_cases(cases, layer);
  return cases;
}

}  // namespace strata::kernels_bench
