// CPU and kernel primitives every layer uses: the spin-wait pause, the seq_cst fence, the
// futex calls, the cache-line size. One definition each (they used to be spelled three
// ways in three files).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#ifndef FL_UNDER_TSAN
#define FL_UNDER_TSAN 0
#endif

namespace flowlane {

// Fields written by different threads for every instruction or task go on separate cache
// lines.
inline constexpr size_t kCacheLine = 64;

// One pause of a spin-wait loop (x86 PAUSE, Arm YIELD): tells the core a sibling may have
// the pipeline, and keeps the loop from flooding the memory system.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// A seq_cst fence. GCC warns that ThreadSanitizer does not model fences; TSan only checks
// happens-before, which in this code always comes from acquire/release pairs, never from
// a fence, so the warning is silenced here and nowhere else.
// Each caller names the store-load (Dekker) pair its fence is half of.
#if defined(__GNUC__) && !defined(__clang__) && FL_UNDER_TSAN
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
inline void full_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
#if defined(__GNUC__) && !defined(__clang__) && FL_UNDER_TSAN
#pragma GCC diagnostic pop
#endif

// Sleeps while *word == expected (the kernel compares and sleeps atomically); may return
// spuriously. Process-private futex.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

// As futex_wait, giving up after `ns` nanoseconds (relative).
inline void futex_wait_for(std::atomic<uint32_t>* word, uint32_t expected, int64_t ns) {
  struct timespec ts;
  ts.tv_sec = ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

// Wakes up to `count` sleepers on `word`. Reads no memory: safe even when the word's owner
// has already gone away (a latch on a waiter's stack frame).
inline void futex_wake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

}  // namespace flowlane
