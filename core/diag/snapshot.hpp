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

// A registered wait of a running head (Lane::waits).
struct WaitSnap {
  const core::WaitRecord* rec = nullptr;  // identifies it to cancel_cycle_waits(); not read outside diag_lock
  Ref on;                                 // fl_object_wait: the user it waits for
  uint64_t obj = 0;
  std::string call;                       // or "fl_stream_synchronize (lane 2, host): ..."
  core::Stream* stream = nullptr;         // the stream it waits for in `call`
  uint64_t target = 0;                    // that stream's completion count, or an instruction id
  bool is_id = false;                     // target is an id (fl_instr_wait_for)
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
  const core::LaneWait* coll = nullptr;
};

struct GraphEdge {
  uint32_t from, to;
  std::string why;
  bool cancellable;  // one of from's running waits, which drain and destroy can give up (below)
  core::Instr* waiter;     // from's head (borrowed from the snapshot)
  core::Instr* waited;     // the instruction waited for in fl_object_wait (borrowed), or null
  core::Stream* stream = nullptr;  // or the stream waited for in fl_stream_synchronize / fl_instr_wait_for
  uint64_t target = 0;             // and its target
  bool is_id = false;
  const core::WaitRecord* rec = nullptr;  // the wait's record (cancellable edges)
};

struct Snapshot {
  Engine* e;
  std::vector<LaneSnap> lanes;  // lanes with pending work
  std::map<uint32_t, size_t> by_lane;
  std::vector<core::LaneWait> colls;
  std::vector<GraphEdge> edges;
};

// Every lane with pending work, and the wait-for edges between them.
Snapshot take_snapshot(Engine& e);
// "; it is the head of lane 2" / "; queued on lane 2 behind ..." / "" for instruction p.
std::string where_is(const Snapshot& s, const core::Instr* p);
// Cycles of the lane graph (each reported once, at most 8), as lists of edge indices.
std::vector<std::vector<size_t>> find_cycles(const Snapshot& s);

}  // namespace flowlane::diag
