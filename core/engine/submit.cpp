// Engine::submit_eager, the path every fl_submit_* shares (Engine::submit hands a capturing
// thread's submissions to its capture instead: capture.hpp): the refusals (destroy, drain), a slot of
// the in-flight window (Window), then, under the lane's submit lock, the recording of the
// instruction's id and dependencies (Recorder, deps.hpp), the stream's and lane's counters and
// the push on the lane's queue (Lane, lane.hpp), or, with FL_SUBMIT_INLINE, running it on
// the submitting thread (core/engine/README.md, "Running on the submitting thread").
#include <string>

#include "engine/engine.hpp"

namespace flowlane::core {

fl_instr_id Engine::enqueue(Instr* i, bool run_inline) {
  Stream* s = i->stream;
  Lane& lane = *s->lane;
  i->refs.store(1, std::memory_order_relaxed);     // the in-flight reference, dropped at completion
  i->pending.store(2, std::memory_order_relaxed);  // the submitter's unit + the lane's unit
  i->state.store(uint32_t(InstrState::kPending), std::memory_order_relaxed);
  // Cleared before any edge publishes i (not only when it is pushed): a walk of what waits
  // for an instruction (Waits::find_waiter) may reach i through an edge before the push,
  // and must not follow a link left from the record's previous use.
  i->lane_next.store(nullptr, std::memory_order_relaxed);
  fl_instr_id id;
  bool owned = false;  // this thread claimed the idle lane (FL_SUBMIT_INLINE)
  bool queued = true;  // i was pushed on the lane's queue
  {
    std::lock_guard<SpinLock> lane_lock(lane.submit_lock);
    // acquire pairs with the release store in stop_accepting() (engine.cpp).
    if (shutdown_.load(std::memory_order_acquire))
      fail(FL_ERR_SHUTDOWN, "the engine is being destroyed: no new instructions are accepted");
    recorder_.record(i);  // the id and the dependencies (deps.hpp); may throw before publishing anything
    i->seq = s->submitted.load(std::memory_order_relaxed) + 1;
    // release: pair with the acquire loads in Waits (synchronize), destroy's drain and the
    // id checks (Stream::check_submitted, CancelDrain::cancel_stream): counted means recorded.
    s->submitted.store(i->seq, std::memory_order_release);
    s->last_submitted_id.store(i->id, std::memory_order_release);
    // Written under the submit lock only (a load and a store, no RMW); stats read it.
    lane.submitted.store(lane.submitted.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    id = i->id;
    if (Observer* ob = observer()) ob->on_submit(*i);
    // Drop the submitter's unit before the push: every edge is published, and until the
    // push the lane's unit keeps pending above zero, so this never releases i. (Dropping it
    // after the push made the record's line travel back to this thread once more per
    // instruction, after the lane runner had taken it.) Without edges nobody else touches
    // pending yet: a plain store. With edges, predecessors may be dropping theirs: an RMW,
    // release, which hands the recording to the thread that drops the last unit.
    if (i->edges.empty())
      i->pending.store(1, std::memory_order_relaxed);
    else  // release: pairs with the acq_rel fetch_subs in Lane::take_unit() and Executor::release_successors()
      i->pending.fetch_sub(1, std::memory_order_release);
    // FL_SUBMIT_INLINE from a thread outside the engine (core/engine/README.md, "Running on
    // the submitting thread"): i is ready (no edge: every predecessor has completed, and
    // lane order covers the rest once the lane is idle), so if this thread can claim the
    // idle lane as schedule() would, it owns the lane; with nothing queued it runs i
    // itself without queueing it at all. Producers are held off by the submit lock, so
    // the queue cannot change under the check.
    owned = run_inline && i->edges.empty() && lane.try_claim();
    queued = !owned || !lane.empty_owned();
    if (queued) lane.push(i);  // i may run, complete and be recycled from here on: not touched again
  }
  if (!owned) {
    lane.schedule();  // make sure the lane runs
    return id;
  }
  if (queued)
    pool_->submit(&lane.task);  // another thread's instruction is ahead: a worker runs the lane
  else
    lane.run_owned(i);
  return id;
}

namespace {

// Discards a record whose submission failed (nothing of it was published).
struct Abandon {
  Engine* e;
  Instr* i;
  ~Abandon() {
    if (i != nullptr) e->discard(i);
  }
};

}  // namespace

fl_instr_id Engine::submit_eager(Stream* s, Instr* i, const SubmitArgs& a) {
  Abandon guard{this, i};
  if (i->operands.size() > 1) merge_operands(i->operands);  // one operand needs no merge (the call stays out of line)
  i->stream = s;
  i->fn = a.fn;
  i->user_data = a.user_data;
  i->cleanup = a.cleanup;
  if (i->async_start != a.async_start) i->async_start = a.async_start;  // not written when clear (see Instr)
  if (a.name != nullptr)
    i->name.assign(a.name);
  else if (!i->name.empty())  // not written when clear (see Instr)
    i->name.clear();
  if (shutting_down()) fail(FL_ERR_SHUTDOWN, std::string(a.api) + ": the engine is being destroyed");
  const bool engine_run = in_any_engine_context();
  auto refuse_drained = [&a] {
    fail(FL_ERR_SHUTDOWN, std::string(a.api) + ": the engine was drained (fl_engine_drain): it accepts no new work "
                                               "from your threads; destroy it, or create another engine");
  };
  // draining() acquires the drain's store. Work submitted by the engine's own callbacks is
  // part of what the drain waits for: accepted.
  if (!engine_run && cancel_drain_.draining()) refuse_drained();
  // A submitter parked on the full window is refused when a drain starts (the flag).
  if (!window_.admit(a.nonblocking, engine_run, engine_run ? nullptr : cancel_drain_.draining_flag())) refuse_drained();
  if (!engine_run) {
    // Checked again once admitted (the check above only spares a submitter waiting for the
    // window of a drained engine): a submission that passed the first check and then waited
    // for the window, or was merely preempted, must not be admitted after the drain found
    // nothing in flight. No fence is needed: Window::admit()'s CAS of its admission count
    // and the drain's RMW of it (Window::fence_admissions(), after its store of draining_)
    // are ordered in that counter's modification order. Ours first: the drain's later
    // inflight() sees our admission and waits for it. The drain's first: our acquire CAS
    // read its release sequence, so the load below sees the drain's flag and we give the
    // slot back (ordered by that CAS, which pairs with the RMW in fence_admissions()).
    if (cancel_drain_.draining()) {
      window_.retire();
      refuse_drained();
    }
  }
  fl_instr_id id;
  try {
    // Engine-run code never runs an instruction inline: it would nest one callback in
    // another (or in a task) on the same stack.
    id = enqueue(i, a.run_inline && !engine_run);
  } catch (...) {
    window_.retire();
    throw;
  }
  guard.i = nullptr;
  return id;
}

}  // namespace flowlane::core
