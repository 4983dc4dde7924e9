#pragma once
// The CPU emulation of CUDA (kernels/emu/README.md): NCCL as exec/nccl_communicator.cpp calls it,
// with the names, types, signatures and enum values of NCCL 2.28.9's nccl.h (CUDA 13.0). The
// ranks are threads of one process sharing the emulated device, each queuing on streams of its
// own (the legacy default stream is the device's, one FIFO for every thread: two ranks' calls on
// it would wait for each other); a unique id names an in-process world, and every communicator
// of that world meets its members in memory.
//
// Collectives and point-to-point calls are checked when made (null pointers, ranks out of range:
// ncclInvalidArgument, as NCCL answers) and queued on their stream as two items
// (strata_emu_waits.hpp): a post, which checks the device ranges and leaves this member's part
// with the others, and a completion, which runs only once what it waits for has been posted:
//  - a collective posts a copy of its input; it completes once every member of the communicator
//    has posted the same collective (the i-th call on a communicator is one instance, as in
//    NCCL), computing its own result from the copies. Reductions sum in communicator rank order,
//    ((x0 + x1) + x2) + ..., in the buffer's type: the bits of the in-process communicator
//    (exec/communicator.hpp), which NCCL's rings and trees do not promise.
//  - a send posts a copy of its data for the peer and completes once the peer has posted the
//    matching receive: every send waits for its receiver, as one larger than NCCL's buffers does
//    on a GPU (smaller ones may not), so that a program that deadlocks with large messages
//    deadlocks here with small ones. A receive posts itself and completes once the message with
//    its index has been posted (the n-th send from a to b meets b's n-th receive from a),
//    checking its count and type.
//  - a member's calls on one communicator run in call order whatever their streams, as NCCL runs
//    them (each launch waits for the communicator's previous one): each post waits for the
//    member's previous call on the communicator to complete.
//  - the calls between ncclGroupStart and the matching ncclGroupEnd are one launch: one item
//    posts them all, after the work queued so far on each of their streams and their
//    communicators' previous calls, and one completes them all; the group's other streams wait
//    for it. So a send and a receive that two ranks exchange (Megatron-LM's batched isend/irecv)
//    complete grouped, and deadlock ungrouped.
//
// Deadlock: while a completion waits, the runtime runs other ready work, whichever rank's thread
// queued it, as a GPU runs every stream. When items wait and nothing anywhere has run for the
// timeout, the synchronizing call fails with strata::emu::fail instead of hanging; the message
// names each waiting call, its communicator's ranks and those that did not arrive. A rank must
// still synchronize its streams before it blocks on the host (in a host barrier, a host
// collective, a join) if other ranks' device work waits for its queued work to be posted.
//
// ncclCommInitRank and ncclCommSplit block the host until every member has called them, as
// NCCL's do. What the emulation does not implement (another data type or reduction, a config)
// fails with strata::emu::EmulationError. Every call is logged (include/strata_emu_nccl.hpp).

#include <cstddef>

#include "cuda_runtime.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_SPLIT_NOCOLOR -1

// The configuration of ncclCommInitRankConfig and ncclCommSplit; the emulation takes none
// (a null config), so the type stays incomplete.
typedef struct ncclConfig_v22800 ncclConfig_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
const char* ncclGetErrorString(ncclResult_t result);
// The message of this thread's last failed call.
const char* ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
