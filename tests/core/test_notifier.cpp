// White-box tests of the event count (core/sched/notifier.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "sched/notifier.hpp"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace flowlane::sched {
namespace {

TEST(Notifier, NotifyWithoutWaitersIsANoOp) {
  Notifier n;
  n.notify_one();
  n.notify_all();
  EXPECT_EQ(n.waiters(), 0u);
}

TEST(Notifier, CancelWaitLeavesNoWaiter) {
  Notifier n;
  n.prepare_wait();
  EXPECT_EQ(n.waiters(), 1u);
  n.cancel_wait();
  EXPECT_EQ(n.waiters(), 0u);
}

TEST(Notifier, TokenGivenBeforeCommitIsNotSleptThrough) {
  Notifier n;
  n.prepare_wait();
  n.notify_one();  // the token arrives between prepare and commit
  n.commit_wait(); // must return at once
  EXPECT_EQ(n.waiters(), 0u);
}

TEST(Notifier, CancelDropsTheTokenMeantForTheCanceller) {
  Notifier n;
  n.prepare_wait();
  n.notify_one();
  ASSERT_EQ(n.signals(), 1u);  // the token is the canceller's
  n.cancel_wait();
  // The state word keeps signals <= waiters: with no waiter left, no token may remain
  // (a stale token would let the next waiter's commit_wait return with no work).
  EXPECT_EQ(n.waiters(), 0u);
  EXPECT_EQ(n.signals(), 0u);
  // And a new waiter is woken only by a token given for it.
  n.prepare_wait();
  EXPECT_EQ(n.signals(), 0u);
  n.notify_one();
  EXPECT_EQ(n.signals(), 1u);
  n.commit_wait();
  EXPECT_EQ(n.waiters(), 0u);
  EXPECT_EQ(n.signals(), 0u);
}

TEST(Notifier, CancelKeepsTokensOfOtherWaiters) {
  Notifier n;
  n.prepare_wait();  // waiter A
  n.prepare_wait();  // waiter B
  n.notify_one();    // one token, for either
  n.cancel_wait();   // A found work: one waiter, one token left
  EXPECT_EQ(n.waiters(), 1u);
  EXPECT_EQ(n.signals(), 1u);
  n.commit_wait();   // B consumes it and returns at once
  EXPECT_EQ(n.waiters(), 0u);
  EXPECT_EQ(n.signals(), 0u);
}

class NotifierThreads : public ::testing::TestWithParam<int> {};

// Producer/consumer handshake through a counter of published items: consumers park with
// the prepare / re-check / commit protocol. If a wake-up were lost, the test would hang
// (ctest's timeout turns that into a failure).
TEST_P(NotifierThreads, NoLostWakeupInPingPong) {
  const int consumers = GetParam();
  const int items = FL_UNDER_SANITIZER ? 10'000 : 50'000;
  Notifier n;
  std::atomic<int> published{0};
  std::atomic<int> consumed{0};
  std::vector<std::thread> ts;
  for (int c = 0; c < consumers; ++c) {
    ts.emplace_back([&] {
      for (;;) {
        int p = published.load(std::memory_order_acquire);
        int k = consumed.load(std::memory_order_relaxed);
        if (k >= items) return;
        if (k < p) {
          consumed.compare_exchange_weak(k, k + 1);
          continue;
        }
        n.prepare_wait();
        if (consumed.load() >= items || published.load() > consumed.load()) {
          n.cancel_wait();
          continue;
        }
        n.commit_wait();
      }
    });
  }
  for (int i = 0; i < items; ++i) {
    published.fetch_add(1, std::memory_order_release);
    n.notify_one();
    // Let consumers drain now and then so that they really park.
    if (i % 64 == 0)
      while (consumed.load() < published.load()) std::this_thread::yield();
  }
  while (consumed.load() < items) std::this_thread::yield();
  n.notify_all();
  for (auto& t : ts) t.join();
  EXPECT_EQ(consumed.load(), items);
  EXPECT_EQ(n.waiters(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Consumers, NotifierThreads, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "consumers"; });

}  // namespace
}  // namespace flowlane::sched
