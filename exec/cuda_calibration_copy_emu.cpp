// The copy kernel built by the host compiler for the CPU emulation of CUDA
// (strata_cuda_calibration_emu, exec/CMakeLists.txt says why through this file).
#include "exec/cuda_calibration_copy.cu"  // NOLINT(bugprone-suspicious-include)
