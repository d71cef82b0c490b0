// Services that upper layers attach to an engine (diagnostics, communicators) and the few
// points at which the engine (or another extension) calls them: destroy, the state dump,
// its structured form, the watchdog and the wait-for graph.
// The engine owns them and destroys them last; it knows nothing else about them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;

// A lane whose running instruction waits for something outside the engine's dependency
// graph that diagnostics should know about (a collective waiting for peer ranks).
struct LaneWait {
  uint32_t lane = 0;
  fl_instr_id instr = 0;
  std::string what;  // "communicator 0x.. seq 1 all_reduce(...): waits for rank 1 (lane 2)"
  struct Peer {
    const Engine* engine;
    uint32_t lane;
    uint32_t rank;
  };
  std::vector<Peer> peers;
};

class Extension {
 public:
  virtual ~Extension() = default;
  // fl_engine_destroy, before the drain: cancel what could make the drain wait forever.
  virtual void begin_shutdown() {}
  // The drain is over (every instruction completed); workers still run.
  virtual void end_shutdown() {}
  // fl_engine_drain begins / returns (drains may overlap, from several threads): as destroy's
  // drain, it must not wait forever for a cycle of waits.
  virtual void begin_drain() {}
  virtual void end_drain() {}
  // Appends this extension's section to a state dump.
  virtual void dump(std::string& out) { (void)out; }
  // Adds the lanes this extension knows to be waiting (for the wait-for graph).
  virtual void lane_waits(std::vector<LaneWait>& out) { (void)out; }
  // Appends this extension's members of a structured (JSON) state dump, each as
  // `,"name":value` (the diagnostics: the lanes; read by communicator dumps, comm/README.md).
  virtual void dump_json(std::string& out) { (void)out; }
  // The engine's watchdog fired (`reason`: its first line); runs on the watchdog's thread
  // (communicators write their dumps).
  virtual void on_watchdog(const std::string& reason) { (void)reason; }
};

}  // namespace flowlane::core
