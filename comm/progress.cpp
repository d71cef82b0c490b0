// The progress thread of transport communicators (comm/transport.hpp; comm/README.md,
// "Transports"): one per process, started with the first request and never stopped (it
// parks when nothing is outstanding). Each round it
//
//   1. takes the requests the lane runners started (Request, through `incoming`);
//   2. tests every outstanding one (fl_comm_transport_t::test), keeping the first failure;
//   3. delivers outcomes in sequence order per communicator: a request whose test finished
//      or failed, or any in-flight one of a communicator that broke or was aborted (the
//      timed-out one fails with FL_ERR_TIMEOUT, the others with FL_ERR_CANCELLED). Delivery
//      writes the flight recorder and finishes the instruction (Executor::finish_async),
//      which completes it in its stream's order;
//   4. forgets requests that are delivered and done; a delivered one not done (its
//      transport still holds it: MPI cannot cancel a collective) is tested on.
//
// Back-off: after a round that changed something it polls again at once for kSpin, then
// sleeps kSleepMin doubling to kSleepMax between rounds while outcomes are awaited (only
// kZombieSleep when what is left has been delivered already), and parks on a futex when
// nothing is outstanding. Its sleeps are futex waits on `epoch`, so a new request or a state
// change (progress_add, progress_wake) cuts them short.
//
// The wake-up protocol (a store-load pair, both sides seq_cst): a waker publishes its
// request (the incoming count, under `mu`), then loads `sleeping`; the thread stores
// `sleeping`, then loads the incoming count. Either the thread sees the request, or the
// waker sees it sleeping and bumps `epoch` and wakes it (the futex wait returns at once if
// `epoch` moved since the thread read it, which it does before the store).
#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>

#include "base/cpu.hpp"
#include "comm/transport.hpp"

namespace flowlane::comm::transport_internal {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr int64_t kSleepMinNs = 10'000;
constexpr int64_t kSleepMaxNs = 200'000;
constexpr int64_t kZombieSleepNs = 10'000'000;

struct CommQueue {
  std::shared_ptr<TransportComm> comm;
  std::deque<Request> reqs;  // in sequence order
};

struct Progress {
  std::mutex mu;
  std::vector<Request> incoming;  // under mu
  bool running = false;           // under mu
  std::atomic<uint64_t> incoming_count{0};
  std::atomic<bool> sleeping{false};
  std::atomic<uint32_t> epoch{0};
};

Progress& progress() {
  static auto* p = new Progress();  // never destroyed: the thread outlives statics
  return *p;
}

void wake(Progress& p) {
  // seq_cst: the load side of the store-load pair described at the top.
  if (p.sleeping.load(std::memory_order_seq_cst)) {
    p.epoch.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&p.epoch, 1);
  }
}

// Tests q's outstanding requests; true if one finished or failed.
bool test_all(CommQueue& q) {
  bool moved = false;
  const fl_comm_transport_t& t = q.comm->t;
  for (Request& r : q.reqs) {
    if (r.req == nullptr) continue;
    int32_t done = 0;
    char msg[1024] = {};
    const fl_status_t st = t.test(t.state, r.req, &done, msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
    if (st != FL_OK && r.status == FL_OK) {
      r.status = st;
      r.msg = msg;
      moved = true;
    }
    if (done != 0) {
      r.req = nullptr;
      moved = true;
      std::lock_guard<std::mutex> lk(q.comm->mu);
      --q.comm->outstanding;
    }
  }
  return moved;
}

// A failure of request r that breaks the communicator (any but a peer's skip).
void break_on_failure(TransportComm& c, const Request& r) {
  std::lock_guard<std::mutex> lk(c.mu);
  if (c.state != TransportComm::State::kActive) return;
  c.state = TransportComm::State::kBroken;
  c.broken_status = r.status;
  c.reason = "collective seq " + std::to_string(r.seq) + " failed: " + r.msg;
  c.stop_requested.store(true, std::memory_order_release);  // pairs with the acquire load in deliver_all
}

// Delivers r's outcome (its record, its instruction's finish). Called in sequence order.
void deliver(TransportComm& c, Request& r) {
  fl_status_t st = r.status;
  std::string why = r.msg;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (st == FL_OK && r.req != nullptr) {  // failed early: the communicator broke or was aborted
      st = r.seq == c.timed_out_seq ? FL_ERR_TIMEOUT : FL_ERR_CANCELLED;
      why = st == FL_ERR_TIMEOUT ? c.reason
                                 : "the communicator " +
                                       std::string(c.state == TransportComm::State::kAborted ? "was aborted" : "broke") +
                                       " while it was in flight (" + c.reason +
                                       "); its request stays outstanding, its buffers in use, until its peers "
                                       "complete it or the process exits";
    }
    if (st == FL_ERR_DEPENDENCY_FAILED) st = FL_ERR_INSTRUCTION_FAILED;  // a peer skipped: this output is not valid
    const CollState cs = r.skipped ? CollState::kSkipped : st == FL_OK ? CollState::kCompleted : CollState::kFailed;
    c.recorder.finished(r.seq, cs, r.skipped ? FL_ERR_DEPENDENCY_FAILED : st, c.since_created_ns());
    c.delivered = r.seq;
  }
  std::string detail;
  if (st != FL_OK && !r.skipped) {
    CollRecord rec;
    const std::string sig = c.recorder.read(r.seq, rec) ? record_signature(rec) : "";
    detail = "collective seq " + std::to_string(r.seq) + " " + sig + " on " + c.name() + " failed: " + why;
  }
  core::Instr* i = r.instr;
  r.instr = nullptr;
  r.delivered = true;
  i->engine->executor().finish_async(i, st, detail);
}

// Delivers what can be delivered, in order; true if anything was.
bool deliver_all(CommQueue& q) {
  TransportComm& c = *q.comm;
  // Acquire pairs with the release stores where the state leaves kActive.
  const bool stopping = c.stop_requested.load(std::memory_order_acquire);
  bool moved = false;
  bool calls_abort = false;
  for (Request& r : q.reqs) {
    if (r.delivered) continue;
    if (r.status != FL_OK && r.status != FL_ERR_DEPENDENCY_FAILED) break_on_failure(c, r);
    // Acquire pairs with the release stores where the state leaves kActive.
    const bool ready = r.req == nullptr || r.status != FL_OK || stopping ||
                       c.stop_requested.load(std::memory_order_acquire);
    if (!ready) break;  // later ones wait for it (outcomes in sequence order)
    if (r.req != nullptr) calls_abort = true;  // delivered while the transport still holds it
    deliver(c, r);
    moved = true;
  }
  if (calls_abort && c.t.abort != nullptr) {
    std::string why;
    {
      std::lock_guard<std::mutex> lk(c.mu);
      if (!c.transport_aborted) {
        c.transport_aborted = true;
        why = c.reason.empty() ? "collectives failed while in flight" : c.reason;
      }
    }
    if (!why.empty()) c.t.abort(c.t.state, why.c_str());
  }
  while (!q.reqs.empty() && q.reqs.front().delivered && q.reqs.front().req == nullptr) q.reqs.pop_front();
  return moved;
}

void run() {
  Progress& p = progress();
  std::vector<CommQueue> queues;
  std::vector<Request> fresh;
  auto last_move = Clock::now();
  int64_t sleep_ns = kSleepMinNs;
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(p.mu);
      fresh.swap(p.incoming);
      p.incoming_count.store(0, std::memory_order_relaxed);  // under mu: adders count under it too
    }
    bool moved = !fresh.empty();
    for (Request& r : fresh) {
      auto it = std::find_if(queues.begin(), queues.end(), [&](const CommQueue& q) { return q.comm == r.comm; });
      if (it == queues.end()) it = queues.insert(queues.end(), CommQueue{r.comm, {}});
      it->reqs.push_back(std::move(r));
    }
    fresh.clear();
    bool awaited = false;  // an outcome is still to be delivered
    for (CommQueue& q : queues) {
      moved |= test_all(q);
      moved |= deliver_all(q);
      for (const Request& r : q.reqs) awaited |= !r.delivered;
    }
    std::erase_if(queues, [](const CommQueue& q) { return q.reqs.empty(); });  // may drop a communicator's last reference
    const auto now = Clock::now();
    if (moved) {
      last_move = now;
      sleep_ns = kSleepMinNs;
    }
    if (now - last_move < kSpin) {
      cpu_relax();
      continue;
    }
    // Sleep (or park): announce it, then look for new work once more (the pair at the top).
    const uint32_t e = p.epoch.load(std::memory_order_seq_cst);
    p.sleeping.store(true, std::memory_order_seq_cst);
    if (p.incoming_count.load(std::memory_order_seq_cst) == 0) {
      if (queues.empty())
        futex_wait(&p.epoch, e);
      else
        futex_wait_for(&p.epoch, e, awaited ? sleep_ns : kZombieSleepNs);
    }
    p.sleeping.store(false, std::memory_order_relaxed);
    if (awaited) sleep_ns = std::min(sleep_ns * 2, kSleepMaxNs);
  }
}

}  // namespace

void progress_add(Request r) {
  Progress& p = progress();
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.incoming.push_back(std::move(r));
    p.incoming_count.fetch_add(1, std::memory_order_seq_cst);  // the store side for wake()'s pair
    if (!p.running) {
      p.running = true;
      std::thread(run).detach();  // never stops: it parks when nothing is outstanding
    }
  }
  wake(p);
}

void progress_wake() {
  Progress& p = progress();
  // seq_cst: as in wake(), the store-load pair at the top (the thread's futex wait returns
  // at once if epoch moved since its read).
  p.epoch.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&p.epoch, 1);
}

}  // namespace flowlane::comm::transport_internal
