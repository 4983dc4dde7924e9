#pragma once
// strata calibrate --backend cuda: measures one GPU as kernels/cuda runs it, in bf16 (the
// training dtype; the loss in fp32, as the plan's loss op counts it), and writes what the
// simulator needs to price a step on it (sim/README.md, "Calibration files"):
//  - ceilings: the bf16 GEMM rate (best of large square cuBLASLt products) and the copy
//    bandwidth (cudaMemcpyAsync device to device and a copy kernel, read + write bytes);
//  - efficiency tables per op kind, each kernel's time on the roof that bounds it, with the FLOP
//    and byte counts of the plan compiler's op shapes (models/ops.hpp): every distinct GEMM of the
//    zoo's layers (QKV, attention output, MLP up, MLP down, LM head) per TP size that divides the
//    model, forward, dX and dW (plan/op_shapes.cpp's products); both attention paths; norms,
//    activations, residual adds, the embedding, the loss and AdamW per byte;
//  - the launch overhead (back-to-back launches of a one-element kernel) and the host's issue
//    cost per kernel and per executor task (two event records and a launch);
//  - comm_slowdown: a GEMM alone against the same GEMM beside a communication kernel (with NCCL
//    and two or more GPUs an all-reduce; else a copy kernel of a few blocks on a second stream,
//    standing in for one, and the document says which);
//  - NCCL bus bandwidth by collective, size and group where there are several GPUs (with one, the
//    document records that it was skipped and why).
// The roofs are the device's datasheet peaks (topologies/devices) when the GPU is a zoo device,
// so that `strata simulate --calibration FILE --cluster <a cluster of that GPU>` prices with the
// measured tables; for another GPU, the measured ceilings (written as a device spec under
// "measurements"). Built against the CPU emulation of CUDA (kernels/emu) the document names the
// emulated device as such: its timings are the emulation's, not a GPU's.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

struct CudaCalibrationOptions {
  int device = 0;  // the CUDA device measured (NCCL uses every visible one)
  // Zoo models whose layers' GEMMs and attention are timed; empty: every zoo model.
  std::vector<std::string> models;
  std::vector<int64_t> tp_sizes = {1, 2, 4, 8};  // where a size divides the model's heads
  std::vector<int64_t> tokens = {2048, 8192};    // GEMM rows: a micro-batch's tokens
  std::vector<int64_t> seq_lens = {1024, 4096};  // attention, one sequence per micro-batch
  int64_t max_cases = 0;                         // per sweep, spread over sizes; 0: all
  double seconds_per_case = 0.02;                // each timed batch lasts at least this long
  // Small sizes everywhere (ceilings, memory-bound ops, launches, the comm stand-in, NCCL) and
  // one call per case: the structure of the document in seconds, e.g. on the emulator.
  bool quick = false;
};

// The options of a run that takes seconds: tiny-gpt and tiny-llama, tp 1 and 2, 64 tokens, a few
// cases per sweep, small sizes, one call per case.
CudaCalibrationOptions quick_cuda_calibration_options();

// The CUDA devices this process sees, or why it sees none.
struct CudaDevices {
  int count = 0;
  std::string problem;  // empty when count > 0: cudaGetDeviceCount's error, or "none found"
};
CudaDevices cuda_devices();

// The calibration document: "devices" (one, with its op tables), "device_info" (GPU, clocks,
// library versions) and "measurements" (every timed case and what each section measured).
// Throws cuda::CudaError when a CUDA call fails.
nlohmann::json calibrate_cuda(const CudaCalibrationOptions& options);

}  // namespace strata
