// Host-memory communicators (FL_COMM_HOST_FAKE). Protocol: core/comm_fake.hpp.
#include "core/comm_fake.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <random>
#include <string>

#include "capi/src/capi_common.hpp"
#include "core/handles.hpp"
#include "core/watchdog.hpp"

namespace flowlane {

HandleTable<core::Comm>& comm_table() {
  static HandleTable<core::Comm>* t = new HandleTable<core::Comm>();  // never destroyed, as the others
  return *t;
}

}  // namespace flowlane

namespace flowlane::core {

struct FakeGroup::Posting {
  uint32_t rank = 0;
  fl_instr_id instr = 0;
  const std::vector<fl_coll_part_t>* parts = nullptr;
  std::string signature;
};

namespace {

constexpr char kMagic[16] = "flowlane-fake1";  // first bytes of a host-fake unique id
const FakeGroup::Posting kSkipped{};           // a rank that skipped its collective

struct Registry {
  std::mutex mu;
  std::map<std::array<char, 128>, std::weak_ptr<FakeGroup>> groups;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: comms may outlive statics
  return *r;
}

const char* op_name(uint32_t op) {
  switch (op) {
    case FL_COLL_ALL_REDUCE: return "all_reduce";
    case FL_COLL_ALL_GATHER: return "all_gather";
    case FL_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case FL_COLL_BROADCAST: return "broadcast";
    case FL_COLL_SEND: return "send";
    case FL_COLL_RECV: return "recv";
    default: return "?";
  }
}
const char* dtype_name(uint32_t t) {
  static const char* k[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"};
  return t < 10 ? k[t] : "?";
}
size_t dtype_size(uint32_t t) {
  static const size_t k[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return k[t];
}
const char* redop_name(uint32_t r) {
  static const char* k[] = {"sum", "prod", "max", "min"};
  return r < 4 ? k[r] : "?";
}
bool is_reduction(uint32_t op) { return op == FL_COLL_ALL_REDUCE || op == FL_COLL_REDUCE_SCATTER; }
bool is_p2p(uint32_t op) { return op == FL_COLL_SEND || op == FL_COLL_RECV; }

std::string part_signature(const fl_coll_part_t& p) {
  std::string s = std::string(op_name(p.op)) + "(" + dtype_name(p.dtype);
  if (is_reduction(p.op)) s += std::string(", ") + redop_name(p.redop);
  if (p.op == FL_COLL_BROADCAST) s += ", root=" + std::to_string(p.peer);
  if (p.op == FL_COLL_SEND) s += ", to=" + std::to_string(p.peer);
  if (p.op == FL_COLL_RECV) s += ", from=" + std::to_string(p.peer);
  s += ", count=" + std::to_string(p.count) + ")";
  return s;
}

std::string signature(const std::vector<fl_coll_part_t>& parts) {
  if (parts.size() == 1) return part_signature(parts[0]);
  std::string s = "group[";
  for (size_t k = 0; k < parts.size(); ++k) s += (k ? "; " : "") + part_signature(parts[k]);
  return s + "]";
}

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

std::string comm_name(const Comm& c) {
  return "communicator " + hex(c.handle) + " (rank " + std::to_string(c.rank) + " of " + std::to_string(c.nranks) + ")";
}

int64_t since(const Comm& c) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - c.created).count();
}

CollRecord* find_record(Comm& c, uint64_t seq) {
  if (c.recorder.empty() || seq < c.recorder.front().seq) return nullptr;
  size_t k = size_t(seq - c.recorder.front().seq);
  return k < c.recorder.size() ? &c.recorder[k] : nullptr;
}

// ---- data movement -----------------------------------------------------------------

template <class T>
void reduce_into(T* acc, const T* in, uint64_t n, uint32_t redop) {
  switch (redop) {
    case FL_REDOP_SUM: for (uint64_t k = 0; k < n; ++k) acc[k] = T(acc[k] + in[k]); break;
    case FL_REDOP_PROD: for (uint64_t k = 0; k < n; ++k) acc[k] = T(acc[k] * in[k]); break;
    case FL_REDOP_MAX: for (uint64_t k = 0; k < n; ++k) acc[k] = std::max(acc[k], in[k]); break;
    case FL_REDOP_MIN: for (uint64_t k = 0; k < n; ++k) acc[k] = std::min(acc[k], in[k]); break;
  }
}

void reduce_bytes(void* acc, const void* in, uint64_t n, uint32_t dtype, uint32_t redop) {
  switch (dtype) {
    case FL_DTYPE_INT8: reduce_into(static_cast<int8_t*>(acc), static_cast<const int8_t*>(in), n, redop); break;
    case FL_DTYPE_UINT8: reduce_into(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), n, redop); break;
    case FL_DTYPE_INT32: reduce_into(static_cast<int32_t*>(acc), static_cast<const int32_t*>(in), n, redop); break;
    case FL_DTYPE_UINT32: reduce_into(static_cast<uint32_t*>(acc), static_cast<const uint32_t*>(in), n, redop); break;
    case FL_DTYPE_INT64: reduce_into(static_cast<int64_t*>(acc), static_cast<const int64_t*>(in), n, redop); break;
    case FL_DTYPE_UINT64: reduce_into(static_cast<uint64_t*>(acc), static_cast<const uint64_t*>(in), n, redop); break;
    case FL_DTYPE_FLOAT32: reduce_into(static_cast<float*>(acc), static_cast<const float*>(in), n, redop); break;
    case FL_DTYPE_FLOAT64: reduce_into(static_cast<double*>(acc), static_cast<const double*>(in), n, redop); break;
  }
}

// Reduction key of a non-p2p part: what every rank must agree on.
bool same_collective(const fl_coll_part_t& a, const fl_coll_part_t& b) {
  if (a.op != b.op || a.dtype != b.dtype || a.count != b.count) return false;
  if (is_reduction(a.op) && a.redop != b.redop) return false;
  if (a.op == FL_COLL_BROADCAST && a.peer != b.peer) return false;
  return true;
}

// Checks that the ranks' postings agree and, if they do, moves the data. Called by the
// last rank to arrive, under the group lock, while every other rank is blocked in its
// callback (so every buffer is live). Returns "" or the mismatch message.
std::string match_and_run(FakeGroup& g, FakeGroup::Round& r, uint64_t seq, const std::string& where) {
  const uint32_t n = g.nranks;
  for (uint32_t q = 0; q < n; ++q)
    if (r.posts[q] == &kSkipped)
      return where + " seq " + std::to_string(seq) + " failed: rank " + std::to_string(q) +
             " skipped its collective (an input was poisoned), so the ranks cannot complete it";
  // Collective parts, in order, must agree on every rank.
  std::vector<std::vector<const fl_coll_part_t*>> coll(n);
  for (uint32_t q = 0; q < n; ++q)
    for (const fl_coll_part_t& p : *r.posts[q]->parts)
      if (!is_p2p(p.op)) coll[q].push_back(&p);
  for (uint32_t q = 1; q < n; ++q) {
    bool same = coll[q].size() == coll[0].size();
    for (size_t k = 0; same && k < coll[0].size(); ++k) same = same_collective(*coll[0][k], *coll[q][k]);
    if (!same)
      return "signature mismatch at seq " + std::to_string(seq) + " of " + where + ": rank 0 issued " +
             r.posts[0]->signature + " but rank " + std::to_string(q) + " issued " + r.posts[q]->signature;
  }
  // Point-to-point: the k-th send r->p pairs with the k-th recv on p from r.
  struct P2P { const fl_coll_part_t* part; uint32_t rank; };
  std::vector<P2P> sends;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<const fl_coll_part_t*>> recvs;  // (receiver, from)
  for (uint32_t q = 0; q < n; ++q)
    for (const fl_coll_part_t& p : *r.posts[q]->parts) {
      if (p.op == FL_COLL_SEND) sends.push_back({&p, q});
      if (p.op == FL_COLL_RECV) recvs[{q, p.peer}].push_back(&p);
    }
  std::map<std::pair<uint32_t, uint32_t>, size_t> used;
  std::vector<std::pair<const fl_coll_part_t*, const fl_coll_part_t*>> pairs;  // (send, recv)
  for (const P2P& s : sends) {
    auto key = std::make_pair(s.part->peer, s.rank);
    size_t& k = used[key];
    auto it = recvs.find(key);
    if (it == recvs.end() || k >= it->second.size() || it->second[k]->dtype != s.part->dtype ||
        it->second[k]->count != s.part->count)
      return "signature mismatch at seq " + std::to_string(seq) + " of " + where + ": rank " + std::to_string(s.rank) +
             " issued " + r.posts[s.rank]->signature + " but rank " + std::to_string(s.part->peer) + " issued " +
             r.posts[s.part->peer]->signature + " (no matching recv for " + part_signature(*s.part) + ")";
    pairs.emplace_back(s.part, it->second[k]);
    ++k;
  }
  for (auto& [key, list] : recvs)
    if (used[key] != list.size())
      return "signature mismatch at seq " + std::to_string(seq) + " of " + where + ": rank " + std::to_string(key.first) +
             " issued " + r.posts[key.first]->signature + " but rank " + std::to_string(key.second) + " issued " +
             r.posts[key.second]->signature + " (a recv has no matching send)";

  // Data movement. Inputs are staged before outputs are written (in-place safe).
  std::vector<unsigned char> tmp;
  for (size_t k = 0; k < coll[0].size(); ++k) {
    const fl_coll_part_t& p0 = *coll[0][k];
    const size_t es = dtype_size(p0.dtype);
    const uint64_t c = p0.count;
    const size_t bytes = size_t(c) * es;
    switch (p0.op) {
      case FL_COLL_ALL_REDUCE:
        tmp.assign(static_cast<const unsigned char*>(coll[0][k]->sendbuf),
                   static_cast<const unsigned char*>(coll[0][k]->sendbuf) + bytes);
        for (uint32_t q = 1; q < n; ++q) reduce_bytes(tmp.data(), coll[q][k]->sendbuf, c, p0.dtype, p0.redop);
        for (uint32_t q = 0; q < n; ++q) std::memcpy(coll[q][k]->recvbuf, tmp.data(), bytes);
        break;
      case FL_COLL_ALL_GATHER:
        tmp.resize(bytes * n);
        for (uint32_t q = 0; q < n; ++q) std::memcpy(tmp.data() + q * bytes, coll[q][k]->sendbuf, bytes);
        for (uint32_t q = 0; q < n; ++q) std::memcpy(coll[q][k]->recvbuf, tmp.data(), bytes * n);
        break;
      case FL_COLL_REDUCE_SCATTER:
        tmp.assign(static_cast<const unsigned char*>(coll[0][k]->sendbuf),
                   static_cast<const unsigned char*>(coll[0][k]->sendbuf) + bytes * n);
        for (uint32_t q = 1; q < n; ++q) reduce_bytes(tmp.data(), coll[q][k]->sendbuf, c * n, p0.dtype, p0.redop);
        for (uint32_t q = 0; q < n; ++q) std::memcpy(coll[q][k]->recvbuf, tmp.data() + q * bytes, bytes);
        break;
      case FL_COLL_BROADCAST:
        tmp.assign(static_cast<const unsigned char*>(coll[p0.peer][k]->sendbuf),
                   static_cast<const unsigned char*>(coll[p0.peer][k]->sendbuf) + bytes);
        for (uint32_t q = 0; q < n; ++q) std::memcpy(coll[q][k]->recvbuf, tmp.data(), bytes);
        break;
    }
  }
  std::vector<std::vector<unsigned char>> staged(pairs.size());
  for (size_t k = 0; k < pairs.size(); ++k) {
    const auto* s = static_cast<const unsigned char*>(pairs[k].first->sendbuf);
    staged[k].assign(s, s + size_t(pairs[k].first->count) * dtype_size(pairs[k].first->dtype));
  }
  for (size_t k = 0; k < pairs.size(); ++k)
    if (!staged[k].empty()) std::memcpy(pairs[k].second->recvbuf, staged[k].data(), staged[k].size());
  return "";
}

struct CollWork {
  std::shared_ptr<Comm> comm;
  uint64_t seq = 0;
  std::vector<fl_coll_part_t> parts;
  FakeGroup::Posting posting;
  bool ran = false;
};

void finish(Comm& c, uint64_t seq, CollRecord::State st) {
  c.completed = std::max(c.completed, seq);
  if (CollRecord* rec = find_record(c, seq)) {
    rec->state = st;
    rec->t_done_ns = since(c);
  }
}

fl_status_t coll_run(fl_instr_ctx_t* ctx, void* ud) {
  auto* w = static_cast<CollWork*>(ud);
  w->ran = true;
  Comm& c = *w->comm;
  FakeGroup& g = *c.group;
  const std::string where = comm_name(c);
  w->posting.instr = fl_instr_get_id(ctx);
  std::unique_lock<std::mutex> lk(g.mu);
  c.started = std::max(c.started, w->seq);
  if (CollRecord* rec = find_record(c, w->seq)) {
    rec->state = CollRecord::kWaiting;
    rec->t_started_ns = since(c);
  }
  if (g.aborted) {
    finish(c, w->seq, CollRecord::kCancelled);
    std::string msg = "collective seq " + std::to_string(w->seq) + " " + w->posting.signature + " on " + where +
                      " was cancelled: " + g.abort_reason;
    lk.unlock();
    fl_instr_set_error(ctx, msg.c_str());
    return FL_ERR_CANCELLED;
  }
  FakeGroup::Round& r = g.rounds[w->seq];
  if (r.posts.empty()) r.posts.assign(g.nranks, nullptr);
  r.posts[c.rank] = &w->posting;
  if (++r.arrived == g.nranks) {
    r.error = match_and_run(g, r, w->seq, "the communicator of " + where);
    r.done = true;
    g.cv.notify_all();
  } else {
    g.cv.wait(lk, [&] { return r.done || g.aborted; });
  }
  if (!r.done) {  // aborted while waiting: this rank leaves the round
    r.posts[c.rank] = nullptr;
    --r.arrived;
    finish(c, w->seq, CollRecord::kCancelled);
    std::string msg = "collective seq " + std::to_string(w->seq) + " " + w->posting.signature + " on " + where +
                      " was cancelled while waiting for its peers: " + g.abort_reason;
    lk.unlock();
    fl_instr_set_error(ctx, msg.c_str());
    return FL_ERR_CANCELLED;
  }
  std::string err = r.error;
  if (++r.left == g.nranks) g.rounds.erase(w->seq);
  finish(c, w->seq, err.empty() ? CollRecord::kDone : CollRecord::kFailed);
  lk.unlock();
  if (!err.empty()) {
    fl_instr_set_error(ctx, err.c_str());
    return FL_ERR_INSTRUCTION_FAILED;
  }
  return FL_OK;
}

// Runs on the lane after coll_run, or instead of it when the instruction was skipped
// (a poisoned input): a skipped rank still takes its turn at this sequence number so
// that its peers fail instead of waiting forever.
void coll_cleanup(void* ud) {
  auto* w = static_cast<CollWork*>(ud);
  if (!w->ran) {
    Comm& c = *w->comm;
    FakeGroup& g = *c.group;
    std::lock_guard<std::mutex> lk(g.mu);
    c.started = std::max(c.started, w->seq);
    finish(c, w->seq, CollRecord::kFailed);
    if (!g.aborted) {
      FakeGroup::Round& r = g.rounds[w->seq];
      if (r.posts.empty()) r.posts.assign(g.nranks, nullptr);
      r.posts[c.rank] = &kSkipped;
      ++r.left;
      if (++r.arrived == g.nranks) {
        r.error = match_and_run(g, r, w->seq, "the communicator of " + comm_name(c));
        r.done = true;
        g.cv.notify_all();
      }
      if (r.left == g.nranks) g.rounds.erase(w->seq);
    }
  }
  delete w;
}

void abort_rank(Comm& c, const std::string& why) {
  FakeGroup& g = *c.group;
  std::lock_guard<std::mutex> lk(g.mu);
  if (c.aborted) return;
  c.aborted = true;
  if (!g.aborted) {
    g.aborted = true;
    g.abort_reason = why;
  }
  if (c.rank < g.ranks.size() && g.ranks[c.rank] == &c) g.ranks[c.rank] = nullptr;
  g.cv.notify_all();
}

}  // namespace

// ---- C API ----------------------------------------------------------------------------

void comm_unique_id(uint32_t backend, fl_comm_unique_id_t* out) {
  if (backend == FL_COMM_NCCL)
    fail(FL_ERR_UNSUPPORTED, "fl_comm_get_unique_id: the NCCL backend is not available in this build (CPU-only, "
                             "or the GPU backend is not built); use FL_COMM_HOST_FAKE for ranks inside one process");
  if (backend != FL_COMM_HOST_FAKE)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_get_unique_id: backend " + std::to_string(backend) +
                                      " is unknown (FL_COMM_NCCL = 0, FL_COMM_HOST_FAKE = 1)");
  require_out(out, "fl_comm_get_unique_id", "out_id");
  static std::atomic<uint64_t> counter{0};
  fl_comm_unique_id_t id;
  std::memset(&id, 0, sizeof id);
  std::memcpy(id.internal, kMagic, sizeof kMagic);
  std::random_device rd;
  for (size_t k = 16; k < 48; k += 4) {
    uint32_t v = rd();
    std::memcpy(id.internal + k, &v, 4);
  }
  uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  std::memcpy(id.internal + 48, &n, 8);
  *out = id;
}

Comm* comm_create(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid) {
  const char* fn = "fl_comm_create";
  if (d.backend == FL_COMM_NCCL)
    fail(FL_ERR_UNSUPPORTED, "fl_comm_create: the NCCL backend is not available in this build; use FL_COMM_HOST_FAKE");
  if (d.backend != FL_COMM_HOST_FAKE)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: backend " + std::to_string(d.backend) + " is unknown");
  if ((d.flags & ~FL_COMM_UNORDERED) != 0)  // host-fake collectives are never in the NCCL order anyway
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_comm_create: flags " + std::to_string(d.flags) + " are unknown (0 or FL_COMM_UNORDERED)");
  if (d.nranks == 0 || d.nranks > 4096)
    fail(FL_ERR_OUT_OF_RANGE, "fl_comm_create: nranks " + std::to_string(d.nranks) + " is out of range (1..4096)");
  if (d.rank >= d.nranks)
    fail(FL_ERR_OUT_OF_RANGE, "fl_comm_create: rank " + std::to_string(d.rank) + " is out of range: the communicator has " +
                                  std::to_string(d.nranks) + " ranks (0.." + std::to_string(d.nranks - 1) + ")");
  if (d.lane >= e->lane_count())
    fail(FL_ERR_OUT_OF_RANGE, "fl_comm_create: lane " + std::to_string(d.lane) + " is out of range: this engine has " +
                                  std::to_string(e->lane_count()) + " lanes");
  if (d.device != 0)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: device must be 0 for FL_COMM_HOST_FAKE (it works on host memory)");
  if (std::memcmp(uid.internal, kMagic, sizeof kMagic) != 0)
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_comm_create: the unique id was not made by fl_comm_get_unique_id(FL_COMM_HOST_FAKE)");
  if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_comm_create: the engine is being destroyed");
  std::array<char, 128> key;
  std::memcpy(key.data(), uid.internal, 128);

  auto c = std::make_shared<Comm>();
  c->engine = e;
  c->lane = uint32_t(d.lane);
  c->rank = uint32_t(d.rank);
  c->nranks = uint32_t(d.nranks);
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lk(reg.mu);
    for (auto it = reg.groups.begin(); it != reg.groups.end();)  // forget groups nobody uses
      it = it->second.expired() ? reg.groups.erase(it) : std::next(it);
    std::shared_ptr<FakeGroup> g = reg.groups[key].lock();
    if (!g) {
      g = std::make_shared<FakeGroup>();
      g->id = key;
      g->nranks = c->nranks;
      g->ranks.assign(c->nranks, nullptr);
      reg.groups[key] = g;
    }
    std::lock_guard<std::mutex> glk(g->mu);
    if (g->nranks != c->nranks)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": nranks " + std::to_string(c->nranks) +
                                        " disagrees with the " + std::to_string(g->nranks) +
                                        " given by the ranks that already joined this unique id");
    if (g->aborted)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the communicator of this unique id was aborted (" +
                                        g->abort_reason + "); create a new unique id");
    if (g->ranks[c->rank] != nullptr)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": rank " + std::to_string(c->rank) +
                                        " of this unique id has already joined (each rank joins once)");
    // Each rank blocks its worker inside a collective until its peers arrive (as a NCCL
    // kernel occupies its GPU), so the lanes of one group on one engine need a worker each.
    std::vector<uint32_t> lanes{c->lane};
    for (Comm* r : g->ranks)
      if (r != nullptr && r->engine == e) lanes.push_back(r->lane);
    std::sort(lanes.begin(), lanes.end());
    size_t distinct = size_t(std::unique(lanes.begin(), lanes.end()) - lanes.begin());
    if (distinct > e->worker_count())
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": this engine would host ranks of one communicator on " +
                                        std::to_string(distinct) + " lanes but has only " +
                                        std::to_string(e->worker_count()) +
                                        " workers; a host-fake rank occupies a worker while it waits in a collective, "
                                        "so they would deadlock (create the engine with more workers, or put the "
                                        "ranks on fewer lanes or on other engines)");
    c->handle = comm_table().insert(c.get());
    if (c->handle == 0) fail(FL_ERR_NO_MEMORY, "fl_comm_create: the process-wide communicator table is full");
    g->ranks[c->rank] = c.get();
    c->group = g;
  }
  Diagnostics* dg = e->diagnostics();
  std::lock_guard<std::mutex> lk(dg->comms_mu);
  dg->comms.push_back(c);
  return c.get();
}

Comm* comm_from(const fl_comm_t* h, const char* fn) {
  if (h == nullptr) fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": comm is NULL");
  Comm* c = comm_table().lookup(handle_bits(h));
  if (c == nullptr)
    fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the communicator handle is stale (destroyed, or its engine was "
                                                  "destroyed) or not a communicator");
  return c;
}

void comm_destroy(Comm* c) {
  if (comm_table().erase(c->handle) == nullptr)
    fail(FL_ERR_INVALID_HANDLE, "fl_comm_destroy: the communicator was destroyed concurrently");
  abort_rank(*c, "rank " + std::to_string(c->rank) + " destroyed its communicator (fl_comm_destroy)");
  Diagnostics* dg = c->engine->diagnostics();
  std::shared_ptr<Comm> keep;  // dropped outside the lock
  std::lock_guard<std::mutex> lk(dg->comms_mu);
  for (auto it = dg->comms.begin(); it != dg->comms.end(); ++it)
    if (it->get() == c) {
      keep = std::move(*it);
      dg->comms.erase(it);
      break;
    }
}

void comms_abort_all(Engine* e, const char* why) {
  Diagnostics* dg = e->diagnostics();
  std::vector<std::shared_ptr<Comm>> list;
  {
    std::lock_guard<std::mutex> lk(dg->comms_mu);
    list = dg->comms;
  }
  for (auto& c : list) {
    comm_table().erase(c->handle);
    abort_rank(*c, "rank " + std::to_string(c->rank) + "'s engine was destroyed (" + why + ")");
  }
}

void comms_release_all(Engine* e) {
  Diagnostics* dg = e->diagnostics();
  std::vector<std::shared_ptr<Comm>> list;
  std::lock_guard<std::mutex> lk(dg->comms_mu);
  list.swap(dg->comms);
}

fl_instr_id comm_submit(Comm* c, fl_stream_t* stream_handle, const fl_collective_instr_t& in) {
  const char* fn = "fl_submit_collective";
  Stream* s = stream_from(stream_handle, fn);
  if ((in.flags & ~uint64_t(FL_SUBMIT_NONBLOCKING)) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_collective: unknown flags " + std::to_string(in.flags) +
                                      " (only FL_SUBMIT_NONBLOCKING is defined)");
  if (s->engine != c->engine)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_collective: the stream belongs to another engine than " + comm_name(*c));
  if (s->lane->id != c->lane || s->kind != FL_STREAM_COLLECTIVE || s->device.type != FL_DEVICE_CPU)
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_submit_collective: " + comm_name(*c) + " issues its collectives on lane " + std::to_string(c->lane) +
             "'s host collective stream ({FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE), but the stream given is lane " +
             std::to_string(s->lane->id) + "'s " + s->describe().substr(s->describe().find(", ") + 2) +
             " stream: collectives of one communicator go through one stream in one order (DESIGN.md rule 8)");
  if (in.num_parts == 0 || in.parts == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_collective: parts is NULL or num_parts is 0 (give at least one part)");
  if (in.num_parts > 1024)
    fail(FL_ERR_OUT_OF_RANGE, "fl_submit_collective: num_parts " + std::to_string(in.num_parts) + " exceeds 1024");
  auto w = std::make_unique<CollWork>();
  w->parts.assign(in.parts, in.parts + in.num_parts);
  for (size_t k = 0; k < w->parts.size(); ++k) {
    const fl_coll_part_t& p = w->parts[k];
    std::string at = "fl_submit_collective: part " + std::to_string(k) + ": ";
    if (p.op < FL_COLL_ALL_REDUCE || p.op > FL_COLL_RECV)
      fail(FL_ERR_INVALID_ARGUMENT, at + "op " + std::to_string(p.op) + " is unknown (FL_COLL_ALL_REDUCE..FL_COLL_RECV)");
    if (p.dtype > FL_DTYPE_BFLOAT16)
      fail(FL_ERR_INVALID_ARGUMENT, at + "dtype " + std::to_string(p.dtype) + " is unknown");
    if (is_reduction(p.op)) {
      if (p.redop > FL_REDOP_MIN)
        fail(FL_ERR_INVALID_ARGUMENT, at + "redop " + std::to_string(p.redop) + " is unknown (sum, prod, max, min)");
      if (p.dtype == FL_DTYPE_FLOAT16 || p.dtype == FL_DTYPE_BFLOAT16)
        fail(FL_ERR_UNSUPPORTED, at + op_name(p.op) + " over " + dtype_name(p.dtype) +
                                     " is not supported by the host-fake backend (reductions support int8, uint8, "
                                     "int32, uint32, int64, uint64, float32, float64; data movement supports every dtype)");
    }
    if ((p.op == FL_COLL_BROADCAST || is_p2p(p.op)) && p.peer >= c->nranks)
      fail(FL_ERR_OUT_OF_RANGE, at + (p.op == FL_COLL_BROADCAST ? "root " : "peer ") + std::to_string(p.peer) +
                                    " is out of range: the communicator has " + std::to_string(c->nranks) + " ranks");
    if (p.count > (uint64_t(1) << 40))
      fail(FL_ERR_OUT_OF_RANGE, at + "count " + std::to_string(p.count) + " is too large");
    if (p.count == 0) continue;
    bool needs_send = p.op != FL_COLL_RECV && (p.op != FL_COLL_BROADCAST || p.peer == c->rank);
    bool needs_recv = p.op != FL_COLL_SEND;
    if (needs_send && p.sendbuf == nullptr) fail(FL_ERR_INVALID_ARGUMENT, at + op_name(p.op) + " needs a sendbuf");
    if (needs_recv && p.recvbuf == nullptr) fail(FL_ERR_INVALID_ARGUMENT, at + op_name(p.op) + " needs a recvbuf");
  }
  std::shared_ptr<Comm> owner;
  {
    Diagnostics* dg = c->engine->diagnostics();
    std::lock_guard<std::mutex> lk(dg->comms_mu);
    for (auto& p : dg->comms)
      if (p.get() == c) owner = p;
  }
  if (!owner) fail(FL_ERR_INVALID_HANDLE, "fl_submit_collective: the communicator was destroyed");
  w->comm = owner;
  w->posting.rank = c->rank;
  w->posting.parts = &w->parts;
  w->posting.signature = signature(w->parts);

  std::lock_guard<std::mutex> order(c->submit_mu);  // seq order == stream order
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lk(c->group->mu);
    seq = ++c->issued;
    CollRecord rec;
    rec.seq = seq;
    rec.signature = w->posting.signature;
    rec.t_issued_ns = since(*c);
    c->recorder.push_back(std::move(rec));
    if (c->recorder.size() > Comm::kRecorderSize) c->recorder.pop_front();
  }
  w->seq = seq;
  SubmitArgs a;
  a.kind = InstrKind::kCollective;
  a.fn = &coll_run;
  a.user_data = w.get();
  a.cleanup = &coll_cleanup;
  a.operands = in.operands;
  a.num_operands = in.num_operands;
  a.name = in.name;
  a.nonblocking = (in.flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.api = fn;
  fl_instr_id id;
  try {
    id = submit_instruction(s, a);
  } catch (...) {  // not queued: give the sequence number back
    std::lock_guard<std::mutex> lk(c->group->mu);
    --c->issued;
    if (!c->recorder.empty() && c->recorder.back().seq == seq) c->recorder.pop_back();
    throw;
  }
  {
    std::lock_guard<std::mutex> lk(c->group->mu);
    if (CollRecord* rec = find_record(*c, seq)) rec->instr = id;
  }
  w.release();  // owned by the instruction now (coll_cleanup deletes it)
  return id;
}

// ---- diagnostics ------------------------------------------------------------------------

std::vector<CollWait> collective_waits(Engine& e) {
  std::vector<CollWait> out;
  Diagnostics* dg = e.diagnostics();
  std::vector<std::shared_ptr<Comm>> list;
  {
    std::lock_guard<std::mutex> lk(dg->comms_mu);
    list = dg->comms;
  }
  for (auto& c : list) {
    FakeGroup& g = *c->group;
    std::lock_guard<std::mutex> lk(g.mu);
    for (auto& [seq, r] : g.rounds) {
      if (r.done || r.posts.empty() || r.posts[c->rank] == nullptr || r.posts[c->rank] == &kSkipped) continue;
      CollWait w;
      w.lane = c->lane;
      w.instr = r.posts[c->rank]->instr;
      w.what = "collective seq " + std::to_string(seq) + " " + r.posts[c->rank]->signature + " of " + comm_name(*c) +
               " waits for rank";
      std::string ranks;
      for (uint32_t q = 0; q < g.nranks; ++q) {
        if (r.posts[q] != nullptr) continue;
        Comm* peer = g.ranks[q];
        ranks += (ranks.empty() ? " " : ", ") + std::to_string(q);
        if (peer != nullptr) {
          ranks += " (lane " + std::to_string(peer->lane) + (peer->engine == &e ? "" : " of engine " + hex(peer->engine->handle())) + ")";
          w.peers.push_back({peer->engine, peer->lane, q});
        } else {
          ranks += " (not joined, or gone)";
        }
      }
      w.what += ranks;
      out.push_back(std::move(w));
    }
  }
  return out;
}

namespace {
const char* state_name(CollRecord::State s) {
  switch (s) {
    case CollRecord::kIssued: return "issued";
    case CollRecord::kWaiting: return "waiting";
    case CollRecord::kDone: return "done";
    case CollRecord::kFailed: return "failed";
    case CollRecord::kCancelled: return "cancelled";
  }
  return "?";
}
std::string ms(int64_t ns) {
  if (ns < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "+%.3f ms", double(ns) / 1e6);
  return b;
}
}  // namespace

void dump_comms(Engine& e, std::string& out) {
  Diagnostics* dg = e.diagnostics();
  std::vector<std::shared_ptr<Comm>> list;
  {
    std::lock_guard<std::mutex> lk(dg->comms_mu);
    list = dg->comms;
  }
  out += "communicators: " + std::to_string(list.size()) + "\n";
  for (auto& cp : list) {
    Comm& c = *cp;
    FakeGroup& g = *c.group;
    std::lock_guard<std::mutex> lk(g.mu);
    out += "  " + comm_name(c) + ", host-fake, collectives on lane " + std::to_string(c.lane) + " (collective stream)\n";
    out += "    sequence numbers: issued " + std::to_string(c.issued) + ", started " + std::to_string(c.started) +
           ", completed " + std::to_string(c.completed) + (g.aborted ? "; ABORTED: " + g.abort_reason : "") + "\n";
    for (uint32_t q = 0; q < g.nranks; ++q) {
      if (q == c.rank) continue;
      Comm* p = g.ranks[q];
      if (p == nullptr) {
        out += "    rank " + std::to_string(q) + ": not joined (or gone)\n";
        continue;
      }
      out += "    rank " + std::to_string(q) + " (lane " + std::to_string(p->lane) +
             (p->engine == &e ? "" : " of engine " + hex(p->engine->handle())) + "): issued " + std::to_string(p->issued) +
             ", started " + std::to_string(p->started) + ", completed " + std::to_string(p->completed) + "\n";
    }
    // The oldest unfinished collective of this rank against what each peer issued at that
    // sequence number: differing signatures (or a peer that has not issued it, or is busy
    // elsewhere) are what keeps the ranks apart.
    if (c.completed < c.issued) {
      uint64_t seq = c.completed + 1;
      CollRecord* mine = find_record(c, seq);
      out += "    oldest unfinished: seq " + std::to_string(seq) + " " + (mine ? mine->signature : "?") + " (" +
             (mine ? state_name(mine->state) : "?") + ")\n";
      for (uint32_t q = 0; q < g.nranks; ++q) {
        if (q == c.rank) continue;
        Comm* p = g.ranks[q];
        if (p == nullptr) continue;
        CollRecord* theirs = find_record(*p, seq);
        std::string line = "      rank " + std::to_string(q) + " at seq " + std::to_string(seq) + ": ";
        if (theirs == nullptr) {
          line += p->issued < seq ? "not issued yet (rank " + std::to_string(q) + " has issued " + std::to_string(p->issued) +
                                        " collectives on this communicator)"
                                  : "not in its flight recorder";
        } else {
          line += theirs->signature + " (" + state_name(theirs->state) + ")";
          if (mine && theirs->signature != mine->signature) line += "  <-- SIGNATURES DISAGREE";
          if (theirs->state == CollRecord::kIssued)
            line += "; not started: its lane " + std::to_string(p->lane) + " is busy with earlier work";
        }
        out += line + "\n";
      }
    }
    out += "    flight recorder (last " + std::to_string(c.recorder.size()) + " of at most " +
           std::to_string(Comm::kRecorderSize) + "):\n";
    for (const CollRecord& r : c.recorder) {
      char b[96];
      std::snprintf(b, sizeof b, "      seq %-4" PRIu64 " #%-6" PRIu64 " %-9s ", r.seq, r.instr, state_name(r.state));
      out += b + r.signature + "  issued " + ms(r.t_issued_ns) + ", started " + ms(r.t_started_ns) + ", done " +
             ms(r.t_done_ns) + "\n";
    }
  }
}

}  // namespace flowlane::core
