#pragma once
// Checkpoint files of `strata train --checkpoint-dir D --checkpoint-every K [--resume]`.
//
// Layout: one directory per checkpointed step, one shard file per rank, one manifest.
//
//   D/step-00000010/rank-00000.bin    rank 0's shard
//   D/step-00000010/rank-00001.bin    rank 1's shard ...
//   D/step-00000010/manifest.json     written last, by rank 0: its presence marks the step complete
//
// Every file is written to a temporary name beside its target ("<name>.tmp.<pid>") and renamed
// into place, so a crash leaves either the old file, the new one, or a stray temporary that
// nothing reads; a step directory without manifest.json is an interrupted checkpoint and ignored.
//
// Shard file (all integers and floats little-endian, whatever the host):
//
//   offset  size  field
//   0       8     magic "STRATACK"
//   8       4     u32 format version (kCheckpointVersion = 1)
//   12      8     i64 step            optimizer steps completed
//   20      8     i64 data_position   sequences the data loader has consumed
//   28      8     u64 rng_seed        the generator's state is (seed, counter)
//   36      8     u64 rng_counter
//   44      8     u64 tensor count
//   then per tensor:
//           8     u64 name length n
//           n     name bytes (UTF-8, no terminator)
//           8     i64 element count c (>= 0)
//           4c    float32 values
//   and nothing after the last tensor.
//
// Worked example: one tensor "w" of 2 values is 52 + (8 + 1 + 8 + 8) = 77 bytes.
//
// Manifest (JSON):
//
//   {"format": "strata checkpoint", "version": 1, "step": 10, "world_size": 2,
//    "identity": {"model": ..., "plan": ..., "seed": 1234},
//    "shards": [{"rank": 0, "file": "rank-00000.bin", "size_bytes": 77,
//                "fnv1a64": "0123456789abcdef"}, ...]}
//
// `identity` is the caller's description of the run (an opaque JSON object); a resume must present
// an equal one. The checksum is FNV-1a 64 (Fowler, Noll, Vo) of the whole file, 16 hex digits; it
// detects corruption, not tampering.
//
// Resuming: newest_complete_checkpoint() finds the step, verify_checkpoint() checks the manifest
// and every shard's size and checksum before anything is loaded, then each rank calls
// read_checkpoint_shard(). Every refusal is an InputError naming the file at fault and the field
// "--resume"; nothing is modified while reading.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

inline constexpr uint32_t kCheckpointVersion = 1;

// A named tensor of this rank: a parameter or an optimizer state (Adam's m, v), in row-major order.
struct CheckpointTensor {
  std::string name;
  std::vector<float> values;
};

// What one rank needs to continue training exactly where it stopped.
struct CheckpointShard {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // sequences the data loader has consumed
  uint64_t rng_seed = 0;      // the generator's state: (seed, counter)
  uint64_t rng_counter = 0;
  std::vector<CheckpointTensor> tensors;  // parameters and optimizer states, this rank's shard
};

// FNV-1a 64 of `bytes` (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t fnv1a64(std::string_view bytes);

// Directory of step `step` under `dir`: checkpoint_step_dir("ckpt", 10) is "ckpt/step-00000010".
std::string checkpoint_step_dir(const std::string& dir, int64_t step);

// Writes dir/step-NNNNNNNN/rank-RRRRR.bin (creating the step directory) through a temporary file
// and a rename. Throws InputError (field "--checkpoint-dir") when it cannot write, or when the
// step directory already holds a complete checkpoint (which is never overwritten). Ranks may call
// it concurrently.
void write_checkpoint_shard(const std::string& dir, int32_t rank, const CheckpointShard& shard);

// Rank 0, after every rank's shard is on disk (the caller runs a barrier first): reads every shard
// back, checks its header (magic, version, step) and record structure, and writes manifest.json
// (temporary file + rename) with world_size, step, the identity and each shard's name, size and
// checksum. `identity_json` must be a JSON object (describing model, plan, seed). Throws
// InputError when a shard is missing or malformed, or the manifest cannot be written.
void write_checkpoint_manifest(const std::string& dir, int64_t step, int32_t world_size,
                               const std::string& identity_json);

// The newest step under `dir` whose directory (named exactly as checkpoint_step_dir names it)
// holds a manifest.json; step directories without one are incomplete and ignored. nullopt when
// there is none, or `dir` does not exist or cannot be listed.
std::optional<int64_t> newest_complete_checkpoint(const std::string& dir);

// Verifies the whole checkpoint before anything is loaded: the manifest parses, names this step,
// this world size and an identity equal to `identity_json`; every rank's file exists with the
// listed size and checksum. Throws InputError (field "--resume") naming the file at fault and
// what is wrong (truncated, corrupted, missing, identity keys that differ). Reads only.
void verify_checkpoint(const std::string& dir, int64_t step, int32_t world_size,
                       const std::string& identity_json);

// Reads one rank's shard (after verify_checkpoint), checking magic, version, step and that every
// length fits in the file. Throws InputError (field "--resume") naming the file otherwise.
CheckpointShard read_checkpoint_shard(const std::string& dir, int64_t step, int32_t rank);

}  // namespace strata
