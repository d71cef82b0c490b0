// What the files of libflowlane_mpi.so share (mpi/README.md):
//
//   mpi_comm.cpp       fl_mpi_comm_create, fl_mpi_nccl_comm_create: checks, the ranks'
//                      agreement, the duplicates, the communicator id
//   mpi_transport.cpp  the transport (fl_comm_transport_t): start, test, abort, destroy of one
//                      communicator's collectives, the check channel
//   mpi_types.cpp      fl_dtype_t / fl_redop_t to MPI, float16 and bfloat16 reductions (user
//                      operations), chunks of counts above INT_MAX
//   mpi_gate.cpp       the gate every MPI call of the plugin passes, and MPI_Finalize's hook
//
// The plugin uses only flowlane's public C API: the engine drives the transport (start on a
// lane runner, test and abort on flowlane's progress thread, destroy wherever the
// communicator's last reference drops).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <shared_mutex>
#include <string>

#include "flowlane/flowlane.h"
#include "flowlane/flowlane_mpi.h"

namespace flowlane::mpi {

// ---- the gate (mpi_gate.cpp) ----------------------------------------------------------------
// Every MPI call the plugin makes holds it: shared (MPI_THREAD_MULTIPLE: calls from the lane
// runners and the progress thread run at once) or exclusive (FL_MPI_SERIALIZED: one at a
// time). MPI_Finalize's hook takes it exclusive, then marks MPI finalized: a call that
// holds the gate checks finalized() first and never reaches MPI after that.
class GateLock {
 public:
  GateLock();
  ~GateLock();
  GateLock(const GateLock&) = delete;
  GateLock& operator=(const GateLock&) = delete;

 private:
  bool exclusive_;
};
// FL_MPI_SERIALIZED was accepted: from now on every call of the plugin is serialized.
void serialize_calls();
// MPI_Finalize has begun (read under the gate).
bool finalized();
// Registers the hook on MPI_COMM_SELF (once per process; under the gate).
void install_finalize_hook();

// "MPI_Comm_dup: <MPI's text> (MPI error 5)"
std::string mpi_error(int code, const char* call);

// ---- types (mpi_types.cpp) --------------------------------------------------------------
size_t dtype_size(uint32_t dtype);
// The datatype that moves `dtype`'s elements (float16 and bfloat16: 2-byte integers, which
// only their reductions need to know better).
MPI_Datatype datatype(uint32_t dtype);
// The reduction of `redop` on `dtype`: MPI's predefined one, or the plugin's user operation
// for float16 and bfloat16 (created at the first use; under the gate).
MPI_Op reduction(uint32_t dtype, uint32_t redop);
// Elements per MPI call: INT_MAX, or FLOWLANE_MPI_CHUNK when set (tests use small chunks
// to exercise the chunked paths without gigabytes).
uint64_t chunk_elements();

// ---- the transport (mpi_transport.cpp) --------------------------------------------------
// A communicator's transport over the duplicates `data` and `ctl` (owned from here: freed by
// its destroy). `check`: FL_TRANSPORT_CHECK_STRICT, 0 (alongside) or FL_TRANSPORT_CHECK_OFF.
fl_comm_transport_t make_transport(MPI_Comm data, MPI_Comm ctl, int rank, int nranks, uint64_t id, uint64_t check);
// FLOWLANE_COMM_CHECK as the engine reads it (it refuses a bad value itself).
uint64_t check_mode();

}  // namespace flowlane::mpi
