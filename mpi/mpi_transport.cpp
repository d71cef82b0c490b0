// MPI as a flowlane transport (fl_comm_transport_t; mpi/README.md, "How a collective runs").
//
// One collective = one Req: its data operations (MPI's nonblocking collectives, or
// Isend/Irecv for point-to-point parts, on the `data` duplicate) and, unless
// FLOWLANE_COMM_CHECK=off, a 24-byte check on the `ctl` duplicate: MPI_Iallreduce(MIN) of
// {h, -h, s}, h the 63-bit fingerprint of the collective's non-p2p parts and s this rank's
// number if it skipped the collective (else INT64_MAX). The result says whether every rank
// issued the same collective (min h == max h) and which rank, if any, skipped it (min s).
// MPI matches collectives by their order on a communicator and detects no mismatch itself
// (a rank's MPI_Iallreduce against another's MPI_Ibcast leaves both pending forever), so:
//
//   strict (default)     the data operations are issued by test() once the check agreed, in
//                        sequence order: a mismatched data operation is never issued, at the
//                        cost of one small all-reduce of latency;
//   alongside            the check and the data operations are issued together by start():
//                        no added latency, but a mismatched data operation is issued, and Open
//                        MPI 4.1 then writes past its buffers (measured: mismatched counts of
//                        MPI_Iallreduce corrupted the heap, caught at MPI_Finalize); on a
//                        mismatch every rank still fails at once;
//   off                  no check: a skip leaves garbage on the peers, a mismatch hangs until
//                        the timeout, or corrupts memory.
//
// A mismatch is then explained: every rank sends its signature (256 bytes) to every other
// rank and receives theirs, point to point on `ctl` with the sequence number as the tag
// (not a collective: a rank finds the mismatch in test(), on whichever thread tests, while
// its lane runner may be issuing the next check on `ctl`; collectives issued in different
// orders on two ranks would be matched with each other — measured: a heap corruption that
// crashed Open MPI in a later MPI_Allreduce — while point-to-point messages never match a
// collective, nor a message of another tag) and fails naming who issued what. A skipped rank takes part with zeroed
// scratch buffers of the parts' sizes (its own buffers may hold poisoned data or belong to
// released objects); every rank then fails with FL_ERR_DEPENDENCY_FAILED naming it.
//
// Threads: start() on the lane runner (or the submitting thread), test() and abort() on
// flowlane's progress thread or a program thread waiting on the collective stream (one at a time),
// destroy() wherever the communicator's last reference drops; every MPI call holds the gate
// (mpi_gate.cpp). A Req belongs to one thread at a time (the engine hands it from start to
// test); State::mu guards only the strict mode's data order.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "mpi_internal.hpp"

namespace flowlane::mpi {

namespace {

constexpr size_t kSignatureCell = 256;  // bytes per rank in a mismatch's exchange
constexpr size_t kSpareReqs = 16;       // finished requests kept for reuse per communicator

struct Req;

struct State {
  MPI_Comm data = MPI_COMM_NULL, ctl = MPI_COMM_NULL;
  int rank = 0, nranks = 1;
  uint64_t check = 0;
  int tag_ub = 32767;
  std::mutex mu;
  uint64_t next_data_seq = 1;  // strict: data operations are issued in sequence order (under mu)
  bool data_mismatched = false;  // strict: a check found a mismatch, no data is issued (under mu)
  // A check found a mismatch at this sequence number: the data operations of that collective
  // and of later ones are never tested (earlier ones matched: they complete as usual). Open MPI 4.1 raises the errors of nonblocking collectives on
  // MPI_COMM_WORLD's error handler, whatever the communicator's (measured: MPI_ERR_TRUNCATE
  // of mismatched counts ended the job through MPI_ERRORS_ARE_FATAL), and MPI cannot cancel
  // them: they are left to MPI, which still progresses them.
  std::atomic<uint64_t> abandoned_from{UINT64_MAX};
  // Collectives the engine is done with whose MPI requests are still active (see
  // keep_or_delete): MPI may still write their buffers, and the communicators cannot be
  // freed under them. Under orphans_mu; orphan_count mirrors the size for a lock-free look
  // (relaxed: a stale zero only delays a sweep to the next test).
  std::mutex orphans_mu;
  std::vector<std::unique_ptr<Req>> orphans;
  std::atomic<size_t> orphan_count{0};
  // Finished requests kept for reuse (take_req, recycle); under spare_mu, a leaf lock.
  std::mutex spare_mu;
  std::vector<std::unique_ptr<Req>> spare;
};

struct Req {
  State* st = nullptr;
  uint64_t seq = 0;
  bool skipped = false;
  std::string signature;
  std::vector<fl_coll_part_t> parts;               // the buffers used: the caller's, or scratch
  std::vector<std::unique_ptr<unsigned char[]>> temps;  // scratch, staging
  struct Copy {
    void* to;
    const void* from;
    size_t bytes;
  };
  std::vector<Copy> after;  // staged results, copied out once the data operations are done
  std::vector<MPI_Request> data;
  std::vector<MPI_Status> statuses;  // MPI_Testall's, sized once the data operations are issued
  bool data_issued = false, data_done = false;
  MPI_Request ctl = MPI_REQUEST_NULL;
  bool ctl_done = false;
  int64_t ctl_in[3] = {}, ctl_out[3] = {};
  std::vector<MPI_Request> sig;  // the signature exchange's sends and receives
  bool sig_started = false, sig_done = false;
  std::vector<char> sig_cell, sig_cells;  // this rank's signature, every rank's (alive while gathered)
  std::string error;      // an MPI call failed
  bool reported = false;  // a failure was returned to the engine

  // Back to a new Req's values, every field, the containers' capacity kept (State::spare).
  void reset() {
    st = nullptr;
    seq = 0;
    skipped = false;
    signature.clear();
    parts.clear();
    temps.clear();
    after.clear();
    data.clear();
    statuses.clear();
    data_issued = data_done = false;
    ctl = MPI_REQUEST_NULL;
    ctl_done = false;
    std::fill(std::begin(ctl_in), std::end(ctl_in), 0);
    std::fill(std::begin(ctl_out), std::end(ctl_out), 0);
    sig.clear();
    sig_started = sig_done = false;
    sig_cell.clear();
    sig_cells.clear();
    error.clear();
    reported = false;
  }
};

// A Req from st's spare ones (their vectors and strings keep their capacity: a collective
// then allocates nothing here), or a new one.
std::unique_ptr<Req> take_req(State& st) {
  {
    std::lock_guard<std::mutex> lk(st.spare_mu);
    if (!st.spare.empty()) {
      std::unique_ptr<Req> r = std::move(st.spare.back());
      st.spare.pop_back();
      return r;
    }
  }
  return std::make_unique<Req>();
}

// r is done with (MPI holds none of its requests): reset and kept for the next collective,
// up to kSpareReqs, else deleted.
void recycle(State& st, Req* r) {
  std::unique_ptr<Req> owned(r);
  owned->reset();
  std::lock_guard<std::mutex> lk(st.spare_mu);
  if (st.spare.size() < kSpareReqs) st.spare.push_back(std::move(owned));  // capacity reserved at creation
}

// Copies text into the engine's message buffer.
void put(char* msg, uint64_t size, const std::string& text) {
  if (size == 0) return;
  const size_t n = std::min<size_t>(text.size(), size_t(size - 1));
  std::memcpy(msg, text.data(), n);
  msg[n] = 0;
}

unsigned char* scratch(Req& r, size_t bytes) {
  r.temps.emplace_back(new unsigned char[bytes == 0 ? 1 : bytes]());
  return r.temps.back().get();
}

// Bytes a part sends and receives on this rank.
void part_bytes(const fl_coll_part_t& p, int nranks, size_t* send, size_t* recv) {
  const size_t b = size_t(p.count) * dtype_size(p.dtype);
  switch (p.op) {
    case FL_COLL_ALL_GATHER: *send = b, *recv = b * size_t(nranks); break;
    case FL_COLL_REDUCE_SCATTER: *send = b * size_t(nranks), *recv = b; break;
    case FL_COLL_SEND: *send = b, *recv = 0; break;
    case FL_COLL_RECV: *send = 0, *recv = b; break;
    default: *send = b, *recv = b; break;
  }
}

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  return an != 0 && bn != 0 && x < y + bn && y < x + an;
}

// Issues one part's MPI operations (in chunks of chunk_elements()); "" or the failure.
std::string issue_part(Req& r, const fl_coll_part_t& p) {
  State& st = *r.st;
  const size_t es = dtype_size(p.dtype);
  const MPI_Datatype t = datatype(p.dtype);
  const uint64_t chunk = chunk_elements(), n = p.count;
  const int tag = int(r.seq % (uint64_t(st.tag_ub) + 1));  // tag_ub may be INT_MAX
  auto* send = static_cast<const unsigned char*>(p.sendbuf);
  auto* recv = static_cast<unsigned char*>(p.recvbuf);
  auto add = [&](int code, const char* call) -> std::string {
    return code == MPI_SUCCESS ? "" : mpi_error(code, call);
  };
  std::string err;
  for (uint64_t o = 0; o < n && err.empty(); o += chunk) {
    const int c = int(std::min(chunk, n - o));
    const size_t off = size_t(o) * es;
    MPI_Request q = MPI_REQUEST_NULL;
    switch (p.op) {
      case FL_COLL_ALL_REDUCE:
        err = add(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send + off, recv + off, c, t,
                                 reduction(p.dtype, p.redop), st.data, &q),
                  "MPI_Iallreduce");
        break;
      case FL_COLL_BROADCAST:
        if (o == 0 && st.rank == int(p.peer) && send != recv) std::memcpy(recv, send, size_t(n) * es);
        err = add(MPI_Ibcast(recv + off, c, t, int(p.peer), st.data, &q), "MPI_Ibcast");
        break;
      case FL_COLL_SEND:
        err = add(MPI_Isend(send + off, c, t, int(p.peer), tag, st.data, &q), "MPI_Isend");
        break;
      case FL_COLL_RECV:
        err = add(MPI_Irecv(recv + off, c, t, int(p.peer), tag, st.data, &q), "MPI_Irecv");
        break;
      case FL_COLL_ALL_GATHER: {
        // Rank q's chunk lands at recv + q * n * es + off: a chunk of c elements whose
        // extent is a whole rank's block.
        const bool in_place = send == recv + size_t(st.rank) * size_t(n) * es;
        MPI_Datatype block = MPI_DATATYPE_NULL, strided = MPI_DATATYPE_NULL;
        MPI_Type_contiguous(c, t, &block);
        MPI_Type_create_resized(block, 0, MPI_Aint(size_t(n) * es), &strided);
        MPI_Type_commit(&strided);
        err = add(MPI_Iallgather(in_place ? MPI_IN_PLACE : send + off, c, t, recv + off, 1, strided, st.data, &q),
                  "MPI_Iallgather");
        MPI_Type_free(&strided);  // pending operations keep it (MPI 3.1, 4.1.9)
        MPI_Type_free(&block);
        break;
      }
      case FL_COLL_REDUCE_SCATTER: {
        // MPI wants each chunk's inputs packed and its output apart from them: staged.
        const size_t cb = size_t(c) * es;
        const bool direct = n <= chunk && !overlaps(send, size_t(n) * es * size_t(st.nranks), recv, size_t(n) * es);
        const unsigned char* in = send;
        unsigned char* out = recv;
        if (!direct) {
          unsigned char* packed = scratch(r, cb * size_t(st.nranks));
          for (int q2 = 0; q2 < st.nranks; ++q2) std::memcpy(packed + size_t(q2) * cb, send + size_t(q2) * size_t(n) * es + off, cb);
          in = packed;
          out = scratch(r, cb);
          r.after.push_back(Req::Copy{recv + off, out, cb});
        }
        err = add(MPI_Ireduce_scatter_block(in, out, c, t, reduction(p.dtype, p.redop), st.data, &q),
                  "MPI_Ireduce_scatter_block");
        break;
      }
      default: break;
    }
    if (q != MPI_REQUEST_NULL) r.data.push_back(q);
  }
  return err;
}

void issue_data(Req& r) {
  r.data_issued = true;
  for (const fl_coll_part_t& p : r.parts) {
    if (p.count == 0) continue;
    std::string err = issue_part(r, p);
    if (!err.empty()) {
      r.error = "collective seq " + std::to_string(r.seq) + " " + r.signature + ": " + err;
      break;
    }
  }
  if (r.data.empty()) r.data_done = true;
}

// Strict mode: issues r's data operations if the check agreed, every earlier collective's
// were issued (or never will be: they were skipped or mismatched), and none mismatched.
// Every rank sees the same check results in the same order, so every rank decides the same
// for every collective: after a mismatch at seq k no rank issues the data of seq k or later
// (issued on some ranks only, they would stay pending, and MPI would write their buffers
// after the engine had failed them: measured, a heap corruption at MPI_Finalize).
void strict_issue(Req& r, bool agreed, bool mismatch) {
  State& st = *r.st;
  std::lock_guard<std::mutex> lk(st.mu);
  if (st.next_data_seq != r.seq) return;  // an earlier one first (tested before this one)
  st.data_mismatched = st.data_mismatched || mismatch;
  if (agreed && !st.data_mismatched) issue_data(r);
  else r.data_issued = r.data_done = true;  // nothing moves
  ++st.next_data_seq;
}

// Posts the signature exchange of mismatched collective r (the top): this rank's cell to
// every other rank, theirs into sig_cells. "" or the MPI failure (what was posted is tested on).
std::string exchange_signatures(Req& r) {
  const State& st = *r.st;
  const size_t n = size_t(st.nranks), me = size_t(st.rank);
  r.sig_cell.assign(kSignatureCell, 0);
  std::memcpy(r.sig_cell.data(), r.signature.data(), std::min(r.signature.size(), kSignatureCell - 1));
  r.sig_cells.assign(kSignatureCell * n, 0);
  std::memcpy(r.sig_cells.data() + me * kSignatureCell, r.sig_cell.data(), kSignatureCell);
  r.sig.reserve(2 * (n - 1));
  r.sig_started = true;
  const int tag = int(r.seq % (uint64_t(st.tag_ub) + 1));
  for (size_t q = 0; q < n; ++q) {
    if (q == me) continue;
    MPI_Request in = MPI_REQUEST_NULL, out = MPI_REQUEST_NULL;
    int code = MPI_Irecv(r.sig_cells.data() + q * kSignatureCell, int(kSignatureCell), MPI_CHAR, int(q), tag, st.ctl, &in);
    if (code == MPI_SUCCESS) r.sig.push_back(in);
    if (code == MPI_SUCCESS) code = MPI_Isend(r.sig_cell.data(), int(kSignatureCell), MPI_CHAR, int(q), tag, st.ctl, &out);
    if (code != MPI_SUCCESS) return mpi_error(code, "the signature exchange (MPI_Irecv/MPI_Isend)");
    r.sig.push_back(out);
  }
  return "";
}

// The mismatch's text once the signatures are exchanged: the ranks grouped by signature.
std::string mismatch_text(const Req& r) {
  const int n = r.st->nranks;
  std::vector<std::string> sigs(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) sigs[size_t(q)] = std::string(r.sig_cells.data() + size_t(q) * kSignatureCell);
  std::string out = "signature mismatch at seq " + std::to_string(r.seq) + ":";
  std::vector<bool> told(static_cast<size_t>(n), false);
  for (int q = 0; q < n; ++q) {
    if (told[size_t(q)]) continue;
    std::string ranks;
    int count = 0;
    for (int q2 = q; q2 < n; ++q2)
      if (!told[size_t(q2)] && sigs[size_t(q2)] == sigs[size_t(q)]) {
        told[size_t(q2)] = true;
        if (++count <= 16) ranks += (ranks.empty() ? "" : ", ") + std::to_string(q2);
      }
    out += std::string(q == 0 ? " " : "; ") + (count > 1 ? "ranks " : "rank ") + ranks + (count > 16 ? ", ..." : "") +
           " issued " + sigs[size_t(q)];
  }
  return out + " (this is rank " + std::to_string(r.st->rank) + ")";
}

// ---- the transport's functions ------------------------------------------------------------

fl_status_t start(void* state, const fl_comm_transport_op_t* op, void** out, char* msg, uint64_t size) {
  auto* st = static_cast<State*>(state);
  std::unique_ptr<Req> r;
  try {
    r = take_req(*st);
    r->st = st;
    r->seq = op->seq;
    r->skipped = (op->flags & FL_TRANSPORT_SKIPPED) != 0;
    r->signature = op->signature != nullptr ? op->signature : "";
    r->parts.assign(op->parts, op->parts + op->num_parts);
    if (r->skipped)  // never the caller's buffers: zeroed scratch of the same sizes
      for (fl_coll_part_t& p : r->parts) {
        size_t sb = 0, rb = 0;
        part_bytes(p, st->nranks, &sb, &rb);
        p.sendbuf = scratch(*r, sb);
        p.recvbuf = scratch(*r, rb);
      }
  } catch (const std::bad_alloc&) {
    put(msg, size, "out of memory");
    return FL_ERR_NO_MEMORY;
  }
  GateLock gate;
  if (finalized()) {
    put(msg, size, "MPI_Finalize was called: no collective can start");
    return FL_ERR_INVALID_ARGUMENT;
  }
  if ((st->check & FL_TRANSPORT_CHECK_OFF) == 0) {
    const int64_t h = int64_t(op->fingerprint & 0x7fffffffffffffffull);
    r->ctl_in[0] = h;
    r->ctl_in[1] = -h;
    r->ctl_in[2] = r->skipped ? int64_t(st->rank) : INT64_MAX;
    const int code = MPI_Iallreduce(r->ctl_in, r->ctl_out, 3, MPI_INT64_T, MPI_MIN, st->ctl, &r->ctl);
    if (code != MPI_SUCCESS) {
      put(msg, size, mpi_error(code, "MPI_Iallreduce (the check)"));
      return FL_ERR_INSTRUCTION_FAILED;
    }
  } else {
    r->ctl_done = true;
  }
  // Data now, unless strict: then test() issues it once the check agreed. (In sequence
  // order either way: starts come in sequence order.)
  if ((st->check & FL_TRANSPORT_CHECK_STRICT) == 0) {
    issue_data(*r);
    if ((st->check & FL_TRANSPORT_CHECK_OFF) == 0) {
      std::lock_guard<std::mutex> lk(st->mu);
      st->next_data_seq = r->seq + 1;
    }
  }
  *out = r.release();
  return FL_OK;
}

// Tests r's outstanding MPI requests; "" or an MPI failure.
std::string poll(Req& r) {
  int flag = 0;
  if (!r.ctl_done && r.ctl != MPI_REQUEST_NULL) {
    const int code = MPI_Test(&r.ctl, &flag, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) return mpi_error(code, "MPI_Test (the check)");
    r.ctl_done = flag != 0;
  }
  if (r.sig_started && !r.sig_done) {
    const int code = MPI_Testall(int(r.sig.size()), r.sig.data(), &flag, MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) return mpi_error(code, "MPI_Testall (the signatures)");
    r.sig_done = flag != 0;
  }
  // The data operations are completed only once the check agreed (a mismatched one may fail,
  // and its failure would reach MPI_COMM_WORLD's error handler: see State::abandoned_from). They
  // progress meanwhile all the same: MPI progresses every operation in any call.
  const bool checked = (r.st->check & FL_TRANSPORT_CHECK_OFF) == 0;
  const bool agreed = !checked || (r.ctl_done && r.ctl_out[0] == -r.ctl_out[1]);
  if (r.data_issued && !r.data_done && agreed) {
    r.statuses.resize(r.data.size());  // allocates on the first test only
    const int code = MPI_Testall(int(r.data.size()), r.data.data(), &flag, r.statuses.data());
    if (code == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& s : r.statuses)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) return mpi_error(s.MPI_ERROR, "a data operation");
    } else if (code != MPI_SUCCESS) {
      return mpi_error(code, "MPI_Testall");
    }
    r.data_done = flag != 0;
  }
  return "";
}

// Whether MPI still holds an active request of r: it may still write r's buffers (the
// check's ctl_out, the signature cells, scratch and staging), and progresses it on r's
// communicators.
bool in_use(const Req& r) {
  return (!r.ctl_done && r.ctl != MPI_REQUEST_NULL) || (r.sig_started && !r.sig_done) || (r.data_issued && !r.data_done);
}

// Called under the gate with MPI not finalized: tests the orphans' checks and signature
// messages (they complete once every rank issued theirs) and deletes the orphans MPI is done
// with. An orphan's data operations are never tested: they belong to a collective at or
// after a mismatch (State::abandoned_from), which MPI may never complete, or fail on
// MPI_COMM_WORLD's error handler.
void sweep_orphans(State& st) {
  std::lock_guard<std::mutex> lk(st.orphans_mu);
  auto& v = st.orphans;
  for (auto& o : v) {
    int flag = 0;
    if (!o->ctl_done && o->ctl != MPI_REQUEST_NULL)
      o->ctl_done = MPI_Test(&o->ctl, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag != 0;
    if (o->sig_started && !o->sig_done)
      o->sig_done = MPI_Testall(int(o->sig.size()), o->sig.data(), &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS || flag != 0;
  }
  v.erase(std::remove_if(v.begin(), v.end(), [](const std::unique_ptr<Req>& o) { return !in_use(*o); }), v.end());
  st.orphan_count.store(v.size(), std::memory_order_relaxed);
}

// The engine is done with r. Deleted unless MPI still holds one of its requests (a
// collective abandoned after a mismatch, or the mismatched one's data operations under
// `alongside`): then it is kept, with its buffers, until MPI is done with it (sweep_orphans),
// or for good. Deleting it wrote MPI's late results into freed memory, and freeing the
// communicators under it crashed Open MPI's progress in a later MPI call (measured: 8 of 40
// runs of mpi.mismatch segfaulted in mca_pml_ob1_isend under a later MPI_Allreduce).
void keep_or_delete(State& st, Req* r, bool mpi_gone) {
  if (mpi_gone) {
    delete r;
    return;
  }
  if (!in_use(*r)) {
    recycle(st, r);
    return;
  }
  std::lock_guard<std::mutex> lk(st.orphans_mu);
  try {
    st.orphans.emplace_back(r);
  } catch (const std::bad_alloc&) {  // r is left to MPI for good: leaked, never freed under it
  }
  st.orphan_count.store(st.orphans.size(), std::memory_order_relaxed);
}

fl_status_t test(void* state, void* request, int32_t* done, char* msg, uint64_t size) {
  auto* st = static_cast<State*>(state);
  auto* r = static_cast<Req*>(request);
  *done = 0;
  fl_status_t fail = FL_OK;
  std::string text;
  bool mpi_gone = false;
  {
    GateLock gate;
    mpi_gone = finalized();
    if (!mpi_gone && st->orphan_count.load(std::memory_order_relaxed) != 0) sweep_orphans(*st);
    if (mpi_gone) {  // nothing can be tested any more: forget it
      *done = 1;
      fail = FL_ERR_INSTRUCTION_FAILED;
      text = "MPI_Finalize was called while collective seq " + std::to_string(r->seq) + " was in flight";
    } else if (r->seq > st->abandoned_from.load(std::memory_order_relaxed)) {
      *done = 1;  // a mismatch broke the communicator: left to MPI (State::abandoned_from)
      fail = FL_ERR_CANCELLED;
      text = "the communicator's data operations were abandoned after a mismatch";
    } else {
      // Polled even after a failure: the requests are tested until done, then freed.
      if (std::string e = poll(*r); r->error.empty()) r->error = std::move(e);
      const bool checked = (st->check & FL_TRANSPORT_CHECK_OFF) == 0;
      const bool mismatch = checked && r->ctl_done && r->ctl_out[0] != -r->ctl_out[1];
      const int64_t skipped_by = checked && r->ctl_done ? r->ctl_out[2] : INT64_MAX;
      if (r->ctl_done && !r->data_issued && r->error.empty()) {
        strict_issue(*r, !mismatch && skipped_by == INT64_MAX, mismatch);
        // Tested at once: the peers may have issued theirs already (a small one then completes
        // in this call instead of the next round).
        if (r->data_issued && !r->data_done) r->error = poll(*r);
      }
      if (mismatch && !r->sig_started && r->error.empty()) {  // explain it: exchange the signatures
        const std::string err = exchange_signatures(*r);
        r->error = err.empty() ? poll(*r) : err;
      }
      bool all_done = r->ctl_done && (!r->sig_started || r->sig_done) && r->data_issued && r->data_done;
      if (mismatch && r->sig_done) {  // explained: its data operations are abandoned, and the others'
        uint64_t from = st->abandoned_from.load(std::memory_order_relaxed);
        while (r->seq < from && !st->abandoned_from.compare_exchange_weak(from, r->seq, std::memory_order_relaxed)) {
        }
        all_done = true;
      }
      // A mismatch is explained rather than an MPI error it caused (mismatched counts truncate).
      if (r->reported) {
      } else if (mismatch && r->sig_done) {
        fail = FL_ERR_INSTRUCTION_FAILED;
        text = mismatch_text(*r);
      } else if (!r->error.empty() && (!mismatch || !r->sig_started)) {
        fail = FL_ERR_INSTRUCTION_FAILED;
        text = r->error;
      } else if (skipped_by != INT64_MAX && !mismatch && all_done) {
        fail = FL_ERR_DEPENDENCY_FAILED;
        text = "rank " + std::to_string(skipped_by) +
               " skipped it (an input was poisoned, or it was cancelled): this output is not valid";
      }
      if (all_done) *done = 1;
    }
  }
  if (fail != FL_OK) {
    r->reported = true;
    put(msg, size, text);
  }
  if (*done != 0) {
    if (fail == FL_OK && !r->reported)
      for (const Req::Copy& c : r->after) std::memcpy(c.to, c.from, c.bytes);
    keep_or_delete(*st, r, mpi_gone);
  }
  return fail;
}

void abort_fn(void*, const char*) {
  // MPI cannot cancel a collective (MPI 3.1, 5.12): the requests stay outstanding and are
  // tested until done. Nothing to do here.
}

// What destroy cannot free while MPI still runs operations on it: kept reachable, for good.
struct Kept {
  std::mutex mu;
  std::vector<std::unique_ptr<State>> states;
};
Kept& kept() {
  static auto* k = new Kept();  // never destroyed: MPI may write the orphans' buffers until exit
  return *k;
}

void destroy(void* state) {
  auto* st = static_cast<State*>(state);
  {
    GateLock gate;
    if (!finalized()) {
      sweep_orphans(*st);
      if (st->orphan_count.load(std::memory_order_relaxed) != 0) {
        // Open MPI progresses a pending operation on a freed communicator and crashes: the
        // communicators and the orphans' buffers stay for the life of the process (a few
        // hundred bytes per collective left behind by a mismatch).
        std::lock_guard<std::mutex> lk(kept().mu);
        try {
          kept().states.emplace_back(st);
        } catch (const std::bad_alloc&) {  // leaked all the same
        }
        return;
      }
      MPI_Comm_free(&st->data);
      MPI_Comm_free(&st->ctl);
    }
  }
  delete st;
}

}  // namespace

fl_comm_transport_t make_transport(MPI_Comm data, MPI_Comm ctl, int rank, int nranks, uint64_t id, uint64_t check) {
  auto* st = new State();
  st->spare.reserve(kSpareReqs);  // recycle() never allocates
  st->data = data;
  st->ctl = ctl;
  st->rank = rank;
  st->nranks = nranks;
  st->check = check;
  int* ub = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(data, MPI_TAG_UB, &ub, &found) == MPI_SUCCESS && found && ub != nullptr) st->tag_ub = *ub;
  fl_comm_transport_t t{};
  t.struct_size = sizeof t;
  t.name = "mpi";
  t.id = id;
  t.state = st;
  t.start = &start;
  t.test = &test;
  t.abort = &abort_fn;
  t.destroy = &destroy;
  return t;
}

uint64_t check_mode() {
  const char* v = std::getenv("FLOWLANE_COMM_CHECK");
  if (v != nullptr && std::strcmp(v, "alongside") == 0) return 0;
  if (v != nullptr && std::strcmp(v, "off") == 0) return FL_TRANSPORT_CHECK_OFF;
  return FL_TRANSPORT_CHECK_STRICT;  // the default (and what the engine refuses: it says so)
}

}  // namespace flowlane::mpi
