// Per-engine diagnostics state (issue 7): the watchdog thread, the engine's communicators
// (for dumps and for cancelling them at destroy) and the active trace.
//
// The watchdog thread sleeps on a condition variable. While a timeout is set it wakes every
// timeout/4 (at least 5 ms, at most 1 s), compares the engine's completion count with the
// one it saw last, and fires once per stall: when nothing completed for `timeout_ms` while
// instructions are in flight (or submitters are parked). It re-arms after any completion.
// With no timeout it sleeps until reconfigured or told to exit.
//
// Shutdown (Engine::drain_and_stop): begin_shutdown() runs first. It aborts every
// communicator of the engine (collectives not yet matched by every rank fail with
// FL_ERR_CANCELLED), and, if work is still in flight, turns the thread into a shutdown
// monitor that looks for wait cycles every few milliseconds and cancels the
// fl_object_wait calls on them (a wait on a cycle can never finish: see core/dump.hpp).
// end_shutdown() runs once the lanes are drained: it joins the thread and writes the
// trace, if one is active.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Comm;
class TraceObserver;

struct Diagnostics {
  explicit Diagnostics(Engine* e) : engine(e) {}
  Engine* engine;

  // --- watchdog (guarded by mu) ---
  std::mutex mu;
  std::condition_variable cv;  // wakes the thread: new settings, shutdown, exit
  std::condition_variable callback_done_cv;
  std::thread thread;
  bool exit = false;
  bool shutdown = false;       // destroy in progress: the thread monitors for cycles
  uint64_t timeout_ms = 0;
  fl_dump_fn callback = nullptr;
  void* user_data = nullptr;
  std::string path;
  bool in_callback = false;
  uint64_t generation = 0;     // bumped by every set_watchdog (re-arms)
  uint64_t fires = 0;

  // --- communicators of this engine ---
  std::mutex comms_mu;
  std::vector<std::shared_ptr<Comm>> comms;

  // --- trace ---
  std::mutex trace_mu;
  TraceObserver* trace = nullptr;  // owned by the engine (observer list); null when off
};

// Engine hooks (called from core/engine.cpp).
Diagnostics* diagnostics_create(Engine* e);          // end of the constructor; reads FLOWLANE_TRACE
void diagnostics_begin_shutdown(Engine* e);          // first step of drain_and_stop
void diagnostics_end_shutdown(Engine* e);            // after the lanes went idle, before joining workers
void diagnostics_destroy(Diagnostics* d);            // last step of drain_and_stop

// fl_engine_set_watchdog. Waits for a dump callback already running on the watchdog thread
// to return (unless called from that callback).
void watchdog_configure(Engine* e, uint64_t timeout_ms, fl_dump_fn cb, void* user_data, const char* path);

// Total of the lanes' completion counters (the watchdog's progress measure).
uint64_t completed_total(const Engine& e);

}  // namespace flowlane::core
