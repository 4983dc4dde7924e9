// The executor interprets the task graph: its runtime (exec/rank_runtime.cpp,
// exec/runtime_compute.cpp, exec/runtime_state.hpp) runs each task on the tensors it names, by
// its op's kind, function and direction and its collective's kind, and never looks at what the
// plan compiler labels a task for reports and traces: its role, layer, bucket or buffer class
// (plan/task_graph.hpp). This test reads the sources and fails on any such use, so that a new
// model family or schedule cannot be run by special-casing a label (docs/design.md, "Executor").

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace strata {

TEST_CASE("the runtime reads no task labels: roles, layers, buckets, buffer classes", "[exec]") {
  for (const char* file :
       {"exec/rank_runtime.cpp", "exec/runtime_compute.cpp", "exec/runtime_state.hpp"}) {
    INFO(file);
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/" + file);
    REQUIRE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    const std::string source = text.str();
    for (const char* label :
         {"TaskRole", "task.role", "task.layer", "task.bucket", "task.buffer", "BufferClass",
          "task.chunk", "task.phase", "Phase::", "ParamBucket"}) {
      INFO(label);
      CHECK(source.find(label) == std::string::npos);
    }
  }
}

}  // namespace strata
