// The emulated CUB (kernels/emu/include/cub/device) against CUB's documentation: the two-phase
// temporary storage protocol, DeviceRadixSort::SortPairs as a stable sort on the bits
// [begin_bit, end_bit) (checked with std::stable_sort in this file), and DeviceSelect::Flagged
// (checked with a loop), with the argument types kernels/cuda/embedding.cu passes.

#include <catch2/catch.hpp>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels/emu/include/strata_emu.hpp"
#include "tests/emu/library_memory.hpp"

namespace strata::emu {
namespace {

using test::DeviceArray;

std::vector<uint32_t> random_keys(size_t count, uint32_t max_key, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> uniform(0, max_key);
  std::vector<uint32_t> keys(count);
  for (uint32_t& key : keys) key = uniform(rng);
  return keys;
}

std::vector<int32_t> iota(size_t count) {
  std::vector<int32_t> values(count);
  std::iota(values.begin(), values.end(), 0);
  return values;
}

// The pairs (keys[i], values[i]) stably sorted on key_of(key): equal keys keep their order.
template <typename Key, typename KeyOf>
std::pair<std::vector<Key>, std::vector<int32_t>> stable_sorted(const std::vector<Key>& keys,
                                                                const std::vector<int32_t>& values,
                                                                KeyOf key_of) {
  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return key_of(keys[x]) < key_of(keys[y]); });
  std::pair<std::vector<Key>, std::vector<int32_t>> sorted;
  for (size_t i : order) {
    sorted.first.push_back(keys[i]);
    sorted.second.push_back(values[i]);
  }
  return sorted;
}

// SortPairs through both phases of the protocol, as embedding.cu: the size query, then the sort
// with that many bytes of temporary storage.
template <typename Key>
std::pair<std::vector<Key>, std::vector<int32_t>> sort_pairs(const std::vector<Key>& keys,
                                                             const std::vector<int32_t>& values,
                                                             int begin_bit, int end_bit) {
  const int count = static_cast<int>(keys.size());
  size_t temp_bytes = 0;
  REQUIRE(cub::DeviceRadixSort::SortPairs(
              nullptr, temp_bytes, static_cast<const Key*>(nullptr), static_cast<Key*>(nullptr),
              static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), count,
              begin_bit, end_bit, nullptr) == cudaSuccess);
  REQUIRE(temp_bytes > 0);
  DeviceArray<std::byte> temp{std::vector<std::byte>(temp_bytes)};
  DeviceArray<Key> keys_in(keys), keys_out(std::vector<Key>(keys.size()));
  DeviceArray<int32_t> values_in(values), values_out(std::vector<int32_t>(values.size()));
  REQUIRE(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys_in.data(), keys_out.data(),
                                          values_in.data(), values_out.data(), count, begin_bit,
                                          end_bit, nullptr) == cudaSuccess);
  REQUIRE(keys_in.to_host() == keys);  // the inputs are read, not changed
  REQUIRE(values_in.to_host() == values);
  return {keys_out.to_host(), values_out.to_host()};
}

TEST_CASE("DeviceRadixSort::SortPairs sorts on the bits embedding.cu asks for and is stable",
          "[emu]") {
  // CUB documents SortPairs as stable: pairs with equal keys keep their input order, so with
  // values 0 .. N-1 each run of equal keys has ascending values (what embedding.cu's
  // deterministic sums rely on). Keys in [0, V], end_bit the bits of V, as key_bits(V) there;
  // several sizes so that 1, 2 and 3 passes of 8 bits run.
  for (const auto& [max_key, end_bit] :
       {std::pair{5u, 3}, std::pair{300u, 9}, std::pair{70000u, 17}}) {
    INFO("keys up to " << max_key);
    const auto keys = random_keys(1000, max_key, max_key);
    const auto values = iota(keys.size());
    const auto expected = stable_sorted(keys, values, [](uint32_t key) { return key; });
    REQUIRE(sort_pairs(keys, values, 0, end_bit) == expected);
  }
}

TEST_CASE("DeviceRadixSort::SortPairs compares only the bits from begin_bit up to end_bit", "[emu]") {
  // CUB: begin_bit is "the least-significant bit index (inclusive)" and end_bit "the
  // most-significant bit index (exclusive) needed for key comparison"; the other bits do not
  // order the pairs, and equal bits keep the input order. An empty range keeps the input order.
  const auto keys = random_keys(500, 0xffffffffu, 11);
  const auto values = iota(keys.size());
  const auto expected =
      stable_sorted(keys, values, [](uint32_t key) { return (key >> 4) & 0x3ffu; });
  REQUIRE(sort_pairs(keys, values, 4, 14) == expected);
  REQUIRE(sort_pairs(keys, values, 9, 9) == std::pair{keys, values});
}

TEST_CASE("DeviceRadixSort::SortPairs orders signed keys with negatives first", "[emu]") {
  // CUB sorts signed integers in their numeric order (its key twiddling flips the sign bit).
  const std::vector<int32_t> keys{3, -1, 0, -2147483647 - 1, 2147483647, -1, 7, -5};
  const auto values = iota(keys.size());
  const auto expected = stable_sorted(keys, values, [](int32_t key) { return key; });
  REQUIRE(sort_pairs(keys, values, 0, 32) == expected);
}

TEST_CASE("DeviceRadixSort::SortPairs follows the temporary storage protocol", "[emu]") {
  // CUB: with d_temp_storage null the call writes the size and does no work; fewer bytes than that
  // is cudaErrorInvalidValue (cub/util_temporary_storage.cuh, AliasTemporaries). Zero items need
  // a non-zero size too, so that the second phase is never a null allocation.
  const std::vector<uint32_t> keys{2, 1};
  const std::vector<int32_t> values{0, 1};
  DeviceArray<uint32_t> keys_in(keys), keys_out(std::vector<uint32_t>{9, 9});
  DeviceArray<int32_t> values_in(values), values_out(std::vector<int32_t>{9, 9});
  size_t temp_bytes = 0;
  REQUIRE(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in.data(), keys_out.data(),
                                          values_in.data(), values_out.data(), 2) == cudaSuccess);
  REQUIRE(temp_bytes > 0);
  REQUIRE(keys_out.to_host() == std::vector<uint32_t>{9, 9});

  DeviceArray<std::byte> temp{std::vector<std::byte>(temp_bytes)};
  size_t too_few = temp_bytes - 1;
  CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), too_few, keys_in.data(), keys_out.data(),
                                        values_in.data(), values_out.data(),
                                        2) == cudaErrorInvalidValue);
  CHECK(keys_out.to_host() == std::vector<uint32_t>{9, 9});

  size_t empty_bytes = 0;
  REQUIRE(cub::DeviceRadixSort::SortPairs(nullptr, empty_bytes, keys_in.data(), keys_out.data(),
                                          values_in.data(), values_out.data(), 0) == cudaSuccess);
  CHECK(empty_bytes > 0);
}

TEST_CASE(
    "DeviceRadixSort::SortPairs fails on a bit range outside the key and on outputs that "
    "overlap the inputs",
    "[emu]") {
  // CUB does not check these; a GPU would sort wrongly, so the emulation fails (EmulationError).
  DeviceArray<uint32_t> keys(std::vector<uint32_t>{2, 1, 0, 0});
  DeviceArray<int32_t> values(std::vector<int32_t>{0, 1, 2, 3});
  DeviceArray<int32_t> values_out(std::vector<int32_t>{0, 0});
  size_t temp_bytes = 1 << 12;
  DeviceArray<std::byte> temp{std::vector<std::byte>(temp_bytes)};
  CHECK_THROWS_AS(
      cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys.data(), keys.data() + 2,
                                      values.data(), values_out.data(), 2, 0, 33),
      EmulationError);
  CHECK_THROWS_AS(
      cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys.data(), keys.data() + 1,
                                      values.data(), values_out.data(), 2),
      EmulationError);
}

TEST_CASE(
    "DeviceSelect::Flagged compacts the flagged items in order and writes their count to "
    "device memory",
    "[emu]") {
  // CUB: the items whose flag is true are copied to d_out keeping their relative order, and
  // their number to *d_num_selected_out. As embedding.cu: d_in = 0 .. N-1 (int32), flags uint8
  // where a run starts, so d_out is the positions of the flags. Also no flag set: a count of 0.
  std::mt19937_64 rng(5);
  std::bernoulli_distribution coin(0.3);
  std::vector<uint8_t> flags(777);
  for (uint8_t& flag : flags) flag = coin(rng) ? 1 : 0;
  for (bool any : {true, false}) {
    if (!any) std::fill(flags.begin(), flags.end(), uint8_t{0});
    const int count = static_cast<int>(flags.size());
    std::vector<int32_t> expected;
    for (int i = 0; i < count; ++i) {
      if (flags[i] != 0) expected.push_back(i);
    }
    size_t temp_bytes = 0;
    REQUIRE(cub::DeviceSelect::Flagged(
                nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                static_cast<const uint8_t*>(nullptr), static_cast<int32_t*>(nullptr),
                static_cast<int32_t*>(nullptr), count, nullptr) == cudaSuccess);
    REQUIRE(temp_bytes > 0);
    DeviceArray<std::byte> temp{std::vector<std::byte>(temp_bytes)};
    DeviceArray<int32_t> indices(iota(flags.size()));
    DeviceArray<uint8_t> flags_device(flags);
    DeviceArray<int32_t> selected(std::vector<int32_t>(flags.size(), -1));
    DeviceArray<int32_t> num_selected(std::vector<int32_t>{-1});
    REQUIRE(cub::DeviceSelect::Flagged(temp.data(), temp_bytes, indices.data(), flags_device.data(),
                                       selected.data(), num_selected.data(), count,
                                       nullptr) == cudaSuccess);
    const std::vector<int32_t> got = selected.to_host();
    REQUIRE(num_selected.to_host() == std::vector<int32_t>{static_cast<int32_t>(expected.size())});
    REQUIRE(std::vector<int32_t>(got.begin(), got.begin() + expected.size()) == expected);
    REQUIRE(std::all_of(got.begin() + expected.size(), got.end(),
                        [](int32_t value) { return value == -1; }));
  }
}

TEST_CASE("DeviceSelect::Flagged refuses too little temporary storage", "[emu]") {
  // cudaErrorInvalidValue, as CUB's AliasTemporaries; nothing is written.
  DeviceArray<int32_t> indices(iota(4));
  DeviceArray<uint8_t> flags(std::vector<uint8_t>{1, 0, 1, 1});
  DeviceArray<int32_t> selected(std::vector<int32_t>(4, -1));
  DeviceArray<int32_t> num_selected(std::vector<int32_t>{-1});
  size_t temp_bytes = 0;
  REQUIRE(cub::DeviceSelect::Flagged(nullptr, temp_bytes, indices.data(), flags.data(),
                                     selected.data(), num_selected.data(), 4) == cudaSuccess);
  DeviceArray<std::byte> temp{std::vector<std::byte>(temp_bytes)};
  size_t too_few = temp_bytes - 1;
  CHECK(cub::DeviceSelect::Flagged(temp.data(), too_few, indices.data(), flags.data(),
                                   selected.data(), num_selected.data(),
                                   4) == cudaErrorInvalidValue);
  CHECK(num_selected.to_host() == std::vector<int32_t>{-1});
}

}  // namespace
}  // namespace strata::emu
