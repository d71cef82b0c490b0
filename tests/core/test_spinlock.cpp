// The spin lock behind per-lane and per-object state: mutual exclusion, and the
// contention counter that benchmarks use as evidence of uncontended locking.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/spinlock.hpp"
#include "test_util.hpp"

namespace flowlane {
namespace {

TEST(SpinLock, ExcludesMutuallyUnderContention) {
  SpinLock lock;
  uint64_t counter = 0;  // plain: only the lock protects it (TSan checks this)
  const int kThreads = 4;
  const int kPer = int(fl_scaled(200000, 20000));
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int k = 0; k < kPer; ++k) {
        lock.lock();
        ++counter;
        lock.unlock();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter, uint64_t(kThreads) * uint64_t(kPer));
}

TEST(SpinLock, CountsAnAcquisitionThatFoundTheLockHeld) {
  SpinLock lock;
  lock.lock();
  const uint64_t before = spin_contentions().load();
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    lock.lock();  // held by the main thread: the slow path
    acquired = true;
    lock.unlock();
  });
  while (spin_contentions().load() == before) std::this_thread::yield();
  EXPECT_FALSE(acquired.load());
  lock.unlock();
  waiter.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_GE(spin_contentions().load(), before + 1);
}

TEST(SpinLock, UncontendedAcquisitionsCountNothing) {
  SpinLock lock;
  const uint64_t before = spin_contentions().load();
  for (int k = 0; k < 1000; ++k) {
    lock.lock();
    lock.unlock();
  }
  // Other tests' threads are gone; nothing else in this process takes spin locks now.
  EXPECT_EQ(spin_contentions().load(), before);
  EXPECT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  lock.unlock();
}

}  // namespace
}  // namespace flowlane
