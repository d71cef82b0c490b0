// The engine: a façade that composes the engine's components and owns what they share —
// the worker pools, the lanes, the interned streams, the services and hooks of the layers
// above (EngineServices, observers, extensions) and the engine's lifetime. Each component
// is one concern with one owner file, whose header says what it owns, what it calls and
// which locks and atomics it shares with whom (core/engine/README.md has the map and the
// protocols):
//   Window        window.{hpp,cpp}        the in-flight window: admission, parking, retirement
//   Recorder      deps.{hpp,cpp}          ids and dependency recording (the per-object rules)
//   Lane          lane.{hpp,cpp}          the strand: queue, run loop, going idle
//   Executor      execute.{hpp,cpp}       running an instruction and completing it
//   Stream        stream.{hpp,cpp}        a stream's counters and waiters
//   FailureLedger ledger.{hpp,cpp}        families of failures, which one a wait returns
//   Waits         waits.{hpp,cpp}, object_wait.cpp, find_waiter.cpp
//                                         synchronize, waits for instructions and objects, queries
//   CancelDrain   cancel_drain.{hpp,cpp}  cancel requests and fl_engine_drain
//   Objects       object.{hpp,cpp}        dependence objects and their release
//   Programs      program.{hpp,cpp}, capture.{hpp,cpp}, capture_compile.cpp, replay.cpp
//                                         captured programs: capture, compilation, replay
//   fork-join     fork_join.{hpp,cpp}     the engine's rules for loops, graphs and task groups
// The façade's own code: engine.cpp (lifetime and destroy, lanes, streams, pools, hooks,
// stats), submit.cpp (Engine::submit: the path every submission takes through the
// components), instr_pool.cpp (instruction records).
//
// The façade owns: the pools (pools_mu_ guards the extra pools of task graphs), the lanes
// and which are held (lanes_mu_), the interned streams (streams_mu_ for creation), the
// observers (observers_mu_) and extensions (extensions_mu_), the handle and the shutdown
// flags. All those mutexes are leaves: nothing else is locked under them, and no callback
// runs under them. Its atomics, and whom they pair with:
//   shutdown_: release store in stop_accepting() with the acquire load in Engine::enqueue
//     (under the lane's submit lock, which shutdown then passes through: a submission
//     either queued before, or sees the flag) and in shutting_down();
//   streams_[k]: release store of a new stream in stream() with the acquire loads in
//     stream(), all_streams() and ~Engine(): the stream is seen initialised;
//   observer_: release stores in set/clear/reinstate_observer() with the acquire load in
//     observer(), read at every hook point (the observer itself lives to the end).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "engine/cancel_drain.hpp"
#include "engine/capture.hpp"
#include "engine/context.hpp"
#include "engine/deps.hpp"
#include "engine/device.hpp"
#include "engine/execute.hpp"
#include "engine/extension.hpp"
#include "engine/instr.hpp"
#include "engine/lane.hpp"
#include "engine/ledger.hpp"
#include "engine/object.hpp"
#include "engine/observer.hpp"
#include "engine/program.hpp"
#include "engine/program_device.hpp"
#include "engine/stream.hpp"
#include "engine/waits.hpp"
#include "engine/window.hpp"
#include "flowlane/flowlane.h"
#include "sched/pool.hpp"

namespace flowlane::core {

// What the layers above the engine plug into it at creation.
struct EngineServices {
  // Runs the instructions of device streams (gpu/); null: the engine has host streams only.
  DeviceBackend* device = nullptr;
  // Builds and replays the device work of programs (gpu/graph.cpp); null: programs hold
  // host work only.
  ProgramDevice* program_device = nullptr;
  // Gives a newly interned stream its C handle (called once per stream, under the
  // engine's stream mutex); returns 0 when no handle can be made (FL_ERR_NO_MEMORY).
  uint64_t (*register_stream)(Stream* s) = nullptr;
  // Makes a C handle stale: called for an object's or a stream's handle just before the
  // engine frees it (objects the caller still holds at destroy, every stream at the end).
  void (*forget_handle)(uint64_t handle) = nullptr;
  // Attaches the upper layers' extensions to a new engine, last in its construction, from
  // the creation descriptor and the environment (diagnostics: a trace from FLOWLANE_TRACE,
  // the watchdog from desc.watchdog_ms or FLOWLANE_WATCHDOG_MS). May throw: the engine is
  // then shut down and its construction fails with that exception.
  void (*extend)(Engine& e, const fl_engine_desc_t& desc) = nullptr;
};

// What an fl_submit_* call asks of the engine besides the operands, which the caller has
// already put into the record (Instr::operands).
struct SubmitArgs {
  // Host streams: the instruction's callback. Device streams: the backend's launch of the
  // work, which it reads back through its record (Instr::device).
  fl_host_fn fn = nullptr;
  void* user_data = nullptr;
  fl_release_fn cleanup = nullptr;  // exactly once, after fn ran or the instruction was skipped
  const char* name = nullptr;       // copied
  bool nonblocking = false;         // FL_SUBMIT_NONBLOCKING: FL_ERR_WOULD_BLOCK instead of waiting
  bool run_inline = false;          // FL_SUBMIT_INLINE: run it on the caller when it is ready at once
  const char* api = "fl_submit";    // the entry point, for messages
  // Host COLLECTIVE streams only: an asynchronous host instruction (core/engine/README.md,
  // "Asynchronous host instructions"). Instead of fn, its lane runner calls async_start(i,
  // user_data, skipped) in stream order and moves on; `skipped`: i was skipped or cancelled
  // (its outcome is set: it must not touch what it writes). The instruction completes
  // when Executor::finish_async(i, ...) is called, exactly once, by any thread (possibly
  // inside async_start); its cleanup runs then. async_start must not throw.
  void (*async_start)(Instr* i, void* user_data, bool skipped) noexcept = nullptr;
};

class Engine {
 public:
  Engine(const fl_engine_desc_t& desc, const EngineServices& services);
  ~Engine();  // shutdown() if not done yet
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- lifetime (engine.cpp; core/engine/README.md, "Destroy") ---
  // Destroy is two steps so that the C handle stays valid while callbacks drain:
  // check_destroy_allowed() throws FL_ERR_INVALID_ARGUMENT from code the engine runs, which
  // the drain would wait for (it reads no member: the caller may not own the engine yet);
  // the caller then claims the destruction (the C layer claims the handle), and shutdown()
  // refuses new work, drains, runs pending releases and joins the workers (idempotent).
  void check_destroy_allowed() const;
  void shutdown();
  // Pairs with the release store of shutdown_ in shutdown().
  bool shutting_down() const { return shutdown_.load(std::memory_order_acquire); }
  uint64_t handle() const { return handle_; }
  void set_handle(uint64_t h) { handle_ = h; }
  // Makes a C handle of something this engine owns stale (EngineServices::forget_handle).
  void forget_handle(uint64_t h) {
    if (h != 0 && services_.forget_handle != nullptr) services_.forget_handle(h);
  }

  // --- what the components share (engine.cpp) ---
  sched::Pool& pool() { return *pool_; }
  // A cached pool with exactly n workers (the main pool when n equals its size), for task
  // graphs run with an explicit thread count.
  sched::Pool& pool_for_threads(unsigned n);
  bool pools_quiescent() const;  // every pool of the engine idle (drain)
  uint32_t worker_count() const { return pool_->size(); }
  DeviceBackend* device() const { return services_.device; }
  ProgramDevice* program_device() const { return services_.program_device; }
  // Devices of the device backend seen when the engine was created (0 without one).
  uint32_t device_count() const { return device_slots_ - 1; }
  uint32_t lane_count() const { return uint32_t(lanes_.size()); }
  Lane& lane(uint32_t id) { return *lanes_[id]; }
  const std::vector<std::unique_ptr<Lane>>& lanes() const { return lanes_; }
  uint32_t acquire_lane();  // fl_lane_acquire
  void release_lane(uint32_t lane);  // fl_lane_release
  // Interned: the same (lane, device, kind) always yields the same stream (lane, device
  // and kind checked by the caller). FL_ERR_SHUTDOWN (thrown) during destroy.
  Stream* stream(uint32_t lane, fl_device_t device, fl_stream_kind_t kind);
  std::vector<Stream*> all_streams() const;

  // --- submission (submit.cpp) and instruction records (instr_pool.cpp) ---
  // A record of this engine from the pool, for a submission to fill (operands, device
  // record) and pass to submit(), or to discard() if it is abandoned.
  Instr* new_instr() {
    // A capturing thread's submission is never queued: it uses the capture's own record.
    if (Capture* c = capture_of(*this)) [[unlikely]]
      return c->scratch();
    return new_pooled_instr();
  }
  void discard(Instr* i);
  // A record from new_instr() that was never submitted, at most its operands filled (a
  // captured submission's): back to the pool without the reset a used record needs.
  void return_unused(Instr* i);
  // A capture's record (Capture::scratch): seq holds this, which no queued record reaches.
  static constexpr uint64_t kScratchSeq = UINT64_MAX;
  void recycle(Instr* i);  // refs reached zero
  // The common path of every fl_submit_*: merges operands that name one object twice (the
  // union of their accesses), takes a window slot (blocking, or FL_ERR_WOULD_BLOCK),
  // records the dependencies and queues `i` on s's lane. Takes `i` in every case: on an
  // error (thrown) it is discarded, nothing is queued, and neither fn nor cleanup runs.
  // While the calling thread captures on this engine (capture.hpp) the submission is
  // recorded into the capture instead (nothing runs, the id is 0): checked inline, so that
  // neither path pays for the other.
  fl_instr_id submit(Stream* s, Instr* i, const SubmitArgs& a) {
    if (Capture* c = capture_of(*this)) [[unlikely]]
      return c->add(s, i, a);
    return submit_eager(s, i, a);
  }

  // --- the components ---
  Window& window() { return window_; }
  Recorder& recorder() { return recorder_; }
  Executor& executor() { return executor_; }
  FailureLedger& ledger() { return ledger_; }
  Waits& waits() { return waits_; }
  CancelDrain& cancel_drain() { return cancel_drain_; }
  Objects& objects() { return objects_; }
  Programs& programs() { return programs_; }

  // --- hooks of the layers above (engine.cpp) ---
  // The engine owns every observer ever installed until it is destroyed (a hook may still
  // be running in one that was replaced or cleared); clear_observer() stops new calls.
  // reinstate_observer() makes one the engine already owns the active one again, so a
  // layer that installs and clears the same observer repeatedly (traces started and
  // stopped in a loop) keeps one, not one per installation.
  // Pairs with the release stores in set_observer(), clear_observer() and reinstate_observer().
  Observer* observer() const { return observer_.load(std::memory_order_acquire); }
  // Whether any engine of the process ever had an observer: a hook point that must find its
  // engine first (a task group's wait looks its engine up by handle) skips that while none
  // did. Relaxed: a stale false only loses the span of a call racing with the first
  // installation, as a stale null from observer() would.
  static bool observed_anywhere() { return any_observer_.load(std::memory_order_relaxed); }
  void set_observer(std::unique_ptr<Observer> o);
  void clear_observer();
  void reinstate_observer(Observer* o);  // o: installed earlier by set_observer()
  size_t observers_kept() const;  // every observer installed so far (tests)
  // Extensions are attached once per key (any stable address, e.g. a static of the
  // attaching module) and live until the engine is destroyed. attach() returns the
  // extension now attached under `key` (an earlier one wins; `x` is then dropped).
  Extension* attach(const void* key, std::unique_ptr<Extension> x);
  Extension* extension(const void* key) const;
  std::vector<Extension*> extensions() const;  // in attach order

  fl_engine_stats_t stats() const;  // fl_engine_stats

  // --- one-line forwarders to components, for the layers above (comm/, core/diag/) ---
  Object* create_object(void* user_data, fl_release_fn release) { return objects_.create(user_data, release); }
  void release_object_ref(Object* o, Instr* completing = nullptr) { objects_.release_ref(o, completing); }
  int64_t inflight() const { return window_.inflight(); }
  uint32_t window_waiters() const { return window_.waiters(); }
  uint64_t inflight_limit() const { return window_.limit(); }
  size_t unreturned_failures(std::string* oldest) const { return ledger_.unreturned(oldest); }

  // The device backend's per-engine state (its poller thread), created by the backend on
  // first use under device_mu and released in DeviceBackend::engine_stopped().
  std::atomic<void*> device_state{nullptr};
  std::mutex device_mu;

 private:
  fl_instr_id submit_eager(Stream* s, Instr* i, const SubmitArgs& a);
  Instr* new_pooled_instr();
  // Takes i's id, records its dependencies and queues it on its lane (or runs it inline);
  // owns the window slot submit() took.
  fl_instr_id enqueue(Instr* i, bool run_inline);
  // The steps of shutdown() (engine.cpp).
  void stop_accepting();
  void wait_until_idle();
  void wait_pools_quiescent();
  void stop_workers();

  EngineServices services_;
  uint64_t handle_ = 0;
  std::unique_ptr<sched::Pool> pool_;
  mutable std::mutex pools_mu_;
  std::map<unsigned, std::unique_ptr<sched::Pool>> extra_pools_;

  std::vector<std::unique_ptr<Lane>> lanes_;
  std::mutex lanes_mu_;
  std::vector<bool> lane_held_;

  // Interned streams: index = (lane * device_slots + slot) * kStreamKinds + kind.
  uint32_t device_slots_ = 1;
  std::unique_ptr<std::atomic<Stream*>[]> streams_;
  std::mutex streams_mu_;

  Objects objects_{*this};
  Programs programs_{*this};
  Window window_;
  Recorder recorder_{*this};
  Executor executor_{*this};
  CancelDrain cancel_drain_{*this};
  FailureLedger ledger_{*this};
  Waits waits_{*this};

  std::atomic<bool> shutdown_{false};
  bool stopped_ = false;  // shutdown() done (destroying thread only)

  std::atomic<Observer*> observer_{nullptr};
  static std::atomic<bool> any_observer_;  // observed_anywhere()
  mutable std::mutex observers_mu_;
  std::vector<std::unique_ptr<Observer>> observers_;  // every observer installed, kept to the end

  mutable std::mutex extensions_mu_;
  std::vector<std::pair<const void*, std::unique_ptr<Extension>>> extensions_;
};

}  // namespace flowlane::core
