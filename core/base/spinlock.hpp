// A test-and-test-and-set spin lock for short, normally uncontended critical sections
// (per-object dependency state, per-lane submission). It yields after a short spin so
// that a preempted holder on an oversubscribed machine is not starved.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "base/cpu.hpp"

namespace flowlane {

// Acquisitions (process-wide, every SpinLock) that found the lock held. Counted only on
// the slow path, so an uncontended lock pays nothing for it; benchmarks read it to show
// that the per-lane and per-object locks are uncontended in the common case.
inline std::atomic<uint64_t>& spin_contentions() {
  static std::atomic<uint64_t> count{0};
  return count;
}

class SpinLock {
 public:
  void lock() noexcept {
    // acquire pairs with the release in unlock(): the holder's writes are visible.
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    lock_contended();
  }
  bool try_lock() noexcept {
    // acquire pairs with the release in unlock(), as in lock().
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }  // pairs with lock()

 private:
  [[gnu::cold, gnu::noinline]] void lock_contended() noexcept {
    spin_contentions().fetch_add(1, std::memory_order_relaxed);
    for (unsigned spins = 0;; ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;  // pairs with unlock()
    }
  }

  std::atomic<bool> locked_{false};
};

}  // namespace flowlane
