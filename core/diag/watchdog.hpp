// Per-engine diagnostics, attached to an engine as an extension (engine/extension.hpp): the
// watchdog thread and the active trace.
//
// The watchdog thread sleeps on a condition variable. While a timeout is set it wakes every
// timeout/4 (at least 5 ms, at most 1 s), compares the engine's completion count with the
// one it saw last, and fires once per stall: when nothing completed for `timeout_ms` while
// instructions are in flight (or submitters are parked). It re-arms after any completion.
// With no timeout it sleeps until reconfigured or told to exit.
//
// Shutdown (Engine::shutdown): begin_shutdown() runs before the drain. If work is
// still in flight it turns the thread into a shutdown monitor that looks for wait cycles
// every few milliseconds and cancels the callbacks' waits on them (a wait on a cycle
// can never finish: see diag/dump.hpp); so does it while fl_engine_drain runs
// (begin_drain() / end_drain()). end_shutdown() runs once the lanes are drained: it
// joins the thread and writes the trace, if one is active.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::diag {

class TraceObserver;

struct Diagnostics : core::Extension {
  explicit Diagnostics(core::Engine* e) : engine(e) {}
  ~Diagnostics() override;
  void begin_shutdown() override;
  void end_shutdown() override;
  void begin_drain() override;
  void end_drain() override;
  // `,"lanes":[...],"wait_cycles":[...],"text":"<the state dump, at most kMaxJsonText bytes>"`.
  void dump_json(std::string& out) override;
  static constexpr size_t kMaxJsonText = 64 * 1024;

  core::Engine* engine;

  // --- watchdog (guarded by mu) ---
  std::mutex mu;
  std::condition_variable cv;  // wakes the thread: new settings, shutdown, exit
  std::condition_variable callback_done_cv;
  std::thread thread;
  bool exit = false;
  bool shutdown = false;       // destroy in progress: the thread monitors for cycles
  int drains = 0;              // fl_engine_drain calls in progress: so does it
  uint64_t timeout_ms = 0;
  fl_dump_fn callback = nullptr;
  void* user_data = nullptr;
  std::string path;
  bool in_callback = false;
  uint64_t generation = 0;     // bumped by every set_watchdog (re-arms)
  uint64_t fires = 0;

  // --- trace ---
  std::mutex trace_mu;
  TraceObserver* trace = nullptr;  // owned by the engine (observer list); null when off
  // The last trace, stopped (the engine still owns it): the next trace restarts it instead
  // of installing another observer.
  TraceObserver* stopped_trace = nullptr;
  // Destroy has written the trace (end_shutdown): a trace started later (a release callback
  // that destroy runs) would never be written, so fl_trace_start is refused.
  bool traces_closed = false;
};

// The longest watchdog timeout (one day): fl_engine_set_watchdog, watchdog_ms and
// FLOWLANE_WATCHDOG_MS accept 0 (off) .. kMaxWatchdogMs.
inline constexpr uint64_t kMaxWatchdogMs = 86'400'000;

// Attaches the diagnostics of a new engine (starts a trace when FLOWLANE_TRACE is set).
Diagnostics& attach(core::Engine& e);
// EngineServices::extend (engine.hpp): attach(), then the watchdog with the stderr sink when
// desc.watchdog_ms (checked by the caller: at most kMaxWatchdogMs) is set or, for an engine
// created without it, FLOWLANE_WATCHDOG_MS holds a timeout (a value that is not a count of
// milliseconds up to kMaxWatchdogMs is ignored, with a line on stderr).
void extend_engine(core::Engine& e, const fl_engine_desc_t& desc);
// The engine's diagnostics (attached at creation).
Diagnostics& diagnostics(core::Engine& e);

// fl_engine_set_watchdog. Waits for a dump callback already running on the watchdog thread
// to return (unless called from code an engine runs, that callback included).
void watchdog_configure(core::Engine* e, uint64_t timeout_ms, fl_dump_fn cb, void* user_data, const char* path);

// Total of the lanes' completion counters (the watchdog's progress measure).
uint64_t completed_total(const core::Engine& e);

}  // namespace flowlane::diag
