#pragma once
// The cases strata_bench_kernels times: every kernel of kernels/cuda/kernels.hpp on the sizes of
// one layer, each with the bytes or flops it counts (stated beside it in kernels_bench_cases.cpp).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/kernels_bench_support.hpp"

namespace strata::kernels_bench {

// One transformer layer's sizes, as the issue gives them.
struct Layer {
  std::string name;         // case ids start with it: "gpt2-1.5b/layernorm_forward"
  std::string description;  // its table's title
  int64_t b, t, c, nh, hs, hidden, vocab;
  bool llama;  // RMSNorm, SwiGLU, no biases, no position table; else LayerNorm, GELU, biases, wpe
  int64_t n() const { return b * t; }
  int64_t mlp_up_oc() const { return llama ? 2 * hidden : hidden; }
  // One layer's matrix parameters as the issue counts them: GPT-2 12 C^2 (QKV 3, projection 1,
  // MLP 8); Llama with MHA 4 C^2 + 3 C H (gate, up, down).
  int64_t params() const { return llama ? 4 * c * c + 3 * c * hidden : 12 * c * c; }
};

// The two layers of issue 7: GPT-2 1.5B and Llama 3 8B.
std::vector<Layer> layers();

enum class Bound { kMemory, kCompute };

struct Case {
  std::string layer;
  std::string kernel;  // the kernels.hpp function
  std::string what;    // which product, for the matmuls ("qkv"); else empty
  std::string shape;
  Bound bound;
  double work;    // bytes read and written (kMemory) or flops (kCompute)
  double target;  // share of the ceiling the issue asks for; 0 where it sets none
  std::function<Timing(const Timer&)> run;  // allocates and fills its buffers, times the kernel

  std::string id() const { return layer + "/" + kernel + (what.empty() ? "" : "/" + what); }
  std::string label() const { return what.empty() ? kernel : kernel + " (" + what + ")"; }
};

// Every case of one layer.
std::vector<Case> layer_cases(const Layer& layer);

}  // namespace strata::kernels_bench
