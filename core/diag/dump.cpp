// The state dump's text, from a snapshot of the engine (diag/snapshot.hpp), and cancelling
// the waits that lie on a cycle of the wait-for graph (diag/dump.hpp).
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

// A head that has started (or finished, held up by a release callback): what it waits for.
void running_head(std::string& out, const Snapshot& s, const LaneSnap& ls) {
  const Instr* h = ls.head.i;
  out += "  oldest: " + h->describe() +
         (ls.completing ? " COMPLETING: it finished, and a release callback its completion runs (an object's "
                          "last reference went with it) holds up the lane\n"
                        : " RUNNING its callback\n");
  for (const WaitSnap& ws : ls.running_waits) {
    if (const Instr* w = ws.on.i) {
      bool self = w->stream->lane->id == ls.id;
      out += "    waits in fl_object_wait for object " + hex(ws.obj) + ", written by " + w->describe() + ", " +
             state_name(w->load_state()) +
             (self ? "; it is queued BEHIND this instruction on the same lane, so it can never run" : where_is(s, w)) +
             "\n";
    } else {
      out += "    waits in " + ws.call + "\n";
    }
  }
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

void cycles_section(std::string& out, const Snapshot& s) {
  auto cycles = find_cycles(s);
  if (cycles.empty()) {
    out += "wait cycles: none found\n";
    return;
  }
  for (const auto& cyc : cycles) {
    std::string path;
    for (size_t k : cyc) path += "lane " + std::to_string(s.edges[k].from) + " -> ";
    path += "lane " + std::to_string(s.edges[cyc.front()].from);
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
  cycles_section(out, s);
  for (core::Extension* x : e.extensions()) x->dump(out);
  out += "=== end of dump ===\n";
  return out;
}

int cancel_cycle_waits(Engine& e) {
  Snapshot s = take_snapshot(e);
  // A wait is on a cycle when the lane it waits for reaches the waiting lane back. Every such
  // wait is given up, not one per cycle: two tasks of one instruction's task groups may wait
  // on two cycles through the same lanes, or on one, and each would otherwise hang.
  std::map<uint32_t, std::vector<uint32_t>> next;
  for (const GraphEdge& g : s.edges) next[g.from].push_back(g.to);
  auto reaches = [&next](uint32_t from, uint32_t to) {
    std::set<uint32_t> seen{from};
    std::vector<uint32_t> todo{from};
    while (!todo.empty()) {
      uint32_t u = todo.back();
      todo.pop_back();
      if (u == to) return true;
      for (uint32_t v : next[u])
        if (seen.insert(v).second) todo.push_back(v);
    }
    return false;
  };
  int n = 0;
  for (const GraphEdge& g : s.edges) {
    if (!g.cancellable || !reaches(g.to, g.from)) continue;
    Lane& lane = e.lane(g.from);
    bool stream_wait = false;
    {
      std::lock_guard<SpinLock> lock(lane.diag_lock);
      // Still the same wait (the lane may have moved on since the snapshot, and a record at
      // the same address may be a later wait): linked, of the same head, for the same thing.
      if (lane.active != g.waiter) continue;
      WaitRecord* r = lane.waits;
      while (r != nullptr && r != g.rec) r = r->next;
      if (r == nullptr) continue;
      const bool same =
          r->by == g.waiter &&
          (g.waited != nullptr
               ? r->on == g.waited
               : r->on == nullptr && r->stream == g.stream && r->target == g.target && r->is_id == g.is_id);
      if (!same) continue;
      // Release pairs with the acquire loads in Waits::sleep_until_terminal() (fl_object_wait)
      // and given_up() (stream.hpp: fl_stream_synchronize, fl_instr_wait_for).
      r->cancelled.store(true, std::memory_order_release);
      if (g.waited != nullptr)
        futex_wake(&g.waited->state, INT_MAX);  // fl_object_wait sleeps on the state of what it waits for
      else
        stream_wait = true;
      ++n;
    }
    // The others sleep on the stream's condition variable (the stream lives as long as the
    // engine); woken outside diag_lock, which no holder of wait_mu ever takes.
    if (stream_wait) g.stream->wake_waiters();
  }
  return n;
}

}  // namespace flowlane::diag
