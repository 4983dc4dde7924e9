#pragma once
// Private to topologies/: the reader of one device object, shared by the device reader and by
// clusters that describe their device inline.

#include <optional>
#include <string_view>

#include "common/json_input.hpp"
#include "topologies/device_spec.hpp"

namespace strata::topology_detail {

DeviceSpec parse_device(const JsonFields& fields);

// A physical figure within bounds no hardware leaves, so that every conversion after it (to ns, to
// bytes, to FLOP/s) stays finite and exact: [low, high], or (0, high] when `low` is 0 and zero is
// not allowed. Refused naming the field otherwise. Bounds, by unit: bandwidths 1e-3 to 1e6 GB/s,
// latencies and overheads up to 1e6 us (a second), memories up to 1e6 GB per GPU and 1e8 GB per
// host, rates up to 1e6 TFLOP/s, prices up to 1e6 dollars per hour, power up to 1e6 W.
double bounded_number(const JsonFields& fields, std::string_view key, double low, double high,
                      bool allow_zero = false);
std::optional<double> optional_bounded_number(const JsonFields& fields, std::string_view key,
                                              double low, double high, bool allow_zero = false);

inline constexpr double kMaxGbps = 1e6, kMinGbps = 1e-3, kMaxUs = 1e6, kMaxGpuGb = 1e6;
inline constexpr double kMaxHostGb = 1e8, kMaxTflops = 1e6, kMaxPrice = 1e6, kMaxWatts = 1e6;

}  // namespace strata::topology_detail
