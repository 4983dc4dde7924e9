// GeGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Gemma's MLP activation, on the GPU, as
// kernels/cpu/geglu.cpp: each row of inp is [gate (H) | up (H)] (Megatron-LM's layout) and
// out = gelu(gate) * up, gelu the tanh approximation of gelu_tanh.cuh (Hugging Face's
// gelu_pytorch_tanh). The same launch shapes as swiglu.cu: elementwise within a row and
// memory-bound, each thread moves 16 bytes of gate, up and out at a time (llm.c's Packed128) when
// H is a multiple of the pack and the pointers are aligned, else one element; int64 indices,
// grid-striding.

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu_tanh.cuh"
#include "kernels/cuda/kernels.hpp"

namespace strata::cuda {
namespace {

constexpr int kBlockSize = 256;
// Enough blocks to fill any current GPU many times over; larger sizes grid-stride.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// out is (N,H), inp (N,2H). Pack p covers kWidth channels of one row: row = p / (H / kWidth),
// channels j .. j + kWidth - 1; H is a multiple of kWidth.
template <typename T, int kWidth>
__global__ void geglu_forward_kernel(T* out, const T* inp, int64_t n, int64_t h) {
  const int64_t row_packs = h / kWidth;
  const int64_t packs = n * row_packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t row = p / row_packs;
    const int64_t j = (p - row * row_packs) * kWidth;
    const T* gate_row = inp + row * 2 * h;
    float gate[kWidth];
    float up[kWidth];
    load_floats(gate, gate_row + j);
    load_floats(up, gate_row + h + j);
    float y[kWidth];
    for (int k = 0; k < kWidth; ++k) y[k] = gelu_tanh::value(gate[k]) * up[k];
    store_floats(out + row * h + j, y);
  }
}

// dinp is (N,2H), inp (N,2H), dout (N,H); packs as in geglu_forward_kernel.
// dgate = dout * up * gelu'(gate), dup = dout * gelu(gate).
template <typename T, int kWidth>
__global__ void geglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) {
  const int64_t row_packs = h / kWidth;
  const int64_t packs = n * row_packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t row = p / row_packs;
    const int64_t j = (p - row * row_packs) * kWidth;
    const T* gate_row = inp + row * 2 * h;
    T* dgate_row = dinp + row * 2 * h;
    float gate[kWidth];
    float up[kWidth];
    float dy[kWidth];
    load_floats(gate, gate_row + j);
    load_floats(up, gate_row + h + j);
    load_floats(dy, dout + row * h + j);
    float dgate[kWidth];
    float dup[kWidth];
    for (int k = 0; k < kWidth; ++k) {
      dgate[k] = dy[k] * up[k] * gelu_tanh::derivative(gate[k]);
      dup[k] = dy[k] * gelu_tanh::value(gate[k]);
    }
    store_floats(dgate_row + j, dgate);
    store_floats(dgate_row + h + j, dup);
  }
}

// Blocks for the n * h / width packs: at least one, at most kMaxBlocks.
int blocks_for(int64_t n, int64_t h, int width) {
  return static_cast<int>(std::min(ceil_div(n * (h / width), kBlockSize), kMaxBlocks));
}

}  // namespace

// Packs of 16 bytes when every row's gate, up and out parts start 16-byte aligned: H a multiple
// of the pack (so that the offsets r * 2H, H and r * H are) and the pointers aligned.
template <typename T>
void geglu_forward(Context& ctx, T* out, const T* inp, int64_t n, int64_t h) {
  if (n <= 0 || h <= 0) return;
  constexpr int kPack = Packed128<T>::kSize;
  if (h % kPack == 0 && is_aligned16(out) && is_aligned16(inp)) {
    STRATA_LAUNCH(blocks_for(n, h, kPack), kBlockSize, 0, ctx.stream(),
                  geglu_forward_kernel<T, kPack>)
    (out, inp, n, h);
  } else {
    STRATA_LAUNCH(blocks_for(n, h, 1), kBlockSize, 0, ctx.stream(), geglu_forward_kernel<T, 1>)
    (out, inp, n, h);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void geglu_backward(Context& ctx, T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) {
  if (n <= 0 || h <= 0) return;
  constexpr int kPack = Packed128<T>::kSize;
  if (h % kPack == 0 && is_aligned16(dinp) && is_aligned16(inp) && is_aligned16(dout)) {
    STRATA_LAUNCH(blocks_for(n, h, kPack), kBlockSize, 0, ctx.stream(),
                  geglu_backward_kernel<T, kPack>)
    (dinp, inp, dout, n, h);
  } else {
    STRATA_LAUNCH(blocks_for(n, h, 1), kBlockSize, 0, ctx.stream(), geglu_backward_kernel<T, 1>)
    (dinp, inp, dout, n, h);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template void geglu_forward<float>(Context&, float*, const float*, int64_t, int64_t);
template void geglu_forward<bf16>(Context&, bf16*, const bf16*, int64_t, int64_t);
template void geglu_backward<float>(Context&, float*, const float*, const float*, int64_t, int64_t);
template void geglu_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, int64_t, int64_t);

}  // namespace strata::cuda
