// The in-flight window (engine/window.hpp; core/engine/README.md, "The in-flight window").
#include "engine/window.hpp"

#include <algorithm>
#include <string>

#include "base/error.hpp"
#include "engine/engine.hpp"

namespace flowlane::core {

bool Window::admit(bool nonblocking, bool engine_run, const std::atomic<bool>* refuse) {
  if (engine_run) {
    // Work submitted by engine-run code (a callback, a task, a completion thread) is never
    // blocked: it could be the very work that must finish to open the window. Admitted
    // over the limit.
    admitted_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  const int64_t limit = int64_t(limit_);
  uint64_t cur = admitted_.load(std::memory_order_relaxed);
  for (;;) {
    // Against the submitters' view of retired_ first (their own cache line); only when that
    // view says full is the completers' counter read. The view is a lower bound, so the
    // window never admits more than the limit. (Signed: `seen` may be newer than `cur`;
    // then the CAS below fails, and a successful one means seen <= retired_ <= cur.)
    uint64_t seen = retired_seen_.load(std::memory_order_relaxed);
    if (int64_t(cur - seen) >= limit) {
      const uint64_t r = retired_.load(std::memory_order_relaxed);
      while (seen < r && !retired_seen_.compare_exchange_weak(seen, r, std::memory_order_relaxed)) {
      }
      seen = std::max(seen, r);
    }
    if (int64_t(cur - seen) < limit) {
      // acquire pairs with the acq_rel RMW of fence_admissions() (fl_engine_drain: submit()
      // then sees draining if the drain's RMW came first); relaxed on failure (we retry).
      if (admitted_.compare_exchange_weak(cur, cur + 1, std::memory_order_acquire, std::memory_order_relaxed)) return true;
      continue;
    }
    if (nonblocking)
      fail(FL_ERR_WOULD_BLOCK, "the in-flight window is full (" + std::to_string(limit) +
                                   " instructions submitted and not completed); retry later or submit without "
                                   "FL_SUBMIT_NONBLOCKING to wait");
    if (!park(refuse)) return false;
    cur = admitted_.load(std::memory_order_relaxed);
  }
}

bool Window::park(const std::atomic<bool>* refuse) {
  stalls_.fetch_add(1, std::memory_order_relaxed);
  Observer* ob = engine_.observer();
  if (ob) ob->on_window_stall(true);
  // Sleep until the window has drained to its low-water mark, not just until one slot
  // frees: the completer wakes parked submitters once the count is at or below the mark
  // instead of on every completion (see retire()).
  const int64_t low = low_water();
  // seq_cst on both sides (here and in retire) is a store–load pattern: either the retiring
  // thread sees us registered, or we see its increment.
  // Each look at retired_ is preceded by reading the wake-up epoch and arming: a completer
  // that finds the window at or below the mark and the waiters armed disarms, bumps the
  // epoch and notifies, once per arming (wake_parked()). Lost wake-ups: a completer that
  // found us not armed read the flag before our arming store, so our look sees its
  // increment (seq_cst total order); one that consumed our arming bumps the epoch after the
  // epoch read below, so the wait returns at once.
  // The refusal (fl_engine_drain) is looked at after the epoch is read, as retired_ is: a
  // drain whose seq_cst store of the flag this load misses bumps the epoch after our read
  // (refuse_parked()), so the sleep returns at once.
  // Store-load (Dekker) pair with retire(): its increment of retired_, then its load of this.
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool admitted = true;
  for (;;) {
    const uint32_t epoch = epoch_.load(std::memory_order_seq_cst);  // pairs with the bumps in wake_parked(), refuse_parked()
    armed_.store(1, std::memory_order_seq_cst);                      // pairs with the exchange in wake_parked()
    const uint64_t r = retired_.load(std::memory_order_seq_cst);
    if (int64_t(admitted_.load(std::memory_order_relaxed) - r) <= low) break;
    if (refuse != nullptr && refuse->load(std::memory_order_seq_cst)) {  // pairs with the store in CancelDrain::drain()
      admitted = false;
      break;
    }
    // Returns at once if the epoch moved since our read: pairs with the bumps in
    // wake_parked() and refuse_parked().
    epoch_.wait(epoch, std::memory_order_seq_cst);
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  if (ob) ob->on_window_stall(false);
  return admitted;
}

void Window::refuse_parked() {
  // seq_cst, after the caller's seq_cst store of the flag: pairs with the epoch load and the
  // flag load in park().
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  epoch_.notify_all();
}

int64_t Window::low_water() const {
  const int64_t limit = int64_t(limit_);
  return limit - 1 - std::min<int64_t>(limit / 4, 256);
}

void Window::retire() {
  // seq_cst: the store-load pair with park(), which counts itself in waiters_ and then
  // loads retired_. A parked submitter is woken once the window is at or below its
  // low-water mark; the line of admitted_ is read only while someone is parked.
  const uint64_t r = retired_.fetch_add(1, std::memory_order_seq_cst) + 1;
  // Store-load (Dekker) pair with park(): its increment of waiters_, then its load of retired_.
  if (waiters_.load(std::memory_order_seq_cst) == 0) return;
  if (int64_t(admitted_.load(std::memory_order_relaxed) - r) > low_water()) return;
  wake_parked();
}

void Window::wake_parked() {
  // One notification per arming by the parked submitters: a woken submitter may not run
  // for a while (on the completer's own CPU, not before it yields), and notifying on
  // every completion meanwhile cost a system call each.
  // seq_cst (the load too: it must not see an arming older than the submitter's look):
  // pairs with the arming store and epoch load in park().
  if (armed_.load(std::memory_order_seq_cst) != 0 && armed_.exchange(0, std::memory_order_seq_cst) != 0) {
    epoch_.fetch_add(1, std::memory_order_seq_cst);  // pairs with the epoch load in park()
    epoch_.notify_all();
  }
}

}  // namespace flowlane::core
