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
// task); mark_issued() and complete_async() may be called from any thread the backend owns
// (its poller), which must call set_completion_thread() first.
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

  // Lane runner: the lane is about to run something else, to block or to go idle; every
  // instruction it issued since the last flush must be marked issued (step 1) now, or it
  // could wait forever. Until this call the backend must not complete them.
  virtual void flush(Lane* lane) = 0;

  // Engine destroy, after the drain: stop the backend's per-engine threads.
  virtual void engine_stopped(Engine* e) = 0;

  // The record's backend state (Instr::device) is no longer needed: every dependent that
  // could read it has completed. Called before the record is reused.
  virtual void recycle(Instr* i) = 0;
};

}  // namespace flowlane::core
