// An event count for parking idle workers, in the style of Eigen's EventCount and rayon's
// sleep module: a worker that found no work announces itself (prepare_wait), checks every
// queue once more, and then either backs out (cancel_wait) or sleeps (commit_wait). A
// producer publishes work first and then calls notify_one(), which costs a fence and a load
// (no syscall, no store) when nobody is waiting or every waiter already has a wake-up.
//
// The state is one 32-bit word, which is also the futex word:
//
//   // [ 16-bit signals | 16-bit waiters ]
//
// waiters: threads between prepare_wait and the end of cancel_wait/commit_wait.
// signals: wake-up tokens handed out by notify and not yet consumed; signals <= waiters.
// A committed waiter sleeps until it can consume a token; notify_one adds a token only if
// some waiter has none, so a burst of submits while a sleeper is waking up costs one
// FUTEX_WAKE, not one per submit.
//
// No lost wake-up (the full argument is in core/sched/README.md): the waiter's seq_cst RMW
// in prepare_wait and the producer's seq_cst fence in notify form a Dekker pair, so either
// the producer sees the waiter counted (and hands out a token, which the waiter cannot
// sleep through: the futex compares the whole word) or the waiter's re-check sees the
// work. Futex waits are FUTEX_PRIVATE and tolerate spurious wake-ups.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>

#include "base/cpu.hpp"

namespace flowlane::sched {

class Notifier {
 public:
  static constexpr uint32_t kWaiterOne = 1u;
  static constexpr uint32_t kSignalOne = 1u << 16;
  static constexpr uint32_t kCountMask = 0xffffu;
  static constexpr uint32_t kMaxWaiters = kCountMask;

  // Step 1 of parking: count this thread as a waiter. The caller must then re-check every
  // place work can appear, and call cancel_wait() if it found some, else commit_wait().
  void prepare_wait() {
    // seq_cst RMW + fence: the Dekker pair of the fence in notify(). Our count is in the
    // total order before the re-check's loads, so a producer whose fence comes later sees
    // it, and a producer whose fence comes earlier has its work seen by the re-check.
    state_.fetch_add(kWaiterOne, std::memory_order_seq_cst);
    full_fence();  // pairs with the fence in notify_one()/notify_all() (the Dekker pair above)
  }

  // The re-check found work: stop being a waiter. If that leaves more tokens than waiters,
  // one token was meant for us (or for nobody): drop it to keep signals <= waiters.
  void cancel_wait() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      uint32_t w = waiters(s) - 1;
      uint32_t sig = signals(s);
      if (sig > w) sig = w;
      uint32_t next = (sig << 16) | w;
      // acq_rel: a token consumed here carries the producer's publication (pairs with
      // the release in notify()).
      if (state_.compare_exchange_weak(s, next, std::memory_order_acq_rel, std::memory_order_relaxed)) return;
    }
  }

  // Sleeps until a token is available, consumes it, and stops being a waiter. Returns
  // true if it actually slept in the kernel (for statistics).
  bool commit_wait() {
    bool slept = false;
    uint32_t s = state_.load(std::memory_order_acquire);  // pairs with the release CAS in notify_one()/notify_all()
    for (;;) {
      if (signals(s) > 0) {
        // Consume one token and leave. Acquire pairs with the release CAS in notify().
        if (state_.compare_exchange_weak(s, s - kSignalOne - kWaiterOne, std::memory_order_acquire,
                                         std::memory_order_relaxed))
          return slept;
        continue;
      }
      // No token: sleep unless the word changed since we read it (then re-read).
      futex_wait(&state_, s);
      slept = true;
      s = state_.load(std::memory_order_acquire);  // pairs with the release CAS in notify_one()/notify_all()
    }
  }

  // Wakes one waiter if some waiter has no token yet. Call after publishing the work.
  void notify_one() {
    // Dekker pair of prepare_wait(): orders the caller's publication of work before the
    // load of waiters below, so that a waiter counted after this point re-checks and sees
    // the work, and a waiter counted before is seen here.
    full_fence();
    uint32_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      if (signals(s) >= waiters(s)) return;  // nobody waiting, or every waiter already woken
      // Release: the token carries the work's publication to the waiter that consumes it.
      // Pairs with the acquire CAS in commit_wait() and the acq_rel CAS in cancel_wait().
      if (state_.compare_exchange_weak(s, s + kSignalOne, std::memory_order_release, std::memory_order_relaxed))
        break;
    }
    futex_wake(&state_, 1);
  }

  // Wakes every waiter (shutdown).
  void notify_all() {
    full_fence();  // as in notify_one(): the Dekker pair of prepare_wait()
    uint32_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      if (signals(s) >= waiters(s)) break;
      uint32_t next = (waiters(s) << 16) | waiters(s);
      // Release as in notify_one(): pairs with the acquire CAS in commit_wait().
      if (state_.compare_exchange_weak(s, next, std::memory_order_release, std::memory_order_relaxed)) break;
    }
    futex_wake(&state_, INT_MAX);
  }

  uint32_t waiters() const { return waiters(state_.load(std::memory_order_relaxed)); }
  // Wake-up tokens handed out and not consumed yet (a snapshot, for tests and diagnostics).
  uint32_t signals() const { return signals(state_.load(std::memory_order_relaxed)); }

 private:
  static uint32_t waiters(uint32_t s) { return s & kCountMask; }
  static uint32_t signals(uint32_t s) { return s >> 16; }

  alignas(64) std::atomic<uint32_t> state_{0};
};

}  // namespace flowlane::sched
