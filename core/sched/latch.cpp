// The fork–join latch (sched/latch.hpp).
#include "sched/latch.hpp"

#include <climits>

#include "base/cpu.hpp"

namespace flowlane::sched {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Latch's futex word is the low half of count_");

void Latch::count_down() { count_down(1); }

void Latch::count_down(int64_t n) {
  // acq_rel: release publishes this task's writes to the waiter (pairs with the acquire
  // in done()/block()); acquire orders us after the other count_downs. This RMW is our
  // last access to *this: the waiter may free the latch as soon as it sees zero.
  int64_t before = count_.fetch_sub(n, std::memory_order_acq_rel);
  if ((before & kCountMask) == n && (before & kSleeper) != 0)
    futex_wake(reinterpret_cast<std::atomic<uint32_t>*>(&count_), INT_MAX);  // reads no memory
}

bool Latch::wait(const Deadline& deadline, BlockWatch* watch) {
  if (done()) return true;
  if (Pool::current() == nullptr) {
    for (int i = 0; i < 128; ++i) {  // short spin: fork–join children are often quick
      if (done()) return true;
      cpu_relax();
    }
  }
  // What the wait saw, never a fresh look once it stops: a group's latch starts a new round
  // when a task is spawned into the group after the count reached zero, and a wait that saw
  // zero (in a poll, or in block()) has reached its target even if the count is up again
  // by the time it returns. (Looking again answered FL_ERR_TIMEOUT to untimed waits.)
  bool reached = false;
  sched::wait(
      [this, watch, &reached] {
        reached = reached || done();
        return reached || (watch != nullptr && watch->stopped());
      },
      [this, watch, &reached](const Deadline& d) {
        if (watch != nullptr) watch->blocking(true);
        if (block(d, watch)) reached = true;
        if (watch != nullptr) watch->blocking(false);
      },
      deadline);
  return reached;
}

bool Latch::block(const Deadline& deadline, const BlockWatch* watch) {
  auto* word = reinterpret_cast<std::atomic<uint32_t>*>(&count_);
  int64_t v = count_.load(std::memory_order_acquire);  // pairs with count_down()
  for (;;) {
    if ((v & kCountMask) == 0) return true;
    // Given up (wake() follows the stop flag's store; a wake-up that comes between this
    // check and the sleep below is lost, and the layer above repeats it: see BlockWatch).
    if (watch != nullptr && watch->stopped()) return false;
    if ((v & kSleeper) == 0) {
      // Announce a sleeper so that the final count_down() issues the FUTEX_WAKE. acquire
      // on failure too: a failed CAS may read the final count.
      // Pairs with the acq_rel fetch_sub in count_down().
      if (!count_.compare_exchange_weak(v, v | kSleeper, std::memory_order_acquire, std::memory_order_acquire))
        continue;
      v |= kSleeper;
    }
    // Sleeps only while the low 32 bits are unchanged; any count_down changes them.
    if (deadline.infinite()) {
      futex_wait(word, uint32_t(uint64_t(v)));
    } else {
      int64_t left = deadline.remaining_ns();
      if (left == 0) return false;
      futex_wait_for(word, uint32_t(uint64_t(v)), left);
    }
    v = count_.load(std::memory_order_acquire);  // pairs with count_down()
  }
}

}  // namespace flowlane::sched
