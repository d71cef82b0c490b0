// The NCCL communicator backend (FL_COMM_NCCL), reached from core/comm.cpp. Compiled in
// every build; without NCCL nccl_available() is false and nccl_handle() never matches.
// Protocol (ordering, sequence numbers, abort, what a skipped collective does):
// gpu/README.md, "NCCL".
//
// An NCCL communicator handle is a generation-checked handle of its own table with bit 30
// of the slot index set (slot indices stay below 2^26), so core/comm.cpp can tell it from
// a host-fake communicator handle, and the host-fake table never resolves it.
#pragma once

#include <string>

#include "flowlane/flowlane.h"

namespace flowlane::core {
class Engine;
struct Instr;
}  // namespace flowlane::core

namespace flowlane::gpu {

// NCCL is compiled in (CUDA build with NCCL found at configure time).
bool nccl_compiled();
// Compiled in and at least one CUDA device visible: FL_COMM_NCCL is served.
bool nccl_available();
bool nccl_handle(const fl_comm_t* h);
void nccl_unique_id(fl_comm_unique_id_t* out);  // ncclGetUniqueId
// Creates the rank's NCCL communicator (non-blocking ncclCommInitRankConfig where NCCL
// has it) and waits until every rank joined, at most FLOWLANE_NCCL_INIT_TIMEOUT_MS
// (FL_ERR_TIMEOUT after that; the half-made communicator is aborted).
fl_comm_t* nccl_comm_create(core::Engine* e, const fl_comm_desc_t& desc, const fl_comm_unique_id_t& id);
// Makes the handle stale. An idle communicator is finalized and destroyed; one with
// collectives in flight or queued is aborted (ncclCommAbort) and those collectives fail
// with FL_ERR_CANCELLED.
void nccl_comm_destroy(const fl_comm_t* h);
// A device instruction on the comm lane's CUDA COLLECTIVE stream: ncclGroupStart, one
// NCCL call per part, ncclGroupEnd. It also writes the engine's collective-order object,
// so every NCCL collective of an engine is issued in submission order.
fl_instr_id nccl_submit(fl_stream_t* stream, const fl_comm_t* h, const fl_collective_instr_t& in);

// ---- hooks called by the engine ------------------------------------------------------

// Engine destroy, before the drain (core::diagnostics_begin_shutdown, next to
// core::comms_abort_all): aborts every NCCL communicator of `e` — collectives not
// completed fail with FL_ERR_CANCELLED, so the drain cannot hang on a peer that never
// comes — and makes their handles stale.
void nccl_engine_shutdown(core::Engine* e);
// The GPU poller, when a collective's GPU work completed (its event): FL_OK, or the
// failure of a collective that was in flight when its communicator was aborted (the
// kernel exited without doing its work), with *detail set. A collective completed with a
// CUDA error is settled by its cleanup instead.
fl_status_t nccl_settle(core::Instr* i, std::string* detail);
// The state dump (after core::dump_comms): every NCCL communicator of `e` with its
// sequence numbers (issued, launched, completed), state and recent collectives.
void nccl_dump(core::Engine& e, std::string& out);

}  // namespace flowlane::gpu
