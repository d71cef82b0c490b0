// The life of an instruction once its lane reaches it (core/engine/README.md, "Completion"):
// the cancel and poison checks, its callback (a host instruction's fn; a device
// instruction's issue to its backend), its cleanup, and its completion: the ledger, the
// terminal state, the successors, the objects, the window slot, the stream's counters and
// the in-flight reference, in that order.
//
// Owns, on this path: the record's run fields (state from kRunning on, outcome, status,
// error: mark_failed / mark_skipped / mark_cancelled), the sealing of its successor lists
// (succ_head, issue_succ_head) and the release of its successors' pending units, the lane's
// statistics counters (Lane::completed, completed_async, failed, cancelled) and
// Stream::last_completed_id.
// Calls: CancelDrain::requested() (cancel_drain.hpp), the user's fn and cleanup inside
// CallbackScope frames (context.hpp), the DeviceBackend (issue, defer_completion,
// deferred_poison, flush: device.hpp), FailureLedger::record, Objects::release_ref (objects'
// release callbacks), Window::retire, Stream::advance_completed,
// Lane::clear_active, the pool (to resume a successor's lane), Engine::recycle and the
// observer (on_start, on_end).
// Called by: the lane runner (Lane::run_task, Lane::run_owned: execute_host,
// execute_async, flush_device), device backends (mark_issued, complete_async: from the lane
// runner, the backend's threads, set_completion_thread(), and program threads inside
// help_complete), Waits (help_complete, from a program thread's wait) and the starters of
// asynchronous host instructions (finish_async, from any thread).
// Lock: a stream's AsyncCompletions::mu (its queue of completions; never held while
// completing), and the lane's diag_lock through Lane::clear_active. The atomics it
// shares, and with whom:
//   state: the seq_cst store of the terminal state with the seq_cst load of `sleepers`
//     (a store-load pair with Waits' sleep_until_terminal: either the sleeper sees the
//     state, or the completer sees it counted and wakes it); the same store is what
//     dependents' poison checks, waits and Recorder's edge decisions acquire. mark_issued's
//     release store of kIssued pairs with the backend's acquire load of a dependent's
//     predecessor.
//   succ_head, issue_succ_head: the acq_rel exchange to kSealed with Recorder's release CAS
//     that published each edge (push_edge).
//   pending: acq_rel fetch_sub in release_successors with the lane runner's take_unit and
//     the submitter's drop of its unit (whoever drops the last unit launches it).
//   Lane::completed / completed_async / failed / cancelled: release increments with the
//     acquire loads of Engine::stats (a snapshot never counts more failed than completed).
//   Stream::last_completed_id: release store (host) or CAS (device, completes_async) with the acquire loads
//     in Stream's waits, Waits::query / wait_instr and CancelDrain::cancel.
//   refs: the last reference's acquire load with the other holders' acq_rel unref().
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "engine/instr.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Lane;

class Executor {
 public:
  explicit Executor(Engine& e) : engine_(e) {}

  // The lane runner, i at its lane's head with every predecessor done: runs a host
  // instruction (cancel check, poison check, fn, cleanup, completion). On a stream that
  // completes asynchronously (Stream::completes_async): starts an asynchronous host
  // instruction (SubmitArgs::async_start) and moves on, and completes a synchronous one
  // only once every instruction before it on its stream has completed.
  void execute_host(Instr* i);
  // An asynchronous host instruction's end (any thread, once; SubmitArgs::async_start):
  // `st` FL_OK, or a failure with `detail` (ignored for one skipped or cancelled: it keeps
  // that outcome). Completes it, and every finished instruction behind it on its stream,
  // in submission order, unless an earlier one is still in flight (whose finish then does).
  void finish_async(Instr* i, fl_status_t st, const std::string& detail);
  // Returns once no thread is inside finish_async: the engine's drain calls it after the
  // last instruction completed, since a finishing thread still touches its stream's queue
  // after completing an instruction (which may be the engine's last).
  void wait_finishers() const;
  // The same for a device stream's instruction: issues it to the device backend (which
  // completes it later, through complete_async), or completes a skipped or cancelled one.
  void execute_async(Instr* i);
  // The lane is about to leave its device stream (run something else, block, go idle):
  // DeviceBackend::flush() when it issued instructions not yet marked issued.
  void flush_device(Lane* lane);

  // Device backends (device.hpp): i is on its device and its completion can be tracked;
  // i's device work finished with `st` (FL_OK, or a failure with `detail`); or it finished,
  // but an input it read was poisoned after it was issued (`poisoned_by`, terminal, failed
  // or skipped): i is skipped as if its lane had seen that (a value edge's consumer).
  void mark_issued(Instr* i);
  void complete_async(Instr* i, fl_status_t st, const std::string& detail);
  void complete_async_poisoned(Instr* i, const Instr* poisoned_by);

  // A program thread's wait (Waits) polls this while it spins: outside any engine callback,
  // it completes what it waits for itself where it can. For a host COLLECTIVE stream (its
  // instructions finish asynchronously: a communicator's requests) it drives the process's
  // async helper (set_async_helper: one round of the communicators' progress, as MPI_Wait
  // drives MPI's); otherwise the device backend may complete finished device work for it
  // (DeviceBackend::help) — for stream `s`, or for the engine's device streams when s is
  // null or a host stream. A host instruction `target` (what the wait waits for, or null)
  // that a device completion releases runs on the calling thread at once
  // (Lane::run_resumed_here), instead of being handed to a worker. True when anything
  // completed (or was delivered).
  bool help_complete(Stream* s, Instr* target);
  // A program thread that polled s with help_complete stops (its wait returns, or it goes to
  // sleep): for a COLLECTIVE stream, the async helper's owner takes the rounds back at once.
  void help_leave(const Stream* s);

 private:
  void complete(Instr* i);
  void start_async(Instr* i, bool runs);
  // A synchronous instruction of a completes_async stream, cleanup done: true when it was
  // queued behind instructions still in flight (their finish completes it).
  bool defer_behind_async(Instr* i);
  // Completes the finished instructions at the head of i's stream's queue, in order.
  void complete_finished(Stream* s);
  void release_successors(Edge* e);  // drops one pending unit of each successor in the list
  // Whoever dropped the last unit of `succ` (blocked at the head of `lane`) resumes the lane:
  // on this thread when help_complete's caller waits for succ, or, on a lane runner, right
  // after its own lane (Lane::continue_here); else on the pool.
  void resume(Lane* lane, Instr* succ);

  Engine& engine_;
  // Threads inside finish_async (wait_finishers). Incremented relaxed on entry: that is
  // sequenced before the instruction's completion, whose release the drain acquires, so a
  // drain that saw the completion sees the increment; decremented with release as the
  // finisher's last access, paired with the acquire load in wait_finishers.
  std::atomic<uint32_t> finishers_{0};
};

// The process's helper for asynchronous host instructions (the comm layer's progress round,
// comm/progress.cpp): `help` is called by help_complete() on a program thread that waits on
// or queries a host COLLECTIVE stream, true when it delivered anything; `leave` by
// help_leave() when such a wait stops polling. Set once, before the first such instruction
// is submitted; the store (release) pairs with the acquire loads in help_complete() and
// help_leave(). The struct outlives every engine.
struct AsyncHelper {
  bool (*help)();
  void (*leave)();
};
void set_async_helper(const AsyncHelper* helper);

// Marks i failed with `st` (its detail in i->error, which becomes the full message naming
// i): the outcome complete() will publish. For the executing thread only.
void mark_failed(Instr* i, fl_status_t st);
// Marks i failed with FL_ERR_CANCELLED: it never ran.
void mark_cancelled(Instr* i);
// Marks i skipped: an input was poisoned by `poisoned_by` (i joins its root's family). For
// the executing thread only.
void mark_skipped(Instr* i, const Instr* poisoned_by);

}  // namespace flowlane::core
