#pragma once
// strata calibrate --backend cpu: measures this machine as the executor's CPU backend uses it
// (one thread per rank, kernels/cpu, the in-process communicator) and writes what the simulator
// needs to predict a measured `strata train` step (docs/design.md, "calibrate the simulator"):
//  - the host as a cluster ("cluster" of the calibration file): a "cpu-host" device whose fp32
//    peak is the best single-thread sgemm rate measured, whose memory bandwidth is a
//    single-thread copy's, whose memory is the host's available memory per rank, and whose
//    `host_cores` the ranks share, and whose `host_slice_us` is how long the host's scheduler
//    lets a thread keep a core while others wait; its intra-node link fitted to in-process
//    all-reduce times of a pair of ranks alone on the host;
//  - efficiency tables per op kind (the "devices" entry for cpu-host): each kernel timed at a
//    sweep of shapes, its time expressed on the roof that bounds it (FLOPs for matmul,
//    attention, loss and GELU; bytes for norms, residual adds, embedding and the optimizer),
//    with the FLOP and byte counts of the op shapes the plan compiler attaches to tasks.

#include <cstdint>

#include <nlohmann/json.hpp>

namespace strata {

struct CpuCalibrationOptions {
  int64_t ranks = 8;               // ranks per host the cluster describes
  double seconds_per_case = 0.02;  // each measurement repeats its kernel for at least this long
};

// The calibration document (sim/README.md, "Calibration files"), with a "measurements" section
// listing every timed case.
nlohmann::json calibrate_cpu(const CpuCalibrationOptions& options);

}  // namespace strata
