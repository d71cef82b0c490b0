// The engine: lanes (strands on the work-stealing pool), interned streams, dependence
// objects, instruction records and the in-flight window. Dependency rules and the lane
// protocol are written down in core/README.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/instr.hpp"
#include "core/observer.hpp"
#include "core/pool.hpp"
#include "core/spinlock.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Lane;
struct Diagnostics;  // core/watchdog.hpp: watchdog, communicators, trace (issue 7)

// Fields written by different threads for every instruction go on separate cache lines.
inline constexpr size_t kCacheLine = 64;

// Number of stream kinds (fl_stream_kind_t) and device slots per lane: slot 0 is the CPU,
// slot 1 + i is CUDA device i.
inline constexpr uint32_t kStreamKinds = 5;

struct Stream {
  Engine* engine = nullptr;
  Lane* lane = nullptr;
  uint64_t handle = 0;
  fl_device_t device{FL_DEVICE_CPU, 0};
  fl_stream_kind_t kind = FL_STREAM_HOST;
  // Submission and completion counters of this stream. `submitted` is written under the
  // lane's submit lock; `completed` only advances, in submission order (a stream is FIFO).
  // Different threads write them for every instruction: separate cache lines.
  std::atomic<uint64_t> submitted{0};
  alignas(kCacheLine) std::atomic<uint64_t> completed{0};
  // Backend state (CUDA stream, event bookkeeping) for device streams; null for host ones.
  void* backend = nullptr;

  // Waiters (synchronize) register the completion count they need; completers wake them
  // only when the smallest registered target is reached, not on every completion.
  std::atomic<uint64_t> wake_at{UINT64_MAX};
  std::mutex wait_mu;
  std::condition_variable wait_cv;
  std::multiset<uint64_t> targets;  // under wait_mu

  bool is_host_executed() const { return device.type == FL_DEVICE_CPU; }
  void advance_completed();                    // completed += 1, wakes waiters whose target is reached
  void wait_completed(uint64_t target);        // sleeps until completed >= target
  std::string describe() const;       // "lane 1, host"
};

// A lane: a strand on the pool. Its instructions start in submission order, one at a time,
// on whichever worker runs the lane task; idle workers steal runnable lanes.
struct Lane {
  Task task;  // run = Lane::run_task; submitted to the pool whenever the lane becomes runnable
  Engine* engine = nullptr;
  uint32_t id = 0;

  // The fields below come in two groups on separate cache lines: those the submitting
  // thread writes for every instruction, and those the lane runner writes for every
  // instruction. Sharing a line would move it between the two cores twice per instruction.

  // --- producer side ---
  // Serialises dependency recording with FIFO order, so that edges skipped because two
  // instructions share this lane are always backed by queue order. Uncontended when one
  // thread submits to a lane, which is the common case.
  alignas(kCacheLine) SpinLock submit_lock;
  bool shutdown_seen = false;  // written under submit_lock
  // Vyukov's intrusive MPSC queue of instructions (producers hold submit_lock anyway).
  std::atomic<Instr*> tail{nullptr};
  // 0: idle (no task queued or running); 1: owned (queued, running, or blocked on `cur`).
  // Read by every push; written by the runner only when the lane goes idle or resumes.
  std::atomic<uint32_t> scheduled{0};
  std::atomic<uint64_t> submitted{0};  // stats, under submit_lock

  // --- consumer side (the lane runner) ---
  alignas(kCacheLine) Instr* head = nullptr;
  Instr* cur = nullptr;  // head instruction waiting for its predecessors
  std::atomic<uint64_t> completed{0};  // stats
  std::atomic<uint64_t> failed{0};
  Instr stub;

  // Diagnostics: the instruction at the head of the lane (running, or blocked on its
  // predecessors) and what a running one waits for inside fl_object_wait. Written by the
  // runner under diag_lock (uncontended: only dumps take it too); a dump takes a reference
  // under the lock before reading a record.
  SpinLock diag_lock;
  Instr* active = nullptr;
  bool active_blocked = false;
  Instr* active_waits_on = nullptr;  // referenced while set
  Object* active_waits_obj = nullptr;
  // Set (under diag_lock) by engine destroy when the running callback's fl_object_wait is on
  // a wait cycle and can never return: the wait gives up with FL_ERR_CANCELLED (core/dump.hpp).
  std::atomic<bool> wait_cancelled{false};

  // Device instructions this lane launched on one CUDA stream since that stream last
  // recorded an event, in launch order (gpu/README.md, "Events"). They stay kRunning until
  // Engine::cover_launched() records one event after the last of them. Lane runner only.
  std::vector<Instr*> uncovered;
  void set_active(Instr* i, bool blocked);
  void clear_active(Instr* i);

  Lane();
  void push(Instr* i);  // producer (under submit_lock)
  Instr* pop();         // consumer
  bool pushed_since(const Instr* head_before) const;
  void schedule();      // makes the lane runnable if it is idle
  static void run_task(Task* t);
};

struct FailureRecord {
  Instr* instr;  // holds a reference
};

class Engine {
 public:
  explicit Engine(const fl_engine_desc_t& desc);
  ~Engine();  // shutdown() if not done yet

  // Destroy is two steps so that the C handle stays valid while callbacks drain:
  // begin_destroy() claims the destruction (false if someone else already did), shutdown()
  // refuses new work, drains, joins the workers and runs pending releases (idempotent).
  bool begin_destroy() { return !destroying_.exchange(true, std::memory_order_acq_rel); }
  void shutdown();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  uint64_t handle() const { return handle_; }
  void set_handle(uint64_t h) { handle_ = h; }

  Pool& pool() { return *pool_; }
  // A cached pool with exactly n workers (the main pool when n equals its size), for task
  // graphs run with an explicit thread count.
  Pool& pool_for_threads(unsigned n);

  uint32_t lane_count() const { return uint32_t(lanes_.size()); }
  uint32_t worker_count() const { return pool_->size(); }
  uint64_t inflight_limit() const { return inflight_limit_; }

  // Lanes.
  uint32_t acquire_lane();
  void release_lane(uint32_t lane);
  Lane& lane(uint32_t id) { return *lanes_[id]; }

  // Streams (interned).
  Stream* stream(uint32_t lane, fl_device_t device, fl_stream_kind_t kind);

  // Objects.
  Object* create_object(void* user_data, fl_release_fn release);
  void release_object_ref(Object* o);  // runs release() when the last reference goes

  // Instructions.
  Instr* new_instr();  // from the pool of records; refs = 1
  // Records dependencies of `i` (operands already resolved) and queues it on its lane.
  // Takes ownership of the window slot admitted by admit().
  fl_instr_id submit(Instr* i);
  // In-flight window: takes a slot, blocking while full (FL_ERR_WOULD_BLOCK when
  // nonblocking). Never blocks on a worker thread of this engine (an instruction or task
  // submitting more work): such submissions are admitted over the limit.
  void admit(bool nonblocking);
  void retire_window_slot();
  int64_t low_water() const;  // parked submitters resume once in-flight drops to this

  // Waits. Each returns FL_OK or a failure status, with the thread's message set.
  fl_status_t synchronize();
  fl_status_t synchronize(Stream* s);
  fl_status_t wait_object(Object* o, uint32_t access);

  // Instruction lifecycle (lane runner side).
  void execute_host(Instr* i);
  void complete(Instr* i);
  // Device instructions (gpu/): execute_device() launches on the lane runner (skip check,
  // gpu::launch) and adds the instruction to its lane's `uncovered` run; cover_launched()
  // records one event after the run, publishes kLaunched, releases launch successors and
  // hands the run to the engine's GPU poller, which calls complete_device() once the
  // covering event completed (st = FL_OK) or faulted. Lane runner only.
  void execute_device(Instr* i);
  void cover_launched(Lane* lane);
  void complete_device(Instr* i, fl_status_t st, const std::string& detail);
  uint32_t device_slots() const { return device_slots_; }
  // The GPU backend's per-engine state (poller thread), created lazily by gpu/ under
  // gpu_backend_mu with the first device instruction; stopped by shutdown() after the drain.
  std::atomic<void*> gpu_backend{nullptr};
  std::mutex gpu_backend_mu;
  void recycle(Instr* i);  // refs reached zero

  void record_failure(Instr* i);
  bool shutting_down() const { return shutdown_.load(std::memory_order_acquire); }

  fl_engine_stats_t stats() const;

  // Diagnostics hooks (core/observer.hpp). The engine owns every observer ever installed
  // until it is destroyed; set_observer(nullptr) stops new calls.
  Observer* observer() const { return observer_.load(std::memory_order_acquire); }
  void set_observer(std::unique_ptr<Observer> o);
  void clear_observer();
  // Lanes, for diagnostics.
  const std::vector<std::unique_ptr<Lane>>& lanes() const { return lanes_; }
  int64_t inflight() const { return inflight_.load(std::memory_order_relaxed); }
  uint32_t window_waiters() const { return window_waiters_.load(std::memory_order_relaxed); }
  std::vector<Stream*> all_streams() const;
  Diagnostics* diagnostics() const { return diag_; }

 private:
  // Waits until done(): a worker of this engine's pool helps run other work meanwhile;
  // any other thread sleeps on `atom` (notified by whoever makes done() true).
  template <class Done, class Atomic>
  void block_until(Done&& done, Atomic& atom) {
    if (pool_->on_worker()) {
      pool_->help_until(done);
      return;
    }
    for (;;) {
      auto v = atom.load(std::memory_order_acquire);
      if (done()) return;
      atom.wait(v, std::memory_order_acquire);
    }
  }
  void record(Instr* i, const Operand& op);
  void release_successors(Edge* e);  // drops one pending unit of each successor in the list
  void wait_stream(Stream* s, uint64_t target);  // helps on a worker, sleeps elsewhere
  void destroy_object(Object* o);
  fl_status_t collect_failure(const std::vector<std::pair<Stream*, uint64_t>>& upto);
  void drain_and_stop();

  uint64_t handle_ = 0;
  uint64_t inflight_limit_ = 4096;
  std::unique_ptr<Pool> pool_;
  std::mutex pools_mu_;
  std::map<unsigned, std::unique_ptr<Pool>> extra_pools_;

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

  // In-flight window: `inflight_` counts submitted, not completed instructions.
  std::atomic<int64_t> inflight_{0};
  std::atomic<uint32_t> window_waiters_{0};
  std::atomic<uint64_t> window_stalls_{0};

  std::atomic<uint64_t> next_id_{1};

  std::mutex failures_mu_;
  std::deque<FailureRecord> failures_;

  std::atomic<bool> shutdown_{false};
  std::atomic<bool> destroying_{false};
  bool stopped_ = false;  // shutdown() done (destroying thread only)

  std::atomic<Observer*> observer_{nullptr};
  std::mutex observers_mu_;
  std::vector<std::unique_ptr<Observer>> observers_;  // every observer installed, kept to the end

  Diagnostics* diag_ = nullptr;  // created in the constructor, freed last in drain_and_stop()
};

// The instruction running on this thread (inside its callback), or null.
Instr* current_instr();

// Marks this thread as one that completes instructions of `e` outside its pool (the GPU
// poller): its submissions — from release and cleanup callbacks it runs — are admitted
// over the window, as workers' are, since the window may be waiting for this very thread.
void set_completion_thread(Engine* e);

}  // namespace flowlane::core
