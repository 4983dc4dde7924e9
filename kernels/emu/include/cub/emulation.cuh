#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): what the emulated CUB device algorithms
// (cub/device/*.cuh) share: CUB's two-phase temporary storage protocol and the no-overlap rules
// of its documentation. Implemented in kernels/emu/cub.cpp.

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace cub::detail {

// CUB aligns every part of its temporary storage to 256 bytes (cub/util_temporary_storage.cuh).
constexpr size_t kTemporaryAlignmentBytes = 256;

// The parts an algorithm carves from its temporary storage, or the answer to a size query.
struct TemporaryStorage {
  cudaError_t status = cudaSuccess;
  // d_temp_storage was null: temp_storage_bytes now holds the size needed and no work is done.
  bool size_query = false;
  std::vector<std::byte*> parts;  // one 256-byte aligned start per part asked for
};

// CUB's AliasTemporaries: each part rounded up to 256 bytes, plus 255 bytes so that the first
// part starts on a 256-byte boundary whatever the allocation's alignment (the sum is never 0,
// so the second call's allocation is never null: CUB's documentation of the protocol tells the
// phases apart by d_temp_storage alone). With d_temp_storage null, writes the sum to
// temp_storage_bytes and returns a size query; with temp_storage_bytes below it, returns
// cudaErrorInvalidValue; otherwise the parts.
TemporaryStorage alias_temporaries(void* d_temp_storage, size_t& temp_storage_bytes,
                                   std::initializer_list<size_t> part_bytes);

// Fails (strata::emu::EmulationError) when the byte ranges [first, first + first_bytes) and
// [second, second + second_bytes) overlap: CUB's documentation says that an algorithm's output
// "shall not overlap" its inputs, and a GPU would give a wrong answer.
void check_disjoint(const void* first, size_t first_bytes, const void* second, size_t second_bytes,
                    const std::string& what);

}  // namespace cub::detail
