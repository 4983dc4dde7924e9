# STRATA_CUDA selects the CUDA parts of the build:
#   AUTO  build them where nvcc and cuBLAS (and, for the NCCL communicator, NCCL) are found in the
#         CUDA toolkit's standard prefix (/usr/local/cuda, or CUDAToolkit_ROOT);
#   ON    require them (configure fails with a message naming what is missing);
#   OFF   never build them.
# Nothing in the plan compiler needs CUDA; the executor's cuda backend and kernels/cuda use
# STRATA_HAVE_CUDA, STRATA_HAVE_CUBLAS and STRATA_HAVE_NCCL.
set(STRATA_CUDA AUTO CACHE STRING "Build the CUDA parts: AUTO, ON or OFF")
set_property(CACHE STRATA_CUDA PROPERTY STRINGS AUTO ON OFF)

set(STRATA_HAVE_CUDA OFF)
set(STRATA_HAVE_CUBLAS OFF)
set(STRATA_HAVE_NCCL OFF)

if(NOT STRATA_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "STRATA_CUDA='${STRATA_CUDA}' is not one of AUTO, ON, OFF")
endif()

if(NOT STRATA_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt)
    set(STRATA_HAVE_CUBLAS ON)
  endif()
  find_library(STRATA_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  find_path(STRATA_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  if(STRATA_NCCL_LIBRARY AND STRATA_NCCL_INCLUDE)
    set(STRATA_HAVE_NCCL ON)
  endif()
  if(CUDAToolkit_FOUND AND STRATA_HAVE_CUBLAS)
    set(STRATA_HAVE_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but nvcc and cuBLAS were not found under "
                        "'${CUDAToolkit_ROOT}'. Install the CUDA toolkit, set CUDAToolkit_ROOT, "
                        "or configure with -DSTRATA_CUDA=OFF.")
  endif()
endif()

if(STRATA_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
endif()
message(STATUS "Strata CUDA (${STRATA_CUDA}): cuda=${STRATA_HAVE_CUDA} cublas=${STRATA_HAVE_CUBLAS} "
               "nccl=${STRATA_HAVE_NCCL}")
