// Fork-join work of an engine: fl_parallel_for, fl_taskgraph_run and task groups
// (fl_task_group_*). The pool (core/sched) runs the work; this file holds the engine's rules
// for it, so that the C boundary only checks arguments, looks handles up and translates
// statuses:
//   - refused once the engine is being destroyed (FL_ERR_SHUTDOWN);
//   - the calling thread runs bodies and tasks under a kLoop callback frame (context.hpp),
//     so that their waits are refused by the rules of the caller's own callbacks, and a
//     trace span (Observer::on_span) covers the region;
//   - a task group created inside an instruction's callback holds that instruction (a
//     reference until the group is closed, or borrowed from the running task of a group
//     with the same owner: below) and a kGroupTask frame that its tasks run under on other
//     workers (core/engine/README.md, "Calls from callbacks");
//   - a spawn from a thread of the caller's (not code the engine runs) is counted as an
//     outside spawn while it checks for a drain and hands its task over
//     (CancelDrain::begin_outside_spawn), so that fl_engine_drain refuses it or waits for it;
//   - a wait for a group from code the engine runs is in the wait-for graph while it blocks
//     (WaitNote), so that the state dump names a cycle of waits through it and drain and
//     destroy give it up (core/engine/README.md, "Calls from callbacks").
//
// Owns: the group's owner reference (or borrow) and frame (EngineTaskGroup). Calls: Engine
// (pool, observer, recycle, the drain's outside-spawn count), sched::parallel_for,
// sched::TaskGraph::run, sched::TaskGroup (its running task's slot and task-end call).
// Atomic: EngineTaskGroup::hold_ (below). No lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/deadline.hpp"
#include "engine/context.hpp"
#include "flowlane/flowlane.h"
#include "sched/parallel_for.hpp"
#include "sched/task_group.hpp"
#include "sched/taskgraph.hpp"

namespace flowlane::core {

class Engine;
struct Instr;

// fl_parallel_for over [begin, end) on the engine's pool; the caller checked the arguments
// (body non-null, begin <= end). Throws FL_ERR_SHUTDOWN during destroy.
sched::ParallelForResult parallel_for(Engine& e, uint64_t begin, uint64_t end, uint64_t grain, fl_range_fn body,
                                      void* user_data);

// fl_taskgraph_run of `graph` on a pool of the engine with the thread count that
// `num_threads` (-1, 0 or N > 0, checked by the caller) resolves to. Throws FL_ERR_SHUTDOWN
// during destroy; returns the graph's status (sched::TaskGraph::run).
fl_status_t run_graph(Engine& e, sched::TaskGraph& graph, int64_t num_threads);

// A task group of an engine. The group itself is public: spawns and waits that need none of
// the engine's rules go to it directly. The layer above keeps the group's engine by handle
// (a group may outlive its engine) and passes the engine to each call while it lives.
//
// The owner. A group created inside a callback of a pending instruction X has X as owner:
// its tasks run under a kGroupTask frame naming X (context.hpp), which reads X's record, so
// X's record must outlive the group. A group created by X's callback itself holds a
// reference on X (one per callback that makes groups: not a hot path). A group created inside
// a running task of a group with the same owner — fork-join recursion inside a callback, a
// group per call on every worker — borrows instead: while that task runs, its group keeps X
// alive, so the new group needs nothing of X's record until the task ends. It is linked in
// the task run's slot (sched::TaskGroup::running_slot(), this thread only); destroyed on the
// creating thread before the task ends (the usual case), it is unlinked and X's record was
// never written. When the task ends (end_borrows(), called by the pool before the task's
// unit is dropped) the groups still linked take a reference each (upgrade). Destroyed on
// another thread while it borrows, a group is detached instead: that thread cannot unlink it
// from the creator's list, so the creator gives the record back when its task ends.
//
//   hold_   kNone -> (open) kRef | kBorrow;  kBorrow -> kRef (creator's task end, a CAS) or
//           kBorrow -> kDetached (destroy on another thread, a CAS) or kBorrow -> kNone
//           (destroy on the creating thread, which alone runs the task end: no race).
//   The CASes are acq_rel: the creator's reference on X happens before a destroyer that
//   sees kRef drops it; a destroyer's detach happens before the creator gives the record
//   back. A destroyer reads hold_ with acquire (pairs with those CASes).
class EngineTaskGroup {
 public:
  sched::TaskGroup group;
  uint64_t handle = 0;  // the caller's fl_task_group_t* value (set by the layer above), for messages
  // Gives the record back to the layer above (its recycler); set by that layer. Called by
  // the creating thread for a group detached by a destroy on another thread.
  void (*give_back)(EngineTaskGroup* g) = nullptr;

  // fl_task_group_create (the group is idle, fresh or recycled): binds it to the engine's
  // pool and, when called inside a callback of one of its instructions, takes that
  // instruction as the owner (a reference, or borrowed from the running task: above) and
  // runs the group's tasks under the owner's frame. Throws FL_ERR_SHUTDOWN during destroy
  // (nothing taken then).
  void open(Engine& e);
  // fl_task_group_spawn: throws FL_ERR_SHUTDOWN during destroy or, from a thread of the
  // caller's, once the engine was drained; std::bad_alloc from the group (nothing spawned).
  void spawn(Engine& e, fl_task_fn fn, void* user_data, fl_release_fn cleanup);
  // fl_task_group_wait(_for) and the wait of fl_task_group_destroy (`call` names it), for
  // engine `e` alive: group.wait(), in the wait-for graph while it blocks, if code the
  // engine runs waits (WaitNote, engine/waits.hpp). When drain or destroy gave the wait up
  // (it was on a cycle of waits) returns FL_ERR_CANCELLED, reported, with *given_up set;
  // otherwise group.wait()'s result (not reported), *given_up false.
  fl_status_t wait(Engine& e, const char* call, std::string* detail, const Deadline& deadline, bool* given_up);
  // Wakes the threads blocked in a wait for the group (drain or destroy gave one up).
  void wake_waiters() const { const_cast<sched::TaskGroup&>(group).wake_waiters(); }
  // fl_task_group_destroy, after the group's last wait: lets the owner go. `e` is the
  // group's engine, or null once it was destroyed (an owner's record is then left: the
  // engine that would recycle it is gone). True when the caller gives the record back now;
  // false when the group was detached (the creating thread will).
  [[nodiscard]] bool close(Engine* e);

  // The group of engine `e` whose task the calling thread runs (its innermost), or null.
  static const EngineTaskGroup* running(const Engine& e) { return of(sched::TaskGroup::running(), e); }
  // The engine group of pool group `g` (may be null) when it is one of engine `e`'s, or null.
  static const EngineTaskGroup* of(const sched::TaskGroup* g, const Engine& e);
  // "task group 0x000000060000002a".
  std::string describe() const;

 private:
  enum class Hold : uint8_t { kNone, kRef, kBorrow, kDetached };
  void borrow(void** slot);
  void unlink_borrow();
  void drop_ref(Engine* e);
  // The pool's task-end call (sched::TaskGroup::set_task_end): the groups still borrowing
  // from the run that ends (its slot's list).
  static void end_borrows(void* head);

  const Engine* engine_ = nullptr;  // compared only: the group may outlive it
  Instr* owner_ = nullptr;
  CallbackFrame frame_{};
  std::atomic<Hold> hold_{Hold::kNone};
  // Borrowing: the creating thread, and the list in its running task's slot (touched only by
  // that thread).
  const void* creator_ = nullptr;
  void** borrow_slot_ = nullptr;
  EngineTaskGroup* borrow_prev_ = nullptr;
  EngineTaskGroup* borrow_next_ = nullptr;
};

}  // namespace flowlane::core
