#pragma once
// Megatron-LM's --moe-layer-freq: which transformer layers are MoE. Megatron reads
// (megatron/training/arguments.py, moe_freq_type) either
//  - a whole number N: layer i is MoE when i % N == 0, every N-th layer from layer 0
//    (megatron/core/models/gpt/gpt_layer_specs.py, get_gpt_decoder_block_spec), default 1; or
//  - a Python list expression (a string holding '[', which it eval()s) of one 0 (dense) or 1 (MoE)
//    per layer, whose length get_gpt_decoder_block_spec asserts is the number of layers:
//    "([0]*3+[1]*58)" is DeepSeek-V3's 3 dense layers before 58 MoE ones.
// A ModelSpec states only how many dense layers come before the MoE ones (first_dense_layers,
// DeepSeek's first_k_dense_replace), so 1 and the lists of that shape are read, the rest refused.

#include <cstdint>
#include <string>

namespace strata::cli {

// The dense layers before the first MoE layer in the pattern `text` over `layers` layers. A list
// is read as far as such patterns use Python: lists of 0 and 1, + and * (by a whole number), and
// parentheses. Throws InputError naming --moe-layer-freq for anything else, a list whose length
// is not `layers`, a dense layer after an MoE one, or a pattern without an MoE layer.
int64_t first_dense_layers_of(const std::string& text, int64_t layers);

}  // namespace strata::cli
