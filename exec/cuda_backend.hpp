#pragma once
// The CUDA backend (docs/design.md, "Executor"): a rank's tensors in device memory and its tasks
// as the kernels of kernels/cuda (fp32 variants, the parity mode), each of the graph's streams a
// non-blocking CUDA stream, each task an event the tasks that depend on it wait for. Built where
// the CUDA toolkit is (strata_exec_cuda) and, against the CPU emulation of CUDA, where it is not
// (strata_exec_cuda_emu, kernels/emu): the same source.
//
// Several ranks may share one GPU (threads of one process, each with its own backend): their
// streams are their own, and a rank's synchronize() waits for its streams alone.

#include <memory>

#include "exec/backend.hpp"

namespace strata {

// The backend of a rank on CUDA device `device` (cudaSetDevice). Throws std::runtime_error when
// there is no such device.
std::unique_ptr<Backend> make_cuda_backend(int device);

// The CUDA devices this process sees (0 when the driver has none).
int cuda_device_count();

}  // namespace strata
