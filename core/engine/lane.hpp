// A lane: a strand on the work-stealing pool. Its instructions start in submission order,
// one at a time, on whichever worker runs the lane's task; all streams of a lane
// (stream.hpp) share its strand. Protocol (core/engine/README.md, "Lanes as strands"):
//   - the queue is Vyukov's intrusive MPSC queue with a stub node; producers (submitters)
//     push under the lane's submit lock, the consumer is whoever owns the lane;
//   - `scheduled` says who owns it: 0 idle, 1 owned (queued on the pool, running, or blocked
//     on `cur`). A producer pushes, then schedule()s: if it swaps 0 -> 1 it hands the lane's
//     task to the pool. The runner runs up to a batch, then yields behind other work;
//   - going idle: the runner stores scheduled = 0, then looks whether `tail` moved since the
//     head it saw, and if so tries to take the lane back (give_up()). No wake-up is lost:
//     the producer's tail exchange and scheduled load and the runner's scheduled store and
//     tail load are all seq_cst (a store-load pattern: either the runner sees the item, or
//     the producer sees 0 and schedules);
//   - an instruction at the head runs when the lane's unit of its `pending` count is the
//     last (take_unit()); otherwise the lane blocks on it (`cur`) and the predecessor that
//     drops the last unit resubmits the lane's task (instr.hpp, "pending").
//   - FL_SUBMIT_INLINE: a submitter may claim the idle lane itself and run its ready
//     instruction on its own thread (run_owned(), core/engine/README.md, "Running on the
//     submitting thread").
//
// Owns: the queue (tail, head, stub), `scheduled`, `cur`, the submit lock, and the run loop.
// Calls: Executor (execute_host, execute_async, flush_device), the pool (submit, yield),
// the observer (on_lane_idle). Called by: Engine::enqueue (push, schedule, try_claim,
// empty_owned, run_owned), Executor::release_successors (resubmits the task), Waits'
// find_waiter (reads the queue links, takes the submit lock).
// Per-lane fields of other components, documented where they are used: the statistics
// counters (Engine::enqueue counts `submitted`, Executor::complete the rest, Engine::stats
// reads them), the cancel requests (CancelDrain, cancel_drain.hpp), the device backend's
// state (`unflushed`, `device_state`: Executor, device.hpp) and the diagnostics (`active`,
// `waits`, under diag_lock: the runner, Waits and the state dump, core/diag/dump.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/cpu.hpp"
#include "base/deadline.hpp"
#include "base/spinlock.hpp"
#include "engine/instr.hpp"
#include "flowlane/flowlane.h"
#include "sched/task.hpp"

namespace flowlane::core {

class Engine;
class EngineTaskGroup;
struct Lane;
struct Stream;

// A wait that the wait-for graph sees (core/diag/dump.hpp): what the state dump shows, and
// what engine drain and destroy give up when it lies on a cycle of waits
// (cancel_cycle_waits(), diag/dump.cpp). It is either
//   - a lane's: a wait of the lane's running instruction `by`, from its callback or from a
//     task of a task group created in its callback while it is pending (fl_object_wait,
//     fl_stream_synchronize, fl_instr_wait_for, fl_task_group_wait(_for),
//     fl_task_group_destroy), linked into Lane::waits under the lane's diag_lock; or
//   - the engine's (Waits' list of loose waits): a wait of a task of a task group that no
//     pending instruction owns (`by` null, `task_of` set), under Waits' loose lock.
// Lives on the waiting thread's stack (WaitNote, engine/waits.hpp) and is linked for as long
// as the wait lasts (a task group wait: while it blocks). The group pointers are only read
// while the record is linked, under its list's lock: a group whose task waits cannot be
// destroyed before the task ends, and a group waited for lives until its waits return (a
// destroy racing with them is the caller's race).
struct WaitRecord {
  // The instruction whose wait this is (the lane's head when it registered). A task of its
  // task group may outlive it and go on waiting after the lane moved on: such a record is
  // not shown as, or cancelled for, the new head's.
  const Instr* by = nullptr;
  // The task group whose task waits (the calling thread's innermost running group task), or
  // null for an instruction's own callback: the graph's edge out of that group's node.
  const EngineTaskGroup* task_of = nullptr;
  // fl_object_wait: the user waited for (referenced while linked) and the object's handle,
  // not the object (the wait holds no reference on it, and the user waited for may free it
  // as it completes, its last reference, before the waiter wakes up to unlink this).
  Instr* on = nullptr;
  uint64_t obj = 0;
  // The call (fl_stream_synchronize, fl_instr_wait_for, fl_task_group_wait, ...).
  const char* call = nullptr;
  // fl_stream_synchronize (the stream's completion count to reach `target`) or
  // fl_instr_wait_for (its instruction with id `target`, `is_id`): the stream (it lives as
  // long as the engine) and the target.
  Stream* stream = nullptr;
  uint64_t target = 0;
  bool is_id = false;
  // fl_task_group_wait(_for), fl_task_group_destroy: the group waited for.
  const EngineTaskGroup* group = nullptr;
  // Set (release, under the list's lock) when drain or destroy gives the wait up: it is on a
  // cycle and can never return. The wait sleeps on it besides its target.
  std::atomic<bool> cancelled{false};
  WaitRecord* next = nullptr;  // its list, under the list's lock
};

// A list of WaitRecords (a lane's, or the engine's loose waits), newest first. Callers
// hold the list's lock.
inline void link_wait(WaitRecord*& head, WaitRecord* r) {
  r->next = head;
  head = r;
}
inline void unlink_wait(WaitRecord*& head, WaitRecord* r) {
  for (WaitRecord** p = &head; *p != nullptr; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      r->next = nullptr;
      return;
    }
}

struct Lane {
  sched::Task task;  // run = Lane::run_task; submitted to the pool whenever the lane becomes runnable
  Engine* engine = nullptr;
  uint32_t id = 0;

  // The fields below come in two groups on separate cache lines: those the submitting
  // thread writes for every instruction, and those the lane runner writes for every
  // instruction. Sharing a line would move it between the two cores twice per instruction.

  // --- producer side ---
  // Serialises dependency recording with FIFO order, so that edges skipped because two
  // instructions share this lane are always backed by queue order. Uncontended when one
  // thread submits to a lane, which is the common case.
  alignas(kCacheLine) SpinLock submit_lock;
  // Vyukov's intrusive MPSC queue of instructions (producers hold submit_lock anyway).
  std::atomic<Instr*> tail{nullptr};
  // 0: idle (no task queued or running); 1: owned (queued, running, or blocked on `cur`).
  // Read by every push; written by the runner only when the lane goes idle or resumes.
  std::atomic<uint32_t> scheduled{0};
  std::atomic<uint64_t> submitted{0};  // stats, under submit_lock

  // --- consumer side (the lane runner) ---
  alignas(kCacheLine) Instr* head = nullptr;
  Instr* cur = nullptr;  // head instruction waiting for its predecessors
  // Stats: instructions of this lane completed. Host instructions complete on the lane's
  // owner, one at a time (a load and a store); device ones on the backend's threads (an
  // RMW on their own counter). Read them through completed_count().
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> completed_async{0};
  // Acquire pairs with the release store / fetch_add in Executor::complete(): an
  // instruction counted here was counted in `submitted` before (its submission happens
  // before its completion), so a `submitted` read after this is never smaller
  // (Engine::stats()).
  uint64_t completed_count() const {
    // Pairs with the release store / fetch_add in Executor::complete().
    return completed.load(std::memory_order_acquire) + completed_async.load(std::memory_order_acquire);
  }
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> cancelled{0};
  Instr stub;
  // CancelDrain's: fl_instr_cancel requests for instructions of this lane not started yet
  // (ids under cancel_mu, sorted and without repeats, so at most one per instruction not
  // completed; `cancel_requests` is their number, read by the runner for every instruction).
  std::atomic<uint32_t> cancel_requests{0};
  std::mutex cancel_mu;
  std::vector<fl_instr_id> cancel_ids;
  // The device stream this lane issued instructions on that the backend may not have
  // marked issued yet (DeviceBackend::flush), or null. Lane runner only.
  Stream* unflushed = nullptr;
  // The device backend's per-lane state (its run of instructions not yet covered by an
  // event), created by the backend on the lane runner. Lane runner only.
  void* device_state = nullptr;

  // Diagnostics: the instruction at the head of the lane (running, or blocked on its
  // predecessors) and what a running one waits for inside fl_object_wait. Written by the
  // runner under diag_lock (uncontended: only dumps take it too); a dump takes a reference
  // under the lock before reading a record.
  SpinLock diag_lock;
  Instr* active = nullptr;
  bool active_blocked = false;
  // The waits of the running instruction that diagnostics show and drain / destroy can
  // give up (WaitRecord): its callback's, and those of tasks of its task groups running on
  // other workers at the same time. A list under diag_lock, newest first.
  WaitRecord* waits = nullptr;

  void set_active(Instr* i, bool blocked);
  void clear_active(Instr* i);

  Lane();
  void push(Instr* i);  // producer (under submit_lock)
  Instr* pop();         // consumer
  Instr* peek() const;  // consumer: the instruction pop() would return next, or null
  bool pushed_since(const Instr* head_before) const;
  void schedule();      // makes the lane runnable if it is idle
  bool try_claim();     // producer: takes the lane if it is idle (scheduled 0 -> 1)
  // Owner, `i` at the head: drops the lane's unit of i->pending. True when i may run now;
  // false when it waits for predecessors (cur = i; the last one resumes the lane).
  bool take_unit(Instr* i);
  // Owner: gives the lane up (scheduled = 0). Returns true when a producer pushed
  // meanwhile and the caller took the lane back (it owns it again and must run it).
  bool give_up();
  // Owner, under the submit lock: nothing is queued.
  bool empty_owned() const;
  // FL_SUBMIT_INLINE: the submitting thread claimed the idle, empty lane (try_claim()
  // under the submit lock) for `i`, which is ready and was not queued. Runs i on the
  // calling thread, then hands the lane on (to the pool if work was queued meanwhile,
  // else idle).
  void run_owned(Instr* i);
  // The calling thread dropped the last unit of the host instruction the lane is blocked on
  // (`cur`), so it owns the lane: runs that one instruction here, then hands the lane on as
  // run_owned() does (Executor::help_complete: a program thread waiting for it).
  void run_resumed_here();
  // Called by whoever dropped the last unit of `lane`'s blocked head: true when the calling
  // thread runs lanes of the same engine (a lane runner) and takes `lane` on right after its
  // own (one at a time; it goes to the pool at once if its own lane goes on with ready work
  // instead). The lane then continues on this worker without a hand-off to another thread
  // (core/engine/README.md, "Lanes as strands"). FLOWLANE_LANE_HANDOFF=0 turns it off.
  static bool continue_here(Lane* lane);
  // Code that may block is about to run on this thread before its lane's turn ends (an
  // object's release callback, run by a completion): the lane it took on (continue_here), if
  // any, goes to the pool now, since that code may wait for it.
  static void hand_off_taken();
  static void run_task(sched::Task* t);

 private:
  // One turn of the run loop (up to kLaneBatch instructions). Returns the lane this thread
  // took on meanwhile (continue_here), to run next, or null.
  Lane* run_batch();
};

}  // namespace flowlane::core
