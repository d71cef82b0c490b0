// FL_COMM_NCCL: communicators over NCCL, and collectives as asynchronous instructions on
// the comm lane's CUDA COLLECTIVE stream (comm/comm.hpp). The protocol is written down in
// comm/README.md, "NCCL"; in short:
//
// * Order. Every NCCL collective of an engine also writes that engine's collective-order
//   object (a dependence object the caller never sees), so the engine issues all of them —
//   whatever communicator, whatever lane — in submission order, each one's GPU work after
//   the previous one's (OneFlow's single transport dependence). SPMD ranks that submit in
//   the same program order thus issue identically. An engine stands for one rank process:
//   two ranks of one communicator on one engine would wait for each other (refused).
// * Sequence numbers. Each communicator numbers its collectives at submission (`issued`),
//   and counts how many reached NCCL (`launched`) and finished (`completed`).
// * Abort. Communicators are non-blocking (ncclCommInitRankConfig, config.blocking = 0)
//   where NCCL has it, so no flowlane thread waits inside NCCL without looking up. A
//   requested abort (asynchronous error, destroy with collectives pending, engine destroy)
//   is performed by whoever holds `nccl_mu`: the launching lane runner polls for it, the
//   watchdog thread and the destroy paths try the lock. After ncclCommAbort the stuck
//   kernels exit; the collectives that were in flight fail, later ones fail at launch.
// * A collective that never reaches NCCL (skipped for a poisoned input, or its launch
//   failed) breaks its communicator: this rank's later collectives would pair with the
//   peers' earlier ones. It is aborted once the collectives issued before have finished;
//   later ones fail with FL_ERR_CANCELLED.
#include "comm/comm.hpp"

#if FLOWLANE_HAVE_CUDA && FLOWLANE_HAVE_NCCL

#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda.hpp"

// NCCL >= 2.14: ncclCommInitRankConfig with config.blocking, ncclCommFinalize. Building with
// -DFLOWLANE_NCCL_FORCE_BLOCKING exercises the older, blocking path.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0) && !defined(FLOWLANE_NCCL_FORCE_BLOCKING)
#define FLOWLANE_NCCL_NONBLOCKING 1
#else
#define FLOWLANE_NCCL_NONBLOCKING 0
#endif

namespace flowlane::comm {

using gpu::cu;    // the CUDA runtime's table (gpu/runtime.hpp)
using gpu::nccl;  // NCCL's, loaded at the first NCCL use

namespace {

using Clock = std::chrono::steady_clock;
using core::Instr;
using core::Stream;

constexpr auto kWatchPeriod = std::chrono::milliseconds(2);
constexpr uint64_t kDefaultInitTimeoutMs = 600'000;     // FLOWLANE_NCCL_INIT_TIMEOUT_MS
constexpr uint64_t kDefaultFinalizeTimeoutMs = 60'000;  // FLOWLANE_NCCL_FINALIZE_TIMEOUT_MS

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

std::string nccl_message(ncclResult_t r, const char* call) {
  return std::string(nccl().ncclGetErrorString(r)) + " (NCCL error " + std::to_string(int(r)) + ") from " + call;
}
// ncclGetLastError's text, when NCCL has one.
std::string nccl_detail(ncclComm_t comm) {
  const char* s = nccl().ncclGetLastError(comm);
  return s != nullptr && *s != 0 ? std::string(": ") + s : std::string();
}

[[maybe_unused]] uint64_t env_ms(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  char* end = nullptr;
  unsigned long long ms = std::strtoull(v, &end, 10);
  return end != nullptr && *end == 0 && ms > 0 ? uint64_t(ms) : fallback;
}

// Polls a non-blocking NCCL state: spins briefly, then sleeps in growing steps (to 1 ms).
struct Backoff {
  int n = 0;
  void pause() {
    if (++n < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 << std::min(n - 64, 7))));
  }
};

// ---- communicators ----------------------------------------------------------------------

enum class CommState : uint8_t {
  kActive,   // collectives are issued
  kBroken,   // a collective was not issued: no more launches; abort once nothing is in flight
  kAborted,  // ncclCommAbort done (or under way): `comm` is gone
};

struct NcclComm final : Communicator {
  ~NcclComm() override;
  fl_instr_id submit(Stream* s, Instr* i, const fl_collective_instr_t& in) override;
  void abort(const std::string& why, bool engine_destroy) override;
  void dump(std::string& out) override;
  // "NCCL communicator 0x... (rank 0 of 2, cuda:0, lane 3)"
  std::string name() const {
    return "NCCL communicator " + hex(handle) + " (rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
           ", cuda:" + std::to_string(device) + ", lane " + std::to_string(lane) + ")";
  }

  core::Object* order = nullptr;  // the engine's collective-order object; null: FL_COMM_UNORDERED
  int device = 0;
  std::array<char, 128> uid{};
  std::mutex submit_mu;  // sequence assignment and queueing, in one order

  // Serializes every NCCL call on `comm` (launch, async-error poll, finalize, abort); lock
  // order: nccl_mu before mu. `comm` is written only under nccl_mu.
  std::mutex nccl_mu;
  ncclComm_t comm = nullptr;
  // Set (release) under mu when an abort is requested; whoever holds nccl_mu performs it.
  // The acquire loads in the launch poll loop and the watchdog pair with it.
  std::atomic<bool> abort_req{false};

  std::mutex mu;  // guards everything below
  CommState state = CommState::kActive;
  bool stale = false;                // the handle is gone (destroy, engine destroy)
  fl_status_t abort_status = FL_OK;  // what unfinished collectives fail with
  std::string reason;                // why the communicator broke or was aborted
  uint64_t issued = 0;               // last sequence number handed out
  uint64_t launched = 0;             // collectives issued to NCCL
  uint64_t completed = 0;            // collectives finished, any outcome
  uint64_t pending = 0;              // submitted, cleanup not run yet
  uint64_t inflight = 0;             // issued to NCCL, not settled yet
  uint64_t last_settled = 0;         // highest launched seq settled (launches settle in seq order)
  uint64_t abort_cut = 0;            // last_settled at the abort: launched seqs above it failed
  FlightRecorder recorder;
};

// One collective instruction's state (its user_data).
struct CollWork {
  std::shared_ptr<NcclComm> comm;
  uint64_t seq = 0;
  std::vector<fl_coll_part_t> parts;
  std::string signature;
  Instr* instr = nullptr;  // set by the launch
  bool ran = false;        // the launch trampoline ran
  bool launched = false;   // issued to NCCL
  bool settled = false;    // settle ran (from the completion hook or the cleanup)
};

// Process-wide: every live communicator (for the watchdog) and those inside their NCCL init.
struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::weak_ptr<NcclComm>> comms;
  std::vector<NcclComm*> joining;  // inside fl_comm_create's NCCL init
  bool watching = false;           // the watchdog thread runs
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: the detached watchdog may outlive statics
  return *r;
}

std::string coll_name(const CollWork& w) {
  return "collective seq " + std::to_string(w.seq) + " " + w.signature + " on " + w.comm->name();
}

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

NcclComm::~NcclComm() {
  // Nothing else can reach this communicator now; an abort requested but not yet performed
  // is done here.
  teardown_comm(comm, abort_req.load(std::memory_order_relaxed) || state != CommState::kActive);
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

// ---- engine order objects -------------------------------------------------------------------

const char kOrderKey = 0;  // its address keys the extension

// The engine's collective-order object, created with the engine's first NCCL communicator;
// it is on the engine's object list like any other and freed by the engine's destroy.
struct Order : core::Extension {
  core::Object* object;
};

core::Object* order_object(Engine* e) {
  if (auto* o = static_cast<Order*>(e->extension(&kOrderKey))) return o->object;
  auto fresh = std::make_unique<Order>();
  fresh->object = e->create_object(nullptr, nullptr);
  core::Object* mine = fresh->object;
  auto* o = static_cast<Order*>(e->attach(&kOrderKey, std::move(fresh)));
  if (o->object != mine) e->release_object_ref(mine);  // another thread attached one first
  return o->object;
}

// ---- launch, settle, cleanup ----------------------------------------------------------------

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
  c->recorder.set(w->seq, "not issued");
  return c->abort_status != FL_OK ? c->abort_status : FL_ERR_CANCELLED;
}

// Under c->nccl_mu: aborts the communicator after an NCCL failure during this launch.
fl_status_t fail_launch(CollWork* w, Instr* i, ncclResult_t r, const char* call) {
  NcclComm* c = w->comm.get();
  std::string why = nccl_message(r, call) + nccl_detail(c->comm) + " while issuing collective seq " + std::to_string(w->seq);
  {
    std::lock_guard<std::mutex> lk(c->mu);
    request_abort(c, FL_ERR_NCCL, why);
    c->recorder.set(w->seq, "not issued");
  }
  abort_locked(c);
  i->error = coll_name(*w) + " failed: " + why + "; the communicator was aborted";
  return FL_ERR_NCCL;
}

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
    c->recorder.set(w->seq, "launched");
    gpu::on_completion(i, &settle_hook);  // an abort may have cut the kernel short
    return FL_OK;
  }
refused:
  return refuse(w, i);
}

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
    c->recorder.set(w->seq, st == FL_OK ? "done" : "failed");
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
      c->recorder.set(w->seq, "skipped");
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

}  // namespace

// ---- the backend's entry points ------------------------------------------------------------

bool nccl_usable(std::string* why_not) {
  if (gpu::backend() == nullptr) {
    *why_not = gpu::cuda_unavailable();
    return false;
  }
  if (!gpu::nccl_loaded()) {
    *why_not = gpu::nccl_unavailable();
    return false;
  }
  if (gpu::device_count() > 0) return true;
  *why_not = "this libflowlane has NCCL but no CUDA device is visible to this process";
  return false;
}

void nccl_unique_id(fl_comm_unique_id_t* out) {
  static_assert(sizeof(ncclUniqueId) <= sizeof(fl_comm_unique_id_t), "NCCL unique id does not fit");
  ncclUniqueId id;
  ncclResult_t r = nccl().ncclGetUniqueId(&id);
  if (r != ncclSuccess) fail(FL_ERR_NCCL, "fl_comm_get_unique_id: " + nccl_message(r, "ncclGetUniqueId") + nccl_detail(nullptr));
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->internal, &id, sizeof id);
}

std::shared_ptr<Communicator> create_nccl(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid) {
  const std::string fn = "fl_comm_create";
  if (d.device >= e->device_count())
    fail(FL_ERR_NO_DEVICE, fn + ": CUDA device " + std::to_string(d.device) + " does not exist: this process sees " +
                               std::to_string(e->device_count()) + " CUDA device(s)");
  static const std::array<char, 128> kZero{};
  if (std::memcmp(uid.internal, kZero.data(), kZero.size()) == 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": the unique id is all zero (not made by fl_comm_get_unique_id)");

  auto owner = std::make_shared<NcclComm>();
  NcclComm* c = owner.get();
  c->engine = e;
  c->lane = uint32_t(d.lane);
  c->device = int(d.device);
  c->rank = uint32_t(d.rank);
  c->nranks = uint32_t(d.nranks);
  std::memcpy(c->uid.data(), uid.internal, c->uid.size());
  Registry& reg = registry();
  {
    std::lock_guard<std::mutex> lk(reg.mu);
    // Unordered ranks do not wait for each other through the order: allowed together.
    const bool ordered = (d.flags & FL_COMM_UNORDERED) == 0;
    auto same = [&](NcclComm* o) {
      return o->engine == c->engine && o->uid == c->uid && (ordered || o->order != nullptr);
    };
    int64_t other = -1;
    for (NcclComm* o : reg.joining)
      if (same(o)) other = o->rank;
    for (auto& w : reg.comms) {
      auto o = w.lock();
      if (!o || !same(o.get())) continue;
      std::lock_guard<std::mutex> olk(o->mu);  // lock order: registry, then a communicator
      if (!o->stale) other = o->rank;
    }
    if (other >= 0)
      fail(FL_ERR_INVALID_ARGUMENT,
           fn + ": rank " + std::to_string(other) + " of this unique id already lives on this engine; an engine issues "
                "all its collectives in one order (comm/README.md, NCCL), so two ranks of one communicator on one "
                "engine would wait for each other forever: give each rank its own engine (normally its own process)");
    c->order = ordered ? order_object(e) : nullptr;
    reg.joining.push_back(c);
  }
  // Leaves reg.joining if the init fails (destroyed before `owner`, so nobody sees a
  // deleted communicator there); on success the move to reg.comms happens under one lock.
  struct Joining {
    NcclComm* c;
    ~Joining() {
      if (c == nullptr) return;
      Registry& reg = registry();
      std::lock_guard<std::mutex> lk(reg.mu);
      reg.joining.erase(std::find(reg.joining.begin(), reg.joining.end(), c));
    }
  } joining{c};

  // Create on the communicator's device; the caller's current device is restored.
  int saved = -1;
  (void)cu().cudaGetDevice(&saved);
  cudaError_t cr = cu().cudaSetDevice(c->device);
  if (cr != cudaSuccess) {
    (void)cu().cudaGetLastError();
    fail(FL_ERR_CUDA, fn + ": " + gpu::cuda_message(cr, "cudaSetDevice"));
  }
  struct RestoreDevice {
    int dev, saved;
    ~RestoreDevice() {
      if (saved >= 0 && saved != dev) (void)cu().cudaSetDevice(saved);
    }
  } restore{c->device, saved};
  ncclUniqueId id;
  std::memcpy(&id, uid.internal, sizeof id);
  const std::string who = "rank " + std::to_string(c->rank) + " of " + std::to_string(c->nranks) + " on cuda:" +
                          std::to_string(c->device);
  ncclComm_t comm = nullptr;
#if FLOWLANE_NCCL_NONBLOCKING
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = nccl().ncclCommInitRankConfig(&comm, int(c->nranks), id, int(c->rank), &cfg);
  const uint64_t timeout_ms = env_ms("FLOWLANE_NCCL_INIT_TIMEOUT_MS", kDefaultInitTimeoutMs);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (Backoff b; r == ncclInProgress; b.pause()) {
    if (Clock::now() >= deadline) {
      (void)nccl().ncclCommAbort(comm);
      fail(FL_ERR_TIMEOUT, fn + ": " + who + ": not every rank joined within " + std::to_string(timeout_ms) +
                               " ms (FLOWLANE_NCCL_INIT_TIMEOUT_MS); the half-made communicator was aborted. Every "
                               "rank must call fl_comm_create with the same unique id and nranks");
    }
    ncclResult_t async = ncclInProgress;
    ncclResult_t q = nccl().ncclCommGetAsyncError(comm, &async);
    r = q != ncclSuccess ? q : async;
  }
  const char* call = "ncclCommInitRankConfig";
#else
  ncclResult_t r = nccl().ncclCommInitRank(&comm, int(c->nranks), id, int(c->rank));  // blocks until every rank joined
  const char* call = "ncclCommInitRank";
#endif
  if (r != ncclSuccess) {
    std::string detail = nccl_detail(comm);
    if (comm != nullptr) (void)nccl().ncclCommAbort(comm);
    fail(FL_ERR_NCCL, fn + ": " + who + ": " + nccl_message(r, call) + detail);
  }
  c->comm = comm;
  {
    std::lock_guard<std::mutex> lk(reg.mu);
    reg.joining.erase(std::find(reg.joining.begin(), reg.joining.end(), c));
    joining.c = nullptr;
    reg.comms.push_back(owner);
    if (!reg.watching) {
      reg.watching = true;
      std::thread(watch_loop).detach();  // exits by itself once no communicator is left
    }
  }
  return owner;
}

// ---- NcclComm ---------------------------------------------------------------------------

void NcclComm::abort(const std::string& why, bool engine_destroy) {
  bool now = false;
  {
    std::lock_guard<std::mutex> lk(mu);
    stale = true;
    if (pending > 0 || engine_destroy) {
      request_abort(this, FL_ERR_CANCELLED,
                    why + (pending > 0 ? " with " + std::to_string(pending) + " collective(s) pending" : ""));
      now = true;
    }
  }
  if (now) {
    try_abort(this);
    return;
  }
  // Idle: no collective can start any more (the handle is gone), so finalize and destroy
  // here, in the caller's thread. nccl_mu is held at most briefly by the watchdog's poll.
  ncclComm_t idle;
  {
    std::lock_guard<std::mutex> nl(nccl_mu);
    idle = comm;
    comm = nullptr;
  }
  teardown_comm(idle, false);
}

fl_instr_id NcclComm::submit(Stream* s, Instr* i, const fl_collective_instr_t& in) {
  const std::string fn = "fl_submit_collective";
  auto w = std::make_unique<CollWork>();
  try {
    if (s->engine != engine) fail(FL_ERR_INVALID_ARGUMENT, fn + ": the stream belongs to another engine than " + name());
    if (s->lane->id != lane || s->kind != FL_STREAM_COLLECTIVE || s->device.type != FL_DEVICE_CUDA ||
        s->device.index != device)
      fail(FL_ERR_INVALID_ARGUMENT, fn + ": " + name() + " issues its collectives on lane " + std::to_string(lane) +
                                        "'s COLLECTIVE stream of cuda:" + std::to_string(device) +
                                        ", but the stream given is " + s->describe() +
                                        " (one stream, one order per communicator)");
    w->parts = check_parts(in, rank, nranks);  // every fl_dtype_t and fl_redop_t has an NCCL counterpart
    if (order != nullptr) i->operands.push_back(core::Operand{order, FL_WRITE});  // WAW: orders, never poisons
  } catch (...) {
    engine->discard(i);
    throw;
  }
  w->comm = std::static_pointer_cast<NcclComm>(shared_from_this());
  w->signature = signature(w->parts);

  std::lock_guard<std::mutex> ordered(submit_mu);  // seq order == stream order
  {
    std::lock_guard<std::mutex> lk(mu);
    w->seq = ++issued;
    ++pending;
    recorder.push(w->seq, w->signature, 0);
  }
  core::SubmitArgs a;
  a.fn = &launch_collective;
  a.user_data = w.get();
  a.cleanup = &coll_cleanup;  // after the GPU work completed, or on skip / failed launch
  a.name = in.name;
  a.nonblocking = (in.flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.api = "fl_submit_collective";
  const uint64_t seq = w->seq;
  CollWork* work = w.release();  // the instruction's from here (coll_cleanup deletes it, maybe before we return)
  fl_instr_id id;
  try {
    id = engine->submit(s, i, a);
  } catch (...) {  // not queued (cleanup never runs): the sequence number is not used
    {
      std::lock_guard<std::mutex> lk(mu);
      --issued;
      --pending;
      recorder.pop(seq);
    }
    delete work;
    throw;
  }
  std::lock_guard<std::mutex> lk(mu);
  if (CollRecord* rec = recorder.find(seq)) rec->instr = id;
  return id;
}

void NcclComm::dump(std::string& out) {
  std::lock_guard<std::mutex> lk(mu);
  const char* st = state == CommState::kActive ? "active" : state == CommState::kBroken ? "BROKEN" : "ABORTED";
  out += "  " + name() + ": " + st + (reason.empty() ? "" : " (" + reason + ")") + "\n";
  out += "    sequence numbers: issued " + std::to_string(issued) + ", launched " + std::to_string(launched) +
         ", completed " + std::to_string(completed) + "; in flight on the GPU " + std::to_string(inflight) + "\n";
  recorder.dump(out);
}

}  // namespace flowlane::comm

#else  // no NCCL in this build

namespace flowlane::comm {

bool nccl_usable(std::string* why_not) {
  *why_not = "this libflowlane was built without NCCL (a CPU-only build, or no NCCL at build time)";
  return false;
}
void nccl_unique_id(fl_comm_unique_id_t*) { fail(FL_ERR_UNSUPPORTED, "NCCL is not available in this build"); }
std::shared_ptr<Communicator> create_nccl(Engine*, const fl_comm_desc_t&, const fl_comm_unique_id_t&) {
  fail(FL_ERR_UNSUPPORTED, "fl_comm_create: NCCL is not available in this build");
}

}  // namespace flowlane::comm

#endif
