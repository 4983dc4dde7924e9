#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): cub::DeviceSelect::Flagged with the
// signature of the toolkit's cub/device/device_select.cuh (CUDA 13), for the host compiler.
//
// Copies the items d_in[i] whose flag d_flags[i] converts to true into d_out, in input order, and
// writes their count to *d_num_selected_out, in device memory, queued on the stream. As CUB's
// algorithm, an exclusive scan of the flags (kept in the temporary storage) gives each selected
// item its output position.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>

#include "cub/emulation.cuh"
#include "strata_emu.hpp"

namespace cub {

struct DeviceSelect {
  // The two-phase protocol: with d_temp_storage null, writes the bytes needed to
  // temp_storage_bytes and does nothing else; then, given that many bytes, queues the selection.
  // Returns cudaErrorInvalidValue when temp_storage_bytes is too small. Where the arguments are
  // pointers, they are checked as device ranges, and [d_out, d_out + *d_num_selected_out) must
  // not overlap d_in, d_flags or d_num_selected_out (CUB's documentation).
  template <typename InputIteratorT, typename FlagIterator, typename OutputIteratorT,
            typename NumSelectedIteratorT>
  static cudaError_t Flagged(void* d_temp_storage, size_t& temp_storage_bytes, InputIteratorT d_in,
                             FlagIterator d_flags, OutputIteratorT d_out,
                             NumSelectedIteratorT d_num_selected_out, int64_t num_items,
                             cudaStream_t stream = 0) {
    const std::string what = "cub::DeviceSelect::Flagged";
    if (num_items < 0) strata::emu::fail(what + ": num_items is negative");
    const auto count = static_cast<size_t>(num_items);
    const detail::TemporaryStorage temporary =
        detail::alias_temporaries(d_temp_storage, temp_storage_bytes, {count * sizeof(int64_t)});
    if (temporary.size_query || temporary.status != cudaSuccess) return temporary.status;

    auto* positions = reinterpret_cast<int64_t*>(temporary.parts[0]);
    const size_t temporary_bytes = temp_storage_bytes;
    strata::emu::enqueue(stream, what, [=] {
      strata::emu::check_device_range(d_temp_storage, temporary_bytes, what + ": d_temp_storage");
      check_pointer(d_in, count, what + ": d_in");
      check_pointer(d_flags, count, what + ": d_flags");
      check_pointer(d_num_selected_out, 1, what + ": d_num_selected_out");
      int64_t selected = 0;
      for (size_t i = 0; i < count; ++i) {
        positions[i] = selected;
        if (static_cast<bool>(d_flags[i])) ++selected;
      }
      const auto written = static_cast<size_t>(selected);
      check_pointer(d_out, written, what + ": d_out");
      check_disjoint_pointers(d_out, written, d_in, count, what + ": d_out and d_in");
      check_disjoint_pointers(d_out, written, d_flags, count, what + ": d_out and d_flags");
      check_disjoint_pointers(d_out, written, d_num_selected_out, 1,
                              what + ": d_out and d_num_selected_out");
      for (size_t i = 0; i < count; ++i) {
        if (static_cast<bool>(d_flags[i])) d_out[positions[i]] = d_in[i];
      }
      *d_num_selected_out = static_cast<std::iter_value_t<NumSelectedIteratorT>>(selected);
    });
    return cudaSuccess;
  }

 private:
  // The device range of count items at iterator, when the iterator is a pointer (a fancy
  // iterator holds no device memory of its own).
  template <typename Iterator>
  static void check_pointer(Iterator iterator, size_t count, const std::string& what) {
    if constexpr (std::is_pointer_v<Iterator>) {
      if (count > 0) strata::emu::check_device_range(iterator, count * sizeof(*iterator), what);
    }
  }

  template <typename First, typename Second>
  static void check_disjoint_pointers(First first, size_t first_count, Second second,
                                      size_t second_count, const std::string& what) {
    if constexpr (std::is_pointer_v<First> && std::is_pointer_v<Second>) {
      detail::check_disjoint(first, first_count * sizeof(*first), second,
                             second_count * sizeof(*second), what);
    }
  }
};

}  // namespace cub
