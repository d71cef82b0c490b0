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
// A round is taken under a try-lock (`driving`), by the progress thread or by a program
// thread waiting on a collective stream (progress_help, through the core's async helper, as
// MPI_Wait drives MPI's progress): no thread blocks on it, a round that finds it taken is
// skipped. A round collects its outcomes and hands them to their instructions
// (Executor::finish_async) after it let go of the lock: finishing runs completion work
// (release callbacks among it), and the async queue of each stream completes out-of-order
// finishes in stream order.
//
// Back-off: after a round that changed something (by any driver) it polls again at once for
// kSpin; while outcomes are awaited it polls on, yielding the core between rounds, up to
// kBusy after that change (MPI's non-blocking collectives advance only while someone tests
// them: a 4 MiB all-reduce is a millisecond of rounds); then it sleeps kSleepMin doubling to
// kSleepMax between rounds while outcomes are awaited (only kZombieSleep when what is left
// has been delivered already), and parks on a futex when nothing is outstanding. While a
// program thread drives the rounds (one within kStandBack), the thread stands back: it naps
// instead of spinning, so that on a machine with few cores the waiter and the peers' threads
// get them, and a new request does not wake a napping thread (the driver tests it; measured,
// 2 ranks on 2 cores: each wake-up was a context switch taken from a waiter). A waiting
// thread that stops polling (progress_leave: its wait returns, or it goes to sleep) wakes a
// napping thread if outcomes are still awaited. Its sleeps are futex waits on `epoch`, so a
// new request (unless it naps) or a state change (progress_add, progress_wake) cuts them short.
//
// The leave pair (seq_cst both sides): a leaver with outcomes awaited increments
// `handbacks`, then loads `sleeping`; the thread stores kNapping, then loads `handbacks`.
// Either the thread sees the hand-back and does not nap (nor stands back any more, unless
// another waiter's rounds go on), or the leaver sees the nap and ends it.
//
// The wake-up protocol (a store-load pair, both sides seq_cst): a waker publishes its
// request (the counts `incoming_count` and `live`, under `mu`), then loads `sleeping`; the
// thread stores `sleeping`, then loads the counts. Either the thread sees the request, or
// the waker sees it sleeping and bumps `epoch` and wakes it (the futex wait returns at once
// if `epoch` moved since the thread read it, which it does before the store). The thread
// parks only when `live` — requests added and not yet forgotten, by whichever thread drove
// the round — is zero, so a request a helper took from `incoming` is never left unwatched.
#include <algorithm>
#include <chrono>
#include <thread>

#include "base/cpu.hpp"
#include "comm/transport.hpp"

namespace flowlane::comm::transport_internal {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kSpinNs = 50'000;
constexpr int64_t kSleepMinNs = 10'000;
constexpr int64_t kSleepMaxNs = 200'000;
constexpr int64_t kZombieSleepNs = 10'000'000;
constexpr int64_t kStandBackNs = 100'000;
constexpr int64_t kBusyNs = 2'000'000;
constexpr uint32_t kAwake = 0, kNapping = 1, kAsleep = 2;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

struct CommQueue {
  std::shared_ptr<TransportComm> comm;
  std::vector<Request> reqs;  // in sequence order (few: a vector, cheaper to make than a deque)
};

// An outcome to hand to its instruction once the round let go of the lock.
struct Outcome {
  core::Instr* instr;
  fl_status_t status;
  std::string detail;
};

struct Progress {
  std::mutex mu;
  std::vector<Request> incoming;  // under mu
  bool running = false;           // under mu
  std::atomic<uint64_t> incoming_count{0};
  // Requests added and not yet forgotten (in `incoming` or a queue), and those of them whose
  // outcome is not delivered: what the thread's sleep decides on (the protocol at the top).
  std::atomic<uint64_t> live{0};
  std::atomic<uint64_t> awaited{0};
  std::atomic<uint32_t> sleeping{kAwake};
  std::atomic<uint32_t> epoch{0};

  // The round's try-lock: exchange(acquire) takes it, store(release) lets go; the pair hands
  // the queues from one driver to the next.
  std::atomic<bool> driving{false};
  std::vector<CommQueue> queues;  // under driving
  std::vector<Request> fresh;     // under driving (scratch)
  std::vector<Request> spare_reqs;  // under driving: an empty vector with capacity, for a new queue
  // Rounds program threads drove (a count: cheaper than a clock read per poll), and when a
  // round last moved (now_ns): hints for the thread's back-off only.
  std::atomic<uint64_t> helps{0};
  std::atomic<int64_t> moved_at{0};
  // Waits that stopped polling with outcomes still awaited (progress_leave): with
  // `sleeping`, the leave pair at the top.
  std::atomic<uint64_t> handbacks{0};
};

Progress& progress() {
  static auto* p = new Progress();  // never destroyed: the thread outlives statics
  return *p;
}

void wake(Progress& p) {
  // seq_cst: the load side of the store-load pair described at the top.
  if (p.sleeping.load(std::memory_order_seq_cst) == kAsleep) {
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

// Delivers r's outcome: writes its record and collects its instruction's finish into `out`.
// Called in sequence order.
void deliver(TransportComm& c, Request& r, std::vector<Outcome>& out) {
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
  out.push_back(Outcome{r.instr, st, std::move(detail)});
  r.instr = nullptr;
  r.delivered = true;
  progress().awaited.fetch_sub(1, std::memory_order_relaxed);  // a hint for the sleep: see the top
}

// Delivers what can be delivered, in order, into `out`; true if anything was.
bool deliver_all(CommQueue& q, std::vector<Outcome>& out) {
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
    deliver(c, r, out);
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
  size_t done = 0;
  while (done < q.reqs.size() && q.reqs[done].delivered && q.reqs[done].req == nullptr) ++done;
  if (done != 0) {
    q.reqs.erase(q.reqs.begin(), q.reqs.begin() + long(done));
    // Relaxed: a decrement only lets the thread park sooner; the increments and the park's
    // load are the store-load pair at the top.
    progress().live.fetch_sub(done, std::memory_order_relaxed);
  }
  return moved;
}

// One round (the steps at the top) if the lock is free: *took says whether it was. True when
// anything moved. The outcomes are handed over after the lock is let go.
bool drive(Progress& p, bool* took) {
  // acquire: pairs with the release store below, by the previous driver.
  *took = !p.driving.exchange(true, std::memory_order_acquire);
  if (!*took) return false;
  // The round's outcomes: this thread's (they are finished after the lock is let go, while
  // another thread may drive), kept with their capacity from round to round.
  static thread_local std::vector<Outcome> out;
  bool moved;
  // Acquire: pairs with the seq_cst increment in progress_add, made under mu after the
  // request was added. A request counted just after this load is taken next round.
  if (p.incoming_count.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lk(p.mu);
    p.fresh.swap(p.incoming);
    p.incoming_count.store(0, std::memory_order_relaxed);  // under mu: adders count under it too
  }
  moved = !p.fresh.empty();
  for (Request& r : p.fresh) {
    auto it = std::find_if(p.queues.begin(), p.queues.end(), [&](const CommQueue& q) { return q.comm == r.comm; });
    if (it == p.queues.end()) {
      it = p.queues.insert(p.queues.end(), CommQueue{r.comm, {}});
      it->reqs.swap(p.spare_reqs);  // a dropped queue's capacity: no allocation per collective
    }
    it->reqs.push_back(std::move(r));
  }
  p.fresh.clear();
  for (CommQueue& q : p.queues) {
    moved |= test_all(q);
    moved |= deliver_all(q, out);
  }
  for (auto it = p.queues.begin(); it != p.queues.end();) {
    if (!it->reqs.empty()) {
      ++it;
      continue;
    }
    if (it->reqs.capacity() > p.spare_reqs.capacity()) p.spare_reqs.swap(it->reqs);
    it = p.queues.erase(it);  // may drop a communicator's last reference
  }
  if (moved) p.moved_at.store(now_ns(), std::memory_order_relaxed);  // a hint: see run()
  p.driving.store(false, std::memory_order_release);  // pairs with the acquire exchange above
  // Taken out first: a finish may run completion work that waits on a collective stream,
  // whose help drives a round on this thread (into `out` again).
  std::vector<Outcome> mine;
  mine.swap(out);
  for (Outcome& o : mine) o.instr->engine->executor().finish_async(o.instr, o.status, o.detail);
  mine.clear();
  out.swap(mine);  // the capacity back (a nested round's outcomes were finished by it)
  return moved;
}

void run() {
  Progress& p = progress();
  int64_t sleep_ns = kSleepMinNs;
  uint64_t helps_seen = 0, handbacks_seen = 0;
  int64_t helps_changed_at = 0;
  for (;;) {
    bool took = false;
    if (drive(p, &took)) sleep_ns = kSleepMinNs;
    // Relaxed loads: hints; a stale value costs one round of spinning or one nap.
    const int64_t now = now_ns();
    const int64_t still = now - p.moved_at.load(std::memory_order_relaxed);
    if (const uint64_t h = p.helps.load(std::memory_order_relaxed); h != helps_seen) {
      helps_seen = h;
      helps_changed_at = now;
    }
    if (const uint64_t b = p.handbacks.load(std::memory_order_relaxed); b != handbacks_seen) {
      // A waiter left its rounds to this thread: it takes them (unless another waiter's
      // rounds go on, which `helps` then shows).
      handbacks_seen = b;
      helps_seen = p.helps.load(std::memory_order_relaxed);
      helps_changed_at = now - kStandBackNs;
    }
    const bool helped = !took || now - helps_changed_at < kStandBackNs;
    if (!helped && still < kSpinNs) {
      cpu_relax();
      continue;
    }
    if (!helped && still < kBusyNs && p.awaited.load(std::memory_order_relaxed) != 0) {
      std::this_thread::yield();  // a collective in flight: poll on, leaving the core to whoever is runnable
      continue;
    }
    // Sleep (or park): announce it, then look for new work once more (the pair at the top).
    const uint32_t e = p.epoch.load(std::memory_order_seq_cst);
    p.sleeping.store(kAsleep, std::memory_order_seq_cst);
    if (p.incoming_count.load(std::memory_order_seq_cst) == 0) {
      // seq_cst: the load side of the store-load pair at the top (with progress_add's increments).
      const bool awaited = p.awaited.load(std::memory_order_seq_cst) != 0;
      if (p.live.load(std::memory_order_seq_cst) == 0) {  // seq_cst: the same pair
        futex_wait(&p.epoch, e);
      } else if (helped) {
        // A nap while a program thread drives: a new request does not wake it (the driver
        // tests it), a waiter that stops with outcomes awaited does (the leave pair: the
        // seq_cst store, then the load of `handbacks`).
        p.sleeping.store(kNapping, std::memory_order_seq_cst);
        if (p.handbacks.load(std::memory_order_seq_cst) == handbacks_seen) futex_wait_for(&p.epoch, e, kStandBackNs);
      } else {
        futex_wait_for(&p.epoch, e, awaited ? sleep_ns : kZombieSleepNs);
        if (awaited) sleep_ns = std::min(sleep_ns * 2, kSleepMaxNs);
      }
    }
    p.sleeping.store(kAwake, std::memory_order_relaxed);
  }
}

}  // namespace

void progress_add(Request r) {
  Progress& p = progress();
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.incoming.push_back(std::move(r));
    // seq_cst: the store side of the store-load pair at the top (the thread's loads after
    // its store of `sleeping`).
    p.awaited.fetch_add(1, std::memory_order_seq_cst);
    p.live.fetch_add(1, std::memory_order_seq_cst);  // seq_cst: the same pair
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

bool progress_help() {
  Progress& p = progress();
  p.helps.fetch_add(1, std::memory_order_relaxed);  // a hint: see run()
  bool took = false;
  return drive(p, &took);
}

void progress_leave() {
  Progress& p = progress();
  // Nothing awaited (the usual end of a wait: what it waited for was delivered): the thread's
  // nap, if any, runs its course, and a new request is tested by whoever waits for it next.
  if (p.awaited.load(std::memory_order_relaxed) == 0) return;
  // seq_cst: the store side of the leave pair at the top (the thread's load of `handbacks`
  // after its store of kNapping).
  p.handbacks.fetch_add(1, std::memory_order_seq_cst);
  if (p.sleeping.load(std::memory_order_seq_cst) == kNapping) {
    // seq_cst: the store side of wake()'s store-load pair (the futex wait returns at once).
    p.epoch.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&p.epoch, 1);
  }
}

}  // namespace flowlane::comm::transport_internal
