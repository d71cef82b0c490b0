// The state dump and the wait-for graph (diag/dump.hpp).
#include "diag/dump.hpp"

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace flowlane::diag {

using core::Instr;
using core::InstrState;
using core::is_terminal;
using core::Lane;
using core::LaneWait;
using core::Stream;
using core::WaitRecord;

namespace {

// How many instructions queued behind each lane's head a dump lists.
constexpr size_t kQueuedShown = 8;

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

// A referenced instruction, released when the snapshot goes.
struct Ref {
  Instr* i = nullptr;
  Engine* e = nullptr;
  Ref() = default;
  Ref(Instr* x, Engine* en) : i(x), e(en) {}  // caller already took the reference
  Ref(Ref&& o) noexcept : i(o.i), e(o.e) { o.i = nullptr; }
  Ref& operator=(Ref&& o) noexcept {
    std::swap(i, o.i);
    std::swap(e, o.e);
    return *this;
  }
  ~Ref() {
    if (i != nullptr && i->unref()) e->recycle(i);
  }
};

struct DepSnap {
  Ref pred;
  uint64_t object = 0;  // the fl_object_t* value the user holds
};

// A registered wait of a running head (Lane::waits).
struct WaitSnap {
  const WaitRecord* rec = nullptr;  // identifies it to cancel_cycle_waits(); not read outside diag_lock
  Ref on;                           // fl_object_wait: the user it waits for
  uint64_t obj = 0;
  std::string call;                 // or "fl_stream_synchronize (lane 2, host): ..."
  Stream* stream = nullptr;         // the stream it waits for in `call`
  uint64_t target = 0;              // that stream's completion count, or an instruction id
  bool is_id = false;               // target is an id (fl_instr_wait_for)
};

struct LaneSnap {
  uint32_t id = 0;
  uint64_t submitted = 0, completed = 0;
  Ref head;
  bool blocked = false;
  bool not_started = false;    // active, not blocked, still pending: skipped or cancelled (or about to start)
  bool completing = false;     // finished; a release callback its completion runs waits
  std::vector<DepSnap> waits;  // blocked: unfinished predecessors
  // running: its registered waits (its callback's, and its task groups' tasks'), oldest first
  std::vector<WaitSnap> running_waits;
  std::vector<Ref> queued;     // the first instructions queued behind the head
  bool more_queued = false;
  const LaneWait* coll = nullptr;
};

struct GraphEdge {
  uint32_t from, to;
  std::string why;
  bool cancellable;  // one of from's running waits, which drain and destroy can give up (below)
  Instr* waiter;     // from's head (borrowed from the snapshot)
  Instr* waited;     // the instruction waited for in fl_object_wait (borrowed), or null
  Stream* stream = nullptr;  // or the stream waited for in fl_stream_synchronize / fl_instr_wait_for
  uint64_t target = 0;       // and its target
  bool is_id = false;
  const WaitRecord* rec = nullptr;  // the wait's record (cancellable edges)
};

struct Snapshot {
  Engine* e;
  std::vector<LaneSnap> lanes;  // lanes with pending work
  std::map<uint32_t, size_t> by_lane;
  std::vector<LaneWait> colls;
  std::vector<GraphEdge> edges;
};

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
    {
      std::lock_guard<SpinLock> lock(lane.diag_lock);
      // A head that has finished is shown only while a release callback its completion runs
      // waits (its lane cannot move on meanwhile); it stays referenceable until its
      // completion clears `active`, which needs this lock.
      const bool completing = lane.active != nullptr && is_terminal(lane.active->load_state());
      bool head_waits = false;  // a wait of the head's (not of a task that outlived an earlier head)
      for (const WaitRecord* r = lane.waits; r != nullptr && !head_waits; r = r->next) head_waits = r->by == lane.active;
      if (lane.active != nullptr && (!completing || head_waits)) {
        lane.active->ref();
        ls.head = Ref(lane.active, &e);
        ls.completing = completing;
        ls.blocked = lane.active_blocked;
        // A head that is neither blocked nor running has not started its function: it is
        // skipped or cancelled (its cleanup runs instead), or in the instant before it starts.
        ls.not_started = !ls.blocked && lane.active->load_state() == InstrState::kPending;
        if (ls.blocked) {
          // The head cannot start while we hold diag_lock (the runner takes it to mark the
          // instruction running), so its deps are stable.
          for (const Instr::Dep& d : lane.active->deps) {
            if ((d.flags & Instr::Dep::kEdge) == 0 || is_terminal(d.pred->load_state())) continue;
            d.pred->ref();
            ls.waits.push_back(DepSnap{Ref(d.pred, &e), d.obj ? d.obj->handle : 0});
          }
        } else {
          for (const WaitRecord* r = lane.waits; r != nullptr; r = r->next) {
            if (r->by != lane.active) continue;
            WaitSnap w;
            w.rec = r;
            if (r->on != nullptr) {
              r->on->ref();  // the record holds a reference while linked
              w.on = Ref(r->on, &e);
              w.obj = r->obj;  // a handle: the object may be gone
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
            ls.running_waits.push_back(std::move(w));
          }
          std::reverse(ls.running_waits.begin(), ls.running_waits.end());  // oldest first
        }
        // What is queued behind the head. While we hold diag_lock none of it can start (the
        // runner marks each instruction active under this lock first), so none can complete
        // and be recycled: following lane_next is safe. The lane's stub node is skipped.
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
    }
    for (const LaneWait& cw : s.colls)
      if (cw.lane == ls.id && ls.head.i != nullptr && cw.instr == ls.head.i->id && !ls.blocked) ls.coll = &cw;
    s.by_lane[ls.id] = s.lanes.size();
    s.lanes.push_back(std::move(ls));
  }
  // Wait-for edges between lanes.
  for (LaneSnap& ls : s.lanes) {
    if (ls.head.i == nullptr) continue;
    for (DepSnap& d : ls.waits)
      s.edges.push_back({ls.id, d.pred.i->stream->lane->id,
                         ls.head.i->describe() + " is blocked until " + d.pred.i->describe() + " (" +
                             state_name(d.pred.i->load_state()) + ") completes (object " + hex(d.object) + ")",
                         false, ls.head.i, nullptr});
    for (const WaitSnap& w : ls.running_waits) {
      if (w.on.i != nullptr && !is_terminal(w.on.i->load_state())) {
        bool self = w.on.i->stream->lane->id == ls.id;
        s.edges.push_back({ls.id, w.on.i->stream->lane->id,
                           ls.head.i->describe() + " waits in fl_object_wait (object " + hex(w.obj) + ") for " +
                               w.on.i->describe() + " (" + state_name(w.on.i->load_state()) + ")" +
                               (self ? ", which is queued behind it on its own lane" : ""),
                           true, ls.head.i, w.on.i, nullptr, 0, false, w.rec});
      }
      if (w.stream != nullptr && !w.stream->reached(w.target, w.is_id))
        s.edges.push_back({ls.id, w.stream->lane->id, ls.head.i->describe() + " waits in " + w.call, true, ls.head.i,
                           nullptr, w.stream, w.target, w.is_id, w.rec});
    }
    if (ls.coll != nullptr)
      for (const LaneWait::Peer& p : ls.coll->peers)
        if (p.engine == &e)
          s.edges.push_back({ls.id, p.lane, ls.head.i->describe() + ": " + ls.coll->what, false, ls.head.i, nullptr});
  }
  return s;
}

// Cycles of the lane graph (each reported once), as lists of edge indices.
std::vector<std::vector<size_t>> find_cycles(const Snapshot& s) {
  std::map<uint32_t, std::vector<size_t>> out_edges;
  for (size_t k = 0; k < s.edges.size(); ++k) out_edges[s.edges[k].from].push_back(k);
  std::map<uint32_t, int> color;  // 0 white, 1 on stack, 2 done
  std::vector<size_t> stack;      // edges on the current path
  std::vector<std::vector<size_t>> cycles;
  std::set<std::vector<uint32_t>> seen;
  auto dfs = [&](auto&& self, uint32_t u) -> void {
    color[u] = 1;
    for (size_t k : out_edges[u]) {
      uint32_t v = s.edges[k].to;
      if (color[v] == 1) {
        std::vector<size_t> cyc;
        size_t start = stack.size();
        while (start > 0 && s.edges[stack[start - 1]].from != v) --start;
        if (v == u) start = stack.size();
        else if (start > 0) --start;
        for (size_t j = start; j < stack.size(); ++j) cyc.push_back(stack[j]);
        cyc.push_back(k);
        std::vector<uint32_t> nodes;
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
  for (const LaneSnap& ls : s.lanes)
    if (color[ls.id] == 0) dfs(dfs, ls.id);
  return cycles;
}

}  // namespace

std::string build_dump(Engine& e, const std::string& reason) {
  Snapshot s = take_snapshot(e);
  std::string out;
  out += "=== flowlane state dump: engine " + hex(e.handle()) + " ===\n";
  if (!reason.empty()) out += reason + "\n";
  fl_engine_stats_t st = e.stats();
  int64_t inflight = e.inflight();
  uint64_t limit = e.inflight_limit();
  uint32_t parked = e.window_waiters();
  out += "in-flight window: " + std::to_string(inflight < 0 ? 0 : inflight) + " of " + std::to_string(limit) +
         " instructions" + (inflight >= int64_t(limit) ? " (FULL)" : "") + "; " + std::to_string(parked) +
         (parked == 1 ? " submitter" : " submitters") + " parked waiting for room" +
         (parked ? " (blocked in fl_submit_*)" : "") + "\n";
  {
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
  }
  {
    std::string oldest;
    size_t n = e.unreturned_failures(&oldest);
    out += "failures not returned by any wait yet: " + std::to_string(n) + (n ? "; the oldest: " + oldest : "") + "\n";
  }
  out += "counters: submitted " + std::to_string(st.submitted) + ", completed " + std::to_string(st.completed) +
         ", failed " + std::to_string(st.failed) + ", window stalls " + std::to_string(st.window_stalls) + "\n";

  // Per-stream pending counts, grouped by lane.
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

  out += "lanes with pending work: " + std::to_string(s.lanes.size()) + "\n";
  for (const LaneSnap& ls : s.lanes) {
    out += "lane " + std::to_string(ls.id) + ": " + std::to_string(ls.submitted - ls.completed) + " pending";
    if (streams_of.count(ls.id)) out += " [" + streams_of[ls.id] + "]";
    out += "\n";
    if (ls.head.i == nullptr) {
      out += "  no instruction at its head right now (the lane is queued for a worker or between instructions)\n";
      continue;
    }
    const Instr* h = ls.head.i;
    if (ls.blocked) {
      out += "  oldest: " + h->describe() + " BLOCKED, waiting for " + std::to_string(ls.waits.size()) +
             " unfinished predecessor(s):\n";
      for (const DepSnap& d : ls.waits)
        out += "    object " + hex(d.object) + ": produced by " + d.pred.i->describe() + ", " +
               state_name(d.pred.i->load_state()) + where_is(s, d.pred.i) + "\n";
      if (ls.waits.empty())
        out += "    (its predecessors have just completed; it is about to run)\n";
    } else if (ls.not_started) {
      out += "  oldest: " + h->describe() +
             " NOT RUN: skipped (an input is poisoned) or cancelled, and finishing (its cleanup runs instead of "
             "its function), unless it is just starting\n";
    } else {
      out += "  oldest: " + h->describe() +
             (ls.completing ? " COMPLETING: it finished, and a release callback its completion runs (an object's "
                              "last reference went with it) holds up the lane\n"
                            : " RUNNING its callback\n");
      for (const WaitSnap& ws : ls.running_waits) {
        if (const Instr* w = ws.on.i) {
          bool self = w->stream->lane->id == ls.id;
          out += "    waits in fl_object_wait for object " + hex(ws.obj) + ", written by " + w->describe() + ", " +
                 state_name(w->load_state()) +
                 (self ? "; it is queued BEHIND this instruction on the same lane, so it can never run"
                       : where_is(s, w)) +
                 "\n";
        } else {
          out += "    waits in " + ws.call + "\n";
        }
      }
      if (ls.coll != nullptr) {
        out += "    in a collective rendezvous: " + ls.coll->what + "\n";
      } else if (ls.running_waits.empty()) {
        out += "    (not waiting on anything flowlane tracks: computing, or blocked on something outside "
               "flowlane)\n";
      }
    }
    if (!ls.queued.empty()) {
      out += "  queued behind it:";
      for (size_t q = 0; q < ls.queued.size(); ++q) out += std::string(q ? "," : "") + " " + ls.queued[q].i->describe();
      out += ls.more_queued ? ", and more\n" : "\n";
    }
  }

  auto cycles = find_cycles(s);
  if (cycles.empty()) {
    out += "wait cycles: none found\n";
  } else {
    for (const auto& cyc : cycles) {
      std::string path;
      for (size_t k : cyc) path += "lane " + std::to_string(s.edges[k].from) + " -> ";
      path += "lane " + std::to_string(s.edges[cyc.front()].from);
      out += "DEADLOCK: cycle of waits " + path + " (nothing on it can complete):\n";
      for (size_t k : cyc) out += "  " + s.edges[k].why + "\n";
    }
  }
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
