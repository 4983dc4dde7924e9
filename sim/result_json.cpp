#include "sim/result_json.hpp"

namespace strata {

nlohmann::json comm_seconds_json(const CommSeconds& comm) {
  return {{"tp", comm.tp}, {"cp", comm.cp}, {"ep", comm.ep}, {"dp", comm.dp}, {"pp", comm.pp}};
}

nlohmann::json memory_breakdown_json(const MemoryBreakdown& memory) {
  return {{"params", memory.params},
          {"grads", memory.grads},
          {"optimizer", memory.optimizer},
          {"activations", memory.activations},
          {"buffers", memory.buffers}};
}

nlohmann::json stage_result_json(const StageResult& stage) {
  return {{"stage", stage.stage},
          {"busy_s", stage.busy_s},
          {"idle_s", stage.idle_s},
          {"bubble_fraction", stage.bubble_fraction},
          {"exposed_comm_s", comm_seconds_json(stage.exposed_comm_s)},
          {"comm_s", comm_seconds_json(stage.comm_s)},
          {"peak_memory_bytes", stage.peak_memory_bytes},
          {"memory", memory_breakdown_json(stage.memory)}};
}

}  // namespace strata
