// The engine: lanes (strands on the work-stealing pool), interned streams, dependence
// objects, instruction records, the in-flight window, waits and the failure ledger. The
// dependency rules, the lane protocol, the window and destroy are written down in
// core/engine/README.md.
//
// Where each part of Engine is defined:
//   engine.cpp      lifetime (create, drain, destroy), lanes, interned streams, extensions, stats
//   submit.cpp      submit(): the window and the per-object dependency rules
//   lane.cpp        the lane strand, executing and completing instructions
//   object.cpp      objects: creation, release, fl_object_wait
//   sync.cpp        stream completion counters, synchronize, the failure ledger
//   instr_pool.cpp  instruction records and their pool
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "engine/cancel_drain.hpp"
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
#include "engine/stream.hpp"
#include "engine/window.hpp"
#include "flowlane/flowlane.h"
#include "sched/pool.hpp"

namespace flowlane::core {

// What the layers above the engine plug into it at creation.
struct EngineServices {
  // Runs the instructions of device streams (gpu/); null: the engine has host streams only.
  DeviceBackend* device = nullptr;
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
};

class Engine {
 public:
  Engine(const fl_engine_desc_t& desc, const EngineServices& services);
  ~Engine();  // shutdown() if not done yet
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Destroy is two steps so that the C handle stays valid while callbacks drain:
  // begin_destroy() claims the destruction (false if someone else already did), shutdown()
  // refuses new work, drains, runs pending releases and joins the workers (idempotent).
  // acq_rel pairs with the exchange of a concurrent begin_destroy() (one of them wins).
  bool begin_destroy() { return !destroying_.exchange(true, std::memory_order_acq_rel); }
  void shutdown();
  // Pairs with the release store of shutdown_ in drain_and_stop().
  bool shutting_down() const { return shutdown_.load(std::memory_order_acquire); }

  uint64_t handle() const { return handle_; }
  void set_handle(uint64_t h) { handle_ = h; }
  // Makes a C handle of something this engine owns stale (EngineServices::forget_handle).
  void forget_handle(uint64_t h) {
    if (h != 0 && services_.forget_handle != nullptr) services_.forget_handle(h);
  }

  sched::Pool& pool() { return *pool_; }
  // A cached pool with exactly n workers (the main pool when n equals its size), for task
  // graphs run with an explicit thread count.
  sched::Pool& pool_for_threads(unsigned n);

  uint32_t lane_count() const { return uint32_t(lanes_.size()); }
  uint32_t worker_count() const { return pool_->size(); }
  uint64_t inflight_limit() const { return window_.limit(); }
  DeviceBackend* device() const { return services_.device; }
  // Devices of the device backend seen when the engine was created (0 without one).
  uint32_t device_count() const { return device_slots_ - 1; }

  // --- lanes and streams (engine.cpp) ---
  uint32_t acquire_lane();
  void release_lane(uint32_t lane);
  Lane& lane(uint32_t id) { return *lanes_[id]; }
  const std::vector<std::unique_ptr<Lane>>& lanes() const { return lanes_; }
  // Interned: the same (lane, device, kind) always yields the same stream.
  Stream* stream(uint32_t lane, fl_device_t device, fl_stream_kind_t kind);
  std::vector<Stream*> all_streams() const;

  // --- objects (object.cpp) ---
  Object* create_object(void* user_data, fl_release_fn release);
  // Drops a reference; the last one runs the object's release callback, in a callback
  // frame for `completing` (the instruction whose completion drops it, or null).
  void release_object_ref(Object* o, Instr* completing = nullptr);
  // fl_object_wait(_for): FL_ERR_TIMEOUT when the deadline passes first (nothing else
  // changes then).
  fl_status_t wait_object(Object* o, uint32_t access, const Deadline& deadline = Deadline::forever());
  // Sleeps until i is terminal or *cancelled is set (by a thread that then wakes i's
  // state futex) or the deadline passes; returns false only on the deadline. On a pool
  // worker, sched::wait() helps the caller's own region first and a spare worker stands
  // in while it sleeps.
  static bool sleep_until_terminal(Instr* i, const std::atomic<bool>* cancelled, const Deadline& deadline);

  // --- submission and the window (submit.cpp) ---
  // A record of this engine from the pool, for a submission to fill (operands, device
  // record) and pass to submit(), or to discard() if it is abandoned.
  Instr* new_instr();
  void discard(Instr* i);
  // The common path of every fl_submit_*: merges operands that name one object twice (the
  // union of their accesses), takes a window slot (blocking, or FL_ERR_WOULD_BLOCK),
  // records the dependencies and queues `i` on s's lane. Takes `i` in every case: on an
  // error (thrown) it is discarded, nothing is queued, and neither fn nor cleanup runs.
  fl_instr_id submit(Stream* s, Instr* i, const SubmitArgs& a);
  // The in-flight window (window.hpp).
  Window& window() { return window_; }

  // --- the run path (execute.hpp) ---
  Executor& executor() { return executor_; }
  void recycle(Instr* i);  // refs reached zero (instr_pool.cpp)

  // --- waits and failures (sync.cpp) ---
  // Each returns FL_OK or a failure status, with the thread's message set.
  // fl_engine_synchronize(_for), fl_stream_synchronize(_for): FL_ERR_TIMEOUT when the
  // deadline passes first (no failure is returned then).
  fl_status_t synchronize(const Deadline& deadline = Deadline::forever());
  fl_status_t synchronize(Stream* s, const Deadline& deadline = Deadline::forever());
  // Among the instructions that wait for the instruction of `frame` to complete (its
  // successors and, on a lane that runs them in order, what is queued behind each,
  // transitively), the first one with an id up to `upto` that `match` accepts; null if
  // none. A wait for it could only end after the caller returns. `frame` is the caller's
  // innermost frame with an instruction: its fn or cleanup (other kinds find nothing, as
  // their instruction may complete during the walk). `chain`, if given, receives the path:
  // "'a' (#3, lane 1, host) -> 'b' (#5, lane 2, host)", the match last.
  static Instr* find_waiter(const CallbackFrame* frame, fl_instr_id upto,
                            const std::function<bool(const Instr*)>& match, std::string* chain = nullptr);
  // Waits for every instruction submitted (to any stream) before the call; FL_OK, or
  // FL_ERR_TIMEOUT reported in the name of `call`. Returns and consumes no failure.
  fl_status_t wait_submitted(const Deadline& deadline, const char* call);
  // The failure ledger (ledger.hpp).
  FailureLedger& ledger() { return ledger_; }
  // Failures (families) not returned yet, and the oldest one's message (for dumps).
  size_t unreturned_failures(std::string* oldest) const { return ledger_.unreturned(oldest); }

  // --- instruction queries (sync.cpp) ---
  // fl_instr_query: throws FL_ERR_INVALID_ARGUMENT for an id this stream never returned.
  fl_instr_state_t query(Stream* s, fl_instr_id id);
  // fl_instr_wait_for: the outcome of id once completed (a failure counts as returned).
  fl_status_t wait_instr(Stream* s, fl_instr_id id, const Deadline& deadline);
  // Cancel requests and fl_engine_drain (cancel_drain.hpp).
  CancelDrain& cancel_drain() { return cancel_drain_; }
  bool pools_quiescent() const;  // every pool of the engine idle (drain)

  fl_engine_stats_t stats() const;
  // Instructions admitted through the window and not yet retired; submitters parked on it.
  int64_t inflight() const { return window_.inflight(); }
  uint32_t window_waiters() const { return window_.waiters(); }

  // --- observers and extensions (engine.cpp) ---
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

  // The device backend's per-engine state (its poller thread), created by the backend on
  // first use under device_mu and released in DeviceBackend::engine_stopped().
  std::atomic<void*> device_state{nullptr};
  std::mutex device_mu;

 private:
  // Records the dependencies of `i` and queues it on its lane; owns the window slot
  // admit() took.
  fl_instr_id enqueue(Instr* i, bool run_inline);
  void release_successors(Edge* e);  // drops one pending unit of each successor in the list
  // Waits for s's completion count to reach target (sched::wait rules); false on the deadline
  // or when *cancelled (if given) is set first (engine destroy gave the wait up).
  bool wait_stream(Stream* s, uint64_t target, const Deadline& deadline = Deadline::forever(),
                   const std::atomic<bool>* cancelled = nullptr);
  void destroy_object(Object* o, Instr* completing);
  void drain_and_stop();

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

  // Live objects (so that destroy can run every release callback).
  std::mutex objects_mu_;
  Object* objects_head_ = nullptr;

  Window window_;
  Recorder recorder_{*this};
  Executor executor_{*this};
  CancelDrain cancel_drain_{*this};

  FailureLedger ledger_{*this};

  std::atomic<bool> shutdown_{false};
  std::atomic<bool> destroying_{false};
  bool stopped_ = false;  // shutdown() done (destroying thread only)

  std::atomic<Observer*> observer_{nullptr};
  static std::atomic<bool> any_observer_;  // observed_anywhere()
  mutable std::mutex observers_mu_;
  std::vector<std::unique_ptr<Observer>> observers_;  // every observer installed, kept to the end

  mutable std::mutex extensions_mu_;
  std::vector<std::pair<const void*, std::unique_ptr<Extension>>> extensions_;
};

}  // namespace flowlane::core
