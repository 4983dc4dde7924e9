// The parts of the emulated CUB that do not depend on its templates' types (cub/emulation.cuh).

#include <cub/emulation.cuh>

#include <cstdint>

#include "kernels/emu/include/strata_emu.hpp"

namespace cub::detail {
namespace {

size_t round_up(size_t bytes) {
  return (bytes + kTemporaryAlignmentBytes - 1) / kTemporaryAlignmentBytes *
         kTemporaryAlignmentBytes;
}

}  // namespace

TemporaryStorage alias_temporaries(void* d_temp_storage, size_t& temp_storage_bytes,
                                   std::initializer_list<size_t> part_bytes) {
  size_t needed = kTemporaryAlignmentBytes - 1;
  for (size_t bytes : part_bytes) needed += round_up(bytes);
  TemporaryStorage storage;
  if (d_temp_storage == nullptr) {
    temp_storage_bytes = needed;
    storage.size_query = true;
    return storage;
  }
  if (temp_storage_bytes < needed) {
    storage.status = cudaErrorInvalidValue;
    return storage;
  }
  const auto address = reinterpret_cast<uintptr_t>(d_temp_storage);
  auto* next = static_cast<std::byte*>(d_temp_storage) + (round_up(address) - address);
  for (size_t bytes : part_bytes) {
    storage.parts.push_back(next);
    next += round_up(bytes);
  }
  return storage;
}

void check_disjoint(const void* first, size_t first_bytes, const void* second, size_t second_bytes,
                    const std::string& what) {
  if (first_bytes == 0 || second_bytes == 0) return;
  const auto first_begin = reinterpret_cast<uintptr_t>(first);
  const auto second_begin = reinterpret_cast<uintptr_t>(second);
  if (first_begin < second_begin + second_bytes && second_begin < first_begin + first_bytes) {
    strata::emu::fail(what + " overlap: CUB requires them disjoint");
  }
}

}  // namespace cub::detail
