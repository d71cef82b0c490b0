// A stream: one (lane, device, kind) queue of a lane (fl_stream_t). Its instructions start in
// submission order; all streams of a lane share the lane's strand (lane.hpp). A stream counts
// what was submitted to it and what completed, and lets threads sleep until a count or an
// instruction id is reached (fl_stream_synchronize, fl_engine_synchronize, fl_instr_wait_for,
// destroy's drain).
//
// Owns: the counters and the waiters' registrations below, and the wake-up protocol between
// completions and waiters (advance_completed() against wait_completed() /
// wait_completed_id(); core/engine/README.md, "The in-flight window", last part).
// Written by others, for their own concern, and documented where they are used:
//   submitted, last_submitted_id  Engine::enqueue (submit.cpp), under the lane's submit lock;
//   last_completed_id             Executor::complete (execute.cpp), before advance_completed();
//   cancel_upto                   CancelDrain (cancel_drain.cpp);
//   failures                      FailureLedger (ledger.hpp), under the ledger's mutex;
//   device_state                  the device backend (device.hpp);
//   async                         Executor (execute.cpp), under async.mu.
// Calls: nothing of the engine (it is a leaf).
//
// Atomics it shares, and with whom:
//   completed (seq_cst fetch_add in advance_completed) and wake_at / wake_at_id (seq_cst
//     stores in wait_completed / wait_completed_id): a store-load pair between the
//     completing thread and a waiter (either the waiter sees the count, or the completer
//     sees the target and wakes it). `completed` is only written by read-modify-writes, so
//     its release sequence spans every value; wake_at / wake_at_id only under wait_mu.
//   submitted (release store in Engine::enqueue) with acquire loads in Waits, CancelDrain
//     and destroy's drain (every instruction counted was recorded before).
//   last_completed_id (release store or CAS in Executor::complete) with the acquire loads
//     here and in Waits (query, wait_instr) and CancelDrain::cancel: what the completion
//     wrote (the outcome history) is visible to whoever sees the id.
// Lock: wait_mu, taken by waiters and by a completion that reaches a registered target.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "base/cpu.hpp"
#include "base/deadline.hpp"
#include "engine/ledger.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Lane;

// Number of stream kinds (fl_stream_kind_t). A lane has one stream per kind and device slot:
// slot 0 is the CPU, slot 1 + i is device i of the device backend.
inline constexpr uint32_t kStreamKinds = 5;

// The completions of a stream whose instructions may complete after their lane moved on
// (host COLLECTIVE streams: asynchronous host instructions, SubmitArgs::async_start). Its
// instructions complete in submission order: an instruction that finished while one before
// it is still in flight waits here, linked through Instr::async_next, and whoever finishes
// the head completes every finished one behind it (core/engine/README.md, "Asynchronous host
// instructions").
struct AsyncCompletions {
  std::mutex mu;
  Instr* head = nullptr;    // oldest not completed; under mu
  Instr* tail = nullptr;    // under mu
  bool completing = false;  // a thread is completing the head (outside mu); under mu
};

struct Stream {
  Engine* engine = nullptr;
  Lane* lane = nullptr;
  uint64_t handle = 0;  // the caller's fl_stream_t* value
  fl_device_t device{FL_DEVICE_CPU, 0};
  fl_stream_kind_t kind = FL_STREAM_HOST;
  // Submission and completion counters of this stream. `submitted` is written under the
  // lane's submit lock; `completed` only advances, in submission order (a stream is FIFO).
  // Different threads write them for every instruction: separate cache lines.
  std::atomic<uint64_t> submitted{0};
  std::atomic<fl_instr_id> last_submitted_id{0};  // under the lane's submit lock
  // Instructions submitted before this id that have not started when their lane reaches
  // them are cancelled (fl_stream_cancel, fl_engine_cancel; CancelDrain); only grows. Read
  // by the lane runner for every instruction (rarely written: no false sharing to speak of).
  std::atomic<fl_instr_id> cancel_upto{0};
  alignas(kCacheLine) std::atomic<uint64_t> completed{0};
  // The id of the last instruction that completed (a stream completes in order).
  std::atomic<fl_instr_id> last_completed_id{0};
  // The device backend's state of a device stream (its queue, events); null for host ones.
  void* device_state = nullptr;
  // Its failed, skipped and cancelled instructions: the FailureLedger's, under its mutex.
  StreamFailures failures;

  // Waiters register what they need: a completion count (synchronize) or an instruction
  // id (fl_instr_wait_for). Completers wake them only when the smallest registered target
  // of either kind is reached, not on every completion (see the pairs above).
  std::atomic<uint64_t> wake_at{UINT64_MAX};
  std::atomic<fl_instr_id> wake_at_id{UINT64_MAX};
  std::mutex wait_mu;
  std::condition_variable wait_cv;
  std::multiset<uint64_t> targets;        // under wait_mu
  std::multiset<fl_instr_id> id_targets;  // under wait_mu

  // Host COLLECTIVE streams (set at creation): asynchronous host instructions may run on
  // them, so an instruction of the stream may complete after its lane moved on.
  bool async_completion = false;
  AsyncCompletions async;

  bool is_host_executed() const { return device.type == FL_DEVICE_CPU; }
  // An instruction of this stream may still be in flight when its lane runs the next one
  // (never for other host streams: their instructions complete before the lane moves on).
  bool completes_async() const { return async_completion; }
  // completed += 1 (last_completed_id already stored), wakes waiters whose target is reached
  void advance_completed();
  // Sleeps until completed >= target, the deadline passes or *cancelled (when given) is set
  // (by drain or destroy, which then wakes the stream's waiters: wake_waiters()); returns
  // whether it reached the target.
  bool wait_completed(uint64_t target, const Deadline& deadline, const std::atomic<bool>* cancelled = nullptr);
  // Sleeps until last_completed_id >= id, the deadline passes or *cancelled is set; returns
  // whether it reached the id.
  bool wait_completed_id(fl_instr_id id, const Deadline& deadline, const std::atomic<bool>* cancelled = nullptr);
  // Whether the stream has completed `target` instructions (or, `is_id`, the instruction
  // whose id is `target`).
  bool reached(uint64_t target, bool is_id) const;
  // Throws FL_ERR_INVALID_ARGUMENT, in the name of `fn`, unless `id` is an instruction id
  // this stream returned (fl_instr_query, fl_instr_wait_for, fl_instr_cancel).
  void check_submitted(fl_instr_id id, const char* fn) const;
  // Wakes every waiter of the stream so that it re-checks its cancel flag.
  void wake_waiters();
  std::string describe() const;  // "lane 1, host"
};

// Whether drain or destroy gave up the wait that `cancelled` (a WaitRecord's flag, or null)
// belongs to. Its wake-up (Stream::wake_waiters()) takes wait_mu after the store, so a
// sleeper checking under wait_mu cannot miss both.
inline bool given_up(const std::atomic<bool>* cancelled) {
  // Acquire pairs with the release store in cancel_cycle_waits() (diag/dump.cpp).
  return cancelled != nullptr && cancelled->load(std::memory_order_acquire);
}

}  // namespace flowlane::core
