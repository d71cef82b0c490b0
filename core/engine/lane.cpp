// Lanes as strands on the pool, and the life of an instruction once it reaches the head
// of its lane: poison check, callback, cleanup, completion, release of successors.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>
#include <string>

#include "engine/engine.hpp"

namespace flowlane::core {

namespace {

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

void Lane::run_owned(Instr* i) {
  // The lane was idle, so nothing is unflushed on the device backend, and i, never queued,
  // holds only the lane's unit of pending: it runs now.
  set_active(i, false);
  engine->execute_host(i);  // i may be recycled from here on
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
  Engine* engine = lane->engine;
  for (int n = 0; n < kLaneBatch; ++n) {
    Instr* i = lane->cur;
    if (i == nullptr) {
      i = lane->pop();
      if (i == nullptr) {
        engine->flush_device(lane);  // nothing queued behind them: completion can be tracked now
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
        if (must_flush_before(lane, i)) engine->flush_device(lane);
        if (!lane->take_unit(i)) return;  // blocked: its last predecessor resumes the lane
      } else {
        if (Observer* ob = engine->observer()) ob->on_lane_idle(lane->id);
        if (!lane->give_up()) return;
        continue;  // a producer pushed meanwhile and we took the lane back
      }
    }
    lane->cur = nullptr;
    lane->set_active(i, false);  // running
    if (i->stream->is_host_executed())
      engine->execute_host(i);
    else
      engine->execute_async(i);  // issues only; the device backend completes it
  }
  engine->flush_device(lane);  // the lane may wait in the injection queue for a while
  engine->pool().yield(&lane->task);  // behind other waiting work; the lane stays owned
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

// ---------------------------------------------------------------------------------------

namespace {
// The producer whose poison `i` would read, or null. For a host instruction every producer
// has completed (cross-lane ones through edges, same-lane ones through lane order); an
// asynchronous instruction's producer on a device stream may only be issued (kIssued): its
// device work has not failed (yet), and a later asynchronous fault is the device's to
// report.
Instr* poisoned_input(const Instr* i) {
  for (const Instr::Dep& d : i->deps) {
    if ((d.flags & Instr::Dep::kReads) == 0) continue;
    InstrState ps = d.pred->load_state();
    if (ps == InstrState::kFailed || ps == InstrState::kSkipped) return d.pred;
  }
  return nullptr;
}

void mark_skipped(Instr* i, const Instr* poisoned_by) {
  Instr* root = poisoned_by->root;
  root->ref();  // dropped when i is recycled
  i->root = root;
  i->status = FL_ERR_DEPENDENCY_FAILED;
  i->outcome = InstrState::kSkipped;  // published by complete()
  try {
    i->error = "instruction " + i->describe() + " skipped: an input was poisoned by " + root->error;
  } catch (...) {  // out of memory: the status says it all
    i->error.clear();
  }
}

}  // namespace

inline bool Engine::cancel_requested(Instr* i) {
  // acquire pairs with the release stores in cancel_stream() and cancel(); a request made
  // concurrently with this check may miss this instruction, which then runs (documented).
  if (i->id > i->stream->cancel_upto.load(std::memory_order_acquire) &&
      i->stream->lane->cancel_requests.load(std::memory_order_acquire) == 0) [[likely]]
    return false;
  return cancel_requested_slow(i);
}

bool Engine::cancel_requested_slow(Instr* i) {
  Lane* lane = i->stream->lane;
  // acquire: as in cancel_requested().
  // Pairs with the release CAS of cancel_upto in cancel_stream().
  bool hit = i->id <= i->stream->cancel_upto.load(std::memory_order_acquire);
  // Pairs with the release store of cancel_requests in cancel() (cancel_ids itself is read
  // under cancel_mu below).
  if (lane->cancel_requests.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(lane->cancel_mu);
    auto& ids = lane->cancel_ids;  // sorted, no repeats (Engine::cancel)
    // Ids of a lane start in increasing order: a request below i's id is for an
    // instruction that has started already, and can never take effect.
    auto past = std::upper_bound(ids.begin(), ids.end(), i->id);
    if (past != ids.begin() && *(past - 1) == i->id) hit = true;
    ids.erase(ids.begin(), past);
    lane->cancel_requests.store(uint32_t(ids.size()), std::memory_order_relaxed);
  }
  if (hit) mark_cancelled(i);  // counted by complete(), after `failed`
  return hit;
}

void mark_cancelled(Instr* i) {
  i->error = "cancelled before it started (fl_instr_cancel, fl_stream_cancel or fl_engine_cancel)";
  mark_failed(i, FL_ERR_CANCELLED);
}

void mark_failed(Instr* i, fl_status_t st) {
  i->root = i;
  i->status = st;
  i->outcome = InstrState::kFailed;  // published by complete()
  try {
    std::string detail = i->error.empty() ? std::string(fl_status_name(st)) : i->error;
    i->error = "instruction " + i->describe() + " failed: " + detail;
  } catch (...) {  // out of memory: the status says it all
    i->error.clear();
  }
}

namespace {

// holds_lane: a device instruction's cleanup run by its lane runner (CallbackFrame).
void run_cleanup(Instr* i, bool holds_lane = false) {
  if (i->cleanup != nullptr) {
    CallbackScope frame(i->engine, i, CallbackKind::kCleanup, holds_lane);  // its completion waits for it
    try {
      i->cleanup(i->user_data);
    } catch (...) {
      // A cleanup callback must not throw; the instruction's result stands.
    }
  }
}
// Runs `call(i)` — the instruction's function, or the device backend's issue — as i's
// callback: i is the thread's current instruction meanwhile, and an exception becomes a
// failure with its text. Returns the callback's status; i->error holds its detail.
template <class Call>
fl_status_t run_callback(Instr* i, Call&& call) {
  CallbackScope frame(i->engine, i, CallbackKind::kFn);
  fl_status_t st;
  if (!i->error.empty()) i->error.clear();  // not written when clear (see Instr)
  try {
    st = call(i);
  } catch (const std::exception& ex) {
    st = FL_ERR_INSTRUCTION_FAILED;
    i->error = std::string("C++ exception: ") + ex.what();
  } catch (...) {
    st = FL_ERR_INSTRUCTION_FAILED;
    i->error = "unknown C++ exception";
  }
  return st;
}
}  // namespace

void Engine::execute_host(Instr* i) {
  Instr* poisoned_by = poisoned_input(i);
  if (cancel_requested(i)) {
    // marked cancelled: not run
  } else if (poisoned_by != nullptr) {
    mark_skipped(i, poisoned_by);
  } else {
    i->state.store(uint32_t(InstrState::kRunning), std::memory_order_relaxed);
    if (Observer* ob = observer()) ob->on_start(*i);
    fl_status_t st = run_callback(i, [](Instr* x) { return x->fn(reinterpret_cast<fl_instr_ctx_t*>(x), x->user_data); });
    if (st != FL_OK)
      mark_failed(i, st);
    else if (!i->error.empty())
      i->error.clear();  // a text set by fl_instr_set_error before success is not a failure
  }
  run_cleanup(i);
  complete(i);
}

void Engine::execute_async(Instr* i) {
  Lane* lane = i->stream->lane;
  Instr* poisoned_by = poisoned_input(i);
  if (poisoned_by == nullptr) poisoned_by = services_.device->deferred_poison(i);  // failed earlier on this lane
  if (cancel_requested(i) || poisoned_by != nullptr) {
    if (i->outcome == InstrState::kDone) {  // not cancelled: skipped
      mark_skipped(i, poisoned_by);
    }
    // In stream order: after the device work issued before it on its stream.
    if (services_.device->defer_completion(i)) return;
    run_cleanup(i, true);  // on the lane runner: the lane waits for it
    complete(i);
    return;
  }
  // Normally done by the run loop (must_flush_before); one device stream at a time.
  if (lane->unflushed != nullptr && lane->unflushed != i->stream) flush_device(lane);
  i->state.store(uint32_t(InstrState::kRunning), std::memory_order_relaxed);
  if (Observer* ob = observer()) ob->on_start(*i);
  bool flush_now = false;
  fl_status_t st = run_callback(i, [this, &flush_now](Instr* x) { return services_.device->issue(x, &flush_now); });
  if (st != FL_OK) {
    mark_failed(i, st);
    // In stream order, and after whatever a failing device function left enqueued.
    if (services_.device->defer_completion(i)) {
      lane->clear_active(i);
      return;
    }
    run_cleanup(i, true);  // on the lane runner: the lane waits for it
    complete(i);
    return;
  }
  i->error.clear();
  lane->clear_active(i);
  // The backend marks i issued at the next flush (i may complete and be recycled from then
  // on, so i is not touched after it).
  lane->unflushed = i->stream;
  if (flush_now) flush_device(lane);
}

void Engine::flush_device(Lane* lane) {
  if (lane->unflushed == nullptr) return;
  lane->unflushed = nullptr;
  services_.device->flush(lane);
}

void Engine::mark_issued(Instr* x) {
  // release: a dependent that sees kIssued (or the sealed issue list) reads the backend's
  // record of x (its event), written before this store; pairs with the acquire state load
  // in the backend's issue() of the dependent.
  x->state.store(uint32_t(InstrState::kIssued), std::memory_order_release);
  // Asynchronous successors on other device streams wait only for this. acq_rel: acquire
  // pairs with the release CAS in push_edge(); release hands the record over.
  release_successors(x->issue_succ_head.exchange(kSealed, std::memory_order_acq_rel));
}

void Engine::complete_async(Instr* i, fl_status_t st, const std::string& detail) {
  if (st != FL_OK) {
    i->error = detail;
    mark_failed(i, st);
  }
  run_cleanup(i);  // an asynchronous instruction's cleanup runs after its device work completed
  complete(i);
}

void Engine::release_successors(Edge* e) {
  if (e == kSealed) return;
  while (e != nullptr) {
    Instr* succ = e->succ;
    Edge* next = e->next;  // read first: once succ's unit is dropped, succ (and e) may be recycled
    // acq_rel: release hands our writes to whoever launches succ; acquire when we are last.
    // Pairs with the other droppers of succ's units: run_task() and Engine::submit().
    if (succ->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Its lane is blocked on it (the lane's unit was already dropped): resume the lane.
      pool_->submit(&succ->stream->lane->task);
    }
    e = next;
  }
}

void Engine::complete(Instr* i) {
  const InstrState final_state = i->outcome;
  for (const Instr::Dep& d : i->deps)
    if (d.pred->unref()) recycle(d.pred);
  if (!i->deps.empty()) i->deps.clear();  // not written when clear (see Instr)

  // Counters first, so that stats read after any wait include this instruction. Release
  // pairs with the acquire loads in Lane::completed_count() and of `failed` in
  // Engine::stats(): a snapshot that counts this instruction as failed (read first) counts
  // it as completed, and one that counts it as completed counts it as submitted.
  Lane* lane = i->stream->lane;
  if (i->stream->is_host_executed())  // on the lane's owner: one writer at a time
    // release pairs with the acquire load in Lane::completed_count().
    lane->completed.store(lane->completed.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  else
    lane->completed_async.fetch_add(1, std::memory_order_release);  // pairs with Lane::completed_count()
  // release pairs with the acquire load of `failed` in Engine::stats().
  if (final_state != InstrState::kDone) lane->failed.fetch_add(1, std::memory_order_release);
  // A cancelled instruction is one of the failed (fl_instr_query answers FL_INSTR_CANCELLED
  // for the same status), counted after them: a snapshot that counts it as cancelled counts
  // it as failed. (Counted when the lane reached it, before its cleanup and this, a
  // snapshot could show more cancelled than failed.)
  // release pairs with the acquire load of `cancelled` in Engine::stats().
  if (final_state == InstrState::kFailed && i->status == FL_ERR_CANCELLED)
    lane->cancelled.fetch_add(1, std::memory_order_release);

  // Into the ledger before the result is published: a dependent skipped because of i (it
  // runs once i's state is terminal) always finds i's family listed.
  if (final_state != InstrState::kDone) ledger_.record(i);

  // Publish the result: release pairs with the acquire loads of waiters and of dependents'
  // poison checks. seq_cst, with the load of `sleepers`: a store–load pair with
  // sleep_until_terminal() (either the sleeper sees the state, or we see it counted and wake it).
  i->state.store(uint32_t(final_state), std::memory_order_seq_cst);
  if (i->sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(&i->state, INT_MAX);
  if (Observer* ob = observer()) ob->on_end(*i);

  // Seal the successor list and release every successor. An instruction without operands
  // is nobody's predecessor (edges are pushed only by submitters that found it as an
  // object's last writer or reader): its list stays empty and is not sealed, one RMW less.
  // acq_rel: acquire pairs with the release CAS that published each edge in push_edge();
  // release orders our result before any successor that sees the list sealed.
  if (!i->operands.empty()) release_successors(i->succ_head.exchange(kSealed, std::memory_order_acq_rel));
  // An asynchronous instruction that was skipped or failed to issue never sealed its issue
  // list: its issue successors are released now (same orders as above).
  // Pairs with the release CAS in push_edge(); a submitter that finds the list sealed acquires it.
  if (!i->stream->is_host_executed())
    release_successors(i->issue_succ_head.exchange(kSealed, std::memory_order_acq_rel));

  for (Operand& op : i->operands) release_object_ref(op.obj, i);  // release callbacks: i's completion waits
  if (!i->operands.empty()) i->operands.clear();
  // The window slot is freed before the stream's completion is published, so a caller
  // returning from synchronize sees in_flight without this instruction.
  window_.retire();
  // The last completed id only grows (a stream completes in order; the max guards against
  // a device backend completing a skipped one early). release pairs with the acquire
  // loads in query() and wait_instr(): the outcome history was written before.
  Stream* s = i->stream;
  fl_instr_id last = s->last_completed_id.load(std::memory_order_relaxed);
  if (s->is_host_executed()) {
    // A host stream completes only on its lane's owner, in order: one writer, no RMW.
    // release pairs with the acquire loads of last_completed_id in query(), wait_instr(), cancel().
    if (last < i->id) s->last_completed_id.store(i->id, std::memory_order_release);
  } else {
    // Pairs with the acquire loads of last_completed_id in query(), wait_instr(), cancel().
    while (last < i->id && !s->last_completed_id.compare_exchange_weak(last, i->id, std::memory_order_release,
                                                                     std::memory_order_relaxed)) {
    }
  }
  s->advance_completed();
  lane->clear_active(i);
  // The in-flight reference. When it is the only one left nobody else can reach i any more
  // (every holder of a pointer to i holds a reference; a dump's was taken under diag_lock
  // while i was active), so no RMW is needed. Acquire pairs with the acq_rel fetch_sub of
  // the other holders' unref(): their accesses happen before the recycle.
  if (i->refs.load(std::memory_order_acquire) == 1 || i->unref()) recycle(i);
}


}  // namespace flowlane::core
