// FL_COMM_NCCL: the process-wide registry of communicators, the watchdog thread, and aborts
// (requested, performed, tried); finalize/destroy of an idle communicator. The protocol is
// at the top of comm/nccl.cpp; what the backend's files share is in comm/nccl_internal.hpp.
#include "comm/comm.hpp"

#if FLOWLANE_HAVE_CUDA && FLOWLANE_HAVE_NCCL

#include "comm/nccl_internal.hpp"

namespace flowlane::comm::nccl_internal {

namespace {

constexpr auto kWatchPeriod = std::chrono::milliseconds(2);
constexpr uint64_t kDefaultFinalizeTimeoutMs = 60'000;  // FLOWLANE_NCCL_FINALIZE_TIMEOUT_MS

}  // namespace

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: the detached watchdog may outlive statics
  return *r;
}

// ---- communicators and aborts -------------------------------------------------------------

// Finalizes and destroys an idle communicator (bounded), aborting it when that fails.
void teardown_comm(ncclComm_t comm, bool abort) {
  if (comm == nullptr) return;
  if (abort) {
    (void)nccl().ncclCommAbort(comm);
    return;
  }
#if FLOWLANE_NCCL_NONBLOCKING
  ncclResult_t r = nccl().ncclCommFinalize(comm);
  if (r == ncclInProgress || r == ncclSuccess) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(
                                             env_ms("FLOWLANE_NCCL_FINALIZE_TIMEOUT_MS", kDefaultFinalizeTimeoutMs));
    ncclResult_t st = ncclInProgress;
    for (Backoff b; Clock::now() < deadline; b.pause()) {
      if (nccl().ncclCommGetAsyncError(comm, &st) != ncclSuccess) st = ncclInternalError;
      if (st != ncclInProgress) break;
    }
    if (st == ncclSuccess) {
      (void)nccl().ncclCommDestroy(comm);
      return;
    }
  }
  (void)nccl().ncclCommAbort(comm);  // finalize failed or did not finish in time
#else
  (void)nccl().ncclCommDestroy(comm);
#endif
}

// Under c->mu. The first reason wins.
void request_abort(NcclComm* c, fl_status_t st, const std::string& why) {
  if (c->state == CommState::kAborted || c->abort_req.load(std::memory_order_relaxed)) return;
  if (c->state == CommState::kActive) {  // a broken communicator keeps the reason it broke for
    c->abort_status = st;
    c->reason = why;
  }
  c->abort_req.store(true, std::memory_order_release);  // pairs with the acquire loads of the performers
}

// Under c->nccl_mu (not c->mu): performs a requested abort. The state flips to kAborted
// before ncclCommAbort, so a collective whose kernel exits because of it is seen as cut.
void abort_locked(NcclComm* c) {
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->state == CommState::kAborted) return;
    c->state = CommState::kAborted;
    c->abort_cut = c->last_settled;
  }
  if (c->comm != nullptr) (void)nccl().ncclCommAbort(c->comm);
  c->comm = nullptr;
}

// Performs a requested abort now if no launch holds nccl_mu (a launch polls for it
// itself; otherwise the watchdog retries every period).
void try_abort(NcclComm* c) {
  std::unique_lock<std::mutex> nl(c->nccl_mu, std::try_to_lock);
  // acquire: pairs with the release store in request_abort.
  if (nl.owns_lock() && c->abort_req.load(std::memory_order_acquire)) abort_locked(c);
}

// ---- the watchdog -------------------------------------------------------------------------
// One process-wide thread while NCCL communicators exist. Every kWatchPeriod it looks at
// each communicator with collectives pending (or an abort to perform): engine shutting
// down → abort; ncclCommGetAsyncError reports an error → abort. It exits when the last
// communicator is gone.

namespace {

void watch_one(NcclComm* c) {
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->state == CommState::kAborted) return;
    if (!c->abort_req.load(std::memory_order_relaxed)) {
      if (c->pending == 0) return;
      // pending > 0 under mu: a collective of the engine has not run its cleanup, so the
      // engine's drain cannot have finished and the engine is alive.
      if (c->engine->shutting_down())
        request_abort(c, FL_ERR_CANCELLED, "the engine is being destroyed (fl_engine_destroy) with " +
                                               std::to_string(c->pending) + " collective(s) pending");
    }
  }
  std::unique_lock<std::mutex> nl(c->nccl_mu, std::try_to_lock);
  if (!nl.owns_lock()) return;  // a launch holds it and polls abort_req itself
  if (c->abort_req.load(std::memory_order_acquire)) {  // pairs with the release in request_abort
    abort_locked(c);
    return;
  }
  if (c->comm == nullptr) return;
  ncclResult_t async = ncclSuccess;
  ncclResult_t r = nccl().ncclCommGetAsyncError(c->comm, &async);
  if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) return;
  std::string why = "asynchronous NCCL error: " + nccl_message(r != ncclSuccess ? r : async, "ncclCommGetAsyncError") +
                    nccl_detail(c->comm);
  {
    std::lock_guard<std::mutex> lk(c->mu);
    request_abort(c, FL_ERR_NCCL, why);
  }
  abort_locked(c);
}

}  // namespace

void watch_loop() {
  Registry& reg = registry();
  std::vector<std::shared_ptr<NcclComm>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(reg.mu);
      std::erase_if(reg.comms, [](const std::weak_ptr<NcclComm>& w) { return w.expired(); });
      if (!reg.comms.empty()) reg.cv.wait_for(lk, kWatchPeriod);
      for (auto& w : reg.comms)
        if (auto c = w.lock()) batch.push_back(std::move(c));
      if (batch.empty()) {
        reg.comms.clear();
        reg.watching = false;
        return;
      }
    }
    for (auto& c : batch) watch_one(c.get());
    batch.clear();  // may drop the last reference: teardown outside the registry lock
  }
}

}  // namespace flowlane::comm::nccl_internal

#endif
