#include "exec/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"

namespace strata {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kMagic = "STRATACK";
constexpr std::size_t kHeaderBytes = 52;     // magic, version, 4 state words, tensor count
constexpr std::size_t kMinTensorBytes = 16;  // name length and element count, both empty
constexpr std::string_view kFormatName = "strata checkpoint";
constexpr std::string_view kManifestName = "manifest.json";
constexpr std::size_t kShownDifferences = 5;  // identity differences listed in one message

// Which flag an error is about and what the user should do: writing errors concern
// --checkpoint-dir, reading errors --resume.
struct ErrorContext {
  std::string field;
  std::string fix;
};

const ErrorContext kResumeContext{"--resume",
                                  "resume from another checkpoint, or start without --resume"};

[[noreturn]] void fail(const fs::path& path, const ErrorContext& context,
                       const std::string& problem) {
  throw InputError(path.string(), context.field, problem, context.fix);
}

std::string step_dir_name(int64_t step) { return fmt::format("step-{:08d}", step); }

std::string rank_file_name(int32_t rank) { return fmt::format("rank-{:05d}.bin", rank); }

fs::path rank_file_path(const std::string& dir, int64_t step, int32_t rank) {
  return fs::path(checkpoint_step_dir(dir, step)) / rank_file_name(rank);
}

fs::path manifest_path(const std::string& dir, int64_t step) {
  return fs::path(checkpoint_step_dir(dir, step)) / kManifestName;
}

// The whole file. Throws InputError naming it when it is missing or cannot be read.
std::string read_whole_file(const fs::path& path, const ErrorContext& context,
                            const std::string& missing_problem) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) fail(path, context, missing_problem);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, context, "cannot be opened for reading");
  const std::streamoff size = in.tellg();
  in.seekg(0);
  std::string bytes(static_cast<std::size_t>(std::max<std::streamoff>(size, 0)), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in || size < 0) fail(path, context, "cannot be read");
  return bytes;
}

// --- Encoding ------------------------------------------------------------------------------------

void append_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

void append_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

void append_floats(std::string& out, const std::vector<float>& values) {
  if (values.empty()) return;
  if constexpr (std::endian::native == std::endian::little) {
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  } else {
    for (float value : values) append_u32(out, std::bit_cast<uint32_t>(value));
  }
}

std::string encode_shard(const CheckpointShard& shard) {
  std::size_t size = kHeaderBytes;
  for (const CheckpointTensor& tensor : shard.tensors) {
    size += kMinTensorBytes + tensor.name.size() + tensor.values.size() * sizeof(float);
  }
  std::string out;
  out.reserve(size);
  out.append(kMagic);
  append_u32(out, kCheckpointVersion);
  append_u64(out, static_cast<uint64_t>(shard.step));
  append_u64(out, static_cast<uint64_t>(shard.data_position));
  append_u64(out, shard.rng_seed);
  append_u64(out, shard.rng_counter);
  append_u64(out, shard.tensors.size());
  for (const CheckpointTensor& tensor : shard.tensors) {
    append_u64(out, tensor.name.size());
    out.append(tensor.name);
    append_u64(out, tensor.values.size());
    append_floats(out, tensor.values);
  }
  STRATA_ASSERT(out.size() == size, "checkpoint shard size computed wrongly");
  return out;
}

// --- Decoding ------------------------------------------------------------------------------------

// Reads a shard's bytes front to back; any field that would run past the end of the file is
// refused, naming the file, before anything is allocated for it.
class ShardReader {
 public:
  ShardReader(std::string_view bytes, const fs::path& path, const ErrorContext& context)
      : bytes_(bytes), path_(path), context_(context) {}

  std::size_t offset() const { return offset_; }
  std::size_t remaining() const { return bytes_.size() - offset_; }

  std::string_view take(std::size_t count, std::string_view what) {
    if (count > remaining()) {
      fail(
          fmt::format("is truncated or corrupted: {} needs {} bytes at offset {}, but only {} "
                      "remain in the file of {} bytes",
                      what, count, offset_, remaining(), bytes_.size()));
    }
    const std::string_view taken = bytes_.substr(offset_, count);
    offset_ += count;
    return taken;
  }

  uint32_t u32(std::string_view what) {
    const std::string_view raw = take(4, what);
    uint32_t value = 0;
    for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(raw[i]);
    return value;
  }

  uint64_t u64(std::string_view what) {
    const std::string_view raw = take(8, what);
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(raw[i]);
    return value;
  }

  std::vector<float> floats(std::size_t count, std::string_view what) {
    const std::string_view raw = take(count * sizeof(float), what);
    std::vector<float> values(count);
    if constexpr (std::endian::native == std::endian::little) {
      if (count > 0) std::memcpy(values.data(), raw.data(), raw.size());
    } else {
      ShardReader inner(raw, path_, context_);
      for (float& value : values) value = std::bit_cast<float>(inner.u32(what));
    }
    return values;
  }

  [[noreturn]] void fail(const std::string& problem) const {
    strata::fail(path_, context_, problem);
  }

 private:
  std::string_view bytes_;
  const fs::path& path_;
  const ErrorContext& context_;
  std::size_t offset_ = 0;
};

// Decodes and checks a whole shard. With `keep_values` false it checks the structure only and
// returns the tensors' names with empty values (the manifest writer's check).
CheckpointShard decode_shard(std::string_view bytes, const fs::path& path, int64_t step,
                             const ErrorContext& context, bool keep_values) {
  ShardReader reader(bytes, path, context);
  if (reader.take(kMagic.size(), "the magic") != kMagic) {
    reader.fail(
        fmt::format("does not start with the magic \"{}\": it is not a Strata checkpoint "
                    "shard, or it is corrupted",
                    kMagic));
  }
  const uint32_t version = reader.u32("the format version");
  if (version != kCheckpointVersion) {
    reader.fail(fmt::format("is in checkpoint format version {}; this Strata reads version {}",
                            version, kCheckpointVersion));
  }
  CheckpointShard shard;
  shard.step = static_cast<int64_t>(reader.u64("the step"));
  if (shard.step != step) {
    reader.fail(
        fmt::format("holds step {}, but lies in the directory of step {}", shard.step, step));
  }
  shard.data_position = static_cast<int64_t>(reader.u64("the data position"));
  if (shard.data_position < 0) {
    reader.fail(
        fmt::format("has a negative data position {}: it is corrupted", shard.data_position));
  }
  shard.rng_seed = reader.u64("the generator seed");
  shard.rng_counter = reader.u64("the generator counter");
  const uint64_t tensor_count = reader.u64("the tensor count");
  if (tensor_count > reader.remaining() / kMinTensorBytes) {
    reader.fail(
        fmt::format("lists {} tensors, but its remaining {} bytes hold at most {}: it is "
                    "truncated or corrupted",
                    tensor_count, reader.remaining(), reader.remaining() / kMinTensorBytes));
  }
  shard.tensors.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    CheckpointTensor tensor;
    const uint64_t name_size = reader.u64(fmt::format("tensor {}'s name length", i));
    tensor.name = std::string(reader.take(name_size, fmt::format("tensor {}'s name", i)));
    const uint64_t count = reader.u64(fmt::format("tensor '{}''s element count", tensor.name));
    if (count > reader.remaining() / sizeof(float)) {
      reader.fail(
          fmt::format("says tensor '{}' has {} elements, but only {} bytes remain: it is "
                      "truncated or corrupted",
                      tensor.name, count, reader.remaining()));
    }
    const std::string what = fmt::format("tensor '{}''s values", tensor.name);
    if (keep_values) {
      tensor.values = reader.floats(count, what);
    } else {
      reader.take(count * sizeof(float), what);
    }
    shard.tensors.push_back(std::move(tensor));
  }
  if (reader.remaining() != 0) {
    reader.fail(fmt::format("has {} bytes after its last tensor (offset {}): it is corrupted",
                            reader.remaining(), reader.offset()));
  }
  return shard;
}

// --- Manifest ------------------------------------------------------------------------------------

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

// Reads the manifest's keys, refusing (naming the manifest) a missing key or one of the wrong type.
class ManifestFields {
 public:
  ManifestFields(const json& object, const fs::path& path) : object_(object), path_(path) {}

  const json& at(std::string_view key, json::value_t type, std::string_view type_name) const {
    const auto found = object_.find(std::string(key));
    const bool matches = found != object_.end() &&
                         (found->type() == type ||
                          (type == json::value_t::number_integer && found->is_number_unsigned()));
    if (!matches) {
      fail(path_, kResumeContext,
           fmt::format("has no {} '{}': the manifest is corrupted", type_name, key));
    }
    return *found;
  }
  int64_t integer(std::string_view key) const {
    return at(key, json::value_t::number_integer, "whole number").get<int64_t>();
  }
  std::string string(std::string_view key) const {
    return at(key, json::value_t::string, "string").get<std::string>();
  }

 private:
  const json& object_;
  const fs::path& path_;
};

// "model.layers" for the JSON pointer "/model/layers" that json::flatten() produces.
std::string dotted(const std::string& pointer) {
  if (pointer.empty()) return "(the whole identity)";
  std::string key = pointer.substr(1);
  std::replace(key.begin(), key.end(), '/', '.');
  return key;
}

std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// One line per leaf of either identity that differs, in key order.
std::vector<std::string> identity_differences(const json& saved, const json& current) {
  const json saved_leaves = saved.flatten();
  const json current_leaves = current.flatten();
  std::vector<std::string> differences;
  for (const auto& [key, value] : saved_leaves.items()) {
    const auto other = current_leaves.find(key);
    if (other == current_leaves.end()) {
      differences.push_back(fmt::format("'{}' is {} in the checkpoint, absent in this run",
                                        dotted(key), shown(value)));
    } else if (*other != value) {
      differences.push_back(fmt::format("'{}' is {} in the checkpoint, {} in this run", dotted(key),
                                        shown(value), shown(*other)));
    }
  }
  for (const auto& [key, value] : current_leaves.items()) {
    if (!saved_leaves.contains(key)) {
      differences.push_back(fmt::format("'{}' is absent in the checkpoint, {} in this run",
                                        dotted(key), shown(value)));
    }
  }
  return differences;
}

json parse_identity(const std::string& identity_json) {
  json identity = json::parse(identity_json, nullptr, /*allow_exceptions=*/false);
  STRATA_ASSERT(!identity.is_discarded() && identity.is_object(),
                "a checkpoint identity must be a JSON object, got: " + identity_json);
  return identity;
}

json read_manifest(const fs::path& path, int64_t step) {
  const std::string text = read_whole_file(
      path, kResumeContext,
      fmt::format("does not exist: the checkpoint of step {} is missing or was interrupted before "
                  "it was complete",
                  step));
  json manifest;
  try {
    manifest = parse_json_text(text, path.string());
  } catch (const InputError& error) {
    fail(path, kResumeContext, "is not valid JSON (" + error.problem() + "): it is corrupted");
  }
  if (!manifest.is_object()) fail(path, kResumeContext, "is not a JSON object: it is corrupted");
  return manifest;
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char byte : bytes) {
    hash ^= static_cast<uint8_t>(byte);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  STRATA_ASSERT(step >= 0, "checkpoint steps are counted from 0");
  return (fs::path(dir) / step_dir_name(step)).string();
}

void write_checkpoint_shard(const std::string& dir, int32_t rank, const CheckpointShard& shard) {
  STRATA_ASSERT(rank >= 0, "ranks are counted from 0");
  const ErrorContext context{"--checkpoint-dir", "choose a writable --checkpoint-dir"};
  const fs::path step_dir = checkpoint_step_dir(dir, shard.step);
  std::error_code error;
  fs::create_directories(step_dir, error);
  // Ranks create the same directory concurrently: one that lost the race sees it already there.
  std::error_code ignored;
  if (error && !fs::is_directory(step_dir, ignored)) {
    fail(dir, context,
         fmt::format("cannot create the directory '{}': {}", step_dir.string(), error.message()));
  }
  if (fs::exists(step_dir / kManifestName, error)) {
    fail(dir, {"--checkpoint-dir", "choose an empty --checkpoint-dir, or continue with --resume"},
         fmt::format("already holds a complete checkpoint of step {} in '{}', which is never "
                     "overwritten",
                     shard.step, step_dir.string()));
  }
  const fs::path path = step_dir / rank_file_name(rank);
  try {
    write_files_atomically({{path.string(), encode_shard(shard)}});
  } catch (const InputError& failure) {
    fail(path, context, failure.problem());
  }
}

void write_checkpoint_manifest(const std::string& dir, int64_t step, int32_t world_size,
                               const std::string& identity_json) {
  STRATA_ASSERT(world_size >= 1, "a checkpoint needs at least one rank");
  const ErrorContext context{"--checkpoint-dir",
                             "put --checkpoint-dir on a file system every rank shares, and let "
                             "every rank write its shard before rank 0 writes the manifest"};
  const fs::path path = manifest_path(dir, step);
  std::error_code ignored;
  if (fs::exists(path, ignored)) {
    fail(path, context,
         fmt::format("already exists: the checkpoint of step {} is never overwritten", step));
  }
  json shards = json::array();
  for (int32_t rank = 0; rank < world_size; ++rank) {
    const fs::path shard_path = rank_file_path(dir, step, rank);
    const std::string bytes = read_whole_file(
        shard_path, context,
        fmt::format("is missing: rank {} of {} has not written its shard of step {}", rank,
                    world_size, step));
    decode_shard(bytes, shard_path, step, context, /*keep_values=*/false);
    shards.push_back({{"rank", rank},
                      {"file", rank_file_name(rank)},
                      {"size_bytes", bytes.size()},
                      {"fnv1a64", hex64(fnv1a64(bytes))}});
  }
  const json manifest = {{"format", kFormatName},
                         {"version", kCheckpointVersion},
                         {"step", step},
                         {"world_size", world_size},
                         {"identity", parse_identity(identity_json)},
                         {"shards", shards}};
  try {
    write_files_atomically({{path.string(), manifest.dump(2) + "\n"}});
  } catch (const InputError& failure) {
    fail(path, context, failure.problem());
  }
}

std::optional<int64_t> newest_complete_checkpoint(const std::string& dir) {
  std::error_code error;
  fs::directory_iterator entries(dir, error);
  if (error) return std::nullopt;
  std::optional<int64_t> newest;
  for (; entries != fs::directory_iterator(); entries.increment(error)) {
    if (error) break;
    const std::string name = entries->path().filename().string();
    if (!name.starts_with("step-")) continue;
    int64_t step = -1;
    const char* digits = name.data() + 5;
    const auto [end, parse_error] = std::from_chars(digits, name.data() + name.size(), step);
    // Only names this code writes count: "step-10" or "step-00000010.tmp" are someone else's.
    if (parse_error != std::errc() || end != name.data() + name.size() || step < 0 ||
        name != step_dir_name(step)) {
      continue;
    }
    std::error_code ignored;
    if (!fs::is_regular_file(entries->path() / kManifestName, ignored)) continue;
    if (!newest || step > *newest) newest = step;
  }
  return newest;
}

void verify_checkpoint(const std::string& dir, int64_t step, int32_t world_size,
                       const std::string& identity_json) {
  const fs::path path = manifest_path(dir, step);
  const json manifest = read_manifest(path, step);
  const ManifestFields fields(manifest, path);

  if (const std::string format = fields.string("format"); format != kFormatName) {
    fail(path, kResumeContext,
         fmt::format("has format \"{}\", not \"{}\": it is not a Strata checkpoint manifest",
                     format, kFormatName));
  }
  if (const int64_t version = fields.integer("version"); version != kCheckpointVersion) {
    fail(path, kResumeContext,
         fmt::format("is in checkpoint format version {}; this Strata reads version {}", version,
                     kCheckpointVersion));
  }
  if (const int64_t saved_step = fields.integer("step"); saved_step != step) {
    fail(path, kResumeContext,
         fmt::format("says step {}, but lies in the directory of step {}: it is corrupted",
                     saved_step, step));
  }
  if (const int64_t saved_world = fields.integer("world_size"); saved_world != world_size) {
    throw InputError(
        path.string(), kResumeContext.field,
        fmt::format("was written by {} ranks, but this run has {}", saved_world, world_size),
        fmt::format("resume with {} ranks (the same plan), resume from another "
                    "checkpoint, or start without --resume",
                    saved_world));
  }
  const json& saved_identity = fields.at("identity", json::value_t::object, "object");
  const json identity = parse_identity(identity_json);
  if (saved_identity != identity) {
    const std::vector<std::string> differences = identity_differences(saved_identity, identity);
    std::string listed;
    for (std::size_t i = 0; i < std::min(differences.size(), kShownDifferences); ++i) {
      listed += (i == 0 ? "" : "; ") + differences[i];
    }
    if (differences.size() > kShownDifferences) {
      listed += fmt::format("; and {} more", differences.size() - kShownDifferences);
    }
    if (differences.empty()) listed = "an empty object and null differ";
    throw InputError(path.string(), kResumeContext.field,
                     "describes a different run (model, plan or seed): " + listed,
                     "resume with the model, plan and seed the checkpoint was written with, "
                     "resume from another checkpoint, or start without --resume");
  }

  const json& shards = fields.at("shards", json::value_t::array, "array");
  if (shards.size() != static_cast<std::size_t>(world_size)) {
    fail(path, kResumeContext,
         fmt::format("lists {} shards for {} ranks: it is corrupted", shards.size(), world_size));
  }
  for (int32_t rank = 0; rank < world_size; ++rank) {
    const json& entry = shards[static_cast<std::size_t>(rank)];
    if (!entry.is_object()) fail(path, kResumeContext, "has a shard entry that is not an object");
    const ManifestFields shard_fields(entry, path);
    const std::string file = shard_fields.string("file");
    if (shard_fields.integer("rank") != rank || file != rank_file_name(rank)) {
      fail(path, kResumeContext,
           fmt::format("lists shard {} as rank {} in '{}', expected rank {} in '{}': it is "
                       "corrupted",
                       rank, shard_fields.integer("rank"), file, rank, rank_file_name(rank)));
    }
    const int64_t size_bytes = shard_fields.integer("size_bytes");
    const std::string checksum = shard_fields.string("fnv1a64");

    const fs::path shard_path = rank_file_path(dir, step, rank);
    std::error_code error;
    if (!fs::is_regular_file(shard_path, error)) {
      fail(shard_path, kResumeContext,
           fmt::format("is missing: the manifest lists it as rank {}'s shard", rank));
    }
    const uintmax_t actual_size = fs::file_size(shard_path, error);
    if (error) fail(shard_path, kResumeContext, "cannot be read: " + error.message());
    if (std::cmp_not_equal(actual_size, size_bytes)) {
      fail(shard_path, kResumeContext,
           fmt::format(
               "is {} bytes, the manifest says {}: the file is {}", actual_size, size_bytes,
               std::cmp_less(actual_size, size_bytes) ? "truncated" : "longer than written"));
    }
    const std::string bytes = read_whole_file(shard_path, kResumeContext, "is missing");
    if (const std::string actual = hex64(fnv1a64(bytes)); actual != checksum) {
      fail(shard_path, kResumeContext,
           fmt::format("checksum {} differs from the manifest's {}: the file is corrupted", actual,
                       checksum));
    }
  }
}

CheckpointShard read_checkpoint_shard(const std::string& dir, int64_t step, int32_t rank) {
  const fs::path path = rank_file_path(dir, step, rank);
  const std::string bytes = read_whole_file(
      path, kResumeContext,
      fmt::format("is missing: rank {}'s shard of step {} was not found", rank, step));
  return decode_shard(bytes, path, step, kResumeContext, /*keep_values=*/true);
}

}  // namespace strata
