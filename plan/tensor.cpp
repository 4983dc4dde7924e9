#include "plan/tensor.hpp"

namespace strata {

const char* to_string(TensorKind kind) {
  switch (kind) {
    case TensorKind::kActivation:
      return "activation";
    case TensorKind::kParameter:
      return "parameter";
    case TensorKind::kGradient:
      return "gradient";
    case TensorKind::kOptimizerState:
      return "optimizer_state";
    case TensorKind::kCommBuffer:
      return "comm_buffer";
    case TensorKind::kScratch:
      return "scratch";
  }
  return "?";
}

const char* to_string(Access access) {
  switch (access) {
    case Access::kRead:
      return "read";
    case Access::kWrite:
      return "write";
    case Access::kUpdate:
      return "update";
    case Access::kAlloc:
      return "alloc";
    case Access::kFree:
      return "free";
  }
  return "?";
}

}  // namespace strata
