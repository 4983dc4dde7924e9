#pragma once
// The runtime's last error (cudaGetLastError): every emulated call returns through returned().

#include "cuda_runtime.h"

namespace strata::emu {

// status, remembered as the host thread's last error when it is not cudaSuccess.
cudaError_t returned(cudaError_t status);

}  // namespace strata::emu
