// A host-only stand-in for the NCCL calls libflowlane makes, with real multi-rank
// semantics for ranks that live in one process (each rank a communicator made from the
// same unique id, normally on its own engine and thread). LD_PRELOADed after the fake
// CUDA runtime (fake_cudart.cpp), whose streams are host threads and whose "device
// pointers" are host memory. It checks flowlane's side of the NCCL contract; it proves
// nothing about NCCL.
//
// Model.
// * A group (ncclGroupStart..End, or one call outside a group) of one communicator is one
//   "launch": a fake kernel (fake_kernel.hpp) enqueued on the stream with cudaLaunchKernel.
// * Collective operations of a communicator are matched across ranks by their index on
//   that communicator (the k-th collective of every rank); send/recv by the k-th send from
//   a to b against the k-th recv on b from a. When every participant has *issued* an
//   operation, their signatures (op, dtype, count, redop, root) are compared: a mismatch
//   is recorded and sets ncclInvalidUsage as the asynchronous error of every participant
//   (real NCCL would hang or corrupt memory); the operation never completes.
// * A running launch first occupies its GPU — one NCCL kernel per GPU at a time, the
//   pessimistic reading of "NCCL kernels may not run concurrently" — then posts its
//   operations and blocks its stream until all of them completed. The last participant to
//   post an operation moves the data (inputs staged first, so in-place is safe).
// * Deadlock: a cycle of launches each waiting for a GPU held by the next, or for a peer's
//   launch that waits for a GPU, can never resolve. It is recorded and every launch on it
//   gets ncclInternalError as its asynchronous error; the kernels keep waiting, as real
//   ones would, until their communicator is aborted.
// * ncclCommAbort makes the rank's waiting kernels return (their operations undone) and
//   gives every peer with work outstanding ncclRemoteError; later kernels of the aborted
//   communicator return at once. Peers' kernels keep waiting until they abort too.
// * Non-blocking communicators (config.blocking = 0): init, group end and finalize return
//   ncclInProgress; the state turns ncclSuccess once every rank joined / right after the
//   enqueue / once nothing is in flight, as seen by ncclCommGetAsyncError.
// * Misuse that real NCCL does not forgive (a call on an aborted or destroyed
//   communicator, a call while a non-blocking one is still ncclInProgress, ncclGroupEnd
//   without ncclGroupStart, destroy with kernels in flight) is counted and reported.
//
// Cross-process mode (fake_nccl_xproc.hpp): a unique id made while FAKE_NCCL_SHARED_DIR
// names a folder carries it, and every communicator made from that id, in any process of
// the machine, meets its peers through files there instead of through this process's
// memory. Each rank's operation is one file (its signature, and its data for a
// collective or a send, written aside and renamed); the rank's kernel writes its files,
// then waits for its peers' (polling, and returning once the communicator is aborted),
// compares the signatures (a mismatch: ncclInvalidUsage on every rank that sees it, the
// operation never completes) and computes its own share with the same code as the
// in-process mode, reducing in rank order: the same bits on every rank and in both modes.
// A send waits for its receiver's file, as a recv waits for its sender's. A peer's abort
// (its abort.<rank> file) gives ncclRemoteError to a rank waiting on the clique. Not
// modelled across processes: deadlock detection (a cycle through another process is never
// reported: the comm timeout must end it), "Duplicate GPU detected" (each process's fake
// GPUs are its own), memory bandwidth or any timing. Files stay until the folder is removed.
// Unique ids carry the making process's id, a random number and a counter, so two
// processes never make the same one (in either mode).
//
// Test interface (extern "C", below): fake_nccl_set_thread_gpu, fake_nccl_counter,
// fake_nccl_report, fake_nccl_reset.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fake_kernel.hpp"
#include "fake_nccl_xproc.hpp"

namespace {

constexpr char kMagic[] = "fake-nccl-id";
// Inside a unique id: the magic, then who made it (pid, a random number, a counter: the
// clique's name), then the shared folder of a cross-process clique ("" otherwise).
constexpr size_t kWhoAt = 16, kWhoBytes = 24, kDirAt = 40, kDirBytes = 128 - kDirAt;

struct Launch;
struct Clique;

enum Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSend, kRecv };
const char* kind_name(int k) {
  static const char* n[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv"};
  return n[k];
}
size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

struct Slot;

struct Op {
  int kind = kAllReduce;
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t redop = ncclSum;
  size_t count = 0;
  int peer = 0;  // root (broadcast), peer (send/recv)
  const void* send = nullptr;
  void* recv = nullptr;
  Slot* slot = nullptr;
  int role = 0;  // index in the slot: the rank (collectives), 0 send / 1 recv (p2p)
  uint64_t seq = 0;  // k: the communicator's k-th collective, or k-th send/recv with this peer
  bool done = false;
  Launch* launch = nullptr;
  std::string sig() const {
    std::string s = std::string(kind_name(kind)) + "(type " + std::to_string(int(dt)) + ", count " + std::to_string(count);
    if (kind == kAllReduce || kind == kReduceScatter) s += ", op " + std::to_string(int(redop));
    if (kind == kBroadcast) s += ", root " + std::to_string(peer);
    return s + ")";
  }
};

// One operation as all its participants see it.
struct Slot {
  std::string what;           // "collective #3 of clique 7" / "send 0->1 #2 of clique 7"
  std::vector<Op*> issued;    // per role; null: not issued yet (or abandoned)
  std::vector<bool> posted;   // the role's kernel runs and waits for it
  int left = 0;               // participants whose launch is finished with it
  bool done = false;
  bool bad = false;           // signatures disagree: never completes
};

struct Clique {
  int serial = 0;
  int nranks = 0;
  std::vector<ncclComm*> ranks;  // by rank; null until joined
  std::vector<bool> gone;        // the rank aborted
  int joined = 0;
  std::map<uint64_t, Slot> colls;
  std::map<std::tuple<int, int, uint64_t>, Slot> p2p;  // (from, to, k)
  std::string xdir;  // cross-process: the clique's folder (fake_nccl_xproc.hpp); "" in-process
};

enum class Pending { kNone, kInit, kGroup, kFinalize };

struct Launch {
  ncclComm* comm = nullptr;
  std::vector<std::unique_ptr<Op>> ops;
  cudaStream_t stream = nullptr;
  enum State { kQueued, kGpuWait, kRunning } st = kQueued;
  int undone = 0;
  bool in_deadlock = false;
};

struct Gpu {
  Launch* holder = nullptr;
};

std::mutex g_mu;
std::condition_variable g_cv;
std::map<std::array<char, 128>, Clique*> g_cliques;
std::map<int, Gpu> g_gpus;
std::set<Launch*> g_launches;
std::map<std::string, long> g_counters;
std::string g_report;
std::string g_last_error;
long g_next_id = 0;
int g_next_clique = 0;

thread_local int t_gpu = -1;
thread_local int t_depth = 0;
struct Queued {
  ncclComm* comm;
  cudaStream_t stream;
  Op op;
};
thread_local std::vector<Queued> t_queued;

// Under g_mu.
void note(const char* counter, const std::string& what) {
  ++g_counters[counter];
  g_report += std::string(counter) + ": " + what + "\n";
}

}  // namespace

struct ncclComm {
  Clique* clique = nullptr;
  int rank = 0;
  int gpu = 0;
  bool blocking = true;
  ncclResult_t state = ncclSuccess;
  Pending pending = Pending::kNone;
  ncclResult_t async = ncclSuccess;
  bool aborted = false;
  bool destroyed = false;
  uint64_t colls = 0;
  std::map<int, uint64_t> sends, recvs;  // per peer
  int launches_out = 0;
  std::string last_error;
  std::string name() const {
    return "clique " + std::to_string(clique->serial) + " rank " + std::to_string(rank) + " (gpu " + std::to_string(gpu) + ")";
  }
};

namespace {

// Under g_mu.
void set_async(ncclComm* c, ncclResult_t r, const std::string& why) {
  if (c == nullptr || c->aborted || c->destroyed) return;
  if (c->async == ncclSuccess) c->async = r;
  c->last_error = why;
}

// Under g_mu: a call on a communicator that real NCCL would not accept.
bool bad_comm(ncclComm* c, const char* call) {
  if (c == nullptr) {
    note("misuses", std::string(call) + " on a NULL communicator");
    return true;
  }
  if (c->aborted || c->destroyed) {
    note("misuses", std::string(call) + " on " + c->name() + " after it was " + (c->aborted ? "aborted" : "destroyed"));
    return true;
  }
  return false;
}

// ---- data movement ---------------------------------------------------------------------

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while ((man & 0x400) == 0) man <<= 1, --exp;
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_half(float f) {  // round to nearest even, enough for the tests' small integers
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint32_t sign = (b >> 16) & 0x8000;
  int exp = int((b >> 23) & 0xff) - 127 + 15;
  uint32_t man = b & 0x7fffff;
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) return uint16_t(sign);
  uint32_t h = sign | (uint32_t(exp) << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return uint16_t(h);
}
float bf16_to_float(uint16_t v) {
  uint32_t b = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fff + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}

template <class T>
T apply(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return T(a * b);
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return T(a + b);
  }
}
template <class T>
void reduce_typed(void* acc, const void* in, size_t n, ncclRedOp_t op) {
  auto* a = static_cast<T*>(acc);
  const auto* b = static_cast<const T*>(in);
  for (size_t k = 0; k < n; ++k) a[k] = apply(a[k], b[k], op);
}
void reduce_into(void* acc, const void* in, size_t n, ncclDataType_t dt, ncclRedOp_t op) {
  switch (dt) {
    case ncclInt8: reduce_typed<int8_t>(acc, in, n, op); break;
    case ncclUint8: reduce_typed<uint8_t>(acc, in, n, op); break;
    case ncclInt32: reduce_typed<int32_t>(acc, in, n, op); break;
    case ncclUint32: reduce_typed<uint32_t>(acc, in, n, op); break;
    case ncclInt64: reduce_typed<int64_t>(acc, in, n, op); break;
    case ncclUint64: reduce_typed<uint64_t>(acc, in, n, op); break;
    case ncclFloat32: reduce_typed<float>(acc, in, n, op); break;
    case ncclFloat64: reduce_typed<double>(acc, in, n, op); break;
    case ncclFloat16:
    case ncclBfloat16: {
      auto* a = static_cast<uint16_t*>(acc);
      const auto* b = static_cast<const uint16_t*>(in);
      const bool half = dt == ncclFloat16;
      for (size_t k = 0; k < n; ++k) {
        float x = half ? half_to_float(a[k]) : bf16_to_float(a[k]);
        float y = half ? half_to_float(b[k]) : bf16_to_float(b[k]);
        float r = apply(x, y, op);
        a[k] = half ? float_to_half(r) : float_to_bf16(r);
      }
      break;
    }
    default: break;
  }
}

// The whole result of collective `o` over the ranks' inputs src[rank] (reduced in rank
// order: every rank gets the same bits, in either mode); copy_share gives rank q its part.
std::vector<unsigned char> combine(const Op& o, const std::vector<const unsigned char*>& src) {
  const size_t n = src.size(), bytes = o.count * type_size(o.dt);
  std::vector<unsigned char> tmp;
  switch (o.kind) {
    case kAllReduce:
      tmp.assign(src[0], src[0] + bytes);
      for (size_t q = 1; q < n; ++q) reduce_into(tmp.data(), src[q], o.count, o.dt, o.redop);
      break;
    case kAllGather:
      tmp.resize(bytes * n);
      for (size_t q = 0; q < n; ++q) std::memcpy(tmp.data() + q * bytes, src[q], bytes);
      break;
    case kReduceScatter:
      tmp.assign(src[0], src[0] + bytes * n);
      for (size_t q = 1; q < n; ++q) reduce_into(tmp.data(), src[q], o.count * n, o.dt, o.redop);
      break;
    case kBroadcast:
      tmp.assign(src[size_t(o.peer)], src[size_t(o.peer)] + bytes);
      break;
  }
  return tmp;
}
void copy_share(const Op& o, const std::vector<unsigned char>& all, int q, void* recv) {
  const size_t bytes = o.count * type_size(o.dt);
  if (o.kind == kAllGather) std::memcpy(recv, all.data(), all.size());
  else std::memcpy(recv, all.data() + (o.kind == kReduceScatter ? size_t(q) * bytes : 0), bytes);
}

// Every participant of a collective slot posted: move the data.
void run_collective(Slot& s) {
  std::vector<const unsigned char*> src;
  for (Op* o : s.issued) src.push_back(static_cast<const unsigned char*>(o->send));
  const Op& o = *s.issued[0];
  const std::vector<unsigned char> all = combine(o, src);
  for (size_t q = 0; q < s.issued.size(); ++q) copy_share(o, all, int(q), s.issued[q]->recv);
}

void complete_slot(Slot& s) {
  if (s.issued[0]->kind == kSend || s.issued[0]->kind == kRecv) {
    const Op& snd = *s.issued[0];
    if (snd.count > 0) std::memmove(s.issued[1]->recv, snd.send, snd.count * type_size(snd.dt));
  } else if (s.issued[0]->count > 0) {
    run_collective(s);
  }
  s.done = true;
  for (Op* o : s.issued) {
    o->done = true;
    --o->launch->undone;
  }
  ++g_counters["ops"];
  g_cv.notify_all();
}

// The two sides agree: a's signature against b's (a the send, for send/recv).
bool same_sig(const Op& a, const Op& b) {
  if (a.kind == kSend) return b.kind == kRecv && a.dt == b.dt && a.count == b.count;
  bool same = a.kind == b.kind && a.dt == b.dt && a.count == b.count;
  if (same && (a.kind == kAllReduce || a.kind == kReduceScatter)) same = a.redop == b.redop;
  if (same && a.kind == kBroadcast) same = a.peer == b.peer;
  return same;
}

// Under g_mu: the participant `role` of s has issued its operation; compares signatures
// once every participant has.
void issued_one(Slot& s) {
  for (Op* o : s.issued)
    if (o == nullptr) return;
  const Op& a = *s.issued[0];
  for (size_t q = 1; q < s.issued.size(); ++q) {
    const Op& b = *s.issued[q];
    if (!same_sig(a, b)) {
      s.bad = true;
      std::string why = "fake NCCL: " + s.what + ": " + a.launch->comm->name() + " issued " + a.sig() + " but " +
                        b.launch->comm->name() + " issued " + b.sig();
      note("mismatches", why);
      for (Op* o : s.issued) set_async(o->launch->comm, ncclInvalidUsage, why);
      return;
    }
  }
}

// ---- deadlock detection -----------------------------------------------------------------

// Under g_mu: the launches `l` waits for with certainty (a GPU holder, or a peer's launch
// that itself waits for its GPU). Unknowns (not issued, queued behind other stream work)
// give no edge: only a cycle of certain waits is a deadlock.
std::vector<Launch*> waits_of(Launch* l) {
  std::vector<Launch*> out;
  if (l->in_deadlock) return out;
  if (l->st == Launch::kGpuWait) {
    Launch* h = g_gpus[l->comm->gpu].holder;
    if (h != nullptr && h != l) out.push_back(h);
  } else if (l->st == Launch::kRunning) {
    for (auto& op : l->ops) {
      if (op->done || op->slot == nullptr) continue;  // (a cross-process op: no edge known)
      const Slot& s = *op->slot;
      for (size_t r = 0; r < s.issued.size(); ++r) {
        if (s.posted[r] || s.issued[r] == nullptr) continue;
        Launch* p = s.issued[r]->launch;
        if (p->st == Launch::kGpuWait) out.push_back(p);
      }
    }
  }
  return out;
}

bool find_cycle(Launch* l, std::map<Launch*, int>& color, std::vector<Launch*>& stack, std::vector<Launch*>& cycle) {
  color[l] = 1;
  stack.push_back(l);
  for (Launch* n : waits_of(l)) {
    if (color[n] == 1) {
      cycle.assign(std::find(stack.begin(), stack.end(), n), stack.end());
      return true;
    }
    if (color[n] == 0 && find_cycle(n, color, stack, cycle)) return true;
  }
  stack.pop_back();
  color[l] = 2;
  return false;
}

void check_deadlock() {
  std::map<Launch*, int> color;
  for (Launch* l : g_launches) {
    if (color[l] != 0) continue;
    std::vector<Launch*> stack, cycle;
    if (!find_cycle(l, color, stack, cycle)) continue;
    std::string why = "fake NCCL: deadlock:";
    for (Launch* x : cycle) {  // appended piecewise: GCC 12 warns falsely on `" " + str` (-Wrestrict, PR 105329)
      why += ' ';
      why += x->comm->name();
      why += x->st == Launch::kGpuWait ? " waits for its GPU;" : " waits for a peer;";
    }
    note("deadlocks", why);
    for (Launch* x : cycle) {
      x->in_deadlock = true;
      set_async(x->comm, ncclInternalError, why);
    }
    return;
  }
}

// ---- launches ---------------------------------------------------------------------------

// Under g_mu: the launch is over (completed, or its communicator was aborted).
void finish(Launch* l) {
  ncclComm* c = l->comm;
  bool cut = false;
  for (auto& op : l->ops) {
    cut = cut || !op->done;
    if (op->slot == nullptr) continue;  // cross-process: nothing shared in this process
    Slot& s = *op->slot;
    if (!op->done) {
      s.issued[op->role] = nullptr;  // abandoned: peers never complete it
      s.posted[op->role] = false;
    }
    ++s.left;
  }
  if (cut) ++g_counters["aborted_kernels"];
  else ++g_counters["launches"];
  --c->launches_out;
  g_launches.erase(l);
  delete l;
  g_cv.notify_all();
}

// ---- cross-process cliques (fake_nccl_xproc.hpp) ------------------------------------------

// <shared folder>/fake-nccl-<who>: the folder of the cross-process clique of `id`, or "".
std::string clique_dir(const ncclUniqueId& id) {
  const std::string dir(id.internal + kDirAt, strnlen(id.internal + kDirAt, kDirBytes));
  return dir.empty() ? dir : dir + "/fake-nccl-" + fake_xproc::hex(id.internal + kWhoAt, kWhoBytes);
}

std::string rank_file(const Clique& cl, const char* what, int rank) { return cl.xdir + "/" + what + "." + std::to_string(rank); }

// The file op `o` of rank `me` writes (its own) or, with theirs, the one of the peer it waits
// for: c<k>.r<rank> for a collective, s<from>.<to>.<k> for a send, r<from>.<to>.<k> for a recv.
std::string op_file(const Clique& cl, const Op& o, int me, int peer, bool theirs) {
  const std::string k = std::to_string(o.seq);
  if (o.kind != kSend && o.kind != kRecv) return cl.xdir + "/c" + k + ".r" + std::to_string(theirs ? peer : me);
  const bool send_file = (o.kind == kSend) != theirs;
  const int from = o.kind == kSend ? me : peer, to = o.kind == kSend ? peer : me;
  return cl.xdir + "/" + (send_file ? "s" : "r") + std::to_string(from) + "." + std::to_string(to) + "." + k;
}

// Without g_mu: writes rank c's file of op `o` (its data: a collective's input, a send's).
bool post_across(const ncclComm* c, const Op& o, std::string* why) {
  const size_t ts = type_size(o.dt);
  fake_xproc::Header h{};
  h.kind = o.kind, h.dt = o.dt, h.redop = o.redop, h.root = o.peer, h.rank = c->rank, h.count = o.count, h.seq = o.seq;
  const bool has_data = o.kind != kRecv && (o.kind != kBroadcast || o.peer == c->rank);
  h.bytes = !has_data ? 0 : o.count * ts * (o.kind == kReduceScatter ? size_t(c->clique->nranks) : 1);
  return fake_xproc::put(op_file(*c->clique, o, c->rank, o.peer, false), h, o.send, why);
}

Op op_of(const fake_xproc::Header& h) {
  Op o;
  o.kind = h.kind, o.dt = ncclDataType_t(h.dt), o.redop = ncclRedOp_t(h.redop), o.peer = h.root, o.count = h.count;
  return o;
}

// Under g_mu, released while it reads files and sleeps: waits for the files of op's peers,
// compares signatures and moves the data. False: the communicator was aborted first (or the
// operation can never complete: a mismatch, a bad file; it then waits for the abort).
bool complete_across(std::unique_lock<std::mutex>& lk, ncclComm* c, Op& o) {
  const Clique& cl = *c->clique;
  const int n = cl.nranks, me = c->rank;
  std::vector<int> peers;
  for (int q = 0; q < n; ++q)
    if ((o.kind == kSend || o.kind == kRecv) ? q == o.peer : q != me) peers.push_back(q);
  std::vector<std::vector<unsigned char>> data(static_cast<size_t>(n));
  std::vector<bool> got(size_t(n), false);
  for (int polls = 0;; ++polls) {
    if (c->aborted) return false;
    lk.unlock();
    std::string bad, gone;
    bool all = true;
    for (int q : peers) {
      fake_xproc::Header h;
      const std::string path = op_file(cl, o, me, q, true);
      if (!got[size_t(q)] && fake_xproc::get(path, &h, &data[size_t(q)], &bad)) {
        got[size_t(q)] = true;
        const Op theirs = op_of(h);
        const bool same = o.kind == kRecv ? same_sig(theirs, o) : same_sig(o, theirs);
        if (bad.empty() && !same)
          bad = "fake NCCL: " + path + ": rank " + std::to_string(me) + " issued " + o.sig() + " but rank " +
                std::to_string(q) + " issued " + theirs.sig();
      }
      all = all && got[size_t(q)];
    }
    for (int q = 0; q < n && !all; ++q)
      if (q != me && fake_xproc::exists(rank_file(cl, "abort", q))) gone = std::to_string(q);
    lk.lock();
    if (!bad.empty()) {
      note("mismatches", bad);
      set_async(c, ncclInvalidUsage, bad);
      g_cv.wait(lk, [&] { return c->aborted; });
      return false;
    }
    if (all) break;
    if (!gone.empty()) set_async(c, ncclRemoteError, "fake NCCL: rank " + gone + " of " + cl.xdir + " aborted its communicator");
    g_cv.wait_for(lk, std::chrono::milliseconds(std::min(20, 1 << std::min(polls, 5))));
  }
  if (o.kind == kRecv && o.count > 0) {
    std::memcpy(o.recv, data[size_t(o.peer)].data(), o.count * type_size(o.dt));
  } else if (o.kind != kSend && o.kind != kRecv && o.count > 0) {
    std::vector<const unsigned char*> src;
    for (int q = 0; q < n; ++q) src.push_back(q == me ? static_cast<const unsigned char*>(o.send) : data[size_t(q)].data());
    copy_share(o, combine(o, src), me, o.recv);
  }
  o.done = true;
  --o.launch->undone;
  ++g_counters["ops"];
  return true;
}

// Under g_mu: a running launch of a cross-process clique. Every file first (a group's send
// and recv with one peer must not wait for each other), then each operation in order.
void run_across(std::unique_lock<std::mutex>& lk, Launch* l) {
  ncclComm* c = l->comm;
  std::string why;
  lk.unlock();
  for (auto& op : l->ops)
    if (!post_across(c, *op, &why)) break;
  lk.lock();
  if (!why.empty()) {
    set_async(c, ncclSystemError, "fake NCCL: " + why);
    g_cv.wait(lk, [&] { return c->aborted; });
    return;
  }
  for (auto& op : l->ops)
    if (!complete_across(lk, c, *op)) return;
}

// Under g_mu: every rank of the clique joined (cross-process: every join.<rank> file is there).
bool all_joined(const Clique& cl) {
  if (cl.xdir.empty()) return cl.joined == cl.nranks;
  for (int r = 0; r < cl.nranks; ++r)
    if (!fake_xproc::exists(rank_file(cl, "join", r))) return false;
  return true;
}

int run_launch(const void* const* args) {
  Launch* l = *static_cast<Launch* const*>(args[0]);
  std::unique_lock<std::mutex> lk(g_mu);
  ncclComm* c = l->comm;
  Gpu& gpu = g_gpus[c->gpu];
  l->st = Launch::kGpuWait;
  check_deadlock();
  g_cv.wait(lk, [&] { return gpu.holder == nullptr || c->aborted; });
  if (c->aborted) {
    finish(l);
    return 0;
  }
  gpu.holder = l;
  l->st = Launch::kRunning;
  if (!c->clique->xdir.empty()) {
    run_across(lk, l);
    gpu.holder = nullptr;
    finish(l);
    return 0;
  }
  for (auto& op : l->ops) {
    Slot& s = *op->slot;
    s.posted[op->role] = true;
    if (s.bad || s.done) continue;
    bool all = true;
    for (size_t r = 0; r < s.issued.size(); ++r) all = all && s.issued[r] != nullptr && s.posted[r];
    if (all) complete_slot(s);
  }
  check_deadlock();
  g_cv.wait(lk, [&] { return l->undone == 0 || c->aborted; });
  gpu.holder = nullptr;
  finish(l);
  return 0;
}
const fake::Kernel kNcclKernel{1, {sizeof(Launch*)}, &run_launch};

// Under g_mu: turns the thread's queued operations into one launch per communicator.
ncclResult_t enqueue_group() {
  std::vector<Queued> ops;
  ops.swap(t_queued);
  ncclResult_t result = ncclSuccess;
  std::vector<Launch*> launches;
  for (Queued& q : ops) {
    Launch* l = nullptr;
    for (Launch* x : launches)
      if (x->comm == q.comm) l = x;
    if (l == nullptr) {
      l = new Launch();
      l->comm = q.comm;
      l->stream = q.stream;
      launches.push_back(l);
    }
    if (l->stream != q.stream) note("misuses", "one group issues operations of " + q.comm->name() + " on two streams");
    auto op = std::make_unique<Op>(q.op);
    op->launch = l;
    ncclComm* c = q.comm;
    Clique& cl = *c->clique;
    if (!cl.xdir.empty()) {  // cross-process: matched through files when the launch runs
      const bool p2p = op->kind == kSend || op->kind == kRecv;
      op->seq = !p2p ? c->colls++ : op->kind == kSend ? c->sends[op->peer]++ : c->recvs[op->peer]++;
      ++l->undone;
      l->ops.push_back(std::move(op));
      continue;
    }
    Slot* s;
    if (op->kind == kSend || op->kind == kRecv) {
      int from = op->kind == kSend ? c->rank : op->peer, to = op->kind == kSend ? op->peer : c->rank;
      uint64_t k = op->kind == kSend ? c->sends[op->peer]++ : c->recvs[op->peer]++;
      s = &cl.p2p[{from, to, k}];
      op->role = op->kind == kSend ? 0 : 1;
      if (s->issued.empty()) {
        s->issued.assign(2, nullptr);
        s->posted.assign(2, false);
        s->what = "send " + std::to_string(from) + "->" + std::to_string(to) + " #" + std::to_string(k) + " of clique " +
                  std::to_string(cl.serial);
      }
      if (cl.gone[op->peer]) set_async(c, ncclRemoteError, "fake NCCL: peer rank " + std::to_string(op->peer) + " aborted");
    } else {
      uint64_t k = c->colls++;
      s = &cl.colls[k];
      op->role = c->rank;
      if (s->issued.empty()) {
        s->issued.assign(cl.nranks, nullptr);
        s->posted.assign(cl.nranks, false);
        s->what = "collective #" + std::to_string(k) + " of clique " + std::to_string(cl.serial);
      }
      for (int r = 0; r < cl.nranks; ++r)
        if (cl.gone[r]) set_async(c, ncclRemoteError, "fake NCCL: rank " + std::to_string(r) + " aborted");
    }
    op->slot = s;
    s->issued[op->role] = op.get();
    ++l->undone;
    l->ops.push_back(std::move(op));
    issued_one(*s);
  }
  for (Launch* l : launches) {
    ncclComm* c = l->comm;
    ++c->launches_out;
    g_launches.insert(l);
    void* args[1] = {&l};
    if (cudaLaunchKernel(static_cast<const void*>(&kNcclKernel), dim3(1), dim3(1), args, 0, l->stream) != cudaSuccess) {
      note("misuses", "cudaLaunchKernel failed for " + c->name());
      result = ncclUnhandledCudaError;
    }
    if (!c->blocking) {
      c->state = ncclInProgress;
      c->pending = Pending::kGroup;
      if (result == ncclSuccess) result = ncclInProgress;
    }
  }
  return result;
}

// A collective or p2p call: queued in the thread's group, or a group of its own.
ncclResult_t add_op(const char* call, ncclComm* c, cudaStream_t stream, Op op) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (bad_comm(c, call)) return ncclInvalidArgument;
  if (c->state == ncclInProgress) {
    note("misuses", std::string(call) + " on " + c->name() + " while its previous operation is still ncclInProgress");
    return ncclInvalidUsage;
  }
  if (type_size(op.dt) == 0 || int(op.redop) < 0 || int(op.redop) > int(ncclMin)) {
    c->last_error = std::string(call) + ": unsupported type or reduction";
    return ncclInvalidArgument;
  }
  if ((op.kind >= kBroadcast) && (op.peer < 0 || op.peer >= c->clique->nranks)) {
    c->last_error = std::string(call) + ": peer/root out of range";
    return ncclInvalidArgument;
  }
  bool needs_send = op.kind != kRecv && (op.kind != kBroadcast || op.peer == c->rank);
  bool needs_recv = op.kind != kSend;
  if (op.count > 0 && ((needs_send && op.send == nullptr) || (needs_recv && op.recv == nullptr))) {
    c->last_error = std::string(call) + ": NULL buffer";
    return ncclInvalidArgument;
  }
  t_queued.push_back(Queued{c, stream, op});
  if (t_depth > 0) return ncclSuccess;
  return enqueue_group();
}

}  // namespace

extern "C" {

// ---- test interface ----------------------------------------------------------------------

// The GPU of communicators this thread creates from now on (-1: the rank's number).
void fake_nccl_set_thread_gpu(int gpu) { t_gpu = gpu; }

// "deadlocks", "mismatches", "misuses", "aborted_kernels" (launches cut by an abort),
// "launches" (completed), "ops" (operations completed), "comms" (created), "live_comms"
// (neither destroyed nor aborted), "waiting" (launches blocked on a GPU or on peers).
long fake_nccl_counter(const char* name) {
  std::lock_guard<std::mutex> lk(g_mu);
  std::string n = name;
  if (n == "waiting") {
    long w = 0;
    for (Launch* l : g_launches) w += l->st != Launch::kQueued;
    return w;
  }
  auto it = g_counters.find(n);
  return it == g_counters.end() ? 0 : it->second;
}

// Every recorded problem, one per line; returns the length (writes at most size-1 bytes).
size_t fake_nccl_report(char* buf, size_t size) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (buf != nullptr && size > 0) {
    size_t n = std::min(size - 1, g_report.size());
    std::memcpy(buf, g_report.data(), n);
    buf[n] = 0;
  }
  return g_report.size();
}

// Clears the problem counters and the report (not "comms"/"live_comms").
void fake_nccl_reset() {
  std::lock_guard<std::mutex> lk(g_mu);
  for (const char* k : {"deadlocks", "mismatches", "misuses", "aborted_kernels", "launches", "ops"}) g_counters.erase(k);
  g_report.clear();
}

// ---- NCCL --------------------------------------------------------------------------------

// FAKE_NCCL_VERSION: another NCCL version, for the loader's version check.
#ifndef FAKE_NCCL_VERSION
#define FAKE_NCCL_VERSION NCCL_VERSION_CODE
#endif
ncclResult_t ncclGetVersion(int* v) {
  *v = FAKE_NCCL_VERSION;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (fake)";
    case ncclSystemError: return "unhandled system error (fake)";
    case ncclInternalError: return "internal error (fake)";
    case ncclInvalidArgument: return "invalid argument (fake)";
    case ncclInvalidUsage: return "invalid usage (fake)";
    case ncclRemoteError: return "remote process exited or there was a network error (fake)";
    case ncclInProgress: return "NCCL operation in progress (fake)";
    default: return "unknown result code (fake)";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lk(g_mu);
  copy = comm != nullptr ? comm->last_error : g_last_error;
  return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  const std::string dir = fake_xproc::shared_dir_from_env();
  std::lock_guard<std::mutex> lk(g_mu);
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, kMagic, sizeof kMagic);
  static const uint64_t nonce = (uint64_t(std::random_device()()) << 32) ^ std::random_device()();
  const int64_t pid = ::getpid();
  long n = ++g_next_id;
  std::memcpy(id->internal + kWhoAt, &pid, sizeof pid);
  std::memcpy(id->internal + kWhoAt + 8, &nonce, sizeof nonce);
  std::memcpy(id->internal + 32, &n, sizeof n);
  if (dir.empty()) return ncclSuccess;
  if (dir.size() >= kDirBytes) {
    g_last_error = "ncclGetUniqueId (fake): FAKE_NCCL_SHARED_DIR is longer than " + std::to_string(kDirBytes - 1) + " bytes";
    return ncclInvalidArgument;
  }
  std::memcpy(id->internal + kDirAt, dir.data(), dir.size());
  std::string why;
  if (!fake_xproc::make_dir(clique_dir(*id), &why)) {
    g_last_error = "ncclGetUniqueId (fake): " + why;
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  std::unique_lock<std::mutex> lk(g_mu);
  *out = nullptr;
  if (config != nullptr && (config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef)) {
    note("misuses", "ncclCommInitRankConfig with a config not set up by NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks || std::memcmp(id.internal, kMagic, sizeof kMagic) != 0) {
    g_last_error = "ncclCommInitRankConfig: bad nranks/rank or a unique id not made by ncclGetUniqueId";
    return ncclInvalidArgument;
  }
  std::array<char, 128> key;
  std::memcpy(key.data(), id.internal, 128);
  Clique*& cl = g_cliques[key];
  if (cl == nullptr) {
    cl = new Clique();
    cl->serial = ++g_next_clique;
    cl->nranks = nranks;
    cl->ranks.assign(nranks, nullptr);
    cl->gone.assign(nranks, false);
    cl->xdir = clique_dir(id);
  }
  if (cl->nranks != nranks) {
    g_last_error = "ncclCommInitRankConfig: nranks disagrees with the ranks that joined before";
    return ncclInvalidArgument;
  }
  if (cl->ranks[rank] != nullptr) {
    g_last_error = "ncclCommInitRankConfig: rank " + std::to_string(rank) + " already joined this unique id";
    return ncclInvalidUsage;
  }
  const int gpu = t_gpu >= 0 ? t_gpu : rank;
  for (ncclComm* o : cl->ranks)
    if (o != nullptr && o->gpu == gpu) {
      g_last_error = "ncclCommInitRankConfig: Duplicate GPU detected: rank " + std::to_string(rank) + " and rank " +
                     std::to_string(o->rank) + " both on gpu " + std::to_string(gpu);
      return ncclInvalidUsage;
    }
  if (!cl->xdir.empty()) {  // a rank joins once, in whichever process
    std::string why;
    int err = 0;
    if (!fake_xproc::make_dir(cl->xdir, &why) ||
        !fake_xproc::create_exclusive(rank_file(*cl, "join", rank), std::to_string(::getpid()), &err, &why)) {
      g_last_error = err == EEXIST ? "ncclCommInitRankConfig: rank " + std::to_string(rank) + " already joined this unique id"
                                   : "ncclCommInitRankConfig (fake): " + why;
      return err == EEXIST ? ncclInvalidUsage : ncclSystemError;
    }
  }
  auto* c = new ncclComm();  // never freed: kernels and peers may still point at it
  c->clique = cl;
  c->rank = rank;
  c->gpu = gpu;
  c->blocking = config == nullptr || config->blocking != 0;
  cl->ranks[rank] = c;
  ++cl->joined;
  ++g_counters["comms"];
  ++g_counters["live_comms"];
  g_cv.notify_all();
  *out = c;
  if (c->blocking) {
    if (!cl->xdir.empty()) {
      for (int polls = 0; !all_joined(*cl) && !c->aborted; ++polls)
        g_cv.wait_for(lk, std::chrono::milliseconds(std::min(20, 1 << std::min(polls, 5))));
      return ncclSuccess;
    }
    g_cv.wait(lk, [&] { return cl->joined == cl->nranks || c->aborted; });
    return ncclSuccess;
  }
  c->state = ncclInProgress;
  c->pending = Pending::kInit;
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* out) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (bad_comm(c, "ncclCommGetAsyncError")) return ncclInvalidArgument;
  if (c->async != ncclSuccess) {
    *out = c->async;
    return ncclSuccess;
  }
  if (c->state == ncclInProgress) {
    bool ready = c->pending == Pending::kGroup || (c->pending == Pending::kInit && all_joined(*c->clique)) ||
                 (c->pending == Pending::kFinalize && c->launches_out == 0);
    if (ready) {
      c->state = ncclSuccess;
      c->pending = Pending::kNone;
    }
  }
  *out = c->state;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
  std::unique_lock<std::mutex> lk(g_mu);
  if (bad_comm(c, "ncclCommFinalize")) return ncclInvalidArgument;
  if (c->state == ncclInProgress) {
    note("misuses", "ncclCommFinalize on " + c->name() + " while it is still ncclInProgress");
    return ncclInvalidUsage;
  }
  if (c->blocking) {
    g_cv.wait(lk, [&] { return c->launches_out == 0; });
    return ncclSuccess;
  }
  c->state = ncclInProgress;
  c->pending = Pending::kFinalize;
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (bad_comm(c, "ncclCommDestroy")) return ncclInvalidArgument;
  if (c->launches_out > 0)
    note("misuses", "ncclCommDestroy on " + c->name() + " with " + std::to_string(c->launches_out) + " kernel(s) in flight");
  if (c->state == ncclInProgress) note("misuses", "ncclCommDestroy on " + c->name() + " while it is still ncclInProgress");
  c->destroyed = true;
  --g_counters["live_comms"];
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (bad_comm(c, "ncclCommAbort")) return ncclInvalidArgument;
  c->aborted = true;
  --g_counters["live_comms"];
  Clique& cl = *c->clique;
  cl.gone[c->rank] = true;
  for (ncclComm* p : cl.ranks)
    if (p != nullptr && p != c && p->launches_out > 0)
      set_async(p, ncclRemoteError, "fake NCCL: rank " + std::to_string(c->rank) + " of clique " +
                                        std::to_string(cl.serial) + " aborted its communicator");
  if (!cl.xdir.empty()) {  // peers in other processes see its abort.<rank> file
    std::string why;
    int err = 0;
    (void)fake_xproc::create_exclusive(rank_file(cl, "abort", c->rank), std::to_string(::getpid()), &err, &why);
  }
  g_cv.notify_all();  // its kernels return; a blocking init waiting for peers gives up
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_depth == 0) {
    std::lock_guard<std::mutex> lk(g_mu);
    note("misuses", "ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--t_depth > 0) return ncclSuccess;
  std::lock_guard<std::mutex> lk(g_mu);
  return enqueue_group();
}

ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  Op o;
  o.kind = kAllReduce, o.dt = dt, o.redop = op, o.count = n, o.send = s, o.recv = r;
  return add_op("ncclAllReduce", c, st, o);
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  Op o;
  o.kind = kAllGather, o.dt = dt, o.count = n, o.send = s, o.recv = r;
  return add_op("ncclAllGather", c, st, o);
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  Op o;
  o.kind = kReduceScatter, o.dt = dt, o.redop = op, o.count = n, o.send = s, o.recv = r;
  return add_op("ncclReduceScatter", c, st, o);
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t st) {
  Op o;
  o.kind = kBroadcast, o.dt = dt, o.count = n, o.peer = root, o.send = s, o.recv = r;
  return add_op("ncclBroadcast", c, st, o);
}
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  Op o;
  o.kind = kSend, o.dt = dt, o.count = n, o.peer = peer, o.send = s;
  return add_op("ncclSend", c, st, o);
}
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  Op o;
  o.kind = kRecv, o.dt = dt, o.count = n, o.peer = peer, o.recv = r;
  return add_op("ncclRecv", c, st, o);
}

}  // extern "C"
