// FL_COMM_HOST_FAKE: ranks of one process over host memory (comm/comm.hpp). Protocol:
// comm/README.md, "The host backend".
//
// Every collective instruction of a communicator gets the next sequence number of that rank
// at submission (`queued`). Its callback runs on the comm's lane COLLECTIVE stream, in
// submission order, and blocks — as a NCCL kernel would — until every rank has reached the
// same sequence number on that communicator (`issued` of each rank). The last rank to
// arrive compares the operation signatures: equal → it moves the data for every rank
// (inputs staged first, so in-place buffers are safe) and wakes the others; different →
// every rank's instruction fails with a message naming both signatures. A rank that never
// arrives leaves the others blocked, like NCCL: that is what the watchdog dump explains.
//
// Abort (fl_comm_destroy, engine destroy): the rank's handle goes stale, and every
// collective of the group (this rank's and its peers') not yet matched by every rank — now
// or later — fails with FL_ERR_CANCELLED naming the rank that left. Matched collectives
// complete normally.
//
// Locking: one mutex per group guards the rendezvous rounds and every rank's counters, and
// serializes the writes of their flight recorders (readers take no lock). Dumps take it
// briefly; nothing blocks while holding it except the data movement of one matched round.
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "comm/comm.hpp"

namespace flowlane::comm {

namespace {

using core::Stream;

struct FakeGroup;

// One rank's communicator.
struct HostComm final : Communicator {
  HostComm(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid, const Settings& s)
      : Communicator("host", e, d, uid, s) {}
  std::shared_ptr<FakeGroup> group;
  std::mutex submit_mu;  // sequence assignment + queueing, in one order

  // Guarded by group->mu (which also serializes the writes of `recorder`).
  uint64_t queued = 0;     // collectives submitted
  uint64_t issued = 0;     // collectives whose callback reached the rendezvous
  uint64_t completed = 0;  // collectives finished (any outcome)
  bool aborted = false;
  uint64_t timed_out_seq = 0;  // its collective that timed out (it fails with FL_ERR_TIMEOUT)
  std::string timeout_detail;
  bool broken = false;         // it timed out: it takes part in no collective any more

  fl_instr_id submit(Stream* s, core::Instr* i, const fl_collective_instr_t& in) override;
  void abort(const std::string& why, bool engine_destroy) override;
  void time_out(uint64_t seq, const std::string& detail) override;
  void dump(std::string& out) override;
  const char* state_word(std::string* reason) override;
  void lane_waits(std::vector<core::LaneWait>& out) override;
};

struct FakeGroup {
  std::array<char, 128> id{};
  uint32_t nranks = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<HostComm*> ranks;  // live ranks (null: not joined yet, or left); under mu
  bool aborted = false;
  std::string abort_reason;
  std::vector<std::string> left_why;  // per rank: why it left the communicator (a timeout), or ""
  struct Posting {
    uint32_t rank = 0;
    fl_instr_id instr = 0;
    const std::vector<fl_coll_part_t>* parts = nullptr;
    std::string signature;
  };
  struct Round {
    std::vector<const Posting*> posts;  // per rank; null until it arrives
    uint32_t arrived = 0;
    uint32_t left = 0;
    bool done = false;
    std::string error;  // signature mismatch
  };
  std::map<uint64_t, Round> rounds;  // by sequence number
};

constexpr char kMagic[16] = "flowlane-fake1";  // first bytes of a host-fake unique id
const FakeGroup::Posting kSkipped{};           // a rank that skipped its collective
const FakeGroup::Posting kLeft{};              // a rank that left (its communicator broke: a timeout)

// The groups of the process, by unique id.
struct Groups {
  std::mutex mu;
  std::map<std::array<char, 128>, std::weak_ptr<FakeGroup>> by_id;
};
Groups& groups() {
  static Groups* r = new Groups();  // never destroyed: comms may outlive statics
  return *r;
}

std::string comm_name(const HostComm& c) {
  return "communicator " + hex(c.handle.load(std::memory_order_relaxed)) + " (rank " + std::to_string(c.rank) + " of " + std::to_string(c.nranks) + ")";
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
  for (uint32_t q = 0; q < n; ++q) {
    if (r.posts[q] == &kSkipped)
      return where + " seq " + std::to_string(seq) + " failed: rank " + std::to_string(q) +
             " skipped its collective (an input was poisoned), so the ranks cannot complete it";
    if (r.posts[q] == &kLeft)
      return where + " seq " + std::to_string(seq) + " failed: rank " + std::to_string(q) + " left the communicator (" +
             g.left_why[q] + "), so the ranks cannot complete it";
  }
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
    if (bytes == 0) continue;  // count 0: nothing moves (and the buffers may be NULL)
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
  std::shared_ptr<HostComm> comm;
  uint64_t seq = 0;
  std::vector<fl_coll_part_t> parts;
  FakeGroup::Posting posting;
  bool ran = false;
};

// Under the group lock.
void finish(HostComm& c, uint64_t seq, CollState state, fl_status_t st) {
  c.completed = std::max(c.completed, seq);
  c.recorder.finished(seq, state, st, c.since_created_ns());
}

// Under the group lock: rank c takes its turn at `seq` without data (`marker`: it skipped
// the collective, or it left the communicator), so that its peers fail instead of waiting.
void post_absent(FakeGroup& g, HostComm& c, uint64_t seq, const FakeGroup::Posting* marker) {
  FakeGroup::Round& r = g.rounds[seq];
  if (r.posts.empty()) r.posts.assign(g.nranks, nullptr);
  r.posts[c.rank] = marker;
  ++r.left;
  if (++r.arrived == g.nranks) {
    r.error = match_and_run(g, r, seq, "the communicator of " + comm_name(c));
    r.done = true;
    g.cv.notify_all();
  }
  if (r.left == g.nranks) g.rounds.erase(seq);
}

fl_status_t coll_run(fl_instr_ctx_t* ctx, void* ud) {
  auto* w = static_cast<CollWork*>(ud);
  w->ran = true;
  HostComm& c = *w->comm;
  FakeGroup& g = *c.group;
  const std::string where = comm_name(c);
  w->posting.instr = fl_instr_get_id(ctx);
  std::unique_lock<std::mutex> lk(g.mu);
  c.issued = std::max(c.issued, w->seq);
  c.recorder.issued(w->seq, c.since_created_ns());
  if (g.aborted || c.broken) {
    const std::string why = g.aborted ? " was cancelled: " + g.abort_reason
                                      : " was not issued: this rank left the communicator (" + g.left_why[c.rank] + ")";
    if (!g.aborted) post_absent(g, c, w->seq, &kLeft);
    finish(c, w->seq, CollState::kFailed, FL_ERR_CANCELLED);
    std::string msg = "collective seq " + std::to_string(w->seq) + " " + w->posting.signature + " on " + where + why;
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
    g.cv.wait(lk, [&] { return r.done || g.aborted || c.timed_out_seq == w->seq; });
  }
  if (!r.done && !g.aborted) {  // timed out: this rank leaves; its peers fail when the others come
    r.posts[c.rank] = &kLeft;
    ++r.left;
    finish(c, w->seq, CollState::kFailed, FL_ERR_TIMEOUT);
    std::string msg = "collective seq " + std::to_string(w->seq) + " " + w->posting.signature + " on " + where +
                      " timed out: " + c.timeout_detail;
    lk.unlock();
    fl_instr_set_error(ctx, msg.c_str());
    return FL_ERR_TIMEOUT;
  }
  if (!r.done) {  // aborted while waiting: this rank leaves the round
    r.posts[c.rank] = nullptr;
    --r.arrived;
    finish(c, w->seq, CollState::kFailed, FL_ERR_CANCELLED);
    std::string msg = "collective seq " + std::to_string(w->seq) + " " + w->posting.signature + " on " + where +
                      " was cancelled while waiting for its peers: " + g.abort_reason;
    lk.unlock();
    fl_instr_set_error(ctx, msg.c_str());
    return FL_ERR_CANCELLED;
  }
  std::string err = r.error;
  if (++r.left == g.nranks) g.rounds.erase(w->seq);
  finish(c, w->seq, err.empty() ? CollState::kCompleted : CollState::kFailed,
         err.empty() ? FL_OK : FL_ERR_INSTRUCTION_FAILED);
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
    HostComm& c = *w->comm;
    FakeGroup& g = *c.group;
    std::lock_guard<std::mutex> lk(g.mu);
    c.issued = std::max(c.issued, w->seq);
    finish(c, w->seq, CollState::kSkipped, FL_ERR_DEPENDENCY_FAILED);
    if (!g.aborted) post_absent(g, c, w->seq, c.broken ? &kLeft : &kSkipped);
  }
  delete w;
}

}  // namespace

// ---- the backend's entry points ------------------------------------------------------------

bool is_host_unique_id(const fl_comm_unique_id_t& id) {
  return std::memcmp(id.internal, kMagic, sizeof kMagic) == 0;
}

void host_unique_id(fl_comm_unique_id_t* out) {
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

std::shared_ptr<Communicator> create_host(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid,
                                          const Settings& settings) {
  const std::string fn = "fl_comm_create";
  // FL_COMM_UNORDERED is accepted: host-fake collectives are never in the NCCL order anyway.
  if (d.device != 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": device must be 0 for FL_COMM_HOST_FAKE (it works on host memory)");
  if (!is_host_unique_id(uid))
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": the unique id was not made by fl_comm_get_unique_id(FL_COMM_HOST_FAKE)");
  std::array<char, 128> key;
  std::memcpy(key.data(), uid.internal, 128);

  auto c = std::make_shared<HostComm>(e, d, uid, settings);
  Groups& reg = groups();
  std::lock_guard<std::mutex> lk(reg.mu);
  for (auto it = reg.by_id.begin(); it != reg.by_id.end();)  // forget groups nobody uses
    it = it->second.expired() ? reg.by_id.erase(it) : std::next(it);
  std::shared_ptr<FakeGroup> g = reg.by_id[key].lock();
  if (!g) {
    g = std::make_shared<FakeGroup>();
    g->id = key;
    g->nranks = c->nranks;
    g->ranks.assign(c->nranks, nullptr);
    g->left_why.assign(c->nranks, std::string());
    reg.by_id[key] = g;
  }
  std::lock_guard<std::mutex> glk(g->mu);
  if (g->nranks != c->nranks)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": nranks " + std::to_string(c->nranks) + " disagrees with the " +
                                      std::to_string(g->nranks) + " given by the ranks that already joined this unique id");
  if (g->aborted)
    fail(FL_ERR_INVALID_ARGUMENT,
         fn + ": the communicator of this unique id was aborted (" + g->abort_reason + "); create a new unique id");
  if (g->ranks[c->rank] != nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": rank " + std::to_string(c->rank) +
                                      " of this unique id has already joined (each rank joins once)");
  // Each rank blocks its worker inside a collective until its peers arrive (as a NCCL
  // kernel occupies its GPU), so the lanes of one group on one engine need a worker each.
  std::vector<uint32_t> lanes{c->lane};
  for (HostComm* r : g->ranks)
    if (r != nullptr && r->engine == e) lanes.push_back(r->lane);
  std::sort(lanes.begin(), lanes.end());
  size_t distinct = size_t(std::unique(lanes.begin(), lanes.end()) - lanes.begin());
  if (distinct > e->worker_count())
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": this engine would host ranks of one communicator on " +
                                      std::to_string(distinct) + " lanes but has only " +
                                      std::to_string(e->worker_count()) +
                                      " workers; a host-fake rank occupies a worker while it waits in a collective, "
                                      "so they would deadlock (create the engine with more workers, or put the "
                                      "ranks on fewer lanes or on other engines)");
  g->ranks[c->rank] = c.get();
  c->group = g;
  return c;
}

// ---- HostComm ---------------------------------------------------------------------------

void HostComm::abort(const std::string& why, bool) {
  FakeGroup& g = *group;
  std::lock_guard<std::mutex> lk(g.mu);
  if (aborted) return;
  aborted = true;
  if (!g.aborted) {
    g.aborted = true;
    g.abort_reason = why;
  }
  if (rank < g.ranks.size() && g.ranks[rank] == this) g.ranks[rank] = nullptr;
  g.cv.notify_all();
}

void HostComm::time_out(uint64_t seq, const std::string& detail) {
  FakeGroup& g = *group;
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.rounds.find(seq);
  const FakeGroup::Posting* mine =
      it == g.rounds.end() || it->second.done || it->second.posts.empty() ? nullptr : it->second.posts[rank];
  // Only a collective that waits in its round (it may have completed meanwhile).
  if (aborted || broken || mine == nullptr || mine == &kSkipped || mine == &kLeft) return;
  // This rank's communicator breaks: it leaves the round (its peers fail once every rank
  // came, or wait for their own timeout), and takes part in no later collective.
  timed_out_seq = seq;
  timeout_detail = detail;
  broken = true;
  g.left_why[rank] = "its collective seq " + std::to_string(seq) + " timed out: " + detail;
  g.cv.notify_all();
}

fl_instr_id HostComm::submit(Stream* s, core::Instr* i, const fl_collective_instr_t& in) {
  static const std::string fn = "fl_submit_collective";  // static: no allocation per submit
  std::unique_ptr<CollWork> w;
  try {
    if (s->engine != engine)
      fail(FL_ERR_INVALID_ARGUMENT, fn + ": the stream belongs to another engine than " + comm_name(*this));
    if (s->lane->id != lane || s->kind != FL_STREAM_COLLECTIVE || s->device.type != FL_DEVICE_CPU)
      fail(FL_ERR_INVALID_ARGUMENT,
           fn + ": " + comm_name(*this) + " issues its collectives on lane " + std::to_string(lane) +
               "'s host collective stream ({FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE), but the stream given is lane " +
               std::to_string(s->lane->id) + "'s " + s->describe().substr(s->describe().find(", ") + 2) +
               " stream: collectives of one communicator go through one stream in one order");
    w = std::make_unique<CollWork>();
    w->parts = check_parts(in, rank, nranks);
    for (size_t k = 0; k < w->parts.size(); ++k) {
      const fl_coll_part_t& p = w->parts[k];
      if (is_reduction(p.op) && (p.dtype == FL_DTYPE_FLOAT16 || p.dtype == FL_DTYPE_BFLOAT16))
        fail(FL_ERR_UNSUPPORTED, fn + ": part " + std::to_string(k) + ": " + op_name(p.op) + " over " +
                                     dtype_name(p.dtype) +
                                     " is not supported by the host-fake backend (reductions support int8, uint8, "
                                     "int32, uint32, int64, uint64, float32, float64; data movement supports every dtype)");
    }
  } catch (...) {
    engine->discard(i);
    throw;
  }
  w->comm = std::static_pointer_cast<HostComm>(shared_from_this());
  w->posting.rank = rank;
  w->posting.parts = &w->parts;
  w->posting.signature = signature(w->parts);

  std::lock_guard<std::mutex> order(submit_mu);  // seq order == stream order
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lk(group->mu);
    seq = ++queued;
    recorder.queued(seq, w->parts, in.name, since_created_ns());
  }
  w->seq = seq;
  core::SubmitArgs a;
  a.fn = &coll_run;
  a.user_data = w.get();
  a.cleanup = &coll_cleanup;
  a.name = in.name;
  a.nonblocking = (in.flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.api = "fl_submit_collective";
  fl_instr_id id;
  try {
    id = engine->submit(s, i, a);
  } catch (...) {  // not queued: give the sequence number back
    std::lock_guard<std::mutex> lk(group->mu);
    --queued;
    recorder.forget(seq);
    throw;
  }
  w.release();  // owned by the instruction now (coll_cleanup deletes it)
  std::lock_guard<std::mutex> lk(group->mu);
  recorder.set_instr(seq, id);
  return id;
}

// ---- diagnostics ------------------------------------------------------------------------

void HostComm::lane_waits(std::vector<core::LaneWait>& out) {
  FakeGroup& g = *group;
  std::lock_guard<std::mutex> lk(g.mu);
  for (auto& [seq, r] : g.rounds) {
    if (r.done || r.posts.empty() || r.posts[rank] == nullptr || r.posts[rank] == &kSkipped || r.posts[rank] == &kLeft)
      continue;
    core::LaneWait w;
    w.lane = lane;
    w.instr = r.posts[rank]->instr;
    w.what = "collective seq " + std::to_string(seq) + " " + r.posts[rank]->signature + " of " + comm_name(*this) +
             " waits for rank";
    std::string ranks;
    for (uint32_t q = 0; q < g.nranks; ++q) {
      if (r.posts[q] != nullptr) continue;
      HostComm* peer = g.ranks[q];
      ranks += (ranks.empty() ? " " : ", ") + std::to_string(q);
      if (peer != nullptr) {
        ranks += " (lane " + std::to_string(peer->lane) +
                 (peer->engine == engine ? "" : " of engine " + hex(peer->engine->handle())) + ")";
        w.peers.push_back({peer->engine, peer->lane, q});
      } else {
        ranks += " (not joined, or gone)";
      }
    }
    w.what += ranks;
    out.push_back(std::move(w));
  }
}

const char* HostComm::state_word(std::string* reason) {
  std::lock_guard<std::mutex> lk(group->mu);
  if (!group->aborted) return "active";
  *reason = group->abort_reason;
  return "aborted";
}

void HostComm::dump(std::string& out) {
  FakeGroup& g = *group;
  std::lock_guard<std::mutex> lk(g.mu);
  out += "  " + comm_name(*this) + ", host-fake, collectives on lane " + std::to_string(lane) + " (collective stream)\n";
  out += "    sequence numbers: queued " + std::to_string(queued) + ", issued " + std::to_string(issued) +
         ", completed " + std::to_string(completed) + (g.aborted ? "; ABORTED: " + g.abort_reason : "") + "\n";
  for (uint32_t q = 0; q < g.nranks; ++q) {
    if (q == rank) continue;
    HostComm* p = g.ranks[q];
    if (p == nullptr) {
      out += "    rank " + std::to_string(q) + ": not joined (or gone)\n";
      continue;
    }
    out += "    rank " + std::to_string(q) + " (lane " + std::to_string(p->lane) +
           (p->engine == engine ? "" : " of engine " + hex(p->engine->handle())) + "): queued " +
           std::to_string(p->queued) + ", issued " + std::to_string(p->issued) + ", completed " +
           std::to_string(p->completed) + "\n";
  }
  // The oldest unfinished collective of this rank against what each peer submitted at that
  // sequence number: differing signatures (or a peer that has not submitted it, or is busy
  // elsewhere) are what keeps the ranks apart.
  if (completed < queued) {
    uint64_t seq = completed + 1;
    CollRecord mine;
    const bool have_mine = recorder.read(seq, mine);
    out += "    oldest unfinished: seq " + std::to_string(seq) + " " + (have_mine ? record_signature(mine) : "?") +
           " (" + (have_mine ? coll_state_name(mine.state) : "?") + ")\n";
    for (uint32_t q = 0; q < g.nranks; ++q) {
      if (q == rank) continue;
      HostComm* p = g.ranks[q];
      if (p == nullptr) continue;
      CollRecord theirs;
      std::string line = "      rank " + std::to_string(q) + " at seq " + std::to_string(seq) + ": ";
      if (!p->recorder.read(seq, theirs)) {
        line += p->queued < seq ? "not submitted yet (rank " + std::to_string(q) + " has submitted " +
                                      std::to_string(p->queued) + " collectives on this communicator)"
                                : "not in its flight recorder";
      } else {
        line += record_signature(theirs) + " (" + coll_state_name(theirs.state) + ")";
        if (have_mine && theirs.fingerprint != mine.fingerprint) line += "  <-- SIGNATURES DISAGREE";
        if (theirs.state == CollState::kQueued)
          line += "; not issued: its lane " + std::to_string(p->lane) + " is busy with earlier work";
      }
      out += line + "\n";
    }
  }
  recorder.dump_text(out);
}

}  // namespace flowlane::comm
