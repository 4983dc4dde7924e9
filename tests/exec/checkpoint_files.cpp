// Checkpoint files (exec/checkpoint.hpp): shards round-trip bit-identical, only complete steps are
// found, and every missing, truncated, corrupted or foreign checkpoint is refused with an
// InputError naming the file, without changing any file.

#include <atomic>
#include <bit>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "exec/checkpoint.hpp"
#include "tests/input_error.hpp"

namespace fs = std::filesystem;
using strata::CheckpointShard;
using strata::CheckpointTensor;
using strata::test::input_error_of;

namespace {

// A fresh directory under the temporary directory, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() : path_(unique_path()) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }

 private:
  static fs::path unique_path() {
    static std::atomic<int> count{0};
    return fs::temp_directory_path() /
           ("strata_checkpoint_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
  }
  fs::path path_;
};

const std::string kIdentity = R"({"model": "tiny", "plan": {"dp": 3, "tp": 1}, "seed": 1234})";

// Values from arbitrary bit patterns, so they include NaNs with payloads, infinities, -0 and
// subnormals: a round trip through text or arithmetic would change some of them.
std::vector<float> pattern_values(uint32_t seed, int count) {
  std::vector<float> values;
  uint32_t state = seed * 2654435761u + 1;
  for (int i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    values.push_back(std::bit_cast<float>(state));
  }
  values.push_back(-0.0f);
  values.push_back(std::bit_cast<float>(0x7fc01234u));  // a quiet NaN with a payload
  values.push_back(std::bit_cast<float>(0x00000001u));  // the smallest subnormal
  return values;
}

CheckpointShard sample_shard(int32_t rank, int64_t step) {
  CheckpointShard shard;
  shard.step = step;
  shard.data_position = step * 24;
  shard.rng_seed = 0xfedcba9876543210ull;
  shard.rng_counter = 1000u + static_cast<uint64_t>(rank);
  shard.tensors.push_back({"layers.0.attn.qkv.weight", pattern_values(rank, 300)});
  shard.tensors.push_back({"layers.0.attn.qkv.weight.adam_m", pattern_values(rank + 7, 300)});
  shard.tensors.push_back({"empty", {}});
  shard.tensors.push_back({"", pattern_values(rank + 11, 1)});
  return shard;
}

// Every rank writes its shard on its own thread, at once; then rank 0 writes the manifest.
void write_checkpoint(const std::string& dir, int64_t step, int32_t world_size,
                      const std::string& identity = kIdentity) {
  std::vector<std::thread> ranks;
  for (int32_t rank = 0; rank < world_size; ++rank) {
    ranks.emplace_back([&dir, rank, step] {
      strata::write_checkpoint_shard(dir, rank, sample_shard(rank, step));
    });
  }
  for (std::thread& rank : ranks) rank.join();
  strata::write_checkpoint_manifest(dir, step, world_size, identity);
}

std::string shard_path(const std::string& dir, int64_t step, int32_t rank) {
  return (fs::path(strata::checkpoint_step_dir(dir, step)) /
          ("rank-0000" + std::to_string(rank) + ".bin"))
      .string();
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Every file under `dir` (relative path -> bytes), to show that a refusal changed nothing.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      files[fs::relative(entry.path(), dir).string()] = read_bytes(entry.path());
    }
  }
  return files;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> result;
  for (float value : values) result.push_back(std::bit_cast<uint32_t>(value));
  return result;
}

void overwrite_u64(std::string& bytes, std::size_t offset, uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xffu);
}

}  // namespace

// FNV-1a 64 reference values (Fowler, Noll, Vo test suite): "" -> offset basis, "a", "foobar".
TEST_CASE("fnv1a64 matches the FNV-1a 64 reference values", "[checkpoint]") {
  CHECK(strata::fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(strata::fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(strata::fnv1a64("foobar") == 0x85944171f73967e8ull);
}

// The header's worked example: one tensor "w" of 2 values is 52 + (8 + 1 + 8 + 8) = 77 bytes,
// starting with "STRATACK" and version 1 as a little-endian u32.
TEST_CASE("A shard file has the documented layout and lies in the eight-digit step directory",
          "[checkpoint]") {
  TempDir dir;
  CHECK(strata::checkpoint_step_dir(dir.path(), 10) == (fs::path(dir.path()) / "step-00000010"));
  CheckpointShard shard;
  shard.step = 10;
  shard.tensors.push_back({"w", {1.0f, -2.5f}});
  strata::write_checkpoint_shard(dir.path(), 0, shard);
  const std::string bytes = read_bytes(shard_path(dir.path(), 10, 0));
  REQUIRE(bytes.size() == 77);
  CHECK(bytes.substr(0, 8) == "STRATACK");
  CHECK(bytes.substr(8, 4) == std::string("\x01\x00\x00\x00", 4));
  CHECK(bytes.substr(12, 8) == std::string("\x0a\0\0\0\0\0\0\0", 8));           // step 10
  CHECK(bytes.substr(bytes.size() - 4) == std::string("\x00\x00\x20\xc0", 4));  // -2.5f
}

TEST_CASE("Shards of three ranks written concurrently read back bit-identical after verification",
          "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 3);
  strata::verify_checkpoint(dir.path(), 10, 3, kIdentity);
  for (int32_t rank = 0; rank < 3; ++rank) {
    const CheckpointShard expected = sample_shard(rank, 10);
    const CheckpointShard read = strata::read_checkpoint_shard(dir.path(), 10, rank);
    CHECK(read.step == expected.step);
    CHECK(read.data_position == expected.data_position);
    CHECK(read.rng_seed == expected.rng_seed);
    CHECK(read.rng_counter == expected.rng_counter);
    REQUIRE(read.tensors.size() == expected.tensors.size());
    for (std::size_t t = 0; t < expected.tensors.size(); ++t) {
      CHECK(read.tensors[t].name == expected.tensors[t].name);
      REQUIRE(read.tensors[t].values.size() == expected.tensors[t].values.size());
      // Compare bits: NaN != NaN as floats, and -0 == +0.
      CHECK(bits(read.tensors[t].values) == bits(expected.tensors[t].values));
    }
  }
}

TEST_CASE("newest_complete_checkpoint ignores a newer step directory without a manifest",
          "[checkpoint]") {
  TempDir dir;
  CHECK_FALSE(strata::newest_complete_checkpoint(dir.path() + "/does-not-exist").has_value());
  CHECK_FALSE(strata::newest_complete_checkpoint(dir.path()).has_value());
  write_checkpoint(dir.path(), 10, 2);
  write_checkpoint(dir.path(), 20, 2);
  // Step 30 was interrupted: every shard is written, the manifest is not.
  for (int32_t rank = 0; rank < 2; ++rank) {
    strata::write_checkpoint_shard(dir.path(), rank, sample_shard(rank, 30));
  }
  // A name this code does not write is not a step directory, even with a manifest in it.
  fs::create_directories(fs::path(dir.path()) / "step-40");
  write_bytes(fs::path(dir.path()) / "step-40" / "manifest.json", "{}");
  CHECK(strata::newest_complete_checkpoint(dir.path()) == std::optional<int64_t>(20));
}

TEST_CASE("A truncated shard is refused naming the file and saying truncated, and no file changes",
          "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 3);
  const std::string path = shard_path(dir.path(), 10, 1);
  const uintmax_t full_size = fs::file_size(path);
  fs::resize_file(path, full_size - 7);
  const auto before = snapshot(dir.path());

  const auto error =
      input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 3, kIdentity); });
  REQUIRE(error.has_value());
  CHECK(error->where() == path);
  CHECK(error->field() == "--resume");
  CHECK(contains(error->what(), path));
  CHECK(contains(error->what(), "is " + std::to_string(full_size - 7) +
                                    " bytes, the manifest says " + std::to_string(full_size)));
  CHECK(contains(error->what(), "truncated"));
  CHECK(contains(error->what(), "start without --resume"));
  // Read without verification, the record structure is checked against the file size too.
  const auto read_error = input_error_of([&] { strata::read_checkpoint_shard(dir.path(), 10, 1); });
  REQUIRE(read_error.has_value());
  CHECK(read_error->where() == path);
  CHECK(snapshot(dir.path()) == before);
}

TEST_CASE("A shard with one flipped byte is refused with a checksum error", "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 3);
  const std::string path = shard_path(dir.path(), 10, 2);
  std::string bytes = read_bytes(path);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
  write_bytes(path, bytes);
  const auto before = snapshot(dir.path());

  const auto error =
      input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 3, kIdentity); });
  REQUIRE(error.has_value());
  CHECK(error->where() == path);
  CHECK(contains(error->problem(), "checksum"));
  CHECK(contains(error->problem(), "differs"));
  CHECK(contains(error->problem(), "corrupted"));
  CHECK(snapshot(dir.path()) == before);
}

TEST_CASE("A missing shard file is refused naming it, by verification and by the manifest writer",
          "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 3);
  const std::string path = shard_path(dir.path(), 10, 2);
  fs::remove(path);
  const auto error =
      input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 3, kIdentity); });
  REQUIRE(error.has_value());
  CHECK(error->where() == path);
  CHECK(contains(error->problem(), "missing"));

  // Rank 0 refuses to mark a step complete when a rank's shard is not on disk.
  strata::write_checkpoint_shard(dir.path(), 0, sample_shard(0, 20));
  strata::write_checkpoint_shard(dir.path(), 1, sample_shard(1, 20));
  const auto manifest_error =
      input_error_of([&] { strata::write_checkpoint_manifest(dir.path(), 20, 3, kIdentity); });
  REQUIRE(manifest_error.has_value());
  CHECK(manifest_error->where() == shard_path(dir.path(), 20, 2));
  CHECK_FALSE(fs::exists(fs::path(strata::checkpoint_step_dir(dir.path(), 20)) / "manifest.json"));
  CHECK(strata::newest_complete_checkpoint(dir.path()) == std::optional<int64_t>(10));
}

TEST_CASE("A checkpoint of a different run is refused naming the identity keys that differ",
          "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 3);
  const std::string other = R"({"model": "tiny", "plan": {"dp": 3, "tp": 2}, "seed": 99})";
  const auto error = input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 3, other); });
  REQUIRE(error.has_value());
  CHECK(contains(error->where(), "manifest.json"));
  CHECK(contains(error->problem(), "'plan.tp' is 1 in the checkpoint, 2 in this run"));
  CHECK(contains(error->problem(), "'seed' is 1234 in the checkpoint, 99 in this run"));
  CHECK_FALSE(contains(error->problem(), "'model'"));
  // Key order does not matter: the same identity written differently is accepted.
  strata::verify_checkpoint(dir.path(), 10, 3,
                            R"({"seed": 1234, "plan": {"tp": 1, "dp": 3}, "model": "tiny"})");
}

TEST_CASE("A checkpoint written by another world size is refused", "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 3);
  const auto error =
      input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 4, kIdentity); });
  REQUIRE(error.has_value());
  CHECK(contains(error->where(), "manifest.json"));
  CHECK(contains(error->problem(), "was written by 3 ranks, but this run has 4"));
}

TEST_CASE("A missing or malformed manifest is refused", "[checkpoint]") {
  TempDir dir;
  for (int32_t rank = 0; rank < 2; ++rank) {
    strata::write_checkpoint_shard(dir.path(), rank, sample_shard(rank, 10));
  }
  const fs::path manifest = fs::path(strata::checkpoint_step_dir(dir.path(), 10)) / "manifest.json";
  auto error = input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 2, kIdentity); });
  REQUIRE(error.has_value());
  CHECK(error->where() == manifest.string());
  CHECK(contains(error->problem(), "does not exist"));

  write_bytes(manifest, "{\"format\": ");
  error = input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 2, kIdentity); });
  REQUIRE(error.has_value());
  CHECK(error->where() == manifest.string());
  CHECK(contains(error->problem(), "not valid JSON"));

  fs::remove(manifest);
  strata::write_checkpoint_manifest(dir.path(), 10, 2, kIdentity);
  std::string text = read_bytes(manifest);
  const std::size_t key = text.find("\"size_bytes\"");
  REQUIRE(key != std::string::npos);
  text.replace(key, 12, "\"size_bites\"");
  write_bytes(manifest, text);
  error = input_error_of([&] { strata::verify_checkpoint(dir.path(), 10, 2, kIdentity); });
  REQUIRE(error.has_value());
  CHECK(contains(error->problem(), "'size_bytes'"));
}

// Offsets from the format in exec/checkpoint.hpp: the tensor count at 44, the first tensor's name
// length at 52, its element count after its name (24 bytes: "layers.0.attn.qkv.weight").
TEST_CASE("A shard with impossible lengths or a wrong header is refused without a huge allocation",
          "[checkpoint]") {
  TempDir dir;
  strata::write_checkpoint_shard(dir.path(), 0, sample_shard(0, 10));
  const std::string path = shard_path(dir.path(), 10, 0);
  const std::string good = read_bytes(path);
  REQUIRE(strata::read_checkpoint_shard(dir.path(), 10, 0).tensors.size() == 4);

  struct Corruption {
    std::string name;
    std::string bytes;
    std::string says;
  };
  std::vector<Corruption> corruptions;
  std::string bytes = good;
  overwrite_u64(bytes, 44, uint64_t{1} << 62);
  corruptions.push_back({"tensor count 2^62", bytes, "tensors"});
  bytes = good;
  overwrite_u64(bytes, 52, ~uint64_t{0});
  corruptions.push_back({"name length 2^64 - 1", bytes, "name"});
  bytes = good;
  overwrite_u64(bytes, 52 + 8 + 24, uint64_t{1} << 61);
  corruptions.push_back({"element count 2^61", bytes, "elements"});
  bytes = good;
  overwrite_u64(bytes, 52 + 8 + 24, ~uint64_t{0});
  corruptions.push_back({"element count -1", bytes, "elements"});
  bytes = good;
  bytes[0] = 'X';
  corruptions.push_back({"bad magic", bytes, "magic"});
  bytes = good;
  bytes[8] = 2;
  corruptions.push_back({"version 2", bytes, "version 2"});
  bytes = good;
  overwrite_u64(bytes, 12, 11);
  corruptions.push_back({"step 11 in the directory of step 10", bytes, "holds step 11"});
  corruptions.push_back({"trailing bytes", good + "xyz", "3 bytes after its last tensor"});
  corruptions.push_back({"header cut short", good.substr(0, 30), "truncated"});
  corruptions.push_back({"empty file", "", "truncated"});

  for (const Corruption& corruption : corruptions) {
    INFO(corruption.name);
    write_bytes(path, corruption.bytes);
    const auto error = input_error_of([&] { strata::read_checkpoint_shard(dir.path(), 10, 0); });
    REQUIRE(error.has_value());
    CHECK(error->where() == path);
    CHECK(error->field() == "--resume");
    CHECK(contains(error->problem(), corruption.says));
  }
}

TEST_CASE("A complete checkpoint is never overwritten, and an unwritable directory is refused",
          "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 2);
  const auto before = snapshot(dir.path());
  const auto shard_error =
      input_error_of([&] { strata::write_checkpoint_shard(dir.path(), 0, sample_shard(5, 10)); });
  REQUIRE(shard_error.has_value());
  CHECK(shard_error->field() == "--checkpoint-dir");
  CHECK(contains(shard_error->problem(), "never overwritten"));
  const auto manifest_error =
      input_error_of([&] { strata::write_checkpoint_manifest(dir.path(), 10, 2, "{}"); });
  REQUIRE(manifest_error.has_value());
  CHECK(snapshot(dir.path()) == before);

  // A regular file where the checkpoint directory should be.
  const std::string blocked = dir.path() + "/not-a-directory";
  write_bytes(blocked, "x");
  const auto write_error =
      input_error_of([&] { strata::write_checkpoint_shard(blocked, 0, sample_shard(0, 10)); });
  REQUIRE(write_error.has_value());
  CHECK(write_error->where() == blocked);
  CHECK(write_error->field() == "--checkpoint-dir");
}

TEST_CASE("Writing checkpoints leaves no temporary files behind", "[checkpoint]") {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 3);
  write_checkpoint(dir.path(), 20, 3);
  const std::regex final_name(R"(step-000000[12]0/(rank-0000[0-2]\.bin|manifest\.json))");
  const auto files = snapshot(dir.path());
  CHECK(files.size() == 8);
  for (const auto& [name, bytes] : files) {
    INFO(name);
    CHECK(std::regex_match(name, final_name));
  }
}
