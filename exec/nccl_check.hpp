#pragma once
// STRATA_NCCL_CHECK(call): every NCCL call of the executor goes through it. A failure throws
// NcclError naming the call as written, the file and line, NCCL's error string and its last
// error message, and a hint:
//
//   STRATA_NCCL_CHECK(ncclSend(data, n, ncclFloat32, peer, world, stream));
//   -> NCCL call ncclSend(data, n, ncclFloat32, peer, world, stream) failed at
//      exec/nccl_communicator.cpp:180: invalid argument (run with NCCL_DEBUG=WARN for details)
//      [ncclSend: peer 9 is not a rank of a communicator of 8]; ...
//
// Built against the toolkit's nccl.h or the CPU emulation's (kernels/emu/include/nccl.h).

#include <nccl.h>

#include <stdexcept>
#include <string>

namespace strata {

// A failed NCCL call.
class NcclError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  const char* detail = ncclGetLastError(nullptr);
  throw NcclError(std::string("NCCL call ") + call + " failed at " + file + ":" +
                  std::to_string(line) + ": " + ncclGetErrorString(result) + " [" +
                  (detail != nullptr ? detail : "") +
                  "]; rerun with NCCL_DEBUG=WARN for NCCL's reason, and check that every rank "
                  "has its own GPU and runs the same plan");
}

}  // namespace strata

#define STRATA_NCCL_CHECK(call) ::strata::check_nccl((call), #call, __FILE__, __LINE__)
