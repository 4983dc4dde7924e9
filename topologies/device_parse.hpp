#pragma once
// Private to topologies/: the reader of one device object, shared by the device reader and by
// clusters that describe their device inline.

#include "common/json_input.hpp"
#include "topologies/device_spec.hpp"

namespace strata::topology_detail {

DeviceSpec parse_device(const JsonFields& fields);

}  // namespace strata::topology_detail
