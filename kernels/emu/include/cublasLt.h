#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): the part of cuBLASLt that kernels/cuda calls,
// with the names, signatures and enum values of the toolkit's cublasLt.h (CUDA 13), for the host
// compiler. Implemented in kernels/emu/cublaslt.cpp; what it refuses, and why, is listed there
// and in the README.
//
// The descriptors are opaque here (the toolkit's are semi-opaque structs that a program may
// place itself with the *Init functions, which the emulation does not offer).

#include <cstddef>
#include <cstdint>

#include "cublas_api.h"

typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

// An algorithm the heuristic picked, as plain data the program keeps.
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

// The matmul descriptor's attributes the emulation implements (the toolkit's values); the
// comment gives each value's type, as cublasLtMatmulDescSetAttribute checks its size.
typedef enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,                 // int32_t (cublasOperation_t), default N
  CUBLASLT_MATMUL_DESC_TRANSB = 4,                 // int32_t (cublasOperation_t), default N
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,               // uint32_t (cublasLtEpilogue_t), default DEFAULT
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,           // const void*, default null
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,  // void*, default null
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,       // int64_t, default 0
} cublasLtMatmulDescAttributes_t;

// The epilogues of cublasLt.h. Emulated: DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX,
// GELU_AUX_BIAS and DGELU; the others fail as not emulated.
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_RELU_AUX = (CUBLASLT_EPILOGUE_RELU | 128),
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = (CUBLASLT_EPILOGUE_RELU | CUBLASLT_EPILOGUE_BIAS),
  CUBLASLT_EPILOGUE_RELU_AUX_BIAS = (CUBLASLT_EPILOGUE_RELU_AUX | CUBLASLT_EPILOGUE_BIAS),
  CUBLASLT_EPILOGUE_DRELU = 8 | 128,
  CUBLASLT_EPILOGUE_DRELU_BGRAD = CUBLASLT_EPILOGUE_DRELU | 16,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = (CUBLASLT_EPILOGUE_GELU | 128),
  CUBLASLT_EPILOGUE_GELU_BIAS = (CUBLASLT_EPILOGUE_GELU | CUBLASLT_EPILOGUE_BIAS),
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = (CUBLASLT_EPILOGUE_GELU_AUX | CUBLASLT_EPILOGUE_BIAS),
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = CUBLASLT_EPILOGUE_DGELU | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

// The preference's attributes the emulation implements (the toolkit's values).
typedef enum {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64_t, default 0
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,  // uint32_t, default 256
} cublasLtMatmulPreferenceAttributes_t;

// One answer of cublasLtMatmulAlgoGetHeuristic, as the toolkit lays it out.
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes);

// A column-major (rows, cols) matrix of type with leading dimension ld (elements).
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes);

// Writes at most one algorithm (the emulation has one) and its count to returnAlgoCount, or
// answers CUBLAS_STATUS_NOT_SUPPORTED where cuBLASLt has no algorithm for the problem.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount);

// D = epilogue(alpha op(A) op(B) + beta C), queued on stream; alpha and beta are host pointers to
// float, read during the call; when beta is 0, C is not read.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream);
