#pragma once
// The Megatron-LM flags that --megatron-args reads and ignores because they change neither a
// step's time nor its memory, each group with its reason (cli/README.md summarizes them). A flag
// that may change either and that Strata does not model is not listed here: it is refused.

#include <optional>
#include <string_view>

namespace strata::cli {

// Why a Megatron-LM flag does not change a step's time or memory, for the flags Strata reads and
// ignores; nullopt for any other flag.
std::optional<std::string_view> ignored_flag_reason(std::string_view flag);

}  // namespace strata::cli
