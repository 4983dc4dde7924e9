#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): cub::DeviceRadixSort::SortPairs with the
// signature of the toolkit's cub/device/device_radix_sort.cuh (CUDA 13), for the host compiler.
//
// A stable least-significant-digit radix sort of (key, value) pairs on the key bits
// [begin_bit, end_bit), 8 bits a pass, queued on the stream. Each pass is a counting sort, stable,
// so pairs with equal keys (on those bits) keep their input order, as CUB documents. The passes
// alternate between d_keys_out/d_values_out and a second buffer in the temporary storage, as
// CUB's double buffer. Integer keys only (CUB also sorts floating point keys): signed keys
// compare with the sign bit flipped, as CUB's key twiddling.

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cub/emulation.cuh"
#include "strata_emu.hpp"

namespace cub {
namespace detail {

constexpr int kRadixDigitBits = 8;

// The bits of key as the sort orders them: unsigned keys as they are, signed keys with the sign
// bit flipped so that negative keys come first.
template <typename KeyT>
uint64_t ordered_bits(KeyT key) {
  static_assert(std::is_integral_v<KeyT>, "the emulated DeviceRadixSort sorts integer keys");
  using Unsigned = std::make_unsigned_t<KeyT>;
  auto bits = static_cast<Unsigned>(key);
  if constexpr (std::is_signed_v<KeyT>) bits ^= Unsigned{1} << (sizeof(KeyT) * 8 - 1);
  return bits;
}

// One stable counting-sort pass on the digit of width bits at shift: pairs go from (keys_from,
// values_from) to (keys_to, values_to), in input order within a digit.
template <typename KeyT, typename ValueT>
void radix_pass(const KeyT* keys_from, const ValueT* values_from, KeyT* keys_to, ValueT* values_to,
                size_t count, int shift, int width) {
  const uint64_t mask = (uint64_t{1} << width) - 1;
  const auto digit = [&](KeyT key) { return (ordered_bits(key) >> shift) & mask; };
  std::array<size_t, (size_t{1} << kRadixDigitBits)> next{};  // counts, then next positions
  for (size_t i = 0; i < count; ++i) ++next[digit(keys_from[i])];
  size_t start = 0;
  for (size_t& slot : next) {
    const size_t digit_count = slot;
    slot = start;
    start += digit_count;
  }
  for (size_t i = 0; i < count; ++i) {
    const size_t position = next[digit(keys_from[i])]++;
    keys_to[position] = keys_from[i];
    values_to[position] = values_from[i];
  }
}

}  // namespace detail

struct DeviceRadixSort {
  // The two-phase protocol: with d_temp_storage null, writes the bytes needed to
  // temp_storage_bytes and does nothing else; then, given that many bytes, queues the sort of
  // num_items pairs on stream. d_keys_in and d_values_in are not changed; the outputs must not
  // overlap the inputs. Returns cudaErrorInvalidValue when temp_storage_bytes is too small;
  // fails (strata::emu::EmulationError) on a bit range outside the key or overlapping outputs.
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes,
                               const KeyT* d_keys_in, KeyT* d_keys_out, const ValueT* d_values_in,
                               ValueT* d_values_out, NumItemsT num_items, int begin_bit = 0,
                               int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0) {
    const std::string what = "cub::DeviceRadixSort::SortPairs";
    constexpr int kKeyBits = sizeof(KeyT) * 8;
    if constexpr (std::is_signed_v<NumItemsT>) {
      if (num_items < 0) strata::emu::fail(what + ": num_items is negative");
    }
    if (begin_bit < 0 || begin_bit > end_bit || end_bit > kKeyBits) {
      strata::emu::fail(what + ": bits [" + std::to_string(begin_bit) + ", " +
                        std::to_string(end_bit) + ") are not inside the key's " +
                        std::to_string(kKeyBits) + " bits");
    }
    const auto count = static_cast<size_t>(num_items);
    const size_t keys_bytes = count * sizeof(KeyT);
    const size_t values_bytes = count * sizeof(ValueT);
    const detail::TemporaryStorage temporary =
        detail::alias_temporaries(d_temp_storage, temp_storage_bytes, {keys_bytes, values_bytes});
    if (temporary.size_query || temporary.status != cudaSuccess) return temporary.status;
    detail::check_disjoint(d_keys_in, keys_bytes, d_keys_out, keys_bytes,
                           what + ": d_keys_in and d_keys_out");
    detail::check_disjoint(d_values_in, values_bytes, d_values_out, values_bytes,
                           what + ": d_values_in and d_values_out");
    if (count == 0) return cudaSuccess;

    auto* keys_other = reinterpret_cast<KeyT*>(temporary.parts[0]);
    auto* values_other = reinterpret_cast<ValueT*>(temporary.parts[1]);
    const size_t temporary_bytes = temp_storage_bytes;
    strata::emu::enqueue(stream, what, [=] {
      strata::emu::check_device_range(d_temp_storage, temporary_bytes, what + ": d_temp_storage");
      strata::emu::check_device_range(d_keys_in, keys_bytes, what + ": d_keys_in");
      strata::emu::check_device_range(d_keys_out, keys_bytes, what + ": d_keys_out");
      strata::emu::check_device_range(d_values_in, values_bytes, what + ": d_values_in");
      strata::emu::check_device_range(d_values_out, values_bytes, what + ": d_values_out");
      const int passes =
          (end_bit - begin_bit + detail::kRadixDigitBits - 1) / detail::kRadixDigitBits;
      if (passes == 0) {
        for (size_t i = 0; i < count; ++i) {
          d_keys_out[i] = d_keys_in[i];
          d_values_out[i] = d_values_in[i];
        }
        return;
      }
      // The passes alternate between the outputs and the temporary buffers, the first one
      // chosen so that the last pass writes the outputs.
      const KeyT* keys_from = d_keys_in;
      const ValueT* values_from = d_values_in;
      for (int pass = 0; pass < passes; ++pass) {
        const bool to_outputs = (passes - 1 - pass) % 2 == 0;
        KeyT* keys_to = to_outputs ? d_keys_out : keys_other;
        ValueT* values_to = to_outputs ? d_values_out : values_other;
        const int shift = begin_bit + pass * detail::kRadixDigitBits;
        const int width =
            end_bit - shift < detail::kRadixDigitBits ? end_bit - shift : detail::kRadixDigitBits;
        detail::radix_pass(keys_from, values_from, keys_to, values_to, count, shift, width);
        keys_from = keys_to;
        values_from = values_to;
      }
    });
    return cudaSuccess;
  }
};

}  // namespace cub
