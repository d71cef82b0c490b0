// FL_COMM_NCCL: communicators over NCCL and collectives as device instructions on the comm
// lane's CUDA COLLECTIVE stream (gpu/nccl.hpp). The protocol is written down in
// gpu/README.md, "NCCL"; in short:
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
#include "gpu/nccl.hpp"

#include "capi/src/capi_common.hpp"

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

#include "core/handles.hpp"
#include "core/instr.hpp"
#include "gpu/backend.hpp"
#include "gpu/cuda.hpp"

// NCCL >= 2.14: ncclCommInitRankConfig with config.blocking, ncclCommFinalize. Building with
// -DFLOWLANE_NCCL_FORCE_BLOCKING exercises the older, blocking path.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0) && !defined(FLOWLANE_NCCL_FORCE_BLOCKING)
#define FLOWLANE_NCCL_NONBLOCKING 1
#else
#define FLOWLANE_NCCL_NONBLOCKING 0
#endif

namespace flowlane {
HandleTable<core::Engine>& engine_table();  // capi/src/capi_engine.cpp
}

namespace flowlane::gpu {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kNcclTag = uint64_t(1) << 30;  // in the slot-index half of the handle
constexpr auto kWatchPeriod = std::chrono::milliseconds(2);
constexpr uint64_t kDefaultInitTimeoutMs = 600'000;     // FLOWLANE_NCCL_INIT_TIMEOUT_MS
constexpr uint64_t kDefaultFinalizeTimeoutMs = 60'000;  // FLOWLANE_NCCL_FINALIZE_TIMEOUT_MS
constexpr size_t kRecorderSize = 32;
constexpr char kHostFakeMagic[] = "flowlane-fake";  // how core/comm_fake.cpp ids begin

// ---- names for messages ---------------------------------------------------------------

const char* op_name(uint32_t op) {
  switch (op) {
    case FL_COLL_ALL_REDUCE: return "all_reduce";
    case FL_COLL_ALL_GATHER: return "all_gather";
    case FL_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case FL_COLL_BROADCAST: return "broadcast";
    case FL_COLL_SEND: return "send";
    case FL_COLL_RECV: return "recv";
  }
  return "?";
}
const char* dtype_name(uint32_t t) {
  static const char* k[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"};
  return t < 10 ? k[t] : "?";
}
const char* redop_name(uint32_t r) {
  static const char* k[] = {"sum", "prod", "max", "min"};
  return r < 4 ? k[r] : "?";
}
bool is_reduction(uint32_t op) { return op == FL_COLL_ALL_REDUCE || op == FL_COLL_REDUCE_SCATTER; }

std::string part_signature(const fl_coll_part_t& p) {
  std::string s = std::string(op_name(p.op)) + "(" + dtype_name(p.dtype);
  if (is_reduction(p.op)) s += std::string(", ") + redop_name(p.redop);
  if (p.op == FL_COLL_BROADCAST) s += ", root=" + std::to_string(p.peer);
  if (p.op == FL_COLL_SEND) s += ", to=" + std::to_string(p.peer);
  if (p.op == FL_COLL_RECV) s += ", from=" + std::to_string(p.peer);
  return s + ", count=" + std::to_string(p.count) + ")";
}
std::string signature(const std::vector<fl_coll_part_t>& parts) {
  if (parts.size() == 1) return part_signature(parts[0]);
  std::string s = "group[";
  for (size_t k = 0; k < parts.size(); ++k) s += (k ? "; " : "") + part_signature(parts[k]);
  return s + "]";
}

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
  return std::string(ncclGetErrorString(r)) + " (NCCL error " + std::to_string(int(r)) + ") from " + call;
}
// ncclGetLastError's text, when NCCL has one.
std::string nccl_detail(ncclComm_t comm) {
  const char* s = ncclGetLastError(comm);
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

struct CollRecord {
  uint64_t seq = 0;
  fl_instr_id instr = 0;
  std::string signature;
  const char* state = "queued";  // queued, launched, done, failed, skipped, not issued
};

enum class CommState : uint8_t {
  kActive,   // collectives are issued
  kBroken,   // a collective was not issued: no more launches; abort once nothing is in flight
  kAborted,  // ncclCommAbort done (or under way): `comm` is gone
};

struct NcclComm {
  core::Engine* engine = nullptr;  // dereferenced only while `pending` > 0 (the engine is alive)
  uint64_t engine_handle = 0;
  core::Object* order = nullptr;  // the engine's collective-order object; null: FL_COMM_UNORDERED
  uint32_t lane = 0;
  int device = 0;
  int rank = 0;
  int nranks = 0;
  std::array<char, 128> uid{};
  uint64_t handle = 0;  // with kNcclTag; 0 once erased (under mu once registered)
  std::string name;     // "NCCL communicator 0x... (rank 0 of 2, cuda:0, lane 3)"
  // One for the handle, one per collective submitted and not cleaned up, and short-lived
  // ones taken by the watchdog (try_ref). The last unref tears down and deletes.
  std::atomic<int64_t> refs{1};
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
  fl_status_t abort_status = FL_OK;  // what unfinished collectives fail with
  std::string reason;                // why the communicator broke or was aborted
  uint64_t issued = 0;               // last sequence number handed out
  uint64_t launched = 0;             // collectives issued to NCCL
  uint64_t completed = 0;            // collectives finished, any outcome
  uint64_t pending = 0;              // submitted, cleanup not run yet
  uint64_t inflight = 0;             // issued to NCCL, not settled yet
  uint64_t last_settled = 0;         // highest launched seq settled (launches settle in seq order)
  uint64_t abort_cut = 0;            // last_settled at the abort: launched seqs above it failed
  std::deque<CollRecord> recorder;   // the last kRecorderSize collectives
};

// One collective instruction's state (its user_data).
struct CollWork {
  NcclComm* comm = nullptr;
  uint64_t seq = 0;
  std::vector<fl_coll_part_t> parts;
  std::string signature;
  core::Instr* instr = nullptr;  // set by the launch
  bool ran = false;              // the launch trampoline ran
  bool launched = false;         // issued to NCCL
  bool settled = false;          // nccl_settle ran (from the poller hook or the cleanup)
};

// Process-wide: the handle table, every live communicator, each engine's order object and
// the watchdog thread.
struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<NcclComm*> comms;                              // every NcclComm with refs > 0
  std::vector<std::pair<uint64_t, core::Object*>> orders;    // engine handle → order object
  std::vector<NcclComm*> joining;                            // inside fl_comm_create's NCCL init
  bool watching = false;                                     // the watchdog thread runs
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: the detached watchdog may outlive statics
  return *r;
}
HandleTable<NcclComm>& nccl_table() {
  static HandleTable<NcclComm>* t = new HandleTable<NcclComm>();  // never destroyed, as the others
  return *t;
}

CollRecord* find_record(NcclComm& c, uint64_t seq) {  // under c.mu
  if (c.recorder.empty() || seq < c.recorder.front().seq) return nullptr;
  size_t k = size_t(seq - c.recorder.front().seq);
  return k < c.recorder.size() ? &c.recorder[k] : nullptr;
}
void set_record(NcclComm& c, uint64_t seq, const char* state) {  // under c.mu
  if (CollRecord* r = find_record(c, seq)) r->state = state;
}

std::string coll_name(const CollWork& w) {
  return "collective seq " + std::to_string(w.seq) + " " + w.signature + " on " + w.comm->name;
}

// Finalizes and destroys an idle communicator (bounded), aborting it when that fails.
void teardown_comm(ncclComm_t comm, bool abort) {
  if (comm == nullptr) return;
  if (abort) {
    (void)ncclCommAbort(comm);
    return;
  }
#if FLOWLANE_NCCL_NONBLOCKING
  ncclResult_t r = ncclCommFinalize(comm);
  if (r == ncclInProgress || r == ncclSuccess) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(
                                             env_ms("FLOWLANE_NCCL_FINALIZE_TIMEOUT_MS", kDefaultFinalizeTimeoutMs));
    ncclResult_t st = ncclInProgress;
    for (Backoff b; Clock::now() < deadline; b.pause()) {
      if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) st = ncclInternalError;
      if (st != ncclInProgress) break;
    }
    if (st == ncclSuccess) {
      (void)ncclCommDestroy(comm);
      return;
    }
  }
  (void)ncclCommAbort(comm);  // finalize failed or did not finish in time
#else
  (void)ncclCommDestroy(comm);
#endif
}

void unref(NcclComm* c) {
  // acq_rel: the last dropper sees every other holder's writes before tearing down.
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lk(reg.mu);
    reg.comms.erase(std::find(reg.comms.begin(), reg.comms.end(), c));
  }
  // Nothing else can reach c now; an abort requested but not yet performed is done here.
  teardown_comm(c->comm, c->abort_req.load(std::memory_order_relaxed) || c->state != CommState::kActive);
  delete c;
}

// Under registry().mu: a reference on a communicator that is not being deleted.
bool try_ref(NcclComm* c) {
  // relaxed: c is alive (it is still registered, and removal takes the registry lock); the
  // count only has to stay above zero, which the CAS from a positive value guarantees.
  int64_t r = c->refs.load(std::memory_order_relaxed);
  while (r > 0 && !c->refs.compare_exchange_weak(r, r + 1, std::memory_order_relaxed)) {
  }
  return r > 0;
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
  if (c->comm != nullptr) (void)ncclCommAbort(c->comm);
  c->comm = nullptr;
}

// Performs a requested abort now if no launch holds nccl_mu (a launch polls for it
// itself; otherwise the watchdog retries every period).
void try_abort(NcclComm* c) {
  std::unique_lock<std::mutex> nl(c->nccl_mu, std::try_to_lock);
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
  ncclResult_t r = ncclCommGetAsyncError(c->comm, &async);
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
  std::vector<NcclComm*> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(reg.mu);
      if (!reg.comms.empty()) reg.cv.wait_for(lk, kWatchPeriod);
      if (reg.comms.empty()) {
        reg.watching = false;
        return;
      }
      for (NcclComm* c : reg.comms)
        if (try_ref(c)) batch.push_back(c);
    }
    for (NcclComm* c : batch) {
      watch_one(c);
      unref(c);
    }
    batch.clear();
  }
}

// ---- engine order objects -------------------------------------------------------------------

// Under registry().mu. The engine's collective-order object, created with the engine's
// first NCCL communicator and freed by the engine's destroy (it is on the engine's object
// list like any other); entries of destroyed engines are dropped without touching them.
core::Object* order_object(core::Engine* e) {
  Registry& reg = registry();
  std::erase_if(reg.orders, [](const auto& p) { return engine_table().lookup(p.first) == nullptr; });
  for (auto& [h, o] : reg.orders)
    if (h == e->handle()) return o;
  core::Object* o = e->create_object(nullptr, nullptr);
  reg.orders.emplace_back(e->handle(), o);
  return o;
}

// ---- launch, settle, cleanup ----------------------------------------------------------------

// Records the failure of a collective whose GPU work completed after its communicator was
// aborted, when the poller did not ask nccl_settle first (a cleanup run on the thread that
// completes the instruction right after: complete() publishes the outcome).
void fail_instr(core::Instr* i, fl_status_t st, const std::string& detail) {
  i->status = st;
  i->error = "instruction " + i->describe() + " failed: " + detail;
  i->origin = i->error;
  i->outcome = core::InstrState::kFailed;
}

// Under c->nccl_mu, nothing issued yet for w. The refusal of a collective whose
// communicator cannot issue it any more.
fl_status_t refuse(CollWork* w, core::Instr* i) {
  NcclComm* c = w->comm;
  std::lock_guard<std::mutex> lk(c->mu);
  i->error = coll_name(*w) + " was not issued: " +
             (c->state == CommState::kBroken ? "the communicator is broken: " : "the communicator was aborted: ") +
             c->reason;
  set_record(*c, w->seq, "not issued");
  return c->abort_status != FL_OK ? c->abort_status : FL_ERR_CANCELLED;
}

// Under c->nccl_mu: aborts the communicator after an NCCL failure during this launch.
fl_status_t fail_launch(CollWork* w, core::Instr* i, ncclResult_t r, const char* call) {
  NcclComm* c = w->comm;
  std::string why = nccl_message(r, call) + nccl_detail(c->comm) + " while issuing collective seq " + std::to_string(w->seq);
  {
    std::lock_guard<std::mutex> lk(c->mu);
    request_abort(c, FL_ERR_NCCL, why);
    set_record(*c, w->seq, "not issued");
  }
  abort_locked(c);
  i->error = coll_name(*w) + " failed: " + why + "; the communicator was aborted";
  return FL_ERR_NCCL;
}

// The launch trampoline (lane runner, device current, CUDA stream created).
fl_status_t launch_collective(fl_instr_ctx_t* ctx, void* ud) {
  auto* i = reinterpret_cast<core::Instr*>(ctx);
  auto* w = static_cast<CollWork*>(ud);
  NcclComm* c = w->comm;
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
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &async);
    if (r != ncclSuccess) return fail_launch(w, i, r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) return fail_launch(w, i, async, "an earlier operation (asynchronous error)");
    cudaStream_t cs = cuda_stream(i->stream);
    r = ncclGroupStart();
    if (r != ncclSuccess) return fail_launch(w, i, r, "ncclGroupStart");
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
        case FL_COLL_ALL_REDUCE: r = ncclAllReduce(p.sendbuf, p.recvbuf, n, dt, op, c->comm, cs), call = "ncclAllReduce"; break;
        case FL_COLL_ALL_GATHER: r = ncclAllGather(p.sendbuf, p.recvbuf, n, dt, c->comm, cs), call = "ncclAllGather"; break;
        case FL_COLL_REDUCE_SCATTER:
          r = ncclReduceScatter(p.sendbuf, p.recvbuf, n, dt, op, c->comm, cs), call = "ncclReduceScatter";
          break;
        case FL_COLL_BROADCAST: r = ncclBroadcast(p.sendbuf, p.recvbuf, n, dt, peer, c->comm, cs), call = "ncclBroadcast"; break;
        case FL_COLL_SEND: r = ncclSend(p.sendbuf, n, dt, peer, c->comm, cs), call = "ncclSend"; break;
        default: r = ncclRecv(p.recvbuf, n, dt, peer, c->comm, cs), call = "ncclRecv"; break;
      }
      if (r != ncclSuccess && first == ncclSuccess) first = r, first_call = call;
    }
    r = ncclGroupEnd();  // always closes the group, even after a failed part
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
      ncclResult_t q = ncclCommGetAsyncError(c->comm, &r);
      if (q != ncclSuccess) return fail_launch(w, i, q, "ncclCommGetAsyncError");
      if (r != ncclSuccess && r != ncclInProgress) return fail_launch(w, i, r, "ncclGroupEnd (asynchronous)");
    }
#endif
    std::lock_guard<std::mutex> lk(c->mu);
    c->launched = std::max(c->launched, w->seq);
    ++c->inflight;
    w->launched = true;
    set_record(*c, w->seq, "launched");
    return FL_OK;
  }
refused:
  return refuse(w, i);
}

// A launched collective has finished on the GPU (or its instruction failed after the
// launch): the outcome, and a broken communicator's deferred abort.
fl_status_t settle(CollWork* w, std::string* detail) {
  NcclComm* c = w->comm;
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
    set_record(*c, w->seq, st == FL_OK ? "done" : "failed");
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
void coll_cleanup(void* ud) {
  auto* w = static_cast<CollWork*>(ud);
  NcclComm* c = w->comm;
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
      set_record(*c, w->seq, "skipped");
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
  unref(c);
  delete w;
}

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

NcclComm* lookup(const fl_comm_t* h, const char* fn) {
  NcclComm* c = nccl_table().lookup(handle_bits(h) & ~kNcclTag);
  if (c == nullptr)
    fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the NCCL communicator handle is stale (destroyed, or its engine "
                                                  "was destroyed)");
  return c;
}

void fill_order(core::Instr* i, const void* ctx) {
  // The engine's collective order: a write-only operand, so it orders (WAW) without
  // poisoning (a failed collective does not skip the next one).
  i->operands.push_back(core::Operand{static_cast<core::Object*>(const_cast<void*>(ctx)), FL_WRITE});
}

}  // namespace

bool nccl_compiled() { return true; }
bool nccl_available() { return device_count() > 0; }

bool nccl_handle(const fl_comm_t* h) { return h != nullptr && (handle_bits(h) & kNcclTag) != 0; }

void nccl_unique_id(fl_comm_unique_id_t* out) {
  static_assert(sizeof(ncclUniqueId) <= sizeof(fl_comm_unique_id_t), "NCCL unique id does not fit");
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) fail(FL_ERR_NCCL, "fl_comm_get_unique_id: " + nccl_message(r, "ncclGetUniqueId") + nccl_detail(nullptr));
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->internal, &id, sizeof id);
}

fl_comm_t* nccl_comm_create(core::Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid) {
  const std::string fn = "fl_comm_create";
  if ((d.flags & ~FL_COMM_UNORDERED) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": flags " + std::to_string(d.flags) + " are unknown (0 or FL_COMM_UNORDERED)");
  if (d.nranks == 0 || d.nranks > 4096)
    fail(FL_ERR_OUT_OF_RANGE, fn + ": nranks " + std::to_string(d.nranks) + " is out of range (1..4096)");
  if (d.rank >= d.nranks)
    fail(FL_ERR_OUT_OF_RANGE, fn + ": rank " + std::to_string(d.rank) + " is out of range: the communicator has " +
                                  std::to_string(d.nranks) + " ranks (0.." + std::to_string(d.nranks - 1) + ")");
  if (d.lane >= e->lane_count())
    fail(FL_ERR_OUT_OF_RANGE, fn + ": lane " + std::to_string(d.lane) + " is out of range: this engine has " +
                                  std::to_string(e->lane_count()) + " lanes");
  const uint32_t devices = e->device_slots() - 1;
  if (d.device >= devices)
    fail(FL_ERR_NO_DEVICE, fn + ": CUDA device " + std::to_string(d.device) + " does not exist: this process sees " +
                               std::to_string(devices) + " CUDA device(s)");
  static const std::array<char, 128> kZero{};
  if (std::memcmp(uid.internal, kHostFakeMagic, sizeof kHostFakeMagic - 1) == 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": the unique id was made by fl_comm_get_unique_id(FL_COMM_HOST_FAKE); an NCCL "
                                       "communicator needs fl_comm_get_unique_id(FL_COMM_NCCL)");
  if (std::memcmp(uid.internal, kZero.data(), kZero.size()) == 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": the unique id is all zero (not made by fl_comm_get_unique_id)");
  if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, fn + ": the engine is being destroyed");

  auto owner = std::make_unique<NcclComm>();
  NcclComm* c = owner.get();
  c->engine = e;
  c->engine_handle = e->handle();
  c->lane = uint32_t(d.lane);
  c->device = int(d.device);
  c->rank = int(d.rank);
  c->nranks = int(d.nranks);
  std::memcpy(c->uid.data(), uid.internal, c->uid.size());
  Registry& reg = registry();
  {
    std::lock_guard<std::mutex> lk(reg.mu);
    // Unordered ranks do not wait for each other through the order: allowed together.
    const bool ordered = (d.flags & FL_COMM_UNORDERED) == 0;
    auto same = [&](NcclComm* o) {
      return o->engine_handle == c->engine_handle && o->uid == c->uid && (ordered || o->order != nullptr);
    };
    int other = -1;
    for (NcclComm* o : reg.joining)
      if (same(o)) other = o->rank;
    for (NcclComm* o : reg.comms) {
      if (!same(o)) continue;
      std::lock_guard<std::mutex> olk(o->mu);  // lock order: registry, then a communicator
      if (o->handle != 0) other = o->rank;
    }
    if (other >= 0)
      fail(FL_ERR_INVALID_ARGUMENT,
           fn + ": rank " + std::to_string(other) + " of this unique id already lives on this engine; an engine issues "
                "all its collectives in one order (gpu/README.md, NCCL), so two ranks of one communicator on one engine "
                "would wait for each other forever: give each rank its own engine (normally its own process)");
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
  (void)cudaGetDevice(&saved);
  cudaError_t cr = cudaSetDevice(c->device);
  if (cr != cudaSuccess) {
    (void)cudaGetLastError();
    fail(FL_ERR_CUDA, fn + ": " + cuda_message(cr, "cudaSetDevice"));
  }
  struct RestoreDevice {
    int dev, saved;
    ~RestoreDevice() {
      if (saved >= 0 && saved != dev) (void)cudaSetDevice(saved);
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
  ncclResult_t r = ncclCommInitRankConfig(&comm, c->nranks, id, c->rank, &cfg);
  const uint64_t timeout_ms = env_ms("FLOWLANE_NCCL_INIT_TIMEOUT_MS", kDefaultInitTimeoutMs);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (Backoff b; r == ncclInProgress; b.pause()) {
    if (Clock::now() >= deadline) {
      (void)ncclCommAbort(comm);
      fail(FL_ERR_TIMEOUT, fn + ": " + who + ": not every rank joined within " + std::to_string(timeout_ms) +
                               " ms (FLOWLANE_NCCL_INIT_TIMEOUT_MS); the half-made communicator was aborted. Every "
                               "rank must call fl_comm_create with the same unique id and nranks");
    }
    ncclResult_t async = ncclInProgress;
    ncclResult_t q = ncclCommGetAsyncError(comm, &async);
    r = q != ncclSuccess ? q : async;
  }
  const char* call = "ncclCommInitRankConfig";
#else
  ncclResult_t r = ncclCommInitRank(&comm, c->nranks, id, c->rank);  // blocks until every rank joined
  const char* call = "ncclCommInitRank";
#endif
  if (r != ncclSuccess) {
    std::string detail = nccl_detail(comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    fail(FL_ERR_NCCL, fn + ": " + who + ": " + nccl_message(r, call) + detail);
  }
  uint64_t h = nccl_table().insert(c);
  if (h == 0) {
    (void)ncclCommAbort(comm);
    fail(FL_ERR_NO_MEMORY, fn + ": the process-wide NCCL communicator table is full");
  }
  c->comm = comm;
  c->handle = h | kNcclTag;
  c->name = "NCCL communicator " + hex(c->handle) + " (rank " + std::to_string(c->rank) + " of " +
            std::to_string(c->nranks) + ", cuda:" + std::to_string(c->device) + ", lane " + std::to_string(c->lane) + ")";
  {
    std::lock_guard<std::mutex> lk(reg.mu);
    reg.joining.erase(std::find(reg.joining.begin(), reg.joining.end(), c));
    joining.c = nullptr;
    reg.comms.push_back(owner.release());
    if (!reg.watching) {
      reg.watching = true;
      std::thread(watch_loop).detach();  // exits by itself once no communicator is left
    }
  }
  return handle_cast<fl_comm_t>(c->handle);
}

void nccl_comm_destroy(const fl_comm_t* h) {
  NcclComm* c = nccl_table().erase(handle_bits(h) & ~kNcclTag);
  if (c == nullptr)
    fail(FL_ERR_INVALID_HANDLE, "fl_comm_destroy: the NCCL communicator handle is stale (destroyed twice, or its engine "
                                "was destroyed)");
  bool abort = false;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    c->handle = 0;
    if (c->pending > 0) {
      request_abort(c, FL_ERR_CANCELLED, "rank " + std::to_string(c->rank) +
                                             " destroyed its communicator (fl_comm_destroy) with " +
                                             std::to_string(c->pending) + " collective(s) pending");
      abort = true;
    }
  }
  if (abort) {
    try_abort(c);
  } else {
    // Idle: no collective can start any more (the handle is gone), so finalize and destroy
    // here, in the caller's thread, whoever drops the last reference. nccl_mu is held at
    // most briefly by the watchdog's error poll.
    ncclComm_t comm;
    {
      std::lock_guard<std::mutex> nl(c->nccl_mu);
      comm = c->comm;
      c->comm = nullptr;
    }
    teardown_comm(comm, false);
  }
  unref(c);  // the handle's
}

fl_instr_id nccl_submit(fl_stream_t* stream_handle, const fl_comm_t* h, const fl_collective_instr_t& in) {
  const std::string fn = "fl_submit_collective";
  NcclComm* c = lookup(h, fn.c_str());
  core::Stream* s = stream_from(stream_handle, fn.c_str());
  if ((in.flags & ~uint64_t(FL_SUBMIT_NONBLOCKING)) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": unknown flags " + std::to_string(in.flags) + " (only FL_SUBMIT_NONBLOCKING is defined)");
  if (s->engine->handle() != c->engine_handle) {
    if (engine_table().lookup(c->engine_handle) == nullptr)
      fail(FL_ERR_INVALID_HANDLE, fn + ": the engine of " + c->name + " was destroyed (destroy the communicator)");
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": the stream belongs to another engine than " + c->name);
  }
  if (s->lane->id != c->lane || s->kind != FL_STREAM_COLLECTIVE || s->device.type != FL_DEVICE_CUDA ||
      s->device.index != c->device)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": " + c->name + " issues its collectives on lane " + std::to_string(c->lane) +
                                      "'s COLLECTIVE stream of cuda:" + std::to_string(c->device) +
                                      ", but the stream given is " + s->describe() +
                                      " (DESIGN.md rule 8: one stream, one order per communicator)");
  if (in.num_parts == 0 || in.parts == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": parts is NULL or num_parts is 0 (give at least one part)");
  if (in.num_parts > 1024)
    fail(FL_ERR_OUT_OF_RANGE, fn + ": num_parts " + std::to_string(in.num_parts) + " exceeds 1024");
  auto w = std::make_unique<CollWork>();
  w->parts.assign(in.parts, in.parts + in.num_parts);
  for (size_t k = 0; k < w->parts.size(); ++k) {
    const fl_coll_part_t& p = w->parts[k];
    auto at = [&] { return fn + ": part " + std::to_string(k) + ": "; };
    ncclDataType_t dt;
    ncclRedOp_t op;
    if (p.op < FL_COLL_ALL_REDUCE || p.op > FL_COLL_RECV)
      fail(FL_ERR_INVALID_ARGUMENT, at() + "op " + std::to_string(p.op) + " is unknown (FL_COLL_ALL_REDUCE..FL_COLL_RECV)");
    if (!dtype_of(p.dtype, &dt)) fail(FL_ERR_INVALID_ARGUMENT, at() + "dtype " + std::to_string(p.dtype) + " is unknown");
    if (is_reduction(p.op) && !redop_of(p.redop, &op))
      fail(FL_ERR_INVALID_ARGUMENT, at() + "redop " + std::to_string(p.redop) + " is unknown (sum, prod, max, min)");
    if ((p.op == FL_COLL_BROADCAST || p.op == FL_COLL_SEND || p.op == FL_COLL_RECV) && p.peer >= uint32_t(c->nranks))
      fail(FL_ERR_OUT_OF_RANGE, at() + (p.op == FL_COLL_BROADCAST ? "root " : "peer ") + std::to_string(p.peer) +
                                    " is out of range: the communicator has " + std::to_string(c->nranks) + " ranks");
    if (p.count > (uint64_t(1) << 40))
      fail(FL_ERR_OUT_OF_RANGE, at() + "count " + std::to_string(p.count) + " is too large");
    if (p.count == 0) continue;
    bool needs_send = p.op != FL_COLL_RECV && (p.op != FL_COLL_BROADCAST || p.peer == uint32_t(c->rank));
    bool needs_recv = p.op != FL_COLL_SEND;
    if (needs_send && p.sendbuf == nullptr) fail(FL_ERR_INVALID_ARGUMENT, at() + op_name(p.op) + " needs a sendbuf");
    if (needs_recv && p.recvbuf == nullptr) fail(FL_ERR_INVALID_ARGUMENT, at() + op_name(p.op) + " needs a recvbuf");
  }
  w->comm = c;
  w->signature = signature(w->parts);

  std::lock_guard<std::mutex> order(c->submit_mu);  // seq order == stream order
  {
    std::lock_guard<std::mutex> lk(c->mu);
    w->seq = ++c->issued;
    ++c->pending;
    CollRecord rec;
    rec.seq = w->seq;
    rec.signature = w->signature;
    c->recorder.push_back(std::move(rec));
    if (c->recorder.size() > kRecorderSize) c->recorder.pop_front();
  }
  c->refs.fetch_add(1, std::memory_order_relaxed);  // the instruction's (the handle's keeps c alive here)
  SubmitArgs a;
  a.kind = core::InstrKind::kCollective;
  a.fn = &launch_collective;
  a.user_data = w.get();
  a.cleanup = &coll_cleanup;  // after the GPU work completed, or on skip / failed launch
  a.operands = in.operands;
  a.num_operands = in.num_operands;
  a.name = in.name;
  a.nonblocking = (in.flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.api = "fl_submit_collective";
  if (c->order != nullptr) {  // FL_COMM_UNORDERED: not in the engine's collective order
    a.fill = &fill_order;
    a.fill_ctx = c->order;
  }
  const uint64_t seq = w->seq;
  CollWork* work = w.release();  // the instruction's from here (coll_cleanup deletes it, maybe before we return)
  fl_instr_id id;
  try {
    id = submit_instruction(s, a);
  } catch (...) {  // not queued (cleanup never runs): neither the sequence number nor the reference is used
    delete work;
    {
      std::lock_guard<std::mutex> lk(c->mu);
      --c->issued;
      --c->pending;
      if (!c->recorder.empty() && c->recorder.back().seq == seq) c->recorder.pop_back();
    }
    unref(c);
    throw;
  }
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (CollRecord* rec = find_record(*c, seq)) rec->instr = id;
  }
  return id;
}

void nccl_engine_shutdown(core::Engine* e) {
  Registry& reg = registry();
  std::vector<NcclComm*> mine;
  {
    std::lock_guard<std::mutex> lk(reg.mu);
    for (NcclComm* c : reg.comms)
      if (c->engine_handle == e->handle() && try_ref(c)) mine.push_back(c);
  }
  for (NcclComm* c : mine) {
    bool drop_handle = false;
    {
      std::lock_guard<std::mutex> lk(c->mu);
      request_abort(c, FL_ERR_CANCELLED, "rank " + std::to_string(c->rank) + "'s engine was destroyed (fl_engine_destroy)");
      drop_handle = c->handle != 0 && nccl_table().erase(c->handle & ~kNcclTag) == c;
      c->handle = 0;
    }
    try_abort(c);
    if (drop_handle) unref(c);
    unref(c);
  }
}

fl_status_t nccl_settle(core::Instr* i, std::string* detail) {
  auto* w = static_cast<CollWork*>(i->user_data);
  if (w == nullptr || !w->launched || w->settled) return FL_OK;
  return settle(w, detail);
}

void nccl_dump(core::Engine& e, std::string& out) {
  Registry& reg = registry();
  std::vector<NcclComm*> mine;
  {
    std::lock_guard<std::mutex> lk(reg.mu);
    for (NcclComm* c : reg.comms)
      if (c->engine_handle == e.handle() && try_ref(c)) mine.push_back(c);
  }
  out += "NCCL communicators: " + std::to_string(mine.size()) + "\n";
  for (NcclComm* c : mine) {
    {
      std::lock_guard<std::mutex> lk(c->mu);
      const char* st = c->state == CommState::kActive ? "active" : c->state == CommState::kBroken ? "BROKEN" : "ABORTED";
      out += "  " + c->name + ": " + st + (c->reason.empty() ? "" : " (" + c->reason + ")") + "\n";
      out += "    sequence numbers: issued " + std::to_string(c->issued) + ", launched " + std::to_string(c->launched) +
             ", completed " + std::to_string(c->completed) + "; in flight on the GPU " + std::to_string(c->inflight) + "\n";
      for (const CollRecord& r : c->recorder) {
        char b[64];
        std::snprintf(b, sizeof b, "      seq %-4" PRIu64 " #%-6" PRIu64 " %-10s ", r.seq, r.instr, r.state);
        out += b + r.signature + "\n";
      }
    }
    unref(c);
  }
}

}  // namespace flowlane::gpu

#else  // no NCCL in this build

namespace flowlane::gpu {
bool nccl_compiled() { return false; }
bool nccl_available() { return false; }
bool nccl_handle(const fl_comm_t*) { return false; }
void nccl_unique_id(fl_comm_unique_id_t*) { fail(FL_ERR_UNSUPPORTED, "NCCL is not available in this build"); }
fl_comm_t* nccl_comm_create(core::Engine*, const fl_comm_desc_t&, const fl_comm_unique_id_t&) {
  fail(FL_ERR_UNSUPPORTED, "fl_comm_create: NCCL is not available in this build");
}
void nccl_comm_destroy(const fl_comm_t*) { fail(FL_ERR_UNSUPPORTED, "NCCL is not available in this build"); }
fl_instr_id nccl_submit(fl_stream_t*, const fl_comm_t*, const fl_collective_instr_t&) {
  fail(FL_ERR_UNSUPPORTED, "fl_submit_collective: NCCL is not available in this build");
}
void nccl_engine_shutdown(core::Engine*) {}
fl_status_t nccl_settle(core::Instr*, std::string*) { return FL_OK; }
void nccl_dump(core::Engine&, std::string&) {}
}  // namespace flowlane::gpu

#endif
