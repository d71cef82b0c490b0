// Taking a snapshot of an engine's lanes and its wait-for graph (diag/snapshot.hpp).
#include "diag/snapshot.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <set>

#include "engine/fork_join.hpp"

namespace flowlane::diag {

using core::Instr;
using core::InstrState;
using core::is_terminal;
using core::Lane;
using core::LaneWait;
using core::Stream;
using core::WaitRecord;

const char* state_name(InstrState s) {
  switch (s) {
    case InstrState::kFree: return "recycled";
    case InstrState::kPending: return "pending";
    case InstrState::kRunning: return "running";
    case InstrState::kIssued: return "issued (device work pending)";
    case InstrState::kDone: return "done";
    case InstrState::kFailed: return "failed";
    case InstrState::kSkipped: return "skipped";
  }
  return "?";
}

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

std::string where_is(const Snapshot& s, const Instr* p) {
  uint32_t l = p->stream->lane->id;
  auto it = s.by_lane.find(l);
  if (it == s.by_lane.end()) return "";
  const LaneSnap& ls = s.lanes[it->second];
  if (ls.head.i == p) return "; it is the head of lane " + std::to_string(l);
  if (ls.head.i != nullptr && !is_terminal(p->load_state()))
    return "; queued on lane " + std::to_string(l) + " behind " + ls.head.i->describe();
  return "";
}

namespace {

// The steps of reading one lane's head, each under the lane's diag_lock (held by
// snapshot_head): the head cannot start meanwhile (the runner takes the lock to mark an
// instruction running), so a blocked head's deps are stable, and nothing queued behind it
// can start, complete and be recycled.

// A blocked head's unfinished predecessors.
void snapshot_deps(Engine& e, Instr* head, LaneSnap& ls) {
  for (const Instr::Dep& d : head->deps) {
    if ((d.flags & Instr::Dep::kEdge) == 0 || is_terminal(d.pred->load_state())) continue;
    d.pred->ref();
    ls.waits.push_back(DepSnap{Ref(d.pred, &e), d.obj ? d.obj->handle : 0});
  }
}

// One registered wait, copied under its list's lock (held by the caller): the record, and
// what it names (a user referenced, a group's handle and unfinished count) cannot go away
// while it is linked.
WaitSnap snapshot_wait(Engine& e, const WaitRecord* r, Lane* list) {
  WaitSnap w;
  w.rec = r;
  w.list = list;
  w.by = r->by;
  w.task_of = r->task_of;
  w.task_of_handle = r->task_of != nullptr ? r->task_of->handle : 0;
  w.given_up = r->cancelled.load(std::memory_order_relaxed);  // stored under this lock
  if (r->on != nullptr) {
    r->on->ref();  // the record holds a reference while linked
    w.on = Ref(r->on, &e);
    w.obj = r->obj;  // a handle: the object may be gone
  } else if (r->group != nullptr) {
    w.group = r->group;
    w.group_handle = r->group->handle;
    w.group_unfinished = r->group->group.unfinished();
    w.call = std::string(r->call) + " for " + r->group->describe() + " (" + std::to_string(w.group_unfinished) +
             (w.group_unfinished == 1 ? " unfinished task)" : " unfinished tasks)");
  } else {
    w.stream = r->stream;
    w.target = r->target;
    w.is_id = r->is_id;
    // Acquire pairs with the release store of last_completed_id in complete() and
    // the fetch_add of completed in Stream::advance_completed().
    w.call = std::string(r->call) + " (" + w.stream->describe() + "): " +
             (w.is_id ? "for its instruction #" + std::to_string(w.target) + ", " +
                            (w.stream->reached(w.target, true) ? "completed" : "not completed yet")
                      : "for " + std::to_string(w.target) + " of its instructions to complete, " +
                            std::to_string(w.stream->completed.load(std::memory_order_acquire)) + " have");
  }
  return w;
}

// A running head's registered waits, oldest first.
void snapshot_running_waits(Engine& e, Lane& lane, LaneSnap& ls) {
  for (const WaitRecord* r = lane.waits; r != nullptr; r = r->next)
    if (r->by == lane.active) ls.running_waits.push_back(snapshot_wait(e, r, &lane));
  std::reverse(ls.running_waits.begin(), ls.running_waits.end());  // oldest first
}

// The first instructions queued behind the head. The lane's stub node is skipped.
void snapshot_queued(Engine& e, Lane& lane, LaneSnap& ls) {
  // Acquire pairs with the release store of lane_next in Lane::push().
  for (Instr* q = lane.active->lane_next.load(std::memory_order_acquire); q != nullptr;
       q = q->lane_next.load(std::memory_order_acquire)) {
    if (q == &lane.stub) continue;
    if (ls.queued.size() == kQueuedShown) {
      ls.more_queued = true;
      break;
    }
    q->ref();
    ls.queued.push_back(Ref(q, &e));
  }
}

// The lane's head (referenced), what it waits for and what is queued behind it.
void snapshot_head(Engine& e, Lane& lane, LaneSnap& ls) {
  std::lock_guard<SpinLock> lock(lane.diag_lock);
  // A head that has finished is shown only while a release callback its completion runs
  // waits (its lane cannot move on meanwhile); it stays referenceable until its
  // completion clears `active`, which needs this lock.
  const bool completing = lane.active != nullptr && is_terminal(lane.active->load_state());
  bool head_waits = false;  // a wait of the head's (not of a task that outlived an earlier head)
  for (const WaitRecord* r = lane.waits; r != nullptr && !head_waits; r = r->next) head_waits = r->by == lane.active;
  if (lane.active == nullptr || (completing && !head_waits)) return;
  lane.active->ref();
  ls.head = Ref(lane.active, &e);
  ls.completing = completing;
  ls.blocked = lane.active_blocked;
  // A head that is neither blocked nor running has not started its function: it is
  // skipped or cancelled (its cleanup runs instead), or in the instant before it starts.
  ls.not_started = !ls.blocked && lane.active->load_state() == InstrState::kPending;
  if (ls.blocked)
    snapshot_deps(e, lane.active, ls);
  else
    snapshot_running_waits(e, lane, ls);
  snapshot_queued(e, lane, ls);
}

// The edge of a registered wait out of `from` (who waits: "'x' (#3, lane 1, host)" or "a
// task of task group 0x.."), if what it waits for is not reached; `task` marks a group
// task's wait out of its group's node.
void add_wait_edge(Snapshot& s, Node from, const std::string& who, const WaitSnap& w, bool task, const Instr* head) {
  const EdgeKind kind = w.group != nullptr ? EdgeKind::kGroupWait : task ? EdgeKind::kTaskWait : EdgeKind::kCallbackWait;
  if (w.on.i != nullptr && !is_terminal(w.on.i->load_state())) {
    const bool self = !from.group && w.on.i->stream->lane->id == from.id;
    s.edges.push_back({from, Node::lane(w.on.i->stream->lane->id),
                       who + " waits in fl_object_wait (object " + hex(w.obj) + ") for " + w.on.i->describe() + " (" +
                           state_name(w.on.i->load_state()) + ")" +
                           (self ? ", which is queued behind it on its own lane" : ""),
                       kind, &w, head});
  } else if (w.stream != nullptr && !w.stream->reached(w.target, w.is_id)) {
    s.edges.push_back({from, Node::lane(w.stream->lane->id), who + " waits in " + w.call, kind, &w, head});
  } else if (w.group != nullptr && w.group_unfinished > 0) {
    s.edges.push_back({from, Node::task_group(w.group_handle), who + " waits in " + w.call, kind, &w, head});
  }
}

// The wait-for edges out of one lane: to its blocked head's predecessors, to what its
// running waits wait for, to the peer lanes of its collective (same engine).
void add_edges(Snapshot& s, const LaneSnap& ls) {
  const Node from = Node::lane(ls.id);
  for (const DepSnap& d : ls.waits)
    s.edges.push_back({from, Node::lane(d.pred.i->stream->lane->id),
                       ls.head.i->describe() + " is blocked until " + d.pred.i->describe() + " (" +
                           state_name(d.pred.i->load_state()) + ") completes (object " + hex(d.object) + ")",
                       EdgeKind::kDependency, nullptr, ls.head.i});
  for (const WaitSnap& w : ls.running_waits) add_wait_edge(s, from, ls.head.i->describe(), w, false, ls.head.i);
  if (ls.coll != nullptr)
    for (const LaneWait::Peer& p : ls.coll->peers)
      if (p.engine == s.e)
        s.edges.push_back({from, Node::lane(p.lane), ls.head.i->describe() + ": " + ls.coll->what,
                           EdgeKind::kDependency, nullptr, ls.head.i});
}

// Every wait of a task of a task group: on the lanes' lists (any head's, also one that
// completed while the task went on) and on the engine's loose list.
void snapshot_task_waits(Engine& e, Snapshot& s) {
  for (const auto& lp : e.lanes()) {
    Lane& lane = *lp;
    std::lock_guard<SpinLock> lock(lane.diag_lock);
    for (const WaitRecord* r = lane.waits; r != nullptr; r = r->next)
      if (r->task_of != nullptr) s.task_waits.push_back(snapshot_wait(e, r, &lane));
  }
  std::lock_guard<SpinLock> lock(e.waits().loose_lock());
  for (const WaitRecord* r = e.waits().loose(); r != nullptr; r = r->next) s.task_waits.push_back(snapshot_wait(e, r, nullptr));
}

}  // namespace

Snapshot take_snapshot(Engine& e) {
  Snapshot s;
  s.e = &e;
  for (core::Extension* x : e.extensions()) x->lane_waits(s.colls);
  for (const auto& lp : e.lanes()) {
    Lane& lane = *lp;
    // Relaxed: the lane's counters are bumped relaxed in complete() and submit(); a
    // snapshot needs only recent values (what it follows is under diag_lock).
    uint64_t done = lane.completed_count();
    uint64_t sub = lane.submitted.load(std::memory_order_relaxed);
    if (sub <= done) continue;
    LaneSnap ls;
    ls.id = lane.id;
    ls.submitted = sub;
    ls.completed = done;
    snapshot_head(e, lane, ls);
    for (const LaneWait& cw : s.colls)
      if (cw.lane == ls.id && ls.head.i != nullptr && cw.instr == ls.head.i->id && !ls.blocked) ls.coll = &cw;
    s.by_lane[ls.id] = s.lanes.size();
    s.lanes.push_back(std::move(ls));
  }
  snapshot_task_waits(e, s);
  for (const LaneSnap& ls : s.lanes)
    if (ls.head.i != nullptr) add_edges(s, ls);
  for (const WaitSnap& w : s.task_waits)
    add_wait_edge(s, Node::task_group(w.task_of_handle), "a task of " + node_name(Node::task_group(w.task_of_handle)),
                  w, true, nullptr);
  return s;
}

std::vector<std::vector<size_t>> find_cycles(const Snapshot& s, bool skip_given_up) {
  std::map<Node, std::vector<size_t>> out_edges;
  for (size_t k = 0; k < s.edges.size(); ++k)
    if (!skip_given_up || s.edges[k].wait == nullptr || !s.edges[k].wait->given_up)
      out_edges[s.edges[k].from].push_back(k);
  std::map<Node, int> color;  // 0 white, 1 on stack, 2 done
  std::vector<size_t> stack;  // edges on the current path
  std::vector<std::vector<size_t>> cycles;
  std::set<std::vector<Node>> seen;
  auto dfs = [&](auto&& self, Node u) -> void {
    color[u] = 1;
    for (size_t k : out_edges[u]) {
      Node v = s.edges[k].to;
      if (color[v] == 1) {
        std::vector<size_t> cyc;
        size_t start = stack.size();
        while (start > 0 && s.edges[stack[start - 1]].from != v) --start;
        if (v == u) start = stack.size();
        else if (start > 0) --start;
        for (size_t j = start; j < stack.size(); ++j) cyc.push_back(stack[j]);
        cyc.push_back(k);
        std::vector<Node> nodes;
        for (size_t j : cyc) nodes.push_back(s.edges[j].from);
        std::sort(nodes.begin(), nodes.end());
        if (seen.insert(nodes).second && cycles.size() < 8) cycles.push_back(cyc);
      } else if (color[v] == 0) {
        stack.push_back(k);
        self(self, v);
        stack.pop_back();
      }
    }
    color[u] = 2;
  };
  for (const auto& [u, edges] : out_edges)
    if (color[u] == 0) dfs(dfs, u);
  return cycles;
}

std::string node_name(Node n) { return n.group ? "task group " + hex(n.id) : "lane " + std::to_string(n.id); }

}  // namespace flowlane::diag
