// The NCCL communicator backend (FL_COMM_NCCL), reached from core/comm.cpp. Compiled in
// every build; without NCCL nccl_available() is false and nccl_handle() never matches.
//
// An NCCL communicator handle is a generation-checked handle of its own table with bit 30
// of the slot index set (slot indices stay below 2^26), so core/comm.cpp can tell it from
// a host-fake communicator handle, and the host-fake table never resolves it.
#pragma once

#include "flowlane/flowlane.h"

namespace flowlane::core {
class Engine;
}

namespace flowlane::gpu {

// NCCL is compiled in (CUDA build with NCCL found at configure time).
bool nccl_compiled();
// Compiled in and at least one CUDA device visible: FL_COMM_NCCL is served.
bool nccl_available();
bool nccl_handle(const fl_comm_t* h);
void nccl_unique_id(fl_comm_unique_id_t* out);  // ncclGetUniqueId
// ncclCommInitRank on desc.device (blocks until every rank joined, as NCCL does).
fl_comm_t* nccl_comm_create(core::Engine* e, const fl_comm_desc_t& desc, const fl_comm_unique_id_t& id);
// Makes the handle stale; ncclCommDestroy runs once the last collective using it completed.
void nccl_comm_destroy(const fl_comm_t* h);
// A device instruction on the comm lane's CUDA COLLECTIVE stream: ncclGroupStart, one
// NCCL call per part, ncclGroupEnd.
fl_instr_id nccl_submit(fl_stream_t* stream, const fl_comm_t* h, const fl_collective_instr_t& in);

}  // namespace flowlane::gpu
