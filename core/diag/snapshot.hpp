// A snapshot of an engine's lanes for the state dump (dump.cpp, dump_json.cpp) and the
// wait-for graph (cycles, and the waits destroy cancels on them): the protocol of reading
// the engine while workers run is at the top of diag/dump.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.hpp"

namespace flowlane::diag {

using core::Engine;

// How many instructions queued behind each lane's head a snapshot keeps.
constexpr size_t kQueuedShown = 8;
// How many of a head's waits (predecessors, or waits of its callback) the JSON form lists.
constexpr size_t kMaxWaitsShown = 16;

const char* state_name(core::InstrState s);  // "running", "issued (device work pending)", ...
std::string hex(uint64_t v);                 // "0x00000000deadbeef"

// A referenced instruction, released when the snapshot goes.
struct Ref {
  core::Instr* i = nullptr;
  Engine* e = nullptr;
  Ref() = default;
  Ref(core::Instr* x, Engine* en) : i(x), e(en) {}  // caller already took the reference
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

// A node of the wait-for graph: a lane, or a task group (by its handle).
struct Node {
  bool group = false;
  uint64_t id = 0;  // the lane's id, or the group's fl_task_group_t* value
  static Node lane(uint32_t l) { return {false, l}; }
  static Node task_group(uint64_t h) { return {true, h}; }
  bool operator<(const Node& o) const { return group != o.group ? !group : id < o.id; }
  bool operator==(const Node& o) const { return group == o.group && id == o.id; }
  bool operator!=(const Node& o) const { return !(*this == o); }
};
std::string node_name(Node n);  // "lane 2", "task group 0x..."

// A registered wait (a WaitRecord of a lane's list, or of the engine's loose waits), copied
// under its list's lock.
struct WaitSnap {
  const core::WaitRecord* rec = nullptr;  // identifies it to cancel_cycle_waits(); not read outside the lock
  core::Lane* list = nullptr;             // the lane whose list holds it; null: the engine's loose waits
  const core::Instr* by = nullptr;        // the instruction whose wait it is (lane records), compared only
  const core::EngineTaskGroup* task_of = nullptr;  // the group whose task waits, compared only
  uint64_t task_of_handle = 0;
  Ref on;                                 // fl_object_wait: the user it waits for
  uint64_t obj = 0;
  std::string call;                       // or "fl_stream_synchronize (lane 2, host): ...", "fl_task_group_wait for task group 0x.. (1 unfinished task)"
  core::Stream* stream = nullptr;         // the stream it waits for in `call`
  uint64_t target = 0;                    // that stream's completion count, or an instruction id
  bool is_id = false;                     // target is an id (fl_instr_wait_for)
  const core::EngineTaskGroup* group = nullptr;  // a group wait: the group, compared (and woken under the lock) only
  uint64_t group_handle = 0;
  int64_t group_unfinished = 0;
  bool given_up = false;                  // drain or destroy gave it up already (it is returning)
};

struct LaneSnap {
  uint32_t id = 0;
  uint64_t submitted = 0, completed = 0;
  Ref head;
  bool blocked = false;
  bool not_started = false;    // active, not blocked, still pending: skipped or cancelled (or about to start)
  bool completing = false;     // finished; a release callback its completion runs waits
  std::vector<DepSnap> waits;  // blocked: unfinished predecessors
  // running: its registered waits (its callback's, and its task groups' tasks' while it is
  // pending), oldest first
  std::vector<WaitSnap> running_waits;
  std::vector<Ref> queued;     // the first instructions queued behind the head
  bool more_queued = false;
  const core::LaneWait* coll = nullptr;
};

// What an edge of the graph stands for: a blocked head's dependency (or a collective's wait
// for peers), which nothing gives up; a callback's wait (the running instruction's own, or a
// task's of a group made in its callback while it is pending); a wait of a task of a group,
// out of that group's node; or a wait for a task group. Drain and destroy give up callback
// waits and group waits on cycles (cancel_cycle_waits()).
enum class EdgeKind { kDependency, kCallbackWait, kTaskWait, kGroupWait };

struct GraphEdge {
  Node from, to;
  std::string why;
  EdgeKind kind = EdgeKind::kDependency;
  const WaitSnap* wait = nullptr;  // the registered wait (kCallbackWait, kTaskWait, kGroupWait)
  const core::Instr* head = nullptr;  // a lane's edge of its running head's wait: that head
  bool cancellable() const { return kind == EdgeKind::kCallbackWait || kind == EdgeKind::kGroupWait; }
};

struct Snapshot {
  Engine* e;
  std::vector<LaneSnap> lanes;  // lanes with pending work
  std::map<uint32_t, size_t> by_lane;
  std::vector<core::LaneWait> colls;
  // Waits of tasks of task groups: those on the lanes' lists (a group made in a callback,
  // while its instruction was pending) and the engine's loose waits.
  std::vector<WaitSnap> task_waits;
  std::vector<GraphEdge> edges;
};

// Every lane with pending work, and the wait-for edges between them.
Snapshot take_snapshot(Engine& e);
// "; it is the head of lane 2" / "; queued on lane 2 behind ..." / "" for instruction p.
std::string where_is(const Snapshot& s, const core::Instr* p);
// Cycles of the graph (each reported once, at most 8), as lists of edge indices; without
// the edges of waits already given up when `skip_given_up`.
std::vector<std::vector<size_t>> find_cycles(const Snapshot& s, bool skip_given_up = false);

}  // namespace flowlane::diag
