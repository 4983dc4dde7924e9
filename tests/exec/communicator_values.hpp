#pragma once
// Inputs and serial references for the communicator tests (tests/exec/communicator_*.cpp and the
// MPI check, tests/exec/mpi_communicator_check.cpp). The values mix magnitudes and signs, so a sum
// taken in another order than the group's rounds differently: in float, 1e8 + 1 is 1e8 (the ulp
// at 1e8 is 8), so ((1e8 + 1) + -1e8) is 0 while ((1e8 + -1e8) + 1) is 1.

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "exec/communicator.hpp"

namespace strata::test {

// Element k of member `rank`'s buffer in the call numbered `call`: +-m x {big, 1, 0.37, 1e-3}
// with m in [1, 2) of full precision (so sums of big values round too), big = 1e8 in float and
// 1e17 in double; splitmix64 of (rank, call, k) picks.
// In bf16 the float value rounded (bf16's ulp at 1e8 is 2^19, so the sums round there too).
template <typename T>
T communicator_value(int32_t rank, size_t k, uint64_t call) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return Bf16::from_float(communicator_value<float>(rank, k, call));
  } else {
    uint64_t h = (static_cast<uint64_t>(rank) << 40) ^ (call << 20) ^ k;
    h += 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
    const T big = sizeof(T) == sizeof(float) ? T(1e8) : T(1e17);
    const T magnitudes[] = {big, T(1), T(0.37), T(1e-3)};
    const T mantissa = static_cast<T>(1.0 + static_cast<double>(h >> 12) * 0x1p-52);
    const T value = magnitudes[h % 4] * mantissa;
    return ((h >> 8) & 1) != 0 ? -value : value;
  }
}

template <typename T>
std::vector<T> communicator_values(int32_t rank, size_t n, uint64_t call) {
  std::vector<T> values(n);
  for (size_t k = 0; k < n; ++k) values[k] = communicator_value<T>(rank, k, call);
  return values;
}

// The contract's reduction: element k is ((x0[k] + x1[k]) + x2[k]) + ..., members in group order
// (or the largest, for kMax).
template <typename T>
std::vector<T> serial_reduce(const std::vector<std::vector<T>>& members, ReduceOp op) {
  std::vector<T> result = members.front();
  for (size_t j = 1; j < members.size(); ++j) {
    for (size_t k = 0; k < result.size(); ++k) {
      result[k] = op == ReduceOp::kSum ? result[k] + members[j][k]
                                       : (members[j][k] > result[k] ? members[j][k] : result[k]);
    }
  }
  return result;
}

// True when summing the members last to first rounds differently from group order in some
// element: the inputs can tell a wrong order.
template <typename T>
bool order_matters(const std::vector<std::vector<T>>& members) {
  const std::vector<std::vector<T>> reversed(members.rbegin(), members.rend());
  return serial_reduce(members, ReduceOp::kSum) != serial_reduce(reversed, ReduceOp::kSum);
}

template <typename T>
bool bitwise_equal(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace strata::test
