#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): cuBLAS's public header, as the toolkit's
// cublas_v2.h, which kernels/cuda includes. The declarations are in cublas_api.h.

#include "cublas_api.h"
