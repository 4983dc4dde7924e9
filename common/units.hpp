#pragma once
// Unit constants. Units live in names (`_bytes`, `_ns`, `_gbps`); convert only at the edges.
// GB = 1e9 bytes, GiB = 2^30 bytes; bandwidth in GB/s = 1e9 B/s as nccl-tests counts it.

#include <cstdint>

namespace strata {

inline constexpr double kBytesPerGB = 1e9;
inline constexpr double kBytesPerGiB = 1073741824.0;
inline constexpr double kFlopsPerTflop = 1e12;
inline constexpr int64_t kNsPerSecond = 1'000'000'000;
inline constexpr double kSecondsPerHour = 3600.0;
inline constexpr double kJoulesPerKwh = 3.6e6;

}  // namespace strata
