// A test-and-test-and-set spin lock for short, normally uncontended critical sections
// (per-object dependency state, per-lane submission). It yields after a short spin so
// that a preempted holder on an oversubscribed machine is not starved.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FL_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define FL_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define FL_CPU_RELAX() ((void)0)
#endif

namespace flowlane::core {

class SpinLock {
 public:
  void lock() noexcept {
    for (unsigned spins = 0;; ++spins) {
      // acquire pairs with the release in unlock(): the holder's writes are visible.
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          FL_CPU_RELAX();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }  // pairs with lock()

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace flowlane::core
