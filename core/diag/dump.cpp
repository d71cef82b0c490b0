// The state dump's text, from a snapshot of the engine (diag/snapshot.hpp). Giving up the
// waits on a cycle: cancel_cycles.cpp.
#include "diag/dump.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "diag/snapshot.hpp"

namespace flowlane::diag {

using core::Instr;
using core::Lane;
using core::Stream;
using core::WaitRecord;

namespace {

// "in-flight window: ...", "workers: ...", unreturned failures, counters.
void engine_lines(std::string& out, Engine& e, const Snapshot& s) {
  fl_engine_stats_t st = e.stats();
  int64_t inflight = e.inflight();
  uint64_t limit = e.inflight_limit();
  uint32_t parked = e.window_waiters();
  out += "in-flight window: " + std::to_string(inflight < 0 ? 0 : inflight) + " of " + std::to_string(limit) +
         " instructions" + (inflight >= int64_t(limit) ? " (FULL)" : "") + "; " + std::to_string(parked) +
         (parked == 1 ? " submitter" : " submitters") + " parked waiting for room" +
         (parked ? " (blocked in fl_submit_*)" : "") + "\n";
  std::string running;
  size_t n = 0;
  for (const LaneSnap& ls : s.lanes)
    if (ls.head.i != nullptr && !ls.blocked) running += (n++ ? ", " : "") + std::to_string(ls.id);
  bool starving = false;
  for (const LaneSnap& ls : s.lanes) starving |= ls.head.i == nullptr;
  out += "workers: " + std::to_string(e.worker_count()) + "; lanes running a callback: " + std::to_string(n) +
         (n ? " (lane" + std::string(n > 1 ? "s " : " ") + running + ")" : "");
  if (n >= e.worker_count() && starving)
    out += "; every worker is inside a callback, so runnable lanes cannot start (worker starvation)";
  out += "\n";
  const unsigned blocked = e.pool().blocked_workers(), spares = e.pool().spare_workers();
  if (blocked > 0 || spares > 0) {
    out += "workers blocked in a wait inside a callback or task: " + std::to_string(blocked) +
           "; spare workers standing in for them: " + std::to_string(std::min(blocked, spares)) + " of " +
           std::to_string(spares) + " started";
    if (blocked > sched::Pool::kMaxSpareWorkers)
      out += " (the limit of " + std::to_string(sched::Pool::kMaxSpareWorkers) +
             " spares is reached: blocked workers beyond it are not replaced)";
    out += "\n";
  }
  std::string oldest;
  size_t failures = e.unreturned_failures(&oldest);
  out += "failures not returned by any wait yet: " + std::to_string(failures) +
         (failures ? "; the oldest: " + oldest : "") + "\n";
  out += "counters: submitted " + std::to_string(st.submitted) + ", completed " + std::to_string(st.completed) +
         ", failed " + std::to_string(st.failed) + ", window stalls " + std::to_string(st.window_stalls) + "\n";
}

// Per-stream pending counts, grouped by lane: "host stream: 2 pending (completed 3 of 5)".
std::map<uint32_t, std::string> pending_streams(Engine& e) {
  std::map<uint32_t, std::string> streams_of;
  for (Stream* str : e.all_streams()) {
    // Pair with the release store of submitted in submit() and the seq_cst fetch_add of
    // completed in Stream::advance_completed().
    uint64_t sub = str->submitted.load(std::memory_order_acquire);
    uint64_t done = str->completed.load(std::memory_order_acquire);
    if (sub <= done) continue;
    std::string& t = streams_of[str->lane->id];
    std::string d = str->describe();
    t += (t.empty() ? "" : "; ") + d.substr(d.find(", ") + 2) + " stream: " + std::to_string(sub - done) +
         " pending (completed " + std::to_string(done) + " of " + std::to_string(sub) + ")";
  }
  return streams_of;
}

// One registered wait: "<prefix>fl_object_wait for object 0x.., written by ...", or
// "<prefix>fl_stream_synchronize (lane 2, host): ...", "<prefix>fl_task_group_wait for task
// group 0x.. (2 unfinished tasks)".
void wait_line(std::string& out, const Snapshot& s, const WaitSnap& ws, Node from, const char* prefix) {
  out += prefix;
  if (const Instr* w = ws.on.i) {
    bool self = !from.group && w->stream->lane->id == from.id;
    out += "fl_object_wait for object " + hex(ws.obj) + ", written by " + w->describe() + ", " +
           state_name(w->load_state()) +
           (self ? "; it is queued BEHIND this instruction on the same lane, so it can never run" : where_is(s, w));
  } else {
    out += ws.call;
  }
  if (ws.given_up) out += " [given up by drain or destroy: it returns FL_ERR_CANCELLED]";
  out += "\n";
}

// A head that has started (or finished, held up by a release callback): what it waits for.
void running_head(std::string& out, const Snapshot& s, const LaneSnap& ls) {
  const Instr* h = ls.head.i;
  out += "  oldest: " + h->describe() +
         (ls.completing ? " COMPLETING: it finished, and a release callback its completion runs (an object's "
                          "last reference went with it) holds up the lane\n"
                        : " RUNNING its callback\n");
  for (const WaitSnap& ws : ls.running_waits) wait_line(out, s, ws, Node::lane(ls.id), "    waits in ");
  if (ls.coll != nullptr) {
    out += "    in a collective rendezvous: " + ls.coll->what + "\n";
  } else if (ls.running_waits.empty()) {
    out += "    (not waiting on anything flowlane tracks: computing, or blocked on something outside flowlane)\n";
  }
}

// One lane with pending work: its head and what it waits for, what is queued behind it.
void lane_section(std::string& out, const Snapshot& s, const LaneSnap& ls, std::map<uint32_t, std::string>& streams_of) {
  out += "lane " + std::to_string(ls.id) + ": " + std::to_string(ls.submitted - ls.completed) + " pending";
  if (streams_of.count(ls.id)) out += " [" + streams_of[ls.id] + "]";
  out += "\n";
  if (ls.head.i == nullptr) {
    out += "  no instruction at its head right now (the lane is queued for a worker or between instructions)\n";
    return;
  }
  const Instr* h = ls.head.i;
  if (ls.blocked) {
    out += "  oldest: " + h->describe() + " BLOCKED, waiting for " + std::to_string(ls.waits.size()) +
           " unfinished predecessor(s):\n";
    for (const DepSnap& d : ls.waits)
      out += "    object " + hex(d.object) + ": produced by " + d.pred.i->describe() + ", " +
             state_name(d.pred.i->load_state()) + where_is(s, d.pred.i) + "\n";
    if (ls.waits.empty()) out += "    (its predecessors have just completed; it is about to run)\n";
  } else if (ls.not_started) {
    out += "  oldest: " + h->describe() +
           " NOT RUN: skipped (an input is poisoned) or cancelled, and finishing (its cleanup runs instead of "
           "its function), unless it is just starting\n";
  } else {
    running_head(out, s, ls);
  }
  if (!ls.queued.empty()) {
    out += "  queued behind it:";
    for (size_t q = 0; q < ls.queued.size(); ++q) out += std::string(q ? "," : "") + " " + ls.queued[q].i->describe();
    out += ls.more_queued ? ", and more\n" : "\n";
  }
}

// The task groups that a registered wait waits for, each with its tasks' registered waits.
void groups_section(std::string& out, const Snapshot& s) {
  std::map<uint64_t, int64_t> waited;  // handle -> unfinished tasks
  auto note = [&waited](const WaitSnap& w) {
    if (w.group != nullptr) waited[w.group_handle] = w.group_unfinished;
  };
  for (const LaneSnap& ls : s.lanes) std::for_each(ls.running_waits.begin(), ls.running_waits.end(), note);
  std::for_each(s.task_waits.begin(), s.task_waits.end(), note);
  if (waited.empty()) return;
  out += "task groups waited for: " + std::to_string(waited.size()) + "\n";
  for (const auto& [h, unfinished] : waited) {
    out += node_name(Node::task_group(h)) + ": " + std::to_string(unfinished) +
           (unfinished == 1 ? " unfinished task" : " unfinished tasks") + "\n";
    size_t n = 0;
    for (const WaitSnap& w : s.task_waits)
      if (w.task_of_handle == h && ++n) wait_line(out, s, w, Node::task_group(h), "  a task waits in ");
    if (n == 0)
      out += "  (no task of it waits on anything flowlane tracks: they compute, block outside flowlane, or wait "
             "for a worker)\n";
  }
}

void cycles_section(std::string& out, const Snapshot& s) {
  auto cycles = find_cycles(s);
  if (cycles.empty()) {
    out += "wait cycles: none found\n";
    return;
  }
  for (const auto& cyc : cycles) {
    std::string path;
    for (size_t k : cyc) path += node_name(s.edges[k].from) + " -> ";
    path += node_name(s.edges[cyc.front()].from);
    out += "DEADLOCK: cycle of waits " + path + " (nothing on it can complete):\n";
    for (size_t k : cyc) out += "  " + s.edges[k].why + "\n";
  }
}

}  // namespace

std::string build_dump(Engine& e, const std::string& reason) {
  Snapshot s = take_snapshot(e);
  std::string out;
  out += "=== flowlane state dump: engine " + hex(e.handle()) + " ===\n";
  if (!reason.empty()) out += reason + "\n";
  engine_lines(out, e, s);
  std::map<uint32_t, std::string> streams_of = pending_streams(e);
  out += "lanes with pending work: " + std::to_string(s.lanes.size()) + "\n";
  for (const LaneSnap& ls : s.lanes) lane_section(out, s, ls, streams_of);
  groups_section(out, s);
  cycles_section(out, s);
  for (core::Extension* x : e.extensions()) x->dump(out);
  out += "=== end of dump ===\n";
  return out;
}

}  // namespace flowlane::diag
