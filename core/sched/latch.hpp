// Fork–join counter: the waiter of a fork–join (task graph run, parallel loop helpers)
// counts its children down to zero. Protocol and orderings: core/sched/README.md, "Latch".
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>

#include "base/cpu.hpp"
#include "base/deadline.hpp"
#include "sched/pool.hpp"

namespace flowlane::sched {

// What a wait tells the layer above while it blocks, and how that layer can end it: a task
// group's wait is put in the engine's wait-for graph only while it blocks (registering on
// every wait would cost a shared lock per fork-join call), and drain or destroy give it up
// by setting `stop` and waking the latch (Latch::wake()). Both calls come from the waiting
// thread: blocking(true) before it sleeps, blocking(false) once it has stopped sleeping. A
// wake() that comes between the sleeper's look at `stop` and its sleep is lost (the futex
// word does not change): the layer above repeats it for as long as the wait is registered
// (the engine's scan for cycles does, every few milliseconds).
class BlockWatch {
 public:
  virtual void blocking(bool begins) = 0;
  const std::atomic<bool>* stop = nullptr;
  // Acquire: pairs with the layer's release store of *stop (cancel_cycle_waits(), diag).
  bool stopped() const { return stop != nullptr && stop->load(std::memory_order_acquire); }
  // Set by the wait that returned because of `stop`, with its work not done.
  bool gave_up = false;

 protected:
  ~BlockWatch() = default;
};

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
  // As wait(), giving up once `deadline` passes, or once watch->stop is set (when `watch` is
  // given; it is told when the wait blocks); returns whether it saw the count at zero (a
  // reused latch may be counting again by the time it returns). A waiter that gave up may
  // leave the sleeper bit set: the final count_down() then makes one wake-up call for
  // nobody, and rearm() clears it.
  bool wait(const Deadline& deadline, BlockWatch* watch = nullptr);
  // Wakes every thread sleeping in wait() so that it looks at its watch's stop flag again.
  // Reads no memory of the latch (a FUTEX_WAKE hashes the address).
  void wake() { futex_wake(reinterpret_cast<std::atomic<uint32_t>*>(&count_), INT_MAX); }
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
  // Sleeps until the count is zero (returns true: it saw zero), `deadline` passes or
  // `watch` (may be null) is stopped (false).
  [[gnu::cold]] bool block(const Deadline& deadline, const BlockWatch* watch);
  std::atomic<int64_t> count_;
};

}  // namespace flowlane::sched
