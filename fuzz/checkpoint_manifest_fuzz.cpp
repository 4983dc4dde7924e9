// Harness for exec/checkpoint.hpp's manifest reader: the bytes as the manifest.json of a
// checkpoint of step 2 whose two shards the harness writes first (write_checkpoint_shard), read as
// `strata train --resume` reads it (verify_checkpoint: format, version, step, world size, the run's
// identity, then each shard's entry against its file's size and checksum). The corpus' manifest
// of those shards (fuzz/README.md) passes; `strata train`'s own manifest differs in identity.

#include <cstdint>

#include "exec/checkpoint.hpp"
#include "fuzz/fuzz_support.hpp"

namespace {

constexpr int64_t kStep = 2;
constexpr int32_t kWorldSize = 2;
constexpr const char* kIdentity = R"({"model": "micro-gpt", "plan": {"dp": 2}, "seed": 1337})";

std::string checkpoint_dir() { return (strata::fuzz::scratch().path() / "checkpoints").string(); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (int32_t rank = 0; rank < kWorldSize; ++rank) {
    strata::CheckpointShard shard;
    shard.step = kStep;
    shard.data_position = 4;
    shard.rng_seed = 1337;
    shard.rng_counter = 10 + static_cast<uint64_t>(rank);
    shard.tensors = {{"wte.param", {0.5f, -0.25f * static_cast<float>(rank)}},
                     {"wte.adam_m", {0.0f, 1e-3f}},
                     {"wte.adam_v", {0.0f, 1e-6f}}};
    strata::write_checkpoint_shard(checkpoint_dir(), rank, shard);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::scratch().write(
      std::filesystem::path(strata::checkpoint_step_dir("checkpoints", kStep)) / "manifest.json",
      strata::fuzz::as_text(data, size));
  return strata::fuzz::run_reader(
      [&] { strata::verify_checkpoint(checkpoint_dir(), kStep, kWorldSize, kIdentity); });
}
