// The verbs that stop work without destroying the engine:
//   fl_instr_cancel, fl_stream_cancel, fl_engine_cancel  requests: instructions that have
//     not started when their lane reaches them are not run (they fail with
//     FL_ERR_CANCELLED, count as failures, and their cleanup still runs);
//   fl_engine_drain  refuses new work from the caller's threads (FL_ERR_SHUTDOWN) and waits
//     until everything submitted, including what callbacks and task-group tasks submit
//     meanwhile, has completed and every pool is idle; it returns the oldest failure not
//     returned yet.
// (Destroy, which drains for good and frees, is Engine::shutdown, engine.cpp.)
//
// Owns: the per-lane cancel requests (Lane::cancel_requests, cancel_mu, cancel_ids: ids
// sorted and without repeats, at most one per instruction not completed, consumed by the lane
// runner), the per-stream bound Stream::cancel_upto (only grows), the draining flag and the
// count of task-group spawns in progress from the caller's threads (outside spawns,
// counted by EngineTaskGroup::spawn, fork_join.hpp).
// Calls: Engine::all_streams, extensions (Extension::begin_drain / end_drain: diagnostics
// give up waits that lie on a cycle, which the drain would wait for forever),
// Waits::wait_submitted, Window::fence_admissions / inflight, Engine::pools_quiescent,
// FailureLedger::take_oldest, mark_cancelled (execute.hpp).
// Called by: the C API (cancel*, drain), Executor (requested, before running an
// instruction), Engine::submit (draining), EngineTaskGroup::spawn (outside spawns).
// Lock: Lane::cancel_mu (requests; the runner takes it only when a request is pending).
// Atomics it shares, and with whom:
//   Stream::cancel_upto (release CAS in cancel_stream) and Lane::cancel_requests (release
//     store in cancel) with the acquire loads of requested(): a request seen covers the
//     instruction (a request racing with the check may miss it, which then runs:
//     documented in the header).
//   Stream::last_completed_id / last_submitted_id: acquire loads, with Executor::complete's
//     and Engine::enqueue's release stores.
//   draining_: seq_cst store in drain() with the acquire load in Engine::submit; then the
//     window's fence (Window::fence_admissions) orders it against admissions; and with the
//     seq_cst load of a submitter parked on the window (Window::park), which the drain
//     then wakes (Window::refuse_parked: a seq_cst bump of the epoch it sleeps on).
//   outside_spawns_ and draining_: a seq_cst fence on each side (drain after its store of
//     draining_, begin_outside_spawn after its increment): either the drain sees the count
//     and waits for the task, or the spawn sees draining_ and is refused. The release
//     decrement in end_outside_spawn pairs with the drain's acquire load: a spawn seen ended
//     has handed its task to the pool, which pools_quiescent() then counts.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/deadline.hpp"
#include "engine/instr.hpp"
#include "engine/lane.hpp"
#include "engine/stream.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;

class CancelDrain {
 public:
  explicit CancelDrain(Engine& e) : engine_(e) {}

  void cancel(Stream* s, fl_instr_id id);  // fl_instr_cancel (FL_ERR_INVALID_ARGUMENT, thrown, for a bad id)
  void cancel_stream(Stream* s);           // fl_stream_cancel
  void cancel_all();                       // fl_engine_cancel

  // The lane runner, before starting i: true (and i marked cancelled, the request
  // consumed) when a cancel request covers i. The common case, no request on i's stream or
  // lane, is two loads inline.
  static bool requested(Instr* i) {
    // acquire pairs with the release stores in cancel_stream() and cancel(); a request made
    // concurrently with this check may miss this instruction, which then runs (documented).
    if (i->id > i->stream->cancel_upto.load(std::memory_order_acquire) &&
        i->stream->lane->cancel_requests.load(std::memory_order_acquire) == 0) [[likely]]
      return false;
    return requested_slow(i);
  }

  fl_status_t drain(const Deadline& deadline);  // fl_engine_drain
  // Pairs with drain()'s store.
  bool draining() const { return draining_.load(std::memory_order_acquire); }
  // The flag itself, for a submitter parked on the window (Window::admit's `refuse`).
  const std::atomic<bool>* draining_flag() const { return &draining_; }
  // fl_task_group_spawn from a thread of the caller's (not code the engine runs): counted
  // from before its check for a drain until its task is handed to the pool, so that a
  // drain either refuses it or waits for its task. False (refused, not counted) once the
  // engine is draining; otherwise end_outside_spawn() follows.
  bool begin_outside_spawn();
  void end_outside_spawn();

 private:
  [[gnu::cold, gnu::noinline]] static bool requested_slow(Instr* i);

  Engine& engine_;
  std::atomic<bool> draining_{false};        // fl_engine_drain: refuse submissions from outside
  std::atomic<uint64_t> outside_spawns_{0};  // begin_outside_spawn() .. end_outside_spawn()
};

}  // namespace flowlane::core
