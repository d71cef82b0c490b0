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
//
// Files: this one has the backend's entry points (fl_comm_create's NCCL init) and the
// methods of NcclComm; nccl_watch.cpp the registry of communicators, the watchdog thread and
// aborts; nccl_launch.cpp the launch, settle and cleanup of collectives; nccl_internal.hpp
// what they share.
#include "comm/comm.hpp"

#if FLOWLANE_HAVE_CUDA && FLOWLANE_HAVE_NCCL

#include <cstdlib>
#include <cstring>

#include "comm/nccl_internal.hpp"

namespace flowlane::comm {

namespace nccl_internal {

std::string nccl_message(ncclResult_t r, const char* call) {
  return std::string(nccl().ncclGetErrorString(r)) + " (NCCL error " + std::to_string(int(r)) + ") from " + call;
}
// ncclGetLastError's text, when NCCL has one.
std::string nccl_detail(ncclComm_t comm) {
  const char* s = nccl().ncclGetLastError(comm);
  return s != nullptr && *s != 0 ? std::string(": ") + s : std::string();
}

uint64_t env_ms(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  char* end = nullptr;
  unsigned long long ms = std::strtoull(v, &end, 10);
  return end != nullptr && *end == 0 && ms > 0 ? uint64_t(ms) : fallback;
}

}  // namespace nccl_internal

using namespace nccl_internal;

namespace {

constexpr uint64_t kDefaultInitTimeoutMs = 600'000;     // FLOWLANE_NCCL_INIT_TIMEOUT_MS

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

namespace {

// fl_comm_create's NCCL init, step by step: refuse a second rank of one communicator on
// one engine and enter reg.joining; create the NCCL communicator (bounded); move it to
// reg.comms and start the watchdog.

// Under reg.mu: the rank of this unique id that already lives on c's engine (and would wait
// for c through the engine's collective order), or -1.
int64_t rank_on_same_engine(Registry& reg, const NcclComm* c, bool ordered) {
  // Unordered ranks do not wait for each other through the order: allowed together.
  auto same = [&](const NcclComm* o) {
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
  return other;
}

void join(NcclComm* c, const fl_comm_desc_t& d) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  const bool ordered = (d.flags & FL_COMM_UNORDERED) == 0;
  int64_t other = rank_on_same_engine(reg, c, ordered);
  if (other >= 0)
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_comm_create: rank " + std::to_string(other) + " of this unique id already lives on this engine; an engine "
         "issues all its collectives in one order (comm/README.md, NCCL), so two ranks of one communicator on one "
         "engine would wait for each other forever: give each rank its own engine (normally its own process)");
  c->order = ordered ? order_object(c->engine) : nullptr;
  reg.joining.push_back(c);
}

// Leaves reg.joining if the init fails (destroyed before the owner, so nobody sees a
// deleted communicator there); on success publish() moves it to reg.comms under one lock.
struct Joining {
  NcclComm* c;
  ~Joining() {
    if (c == nullptr) return;
    Registry& reg = registry();
    std::lock_guard<std::mutex> lk(reg.mu);
    reg.joining.erase(std::find(reg.joining.begin(), reg.joining.end(), c));
  }
};

// Makes `device` current until the scope ends; the caller's device is restored.
struct DeviceScope {
  int dev, saved = -1;
  explicit DeviceScope(int device) : dev(device) {
    (void)cu().cudaGetDevice(&saved);
    cudaError_t cr = cu().cudaSetDevice(dev);
    if (cr != cudaSuccess) {
      (void)cu().cudaGetLastError();
      fail(FL_ERR_CUDA, "fl_comm_create: " + gpu::cuda_message(cr, "cudaSetDevice"));
    }
  }
  ~DeviceScope() {
    if (saved >= 0 && saved != dev) (void)cu().cudaSetDevice(saved);
  }
};

// ncclCommInitRank(Config) on c's device: the new NCCL communicator, once every rank joined.
ncclComm_t init_rank(const NcclComm* c, const fl_comm_unique_id_t& uid) {
  const std::string fn = "fl_comm_create";
  DeviceScope on_device(c->device);
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
  return comm;
}

// The communicator leaves reg.joining for reg.comms; the watchdog runs from now on.
void publish(const std::shared_ptr<NcclComm>& owner, Joining& joining) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  reg.joining.erase(std::find(reg.joining.begin(), reg.joining.end(), owner.get()));
  joining.c = nullptr;
  reg.comms.push_back(owner);
  if (!reg.watching) {
    reg.watching = true;
    std::thread(watch_loop).detach();  // exits by itself once no communicator is left
  }
}

}  // namespace

std::shared_ptr<Communicator> create_nccl(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid,
                                          const Settings& settings) {
  const std::string fn = "fl_comm_create";
  if (d.device >= e->device_count())
    fail(FL_ERR_NO_DEVICE, fn + ": CUDA device " + std::to_string(d.device) + " does not exist: this process sees " +
                               std::to_string(e->device_count()) + " CUDA device(s)");
  static const std::array<char, 128> kZero{};
  if (std::memcmp(uid.internal, kZero.data(), kZero.size()) == 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": the unique id is all zero (not made by fl_comm_get_unique_id)");

  auto owner = std::make_shared<NcclComm>(e, d, uid, settings);
  NcclComm* c = owner.get();
  c->device = int(d.device);
  std::memcpy(c->uid.data(), uid.internal, c->uid.size());
  join(c, d);
  Joining joining{c};
  c->comm = init_rank(c, uid);
  publish(owner, joining);
  return owner;
}

// ---- NcclComm ---------------------------------------------------------------------------

NcclComm::~NcclComm() {
  // Nothing else can reach this communicator now; an abort requested but not yet performed
  // is done here.
  teardown_comm(comm, abort_req.load(std::memory_order_relaxed) || state != CommState::kActive);
}

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
  static const std::string fn = "fl_submit_collective";  // static: no allocation per submit
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
    recorder.queued(w->seq, w->parts, in.name, since_created_ns());
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
      recorder.forget(seq);
    }
    delete work;
    throw;
  }
  std::lock_guard<std::mutex> lk(mu);
  recorder.set_instr(seq, id);
  return id;
}

void NcclComm::time_out(uint64_t seq, const std::string& detail) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (state == CommState::kAborted || completed >= seq) return;
    // The collectives in flight fail with FL_ERR_TIMEOUT, later ones at their launch.
    request_abort(this, FL_ERR_TIMEOUT, "collective seq " + std::to_string(seq) + " timed out: " + detail);
  }
  try_abort(this);  // else the launch polling for it, or the watchdog, performs it
}

void NcclComm::dump(std::string& out) {
  std::lock_guard<std::mutex> lk(mu);
  const char* st = state == CommState::kActive ? "active" : state == CommState::kBroken ? "BROKEN" : "ABORTED";
  out += "  " + name() + ": " + st + (reason.empty() ? "" : " (" + reason + ")") + "\n";
  out += "    sequence numbers: issued " + std::to_string(issued) + ", launched " + std::to_string(launched) +
         ", completed " + std::to_string(completed) + "; in flight on the GPU " + std::to_string(inflight) + "\n";
  recorder.dump_text(out);
}

const char* NcclComm::state_word(std::string* why) {
  std::lock_guard<std::mutex> lk(mu);
  *why = reason;
  return state == CommState::kActive ? "active" : state == CommState::kBroken ? "broken" : "aborted";
}

}  // namespace flowlane::comm

#else  // no NCCL in this build

namespace flowlane::comm {

bool nccl_usable(std::string* why_not) {
  *why_not = "this libflowlane was built without NCCL (a CPU-only build, or no NCCL at build time)";
  return false;
}
void nccl_unique_id(fl_comm_unique_id_t*) { fail(FL_ERR_UNSUPPORTED, "NCCL is not available in this build"); }
std::shared_ptr<Communicator> create_nccl(Engine*, const fl_comm_desc_t&, const fl_comm_unique_id_t&, const Settings&) {
  fail(FL_ERR_UNSUPPORTED, "fl_comm_create: NCCL is not available in this build");
}

}  // namespace flowlane::comm

#endif
