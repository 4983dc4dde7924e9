#pragma once
// DeviceSpec: one accelerator model as the cost models see it. Built-in devices live in
// topologies/devices/*.json (compiled into the binary), with figures from
// data/reference/hardware.csv cited in each file's "source" field.

#include <cstdint>
#include <string>
#include <vector>

#include "models/ops.hpp"

namespace strata {

struct DeviceSpec {
  std::string name;            // e.g. "h100-sxm"
  double peak_bf16_flops = 0;  // dense peak, FLOP/s (no sparsity)
  double peak_fp16_flops = 0;
  double peak_fp32_flops = 0;             // plain FP32 (not TF32)
  double peak_tf32_flops = 0;             // 0 when the device has no TF32
  double peak_fp8_flops = 0;              // 0 when the device has no FP8
  double measured_matmul_bf16_flops = 0;  // best measured bf16 GEMM (MAMF); 0 when unknown
  double measured_matmul_fp8_flops = 0;   // best measured fp8 GEMM (MAMF); 0 when unknown
  int64_t hbm_bytes = 0;                  // memory capacity, bytes (GB = 1e9 as the datasheet)
  double hbm_bw_gbps = 0;                 // memory bandwidth, GB/s
  int64_t launch_overhead_ns = 0;         // per-kernel launch cost
  double price_usd_per_hour = 0;          // assumption, overridable: on-demand cloud price per GPU
  double tdp_watts = 0;                   // 0 when unknown
  // A CPU host (strata calibrate --backend cpu): the ranks of one node share this many cores, so
  // their computes slow down when more run at once than there are cores. 0 for a GPU.
  int64_t host_cores = 0;
  // A CPU host: how long a rank's thread keeps a core while other ranks wait for one (the
  // scheduler's time slice, measured by strata calibrate). 0: unknown, Linux's default is taken
  // (sim/simulate.cpp).
  int64_t host_slice_ns = 0;
  // The host share of one GPU in its usual server (the node's CPU sockets over its GPUs), where
  // offloaded work runs (ZeRO-Offload): fp32 FLOP/s, DRAM bandwidth in GB/s, DRAM bytes. 0 when
  // unknown.
  double host_flops = 0;
  double host_mem_bw_gbps = 0;
  int64_t host_memory_bytes = 0;

  // Dense peak FLOP/s for the dtype training computes in (fp32 uses TF32 tensor cores when the
  // device has them, as PyTorch and Megatron do by default for matmuls).
  double peak_flops(DType dtype) const;
};

// A zoo name (topologies/devices/*.json) or a path. Throws InputError; an unknown name lists the
// known ones.
DeviceSpec load_device(const std::string& name_or_path);
std::vector<std::string> zoo_device_names();

}  // namespace strata
