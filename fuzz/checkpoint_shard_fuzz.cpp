// Harness for exec/checkpoint.hpp's shard reader: the bytes as rank 0's shard of step 2 (the corpus
// holds a `strata train` checkpoint of step 2), read as `strata train --resume` reads it
// (read_checkpoint_shard: magic, version, step, every length against the file's size).

#include <cstdint>

#include "exec/checkpoint.hpp"
#include "fuzz/fuzz_support.hpp"

namespace {

constexpr int64_t kStep = 2;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = (strata::fuzz::scratch().path() / "checkpoints").string();
  strata::fuzz::scratch().write(
      std::filesystem::path(strata::checkpoint_step_dir("checkpoints", kStep)) / "rank-00000.bin",
      strata::fuzz::as_text(data, size));
  return strata::fuzz::run_reader([&] { strata::read_checkpoint_shard(dir, kStep, 0); });
}
