// The life of an instruction at its lane's head: cancel and poison checks, the callback,
// the cleanup and the completion (engine/execute.hpp; core/engine/README.md, "Completion").
#include "engine/execute.hpp"

#include <climits>
#include <exception>
#include <string>
#include <thread>

#include "engine/engine.hpp"
#include "engine/program.hpp"

namespace flowlane::core {

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

}  // namespace

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

void Executor::execute_host(Instr* i) {
  Engine& e = engine_;
  Instr* poisoned_by = poisoned_input(i);
  bool runs = false;
  if (CancelDrain::requested(i)) {
    // marked cancelled: not run
  } else if (poisoned_by != nullptr && !is_launch(i)) {
    // (A program's launch checks its inputs' poison per node: replay.cpp.)
    mark_skipped(i, poisoned_by);
  } else {
    runs = true;
  }
  if (i->async_start != nullptr) return start_async(i, runs);
  if (runs) {
    i->state.store(uint32_t(InstrState::kRunning), std::memory_order_relaxed);
    if (Observer* ob = e.observer()) ob->on_start(*i);
    fl_status_t st = run_callback(i, [](Instr* x) { return x->fn(reinterpret_cast<fl_instr_ctx_t*>(x), x->user_data); });
    if (st != FL_OK)
      mark_failed(i, st);
    else if (i->outcome == InstrState::kDone && !i->error.empty())
      i->error.clear();  // a text set by fl_instr_set_error before success is not a failure
                         // (a launch that skipped itself keeps its message)
  }
  run_cleanup(i);
  if (i->stream->completes_async() && defer_behind_async(i)) return;
  complete(i);
}

// ---- asynchronous host instructions (core/engine/README.md, "Asynchronous host instructions")

namespace {
// Puts i at the tail of its stream's queue of completions, in `phase`; under q.mu.
void append(AsyncCompletions& q, Instr* i, AsyncPhase phase) {
  i->async_phase = phase;
  i->async_next = nullptr;
  if (q.tail != nullptr)
    q.tail->async_next = i;
  else
    q.head = i;
  q.tail = i;
}
}  // namespace

void Executor::start_async(Instr* i, bool runs) {
  Stream* s = i->stream;
  {
    // Queued before the start: its finish may come before async_start returns.
    std::lock_guard<std::mutex> lk(s->async.mu);
    append(s->async, i, kInFlight);
  }
  if (runs) {
    i->state.store(uint32_t(InstrState::kRunning), std::memory_order_relaxed);
    if (Observer* ob = engine_.observer()) ob->on_start(*i);
  }
  // The lane no longer runs it (its collective's own waits are its communicator's to show).
  s->lane->clear_active(i);
  i->async_start(i, i->user_data, !runs);  // i may complete and be recycled from here on
}

bool Executor::defer_behind_async(Instr* i) {
  Stream* s = i->stream;
  {
    std::lock_guard<std::mutex> lk(s->async.mu);
    // Nothing before it in flight nor being completed: it completes now, in order (the
    // lane runner is the only thread that adds to the queue, and it is here).
    if (s->async.head == nullptr && !s->async.completing) return false;
    append(s->async, i, kFinishedCleaned);
    if (s->async.completing || s->async.head->async_phase == kInFlight) return true;
  }
  complete_finished(s);  // the head finished meanwhile and nobody is completing it
  return true;
}

void Executor::finish_async(Instr* i, fl_status_t st, const std::string& detail) {
  finishers_.fetch_add(1, std::memory_order_relaxed);  // orderings: at finishers_'s declaration
  struct Leave {
    std::atomic<uint32_t>& n;
    // release: pairs with the acquire load in wait_finishers (this is the last access).
    ~Leave() { n.fetch_sub(1, std::memory_order_release); }
  } leave{finishers_};
  // The lane runner no longer touches i once it started it (start_async): the outcome is
  // this thread's to write. One skipped or cancelled keeps that outcome.
  if (st != FL_OK && i->outcome == InstrState::kDone) {
    try {
      i->error = detail;
    } catch (...) {  // out of memory: the status says it all
      i->error.clear();
    }
    mark_failed(i, st);
  }
  Stream* s = i->stream;
  {
    std::lock_guard<std::mutex> lk(s->async.mu);
    i->async_phase = kFinished;
    if (s->async.completing || s->async.head != i) return;  // completed in order by whoever finishes the head
  }
  complete_finished(s);
}

void Executor::wait_finishers() const {
  // acquire: pairs with the release decrement in finish_async's Leave.
  while (finishers_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void Executor::complete_finished(Stream* s) {
  // A thread outside the engine (a communicator's progress thread) completes as a device
  // backend's poller does: release callbacks it runs submit without blocking on the window.
  const bool mark = !in_engine_context(&engine_);
  if (mark) set_completion_thread(&engine_);
  std::unique_lock<std::mutex> lk(s->async.mu);
  if (!s->async.completing) {
    s->async.completing = true;
    while (s->async.head != nullptr && s->async.head->async_phase != kInFlight) {
      Instr* x = s->async.head;
      s->async.head = x->async_next;
      if (s->async.head == nullptr) s->async.tail = nullptr;
      const bool cleaned = x->async_phase == kFinishedCleaned;
      x->async_phase = kNotQueued;
      x->async_next = nullptr;
      lk.unlock();
      if (!cleaned) run_cleanup(x);
      complete(x);
      lk.lock();
    }
    s->async.completing = false;
  }
  lk.unlock();
  if (mark) set_completion_thread(nullptr);
}

void Executor::execute_async(Instr* i) {
  Engine& e = engine_;
  Lane* lane = i->stream->lane;
  Instr* poisoned_by = poisoned_input(i);
  if (poisoned_by == nullptr) poisoned_by = e.device()->deferred_poison(i);  // failed earlier on this lane
  if (CancelDrain::requested(i) || poisoned_by != nullptr) {
    if (i->outcome == InstrState::kDone) {  // not cancelled: skipped
      mark_skipped(i, poisoned_by);
    }
    // In stream order: after the device work issued before it on its stream.
    if (e.device()->defer_completion(i)) return;
    run_cleanup(i, true);  // on the lane runner: the lane waits for it
    complete(i);
    return;
  }
  // Normally done by the run loop (must_flush_before); one device stream at a time.
  if (lane->unflushed != nullptr && lane->unflushed != i->stream) flush_device(lane);
  i->state.store(uint32_t(InstrState::kRunning), std::memory_order_relaxed);
  if (Observer* ob = e.observer()) ob->on_start(*i);
  bool flush_now = false;
  fl_status_t st = run_callback(i, [&e, &flush_now](Instr* x) { return e.device()->issue(x, &flush_now); });
  if (st != FL_OK) {
    mark_failed(i, st);
    // In stream order, and after whatever a failing device function left enqueued.
    if (e.device()->defer_completion(i)) {
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
  // on, so i is not touched after it). A flush the backend asks for at once does not leave
  // the stream: `unflushed` stays, so the lane still flushes (leaving) before it runs
  // anything else, blocks or goes idle.
  lane->unflushed = i->stream;
  if (flush_now) e.device()->flush(lane, false);
}

void Executor::flush_device(Lane* lane) {
  if (lane->unflushed == nullptr) return;
  lane->unflushed = nullptr;
  engine_.device()->flush(lane, true);
}

void Executor::mark_issued(Instr* x) {
  // release: a dependent that sees kIssued (or the sealed issue list) reads the backend's
  // record of x (its event), written before this store; pairs with the acquire state load
  // in the backend's issue() of the dependent.
  x->state.store(uint32_t(InstrState::kIssued), std::memory_order_release);
  // Asynchronous successors on other device streams wait only for this. acq_rel: acquire
  // pairs with the release CAS in push_edge(); release hands the record over.
  release_successors(x->issue_succ_head.exchange(kSealed, std::memory_order_acq_rel));
}

void Executor::complete_async(Instr* i, fl_status_t st, const std::string& detail) {
  if (st != FL_OK) {
    i->error = detail;
    mark_failed(i, st);
  }
  run_cleanup(i);  // an asynchronous instruction's cleanup runs after its device work completed
  complete(i);
}

void Executor::complete_async_poisoned(Instr* i, const Instr* poisoned_by) {
  mark_skipped(i, poisoned_by);
  run_cleanup(i);
  complete(i);
}

namespace {
// help_complete's caller: the instruction it waits for, and the lane a completion resumed for
// it (to run on this thread once the backend's help returns). Program threads only.
FL_TLS thread_local Instr* t_help_target = nullptr;
FL_TLS thread_local Lane* t_help_resumed = nullptr;

std::atomic<const AsyncHelper*> g_async_helper{nullptr};

}  // namespace

void set_async_helper(const AsyncHelper* helper) {
  // release: pairs with the acquire loads in help_complete and help_leave.
  g_async_helper.store(helper, std::memory_order_release);
}

bool Executor::help_complete(Stream* s, Instr* target) {
  if (s != nullptr && s->completes_async()) {
    if (in_any_engine_context()) return false;  // a callback's wait leaves it to the progress thread
    // acquire: pairs with the release store in set_async_helper.
    const AsyncHelper* helper = g_async_helper.load(std::memory_order_acquire);
    return helper != nullptr && helper->help();
  }
  DeviceBackend* dev = engine_.device();
  if (dev == nullptr || in_any_engine_context()) return false;
  t_help_target = target;
  bool progress = dev->help(&engine_, s);
  t_help_target = nullptr;
  if (Lane* lane = t_help_resumed) {
    t_help_resumed = nullptr;
    lane->run_resumed_here();  // the target: what this thread waits for, run here
    progress = true;
  }
  return progress;
}

void Executor::help_leave(const Stream* s) {
  if (!s->completes_async() || in_any_engine_context()) return;  // help_complete did not poll it
  // acquire: pairs with the release store in set_async_helper.
  if (const AsyncHelper* helper = g_async_helper.load(std::memory_order_acquire)) helper->leave();
}

void Executor::resume(Lane* lane, Instr* succ) {
  if (succ == t_help_target && t_help_resumed == nullptr && succ->stream->is_host_executed()) {
    t_help_resumed = lane;  // help_complete runs it once the backend returns
    return;
  }
  if (Lane::continue_here(lane)) return;  // a lane runner takes it on after its own lane
  engine_.pool().submit(&lane->task);
}

void Executor::release_successors(Edge* e) {
  if (e == kSealed) return;
  while (e != nullptr) {
    Instr* succ = e->succ;
    Edge* next = e->next;  // read first: once succ's unit is dropped, succ (and e) may be recycled
    // acq_rel: release hands our writes to whoever launches succ; acquire when we are last.
    // Pairs with the other droppers of succ's units: Lane::take_unit() and Engine::enqueue().
    // A value edge's entry holds no unit (Edge::holds_unit).
    if (e->holds_unit && succ->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Its lane is blocked on it (the lane's unit was already dropped): resume the lane.
      resume(succ->stream->lane, succ);
    }
    e = next;
  }
}

void Executor::complete(Instr* i) {
  Engine& e = engine_;  // a local: kept in a register across the calls below
  const InstrState final_state = i->outcome;
  for (const Instr::Dep& d : i->deps)
    if (d.pred->unref()) e.recycle(d.pred);
  if (!i->deps.empty()) i->deps.clear();  // not written when clear (see Instr)

  // Counters first, so that stats read after any wait include this instruction. Release
  // pairs with the acquire loads in Lane::completed_count() and of `failed` in
  // Engine::stats(): a snapshot that counts this instruction as failed (read first) counts
  // it as completed, and one that counts it as completed counts it as submitted.
  Lane* lane = i->stream->lane;
  // On the lane's owner, one writer at a time, unless the stream completes asynchronously.
  const bool on_lane_owner = i->stream->is_host_executed() && !i->stream->completes_async();
  if (on_lane_owner)
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
  if (final_state != InstrState::kDone) e.ledger().record(i);

  // Publish the result: release pairs with the acquire loads of waiters and of dependents'
  // poison checks. seq_cst, with the load of `sleepers`: a store–load pair with
  // sleep_until_terminal() (either the sleeper sees the state, or we see it counted and wake it).
  i->state.store(uint32_t(final_state), std::memory_order_seq_cst);
  if (i->sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(&i->state, INT_MAX);
  if (Observer* ob = e.observer()) ob->on_end(*i);

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

  for (Operand& op : i->operands) e.objects().release_ref(op.obj, i);  // release callbacks: i's completion waits
  if (!i->operands.empty()) i->operands.clear();
  // The window slot is freed before the stream's completion is published, so a caller
  // returning from synchronize sees in_flight without this instruction.
  e.window().retire();
  // The last completed id only grows (a stream completes in order; the max guards against
  // a device backend completing a skipped one early). release pairs with the acquire
  // loads in query() and wait_instr(): the outcome history was written before.
  Stream* s = i->stream;
  fl_instr_id last = s->last_completed_id.load(std::memory_order_relaxed);
  if (on_lane_owner) {
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
  if (i->refs.load(std::memory_order_acquire) == 1 || i->unref()) e.recycle(i);
}

}  // namespace flowlane::core
