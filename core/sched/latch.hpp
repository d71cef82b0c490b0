// Fork–join counter: the waiter of a fork–join (task graph run, parallel loop helpers)
// counts its children down to zero. Protocol and orderings: core/sched/README.md, "Latch".
#pragma once

#include <atomic>
#include <cstdint>

#include "base/deadline.hpp"
#include "sched/pool.hpp"

namespace flowlane::sched {

// Fork–join counter. count_down() from any thread; wait() follows sched::wait(): on a pool
// worker it helps with tasks of its own region, then blocks (futex) with a spare standing
// in; elsewhere it blocks. The count reaches zero once: add() is for a holder of a
// count (the waiter before it waits, or a task that has not counted down yet).
//
// A task group reuses its latch: add() from zero starts a new round (rearm() first).
//
// A Latch usually lives on the waiter's stack frame, and the waiter may return the moment
// it sees zero. So count_down() touches the latch's memory exactly once, with the RMW that
// may reach zero; the wake-up after it is a FUTEX_WAKE, which reads no memory.
//
//   // count_: [ 1-bit unused | 1-bit sleeper | 62-bit count ]  (the futex word is its low 32 bits)
class Latch {
 public:
  explicit Latch(int64_t count) : count_(count) {}
  void add(int64_t n) { count_.fetch_add(n, std::memory_order_relaxed); }
  void count_down();
  void count_down(int64_t n);  // n counts at once (n >= 1), same rules as count_down()
  void wait() { (void)wait(Deadline::forever()); }
  // As wait(), giving up once `deadline` passes; returns done(). A waiter that gave up may
  // leave the sleeper bit set: the final count_down() then makes one wake-up call for
  // nobody, and rearm() clears it.
  bool wait(const Deadline& deadline);
  // Counts not yet dropped (a snapshot, for messages).
  int64_t pending() const { return count_.load(std::memory_order_relaxed) & kCountMask; }
  // For a latch reused after it reached zero (a task group): clears a sleeper bit left by
  // the last waiter, so the next count_down to zero makes no wake-up call for nobody.
  void rearm() {
    int64_t v = kSleeper;
    // The load first: usually no sleeper was announced, and a failing CAS is still a
    // locked RMW (on every fl_task_group_wait and _destroy).
    if (count_.load(std::memory_order_relaxed) == v) count_.compare_exchange_strong(v, 0, std::memory_order_relaxed);
  }
  // Acquire: pairs with the acq_rel RMW in count_down(); what the counted-down tasks wrote
  // is visible to the waiter.
  bool done() const { return (count_.load(std::memory_order_acquire) & kCountMask) == 0; }

 private:
  static constexpr int64_t kSleeper = int64_t(1) << 62;
  static constexpr int64_t kCountMask = kSleeper - 1;
  // Sleeps until the count is zero or `deadline` passes.
  [[gnu::cold]] void block(const Deadline& deadline);
  std::atomic<int64_t> count_;
};

}  // namespace flowlane::sched
