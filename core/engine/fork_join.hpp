// Fork-join work of an engine: fl_parallel_for, fl_taskgraph_run and task groups
// (fl_task_group_*). The pool (core/sched) runs the work; this file holds the engine's rules
// for it, so that the C boundary only checks arguments, looks handles up and translates
// statuses:
//   - refused once the engine is being destroyed (FL_ERR_SHUTDOWN);
//   - the calling thread runs bodies and tasks under a kLoop callback frame (context.hpp),
//     so that their waits are refused by the rules of the caller's own callbacks, and a
//     trace span (Observer::on_span) covers the region;
//   - a task group created inside an instruction's callback holds that instruction (a
//     reference, until the group is closed) and a kGroupTask frame that its tasks run under
//     on other workers (core/engine/README.md, "Calls from callbacks");
//   - a spawn from a thread of the caller's (not code the engine runs) is counted as an
//     outside spawn while it checks for a drain and hands its task over
//     (CancelDrain::begin_outside_spawn), so that fl_engine_drain refuses it or waits for it;
//   - a wait for a group from code the engine runs is in the wait-for graph while it blocks
//     (WaitNote), so that the state dump names a cycle of waits through it and drain and
//     destroy give it up (core/engine/README.md, "Calls from callbacks").
//
// Owns: the group's owner reference and frame (EngineTaskGroup). Calls: Engine (pool,
// observer, recycle, the drain's outside-spawn count), sched::parallel_for,
// sched::TaskGraph::run, sched::TaskGroup. Shares no lock or atomic of its own.
#pragma once

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
class EngineTaskGroup {
 public:
  sched::TaskGroup group;
  uint64_t handle = 0;  // the caller's fl_task_group_t* value (set by the layer above), for messages

  // fl_task_group_create (the group is idle, fresh or recycled): binds it to the engine's
  // pool and, when called inside a callback of one of its instructions, takes that
  // instruction as the owner (a reference) and runs the group's tasks under the owner's
  // frame. Throws FL_ERR_SHUTDOWN during destroy (nothing taken then).
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
  // fl_task_group_destroy, after the group's last wait: drops the owner's reference. `e` is
  // the group's engine, or null once it was destroyed (the owner's record is then left:
  // the engine that would recycle it is gone).
  void close(Engine* e);

  // The group of engine `e` whose task the calling thread runs (its innermost), or null.
  static const EngineTaskGroup* running(const Engine& e);
  // "task group 0x000000060000002a".
  std::string describe() const;

 private:
  const Engine* engine_ = nullptr;  // compared only: the group may outlive it
  Instr* owner_ = nullptr;
  CallbackFrame frame_{};
};

}  // namespace flowlane::core
