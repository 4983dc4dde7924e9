#pragma once
// DeviceSpec and ClusterSpec as JSON for outputs (the "cluster" key of `strata plan --json`), in
// the same format the readers take, so an output can be read back. Stable keys.

#include <nlohmann/json.hpp>

#include "topologies/cluster_spec.hpp"

namespace strata {

nlohmann::json device_to_json(const DeviceSpec& device);
nlohmann::json cluster_to_json(const ClusterSpec& cluster);

}  // namespace strata
