// Giving up the waits that lie on a cycle of the wait-for graph (diag/dump.hpp), for
// fl_engine_drain and engine destroy: the shutdown monitor (watchdog.cpp) calls
// cancel_cycle_waits() every kShutdownScan while either runs.
//
// Which waits are given up. A cycle can never complete on its own, and each one goes through
// at least one registered wait (dependencies only point to earlier submissions), so giving
// up every registered wait on it is enough; but a wait given up fails in the program's
// hands, so the scan gives up as few kinds as it can:
//   1. callback waits on a cycle: the running instructions' own fl_object_wait,
//      fl_stream_synchronize and fl_instr_wait_for (a task of a group made in a callback
//      counts as that callback while its instruction is pending) — the rule before task
//      groups were in the graph;
//   2. only when none was found, waits for task groups on a cycle (fl_task_group_wait(_for),
//      fl_task_group_destroy): the group's tasks go on running, and the waiter returns
//      FL_ERR_CANCELLED.
// A wait of a task out of its group's node (kTaskWait) is never given up: every cycle
// through a group's node enters it through a wait for the group. The graph of each scan
// leaves out the waits already given up (they are returning), so a cycle that kind 1 broke
// does not make a group wait look as if it were still on it.
//
// A wait given up is woken (the futex of what it sleeps on, or its stream's condition
// variable). A wake-up that comes between the waiter's look at its flag and its sleep is
// lost for the futex waits (fl_object_wait, task groups), so every scan wakes again each wait
// that was given up and is still registered.
#include <climits>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "diag/dump.hpp"
#include "diag/snapshot.hpp"
#include "engine/fork_join.hpp"

namespace flowlane::diag {

using core::WaitRecord;

namespace {

// Whether record r is the wait `w` was copied from: linked in the same list, for the same
// thing, by the same waiter (the lane may have moved on since the snapshot, and a record at
// the same address may be a later wait).
bool same_wait(const WaitRecord* r, const WaitSnap& w) {
  if (r->by != w.by || r->task_of != w.task_of || r->on != w.on.i || r->group != w.group) return false;
  return w.on.i != nullptr || w.group != nullptr ||
         (r->stream == w.stream && r->target == w.target && r->is_id == w.is_id);
}

// Gives up the registered wait `w` (or wakes it again), if it is still the same wait and,
// for a lane's edge out of its running head, that head still runs. Returns whether it did.
bool give_up(Engine& e, const WaitSnap& w, const core::Instr* head) {
  core::Stream* wake_stream = nullptr;
  bool done = false;
  auto act = [&](WaitRecord* list) {
    WaitRecord* r = list;
    while (r != nullptr && r != w.rec) r = r->next;
    if (r == nullptr || !same_wait(r, w)) return;
    // Release pairs with the acquire loads of the waits: Waits::sleep_until_terminal()
    // (fl_object_wait), given_up() (stream.hpp: fl_stream_synchronize, fl_instr_wait_for),
    // BlockWatch::stopped() (sched/latch.hpp: task group waits).
    r->cancelled.store(true, std::memory_order_release);
    // Woken under the lock: while the record is linked, what it names is alive.
    if (r->on != nullptr)
      futex_wake(&r->on->state, INT_MAX);  // fl_object_wait sleeps on the state of what it waits for
    else if (r->group != nullptr)
      r->group->wake_waiters();  // on the group's latch
    else
      wake_stream = r->stream;
    done = true;
  };
  if (w.list != nullptr) {
    std::lock_guard<SpinLock> lock(w.list->diag_lock);
    if (head != nullptr && w.list->active != head) return false;
    act(w.list->waits);
  } else {
    std::lock_guard<SpinLock> lock(e.waits().loose_lock());
    act(e.waits().loose());
  }
  // Stream waits sleep on the stream's condition variable (the stream lives as long as the
  // engine); woken outside the list's lock, which no holder of wait_mu ever takes.
  if (wake_stream != nullptr) wake_stream->wake_waiters();
  return done;
}

}  // namespace

int cancel_cycle_waits(Engine& e) {
  Snapshot s = take_snapshot(e);
  // The graph without the waits given up already (they are returning).
  std::map<Node, std::vector<Node>> next;
  for (const GraphEdge& g : s.edges)
    if (g.wait == nullptr || !g.wait->given_up) next[g.from].push_back(g.to);
  auto reaches = [&next](Node from, Node to) {
    std::set<Node> seen{from};
    std::vector<Node> todo{from};
    while (!todo.empty()) {
      Node u = todo.back();
      todo.pop_back();
      if (u == to) return true;
      for (Node v : next[u])
        if (seen.insert(v).second) todo.push_back(v);
    }
    return false;
  };
  std::set<const WaitRecord*> acted;
  // Waits given up by an earlier scan and still waiting: woken again.
  for (const GraphEdge& g : s.edges)
    if (g.wait != nullptr && g.wait->given_up && acted.insert(g.wait->rec).second) give_up(e, *g.wait, g.head);
  // Every wait of the first kind that lies on a cycle (not one per cycle: two tasks of one
  // instruction's groups may wait on two cycles through the same lanes, or on one, and each
  // would otherwise hang); the next kind only when none was found.
  int n = 0;
  for (EdgeKind kind : {EdgeKind::kCallbackWait, EdgeKind::kGroupWait}) {
    for (const GraphEdge& g : s.edges) {
      if (g.kind != kind || g.wait->given_up || !reaches(g.to, g.from)) continue;
      if (acted.insert(g.wait->rec).second && give_up(e, *g.wait, g.head)) ++n;
    }
    if (n > 0) break;
  }
  return n;
}

}  // namespace flowlane::diag
