// Communicators over a transport (fl_comm_create_transport): creation, submission, the
// start of a collective on its lane, abort, timeout and diagnostics. The progress thread
// that tests the requests and delivers outcomes is progress.cpp; what both share and the
// protocol's outline are in comm/transport.hpp (comm/README.md, "Transports").
#include "comm/transport.hpp"

#include <cstring>
#include <set>

namespace flowlane::comm {

namespace transport_internal {

namespace {

// The transport's name, kept for the life of the process (Communicator::backend_name is a
// plain pointer that dumps read at any time).
const char* intern_name(const char* name) {
  static std::mutex mu;
  static auto* names = new std::set<std::string>();  // never destroyed: dumps may run at exit
  std::lock_guard<std::mutex> lk(mu);
  return names->insert(name).first->c_str();
}

// A collective instruction's state (its user_data), deleted by its cleanup.
struct Work {
  std::shared_ptr<TransportComm> comm;
  uint64_t seq = 0;
  std::vector<fl_coll_part_t> parts;
  std::string signature;
  uint64_t fingerprint = 0;
};

void work_cleanup(void* ud) { delete static_cast<Work*>(ud); }

// The lane runner reached collective w->seq (SubmitArgs::async_start): start it through
// the transport, or — the communicator broke or was aborted — hand its failure over. Either
// way the progress thread delivers its outcome, in sequence order.
void start(core::Instr* i, void* ud, bool skipped) noexcept {
  auto* w = static_cast<Work*>(ud);
  TransportComm& c = *w->comm;
  Request r;
  r.instr = i;
  r.seq = w->seq;
  r.skipped = skipped;
  bool go = true;
  try {
    r.comm = w->comm;
    std::lock_guard<std::mutex> lk(c.mu);
    c.started = w->seq;
    c.recorder.issued(w->seq, c.since_created_ns());
    if (c.state != TransportComm::State::kActive) {
      go = false;
      r.status = FL_ERR_CANCELLED;
      r.msg = "not started: the communicator " + std::string(c.state == TransportComm::State::kAborted ? "was aborted"
                                                                                                         : "is broken") +
              " (" + c.reason + ")";
    } else {
      ++c.outstanding;
    }
  } catch (...) {  // out of memory: the status says it all
    go = false;
    r.status = FL_ERR_NO_MEMORY;
  }
  if (go) {
    fl_comm_transport_op_t op{};
    op.struct_size = sizeof op;
    op.seq = w->seq;
    op.parts = w->parts.data();
    op.num_parts = w->parts.size();
    op.fingerprint = w->fingerprint;
    op.signature = w->signature.c_str();
    op.flags = (skipped ? FL_TRANSPORT_SKIPPED : 0) | c.check;
    char msg[1024] = {};
    void* req = nullptr;
    const fl_status_t st = c.t.start(c.t.state, &op, &req, msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
    if (st == FL_OK) {
      r.req = req;
    } else {
      r.status = st;
      r.msg = std::string("the transport could not start it: ") + msg;
      std::lock_guard<std::mutex> lk(c.mu);
      --c.outstanding;
    }
  }
  progress_add(std::move(r));
}

}  // namespace

std::string TransportComm::name() const {
  return std::string(backend_name) + " communicator " + hex(handle.load(std::memory_order_relaxed)) + " (rank " +
         std::to_string(rank) + " of " + std::to_string(nranks) + ", lane " + std::to_string(lane) + ")";
}

TransportComm::~TransportComm() {
  if (t.destroy != nullptr) t.destroy(t.state);
}

fl_instr_id TransportComm::submit(core::Stream* s, core::Instr* i, const fl_collective_instr_t& in) {
  static const std::string fn = "fl_submit_collective";  // static: no allocation per submit
  auto w = std::make_unique<Work>();
  try {
    if (s->engine != engine) fail(FL_ERR_INVALID_ARGUMENT, fn + ": the stream belongs to another engine than " + name());
    if (s->lane->id != lane || s->kind != FL_STREAM_COLLECTIVE || s->device.type != FL_DEVICE_CPU)
      fail(FL_ERR_INVALID_ARGUMENT,
           fn + ": " + name() + " issues its collectives on lane " + std::to_string(lane) +
               "'s host collective stream ({FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE), but the stream given is " +
               s->describe() + " (one stream, one order per communicator)");
    w->parts = check_parts(in, rank, nranks, /*inline_ok=*/true);
    w->signature = signature(w->parts);
    w->fingerprint = fingerprint(w->parts);
  } catch (...) {
    engine->discard(i);
    throw;
  }
  w->comm = std::static_pointer_cast<TransportComm>(shared_from_this());

  std::lock_guard<std::mutex> ordered(submit_mu);  // seq order == stream order
  {
    std::lock_guard<std::mutex> lk(mu);
    w->seq = ++queued;
    recorder.queued(w->seq, w->parts, in.name, since_created_ns());
  }
  core::SubmitArgs a;
  a.async_start = &start;
  a.user_data = w.get();
  a.cleanup = &work_cleanup;
  a.name = in.name;
  a.nonblocking = (in.flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.run_inline = (in.flags & FL_SUBMIT_INLINE) != 0;  // start() on the caller when the lane is idle
  a.api = "fl_submit_collective";
  const uint64_t seq = w->seq;
  Work* work = w.release();  // the instruction's from here (work_cleanup deletes it, maybe before we return)
  fl_instr_id id;
  try {
    id = engine->submit(s, i, a);
  } catch (...) {  // not queued (its cleanup never runs): the sequence number is given back
    {
      std::lock_guard<std::mutex> lk(mu);
      --queued;
      recorder.forget(seq);
    }
    delete work;
    throw;
  }
  std::lock_guard<std::mutex> lk(mu);
  recorder.set_instr(seq, id);
  return id;
}

void TransportComm::abort(const std::string& why, bool) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (state == State::kAborted) return;
    if (state == State::kActive) reason = why;  // a broken one keeps the reason it broke for
    state = State::kAborted;
  }
  stop_requested.store(true, std::memory_order_release);  // pairs with the progress thread's acquire load
  progress_wake();
}

void TransportComm::time_out(uint64_t seq, const std::string& detail) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (state != State::kActive || seq <= delivered) return;  // finished meanwhile, or already broken
    state = State::kBroken;
    broken_status = FL_ERR_TIMEOUT;
    timed_out_seq = seq;
    reason = "collective seq " + std::to_string(seq) + " timed out: " + detail;
  }
  stop_requested.store(true, std::memory_order_release);  // pairs with the progress thread's acquire load
  progress_wake();
}

const char* TransportComm::state_word(std::string* why) {
  std::lock_guard<std::mutex> lk(mu);
  if (state == State::kActive) return "active";
  *why = reason;
  return state == State::kBroken ? "broken" : "aborted";
}

void TransportComm::dump(std::string& out) {
  std::lock_guard<std::mutex> lk(mu);
  const char* st = state == State::kActive ? "active" : state == State::kBroken ? "BROKEN" : "ABORTED";
  out += "  " + name() + ": " + st + (reason.empty() ? "" : " (" + reason + ")") + "\n";
  out += "    sequence numbers: queued " + std::to_string(queued) + ", started " + std::to_string(started) +
         ", finished " + std::to_string(delivered) + "; requests outstanding " + std::to_string(outstanding) + "\n";
  recorder.dump_text(out);
}

}  // namespace transport_internal

using transport_internal::TransportComm;

Communicator* create_transport(Engine* e, const fl_comm_desc_t& d, const fl_comm_transport_t& t, bool* owned) {
  check_desc(*e, d);
  const Settings settings = read_settings();
  const char* name = transport_internal::intern_name(t.name);
  // Waits on collective streams drive the progress.
  static constexpr core::AsyncHelper kHelper{&transport_internal::progress_help, &transport_internal::progress_leave};
  core::set_async_helper(&kHelper);
  auto c = std::make_shared<TransportComm>(e, d, t, name, settings);  // its destructor calls t.destroy
  *owned = false;
  return enroll(std::move(c), settings);
}

}  // namespace flowlane::comm
