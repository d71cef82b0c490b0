// The lane strand on the pool (engine/lane.hpp; core/engine/README.md, "Lanes as strands"):
// the MPSC queue, the run loop, going idle without losing a wake-up, running on the
// submitting thread.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>
#include <string>

#include "base/env.hpp"
#include "engine/engine.hpp"

namespace flowlane::core {

namespace {

// FLOWLANE_LANE_HANDOFF (default 1): a lane runner that resumes another lane takes it on
// itself (Lane::continue_here) and spins briefly before a device instruction blocks; 0
// hands every resumed lane to the pool at once and blocks at once, as before (for A/B
// measurements).
bool handoff_enabled() {
  static const bool on = env_count("FLOWLANE_LANE_HANDOFF", 1, 1) != 0;
  return on;
}
// How long a lane whose head device instruction waits for a predecessor on another lane
// (typically for its issue: a launch, a few microseconds) spins before it blocks, when this
// worker took on no other lane meanwhile: the other lane's runner may release it at once,
// and blocking costs a trip through the pool and often a wake-up.
constexpr int64_t kBlockSpinNs = 10'000;

// The lane this thread is running (Lane::run_batch) and the lane it took on to run next
// (continue_here). Worker threads only; lane tasks never nest (only a worker's top-level
// loop runs them).
FL_TLS thread_local Lane* t_running = nullptr;
FL_TLS thread_local Lane* t_next = nullptr;

// A lane runs at most this many instructions before it re-queues itself, so that one busy
// lane cannot starve the others on a small pool.
constexpr int kLaneBatch = 64;
// Pauses a lane runner waits for more work before going idle (a few hundred ns).
constexpr int kIdleSpins = 16;
// The lane must have the device backend track what it issued before it goes on with
// `next`: `next` is not an instruction of the same device stream (it may depend on their
// completion), or it may block on a predecessor (the lane is then left, maybe for a long
// time). Checked before the lane's unit is dropped: once it is, another worker may own
// the lane.
bool must_flush_before(const Lane* lane, const Instr* next) {
  if (lane->unflushed == nullptr) return false;
  // acquire is not needed: a stale value only makes the lane flush early.
  return next->stream != lane->unflushed || next->pending.load(std::memory_order_relaxed) != 1;
}
}  // namespace

// ---------------------------------------------------------------------------------------
// The lane queue: Vyukov's intrusive MPSC queue with a stub node. Producers are serialised
// by the lane's submit lock anyway; the consumer is whichever worker runs the lane task.

Lane::Lane() {
  task.run = &Lane::run_task;
  task.tag = sched::kLaneTag;  // run by a worker's top-level loop only, never by a waiter
  stub.lane_next.store(nullptr, std::memory_order_relaxed);
  tail.store(&stub, std::memory_order_relaxed);
  head = &stub;
}

void Lane::push(Instr* i) {
  // i->lane_next is null already: Engine::enqueue() clears it before recording, pop() before
  // pushing the stub.
  // seq_cst: with the seq_cst store of `scheduled` = 0 and the seq_cst load of `tail` in
  // maybe_nonempty(), either the runner going idle sees this item or schedule() sees the
  // lane idle (a store–load (Dekker) pattern, so both sides need seq_cst).
  Instr* prev = tail.exchange(i, std::memory_order_seq_cst);
  prev->lane_next.store(i, std::memory_order_release);  // pairs with acquire in pop()
}

Instr* Lane::pop() {
  Instr* h = head;
  Instr* next = h->lane_next.load(std::memory_order_acquire);  // pairs with release in push()
  if (h == &stub) {
    if (next == nullptr) return nullptr;
    head = next;
    h = next;
    next = next->lane_next.load(std::memory_order_acquire);  // pairs with release in push()
  }
  if (next != nullptr) {
    head = next;
    return h;
  }
  // Acquire pairs with the tail exchange in push().
  if (h != tail.load(std::memory_order_acquire)) return nullptr;  // a push is half done; retry later
  stub.lane_next.store(nullptr, std::memory_order_relaxed);  // the consumer's node: nobody links to it now
  push(&stub);
  next = h->lane_next.load(std::memory_order_acquire);  // pairs with release in push()
  if (next != nullptr) {
    head = next;
    return h;
  }
  return nullptr;
}

bool Lane::pushed_since(const Instr* h) const {
  // Only `tail` is read: the caller may no longer own the consumer side. An empty queue
  // has tail == head; any push since moves tail. seq_cst: see push().
  // Store-load pair: run_task() stores scheduled = 0 before this load; push() exchanges
  // tail before schedule() loads scheduled.
  return tail.load(std::memory_order_seq_cst) != h;
}

Instr* Lane::peek() const {
  // The first node not returned yet is head itself, or the one after the stub.
  // Acquire pairs with the release store of the link in push().
  return head == &stub ? stub.lane_next.load(std::memory_order_acquire) : head;
}

bool Lane::take_unit(Instr* i) {
  // Only the lane's unit left: every predecessor has dropped its unit (nobody else can
  // touch `pending` any more), so no RMW is needed. Acquire pairs with the release
  // fetch_subs of pending in release_successors() and Engine::enqueue(): the predecessors'
  // results are visible before i runs.
  if (i->pending.load(std::memory_order_acquire) == 1) return true;
  // A device instruction waiting for another lane (its predecessor's issue, usually): that
  // lane's runner may drop the unit within a launch. Unless this worker took on a lane
  // meanwhile (it runs that one instead), spin briefly rather than block.
  if (t_next == nullptr && !i->stream->is_host_executed() && handoff_enabled()) {
    const auto start = std::chrono::steady_clock::now();
    for (unsigned n = 1;; ++n) {
      cpu_relax();
      // Acquire, as above: pairs with the release fetch_subs of the other droppers.
      if (i->pending.load(std::memory_order_acquire) == 1) return true;
      if ((n & 63) == 0 && std::chrono::steady_clock::now() - start > std::chrono::nanoseconds(kBlockSpinNs)) break;
    }
  }
  // Drop the lane's unit. cur is set first: whoever drops the last unit re-submits this
  // lane task, and the resumed runner must find the instruction.
  cur = i;
  set_active(i, true);  // for diagnostics: blocked until proven otherwise
  // acq_rel: release publishes `cur` to the thread that drops the last unit; acquire
  // (when we drop it) makes every predecessor's results visible before running.
  // Pairs with the fetch_sub of pending in release_successors() and Engine::enqueue().
  return i->pending.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

bool Lane::give_up() {
  // Publish, then look again, so that a producer that saw the lane owned cannot leave its
  // instruction behind (see push()). Once `scheduled` is 0 another thread may own the lane,
  // so only the head captured before is compared.
  const Instr* h = head;
  // Store-load (Dekker) pair with push()/schedule(): we store scheduled, then load tail
  // in pushed_since(); a producer exchanges tail, then loads scheduled. Release also
  // hands the lane's state to the next owner (pairs with the exchanges below and in schedule()).
  scheduled.store(0, std::memory_order_seq_cst);
  if (!pushed_since(h)) return false;
  // Pairs with schedule()'s exchange (one of us owns the lane) and, acquire, with the
  // store of 0 above by whichever thread ran the lane since.
  return scheduled.exchange(1, std::memory_order_seq_cst) == 0;  // else re-scheduled by a producer
}

bool Lane::continue_here(Lane* lane) {
  Lane* self = t_running;
  if (self == nullptr || t_next != nullptr || self->engine != lane->engine || !handoff_enabled()) return false;
  t_next = lane;
  return true;
}

void Lane::hand_off_taken() {
  Lane* next = t_next;
  if (next == nullptr) return;
  t_next = nullptr;
  next->engine->pool().submit(&next->task);
}

void Lane::run_resumed_here() {
  // The lane blocked on `cur` after flushing its device work, and whoever dropped the last
  // unit owns it now: the same state run_task() resumes from.
  Instr* i = cur;
  cur = nullptr;
  set_active(i, false);
  engine->executor().execute_host(i);  // i may be recycled from here on
  if (peek() != nullptr || give_up()) engine->pool().submit(&task);
}

void Lane::run_owned(Instr* i) {
  // The lane was idle, so nothing is unflushed on the device backend, and i, never queued,
  // holds only the lane's unit of pending: it runs now.
  set_active(i, false);
  engine->executor().execute_host(i);  // i may be recycled from here on
  // Hand the lane on: to the pool if something was queued meanwhile, else idle.
  if (peek() != nullptr || give_up()) engine->pool().submit(&task);
}

bool Lane::empty_owned() const {
  // Empty is head == tail == stub (pop() re-pushes the stub behind the last node it
  // returns). Relaxed: the owner's view of head and, under the submit lock, of tail.
  return head == &stub && tail.load(std::memory_order_relaxed) == &stub;
}

bool Lane::try_claim() {
  // Store-load (Dekker) pair with the runner's seq_cst store of 0 and its tail load (see
  // push()); the exchange makes one claimant the owner.
  return scheduled.load(std::memory_order_seq_cst) == 0 && scheduled.exchange(1, std::memory_order_seq_cst) == 0;
}

void Lane::schedule() {
  if (try_claim()) engine->pool().submit(&task);
}

void Lane::run_task(sched::Task* t) {
  Lane* lane = reinterpret_cast<Lane*>(reinterpret_cast<char*>(t) - offsetof(Lane, task));
  // A lane taken on meanwhile (continue_here) runs next on this worker: no hand-off.
  while (lane != nullptr) lane = lane->run_batch();
}

Lane* Lane::run_batch() {
  Lane* lane = this;
  Engine* engine = lane->engine;
  Executor& run = engine->executor();
  t_running = lane;
  // What this turn ends with: the lane taken on meanwhile, which this thread runs next.
  auto finish = [] {
    t_running = nullptr;
    Lane* next = t_next;
    t_next = nullptr;
    return next;
  };
  for (int n = 0; n < kLaneBatch; ++n) {
    Instr* i = lane->cur;
    if (i == nullptr) {
      i = lane->pop();
      if (i == nullptr) {
        run.flush_device(lane);  // nothing queued behind them: completion can be tracked now
        // Briefly wait for the submitter before giving the lane up: when execution is
        // faster than submission, giving up after every instruction costs a trip through
        // the pool's injection queue per instruction.
        // It watches the link a push writes into the queue's last node (head's lane_next),
        // not `tail`: the submitter's line (its lock, `tail`, `scheduled`) is left alone
        // while it submits.
        for (int spin = 0; spin < kIdleSpins && i == nullptr; ++spin) {
          cpu_relax();
          // Acquire: pairs with the release store of the link in push().
          if (lane->head->lane_next.load(std::memory_order_acquire) != nullptr) i = lane->pop();
        }
      }
      if (i != nullptr) {
        if (must_flush_before(lane, i)) run.flush_device(lane);
        if (!lane->take_unit(i)) return finish();  // blocked: its last predecessor resumes the lane
      } else {
        if (Observer* ob = engine->observer()) ob->on_lane_idle(lane->id);
        if (!lane->give_up()) return finish();
        continue;  // a producer pushed meanwhile and we took the lane back
      }
    }
    // This lane goes on: a lane taken on meanwhile must not wait for it.
    if (Lane* other = t_next) {
      t_next = nullptr;
      engine->pool().submit(&other->task);
    }
    lane->cur = nullptr;
    lane->set_active(i, false);  // running
    if (i->stream->is_host_executed())
      run.execute_host(i);
    else
      run.execute_async(i);  // issues only; the device backend completes it
  }
  run.flush_device(lane);  // the lane may wait in the injection queue for a while
  engine->pool().yield(&lane->task);  // behind other waiting work; the lane stays owned
  return finish();
}

void Lane::set_active(Instr* i, bool blocked) {
  std::lock_guard<SpinLock> lock(diag_lock);
  active = i;
  active_blocked = blocked;
}

void Lane::clear_active(Instr* i) {
  std::lock_guard<SpinLock> lock(diag_lock);
  if (active == i) {
    active = nullptr;
    active_blocked = false;
  }
}

}  // namespace flowlane::core
