#include "plan/lowering_context.hpp"

#include <utility>

#include "common/error.hpp"

namespace strata {

LayerParams::LayerParams(const std::vector<ParamTensorSpec>& specs) {
  const std::pair<const char*, int*> names[] = {{"norm1_w", &norm1_w},
                                                {"norm1_b", &norm1_b},
                                                {"qkv_w", &qkv_w},
                                                {"qkv_b", &qkv_b},
                                                {"q_norm_w", &q_norm_w},
                                                {"k_norm_w", &k_norm_w},
                                                {"out_w", &out_w},
                                                {"out_b", &out_b},
                                                {"post_attn_norm_w", &post_attn_norm_w},
                                                {"post_attn_norm_b", &post_attn_norm_b},
                                                {"norm2_w", &norm2_w},
                                                {"norm2_b", &norm2_b},
                                                {"up_w", &up_w},
                                                {"up_b", &up_b},
                                                {"down_w", &down_w},
                                                {"down_b", &down_b},
                                                {"post_mlp_norm_w", &post_mlp_norm_w},
                                                {"post_mlp_norm_b", &post_mlp_norm_b},
                                                {"router_w", &router_w},
                                                {"router_b", &router_b},
                                                {"experts_up_w", &experts_up_w},
                                                {"experts_down_w", &experts_down_w},
                                                {"shared_up_w", &shared_up_w},
                                                {"shared_down_w", &shared_down_w},
                                                {"shared_gate_w", &shared_gate_w},
                                                {"q_down_w", &q_down_w},
                                                {"q_down_b", &q_down_b},
                                                {"q_layernorm_w", &q_layernorm_w},
                                                {"q_up_w", &q_up_w},
                                                {"q_w", &q_w},
                                                {"kv_down_w", &kv_down_w},
                                                {"kv_down_b", &kv_down_b},
                                                {"kv_layernorm_w", &kv_layernorm_w},
                                                {"kv_up_w", &kv_up_w}};
  for (size_t i = 0; i < specs.size(); ++i) {
    for (const auto& [name, index] : names) {
      if (specs[i].name == name) *index = static_cast<int>(i);
    }
  }
}

RankState::StoredLayer& RankState::stored_for_backward(int64_t layer) {
  StoredQueue& waiting = stored[static_cast<size_t>(layer)];
  STRATA_ASSERT(!waiting.empty() && waiting.front().micro_batch == program.micro_batch(),
                "a layer's backwards run in the order of its forwards");
  return waiting.front();
}

TensorId RankState::make_scratch(const SlotTable& slots, Slot slot) {
  const int32_t shape = slots.shape[static_cast<size_t>(slot)];
  STRATA_ASSERT(shape >= 0, "a slot the lowering uses has a shape under the plan");
  const TensorId made = program.tensor(TensorKind::kScratch, slots.name[static_cast<size_t>(slot)],
                                       shape, -1, program.micro_batch());
  scratch[static_cast<size_t>(slot)] = made;
  return made;
}

}  // namespace strata
