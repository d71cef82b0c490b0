// How the engine runs instructions on devices other than the host, without knowing any
// device API: a DeviceBackend (the CUDA backend, gpu/) plugs in behind this interface.
//
// Instructions of a stream whose device is not the CPU are *asynchronous*. The lane runner
// does not execute them; it *issues* them: after the same poison check as a host
// instruction it calls DeviceBackend::issue(), which enqueues the work on the device stream
// and returns at once. The backend then
//   1. calls Executor::mark_issued(i) (engine->executor(), execute.hpp) once it can tell when i completes (for CUDA: once an
//      event was recorded after i): i becomes kIssued, and asynchronous successors on
//      other device streams that waited only for that (Instr::issue_succ_head) are
//      released; they are ordered after i *on the device* (Dep::kIssueWait), never by a
//      host wait;
//   2. calls Executor::complete_async(i, status, detail) once the device work finished (or
//      failed): cleanup, release of host successors, objects and the window slot, exactly
//      as for a host instruction. Completions of one stream are reported in issue order.
// A backend may report several instructions with one mark (a run that one event covers).
//
// Threads: issue() and flush() run on the lane runner (the worker running the lane's
// task); mark_issued() and complete_async() may be called from the lane runner, from any
// thread the backend owns (its poller, which must call set_completion_thread() first) and
// from a program thread inside help() (which runs no user callback there).
#pragma once

#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Stream;
struct Lane;
struct Instr;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Devices of this backend visible to the process; 0 when its runtime is missing or sees
  // no device (the engine then offers no device streams).
  virtual int device_count() = 0;

  // A device stream was interned (Stream::device_state is the backend's to set) / is being
  // freed after the engine drained.
  virtual void stream_created(Stream* s) = 0;
  virtual void stream_destroyed(Stream* s) = 0;

  // Lane runner: enqueues i's work on its device stream, after ordering it behind every
  // kIssueWait predecessor that is kIssued. FL_OK: the backend now owns i's completion
  // (steps 1 and 2 above), from the next flush() on; it may still report a failure
  // through complete_async (work that was enqueued and then failed is tracked like any
  // other). *flush_now asks the engine to flush at once (a successor already waits for i,
  // or the run is long). Another status, with i->error set to the detail: i failed; the
  // engine marks it so and completes it through defer_completion().
  virtual fl_status_t issue(Instr* i, bool* flush_now) = 0;

  // Lane runner: i was skipped, cancelled or failed to issue (its outcome and error are
  // set) — true: the backend completes it (Executor::complete_async with FL_OK, keeping that
  // outcome) in stream order, after the device work issued before it on its stream, or
  // after work of its own that a failing issue may have left enqueued (a device function
  // or a collective that enqueued some work and then failed). false: nothing of its
  // stream is in flight, and the engine completes it at once. Completions of a stream thus
  // always follow submission order, which synchronize and per-id waits rely on.
  virtual bool defer_completion(Instr* i) = 0;

  // Lane runner, before issuing i: a predecessor that i reads, of i's lane, whose
  // completion this backend deferred (its outcome is failed, skipped or cancelled but not
  // yet published): i is skipped for it. Null when there is none. (Lane order runs i
  // after it without an edge, so the engine's own check cannot see that outcome yet.)
  virtual Instr* deferred_poison(const Instr* i) = 0;

  // Lane runner: every instruction the lane issued since the last flush must be marked
  // issued (step 1) now. `leaving`: the lane is about to run something else, to block or to
  // go idle, so nothing it issued may wait for the lane to come back; otherwise (a
  // successor already waits for the issue, or the run is long) the lane goes on issuing on
  // the same device stream and may complete that stream's finished work itself. Until the
  // first flush after an issue the backend must not complete the instruction.
  virtual void flush(Lane* lane, bool leaving) = 0;

  // A program thread (outside any engine callback) waits for work of engine `e` (for an
  // instruction of stream `s`, or, s null or a host stream, for work that device work of the
  // engine may hold up): it may complete device work that has finished, in stream order,
  // instead of waiting for the backend's own thread to see it (gpu/README.md, "Completion").
  // Runs no user callback: work whose completion does (cleanup, release, hooks) is left to
  // the backend. Returns true when it completed anything.
  virtual bool help(Engine* e, Stream* s) = 0;

  // Recording (under the operands' locks): `succ`, on another lane, depends on device
  // instruction `pred`, which is not issued yet. True when the backend orders succ after
  // pred on the device without waiting for pred's issue (a value edge: pred's stream writes
  // a value after pred that succ's stream waits for); succ then records a Dep::kValueWait
  // entry and no counted edge. False: the usual issue edge.
  virtual bool value_edge(Instr* pred, Instr* succ) = 0;

  // Engine destroy, after the drain: stop the backend's per-engine threads.
  virtual void engine_stopped(Engine* e) = 0;

  // The record's backend state (Instr::device) is no longer needed: every dependent that
  // could read it has completed. Called before the record is reused.
  virtual void recycle(Instr* i) = 0;
};

}  // namespace flowlane::core
