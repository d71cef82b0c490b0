// FL_COMM_NCCL: a collective instruction's launch (ncclGroupStart, one NCCL call per part,
// ncclGroupEnd, polled while non-blocking), its settlement when its GPU work is done, and
// its cleanup (a collective never issued breaks its communicator). The protocol is at the
// top of comm/nccl.cpp; what the backend's files share is in comm/nccl_internal.hpp.
#include "comm/comm.hpp"

#if FLOWLANE_HAVE_CUDA && FLOWLANE_HAVE_NCCL

#include "comm/nccl_internal.hpp"

namespace flowlane::comm::nccl_internal {

namespace {

bool dtype_of(uint32_t t, ncclDataType_t* out) {
  switch (t) {
    case FL_DTYPE_INT8: *out = ncclInt8; return true;
    case FL_DTYPE_UINT8: *out = ncclUint8; return true;
    case FL_DTYPE_INT32: *out = ncclInt32; return true;
    case FL_DTYPE_UINT32: *out = ncclUint32; return true;
    case FL_DTYPE_INT64: *out = ncclInt64; return true;
    case FL_DTYPE_UINT64: *out = ncclUint64; return true;
    case FL_DTYPE_FLOAT16: *out = ncclFloat16; return true;
    case FL_DTYPE_FLOAT32: *out = ncclFloat32; return true;
    case FL_DTYPE_FLOAT64: *out = ncclFloat64; return true;
    case FL_DTYPE_BFLOAT16: *out = ncclBfloat16; return true;
  }
  return false;
}
bool redop_of(uint32_t r, ncclRedOp_t* out) {
  switch (r) {
    case FL_REDOP_SUM: *out = ncclSum; return true;
    case FL_REDOP_PROD: *out = ncclProd; return true;
    case FL_REDOP_MAX: *out = ncclMax; return true;
    case FL_REDOP_MIN: *out = ncclMin; return true;
  }
  return false;
}

std::string coll_name(const CollWork& w) {
  return "collective seq " + std::to_string(w.seq) + " " + w.signature + " on " + w.comm->name();
}

// Records the failure of a collective whose GPU work completed after its communicator was
// aborted, when the completion hook did not settle it first (a cleanup run on the thread
// that completes the instruction right after: complete() publishes the outcome).
void fail_instr(Instr* i, fl_status_t st, const std::string& detail) {
  i->error = detail;
  core::mark_failed(i, st);
}

fl_status_t settle_hook(Instr* i, std::string* detail);

// Under c->nccl_mu, nothing issued yet for w. The refusal of a collective whose
// communicator cannot issue it any more.
fl_status_t refuse(CollWork* w, Instr* i) {
  NcclComm* c = w->comm.get();
  std::lock_guard<std::mutex> lk(c->mu);
  i->error = coll_name(*w) + " was not issued: " +
             (c->state == CommState::kBroken ? "the communicator is broken: " : "the communicator was aborted: ") +
             c->reason;
  const fl_status_t st = c->abort_status != FL_OK ? c->abort_status : FL_ERR_CANCELLED;
  c->recorder.finished(w->seq, CollState::kFailed, st, c->since_created_ns());
  return st;
}

// Under c->nccl_mu: aborts the communicator after an NCCL failure during this launch.
fl_status_t fail_launch(CollWork* w, Instr* i, ncclResult_t r, const char* call) {
  NcclComm* c = w->comm.get();
  std::string why = nccl_message(r, call) + nccl_detail(c->comm) + " while issuing collective seq " + std::to_string(w->seq);
  {
    std::lock_guard<std::mutex> lk(c->mu);
    request_abort(c, FL_ERR_NCCL, why);
    c->recorder.finished(w->seq, CollState::kFailed, FL_ERR_NCCL, c->since_created_ns());
  }
  abort_locked(c);
  i->error = coll_name(*w) + " failed: " + why + "; the communicator was aborted";
  return FL_ERR_NCCL;
}

}  // namespace

// The launch trampoline (lane runner, device current, CUDA stream created).
fl_status_t launch_collective(fl_instr_ctx_t* ctx, void* ud) {
  auto* i = reinterpret_cast<Instr*>(ctx);
  auto* w = static_cast<CollWork*>(ud);
  NcclComm* c = w->comm.get();
  w->instr = i;
  w->ran = true;
  std::lock_guard<std::mutex> nl(c->nccl_mu);
  // acquire pairs with the release in request_abort: the reason is visible under mu anyway.
  if (c->abort_req.load(std::memory_order_acquire)) abort_locked(c);
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->state != CommState::kActive) goto refused;
  }
  {
    // An asynchronous error found here fails this collective before it is issued.
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = nccl().ncclCommGetAsyncError(c->comm, &async);
    if (r != ncclSuccess) return fail_launch(w, i, r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) return fail_launch(w, i, async, "an earlier operation (asynchronous error)");
    cudaStream_t cs = static_cast<cudaStream_t>(gpu::cuda_stream(i->stream));
    r = nccl().ncclGroupStart();
    if (r != ncclSuccess) return fail_launch(w, i, r, "ncclGroupStart");
    // From here a failure may leave parts of the group enqueued: it completes after an event.
    gpu::record_of(i).may_enqueue = true;
    ncclResult_t first = ncclSuccess;
    const char* first_call = "";
    for (const fl_coll_part_t& p : w->parts) {
      ncclDataType_t dt = ncclFloat32;
      ncclRedOp_t op = ncclSum;
      dtype_of(p.dtype, &dt);  // validated at submit
      redop_of(p.redop, &op);
      const size_t n = size_t(p.count);
      const int peer = int(p.peer);
      const char* call = "";
      switch (p.op) {
        case FL_COLL_ALL_REDUCE: r = nccl().ncclAllReduce(p.sendbuf, p.recvbuf, n, dt, op, c->comm, cs), call = "ncclAllReduce"; break;
        case FL_COLL_ALL_GATHER: r = nccl().ncclAllGather(p.sendbuf, p.recvbuf, n, dt, c->comm, cs), call = "ncclAllGather"; break;
        case FL_COLL_REDUCE_SCATTER:
          r = nccl().ncclReduceScatter(p.sendbuf, p.recvbuf, n, dt, op, c->comm, cs), call = "ncclReduceScatter";
          break;
        case FL_COLL_BROADCAST: r = nccl().ncclBroadcast(p.sendbuf, p.recvbuf, n, dt, peer, c->comm, cs), call = "ncclBroadcast"; break;
        case FL_COLL_SEND: r = nccl().ncclSend(p.sendbuf, n, dt, peer, c->comm, cs), call = "ncclSend"; break;
        default: r = nccl().ncclRecv(p.recvbuf, n, dt, peer, c->comm, cs), call = "ncclRecv"; break;
      }
      if (r != ncclSuccess && first == ncclSuccess) first = r, first_call = call;
    }
    r = nccl().ncclGroupEnd();  // always closes the group, even after a failed part
    if (first != ncclSuccess) return fail_launch(w, i, first, first_call);
    if (r != ncclSuccess && r != ncclInProgress) return fail_launch(w, i, r, "ncclGroupEnd");
#if FLOWLANE_NCCL_NONBLOCKING
    // Non-blocking: the kernels are on the stream only once the state leaves
    // ncclInProgress (e.g. after a first connection to the peers). Poll, and honour an
    // abort requested meanwhile (peers that never come, engine destroy).
    for (Backoff b; r == ncclInProgress; b.pause()) {
      if (c->abort_req.load(std::memory_order_acquire)) {  // pairs with the release in request_abort
        abort_locked(c);
        goto refused;
      }
      ncclResult_t q = nccl().ncclCommGetAsyncError(c->comm, &r);
      if (q != ncclSuccess) return fail_launch(w, i, q, "ncclCommGetAsyncError");
      if (r != ncclSuccess && r != ncclInProgress) return fail_launch(w, i, r, "ncclGroupEnd (asynchronous)");
    }
#endif
    std::lock_guard<std::mutex> lk(c->mu);
    c->launched = std::max(c->launched, w->seq);
    ++c->inflight;
    w->launched = true;
    c->recorder.issued(w->seq, c->since_created_ns());
    gpu::on_completion(i, &settle_hook);  // an abort may have cut the kernel short
    return FL_OK;
  }
refused:
  return refuse(w, i);
}

namespace {

// A launched collective has finished on the GPU (or its instruction failed after the
// launch): the outcome, and a broken communicator's deferred abort.
fl_status_t settle(CollWork* w, std::string* detail) {
  NcclComm* c = w->comm.get();
  w->settled = true;
  fl_status_t st = FL_OK;
  bool abort = false;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    --c->inflight;
    c->last_settled = std::max(c->last_settled, w->seq);
    if (c->state == CommState::kAborted && w->seq > c->abort_cut) {
      st = c->abort_status != FL_OK ? c->abort_status : FL_ERR_CANCELLED;
      *detail = coll_name(*w) + " was in flight when the communicator was aborted (" + c->reason +
                "); its output is undefined";
    }
    c->recorder.finished(w->seq, st == FL_OK ? CollState::kCompleted : CollState::kFailed, st, c->since_created_ns());
    if (c->state == CommState::kBroken && c->inflight == 0) {
      request_abort(c, FL_ERR_CANCELLED, c->reason);
      abort = true;
    }
  }
  if (abort) try_abort(c);
  return st;
}

// Runs once per collective: after its GPU work (poller), or on the lane runner when it was
// skipped or its launch failed.
fl_status_t settle_hook(Instr* i, std::string* detail) {
  auto* w = static_cast<CollWork*>(i->user_data);
  if (!w->launched || w->settled) return FL_OK;
  return settle(w, detail);
}

}  // namespace

void coll_cleanup(void* ud) {
  auto* w = static_cast<CollWork*>(ud);
  NcclComm* c = w->comm.get();
  if (w->launched && !w->settled) {
    std::string detail;
    fl_status_t st = settle(w, &detail);
    if (st != FL_OK && w->instr->outcome == core::InstrState::kDone) fail_instr(w->instr, st, detail);
  }
  bool abort = false;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    --c->pending;
    ++c->completed;
    if (!w->ran) {
      // Skipped (poisoned input) or failed before the trampoline: this rank never issues
      // seq w->seq, so its peers would wait for it and its later collectives would pair
      // with their earlier ones. Break the communicator; abort once nothing is in flight.
      c->recorder.finished(w->seq, CollState::kSkipped, FL_ERR_DEPENDENCY_FAILED, c->since_created_ns());
      if (c->state == CommState::kActive) {
        c->state = CommState::kBroken;
        c->abort_status = FL_ERR_CANCELLED;
        c->reason = "collective seq " + std::to_string(w->seq) + " " + w->signature +
                    " was never issued to NCCL (skipped for a poisoned input, or its launch failed), so this rank "
                    "cannot stay in step with its peers";
      }
      if (c->state == CommState::kBroken && c->inflight == 0) {
        request_abort(c, FL_ERR_CANCELLED, c->reason);
        abort = true;
      }
    }
  }
  if (abort) try_abort(c);
  delete w;  // may drop the last reference to c
}

}  // namespace flowlane::comm::nccl_internal

#endif
