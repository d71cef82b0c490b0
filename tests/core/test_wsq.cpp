// White-box tests of the Chase–Lev deque (core/sched/wsq.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "sched/wsq.hpp"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace flowlane::sched {
namespace {

constexpr int kItems = FL_UNDER_SANITIZER ? 100'000 : 400'000;

// Items are fake Task pointers encoding an index: 8-aligned addresses in a vector.
struct Items {
  explicit Items(int n) : tasks(size_t(n)) {}
  Task* at(int i) { return &tasks[size_t(i)]; }
  int index(Task* t) const { return int(t - tasks.data()); }
  std::vector<Task> tasks;
};

TEST(Wsq, PopIsLifoAndStealIsFifo) {
  WorkStealingQueue q(4);
  Items items(3);
  for (int i = 0; i < 3; ++i) q.push(items.at(i));
  EXPECT_EQ(q.size(), 3);
  Task* t = nullptr;
  ASSERT_EQ(q.steal(&t), StealResult::Success);
  EXPECT_EQ(items.index(t), 0);
  EXPECT_EQ(items.index(q.pop()), 2);
  EXPECT_EQ(items.index(q.pop()), 1);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.empty());
}

TEST(Wsq, StealFromEmptyIsEmptyNotRetry) {
  WorkStealingQueue q;
  Task* t = nullptr;
  EXPECT_EQ(q.steal(&t), StealResult::Empty);
  EXPECT_EQ(q.pop(), nullptr);
  Items items(1);
  q.push(items.at(0));
  EXPECT_EQ(q.pop(), items.at(0));
  EXPECT_EQ(q.steal(&t), StealResult::Empty);
  EXPECT_EQ(q.pop(), nullptr);  // pop on empty restores bottom: still empty afterwards
  EXPECT_EQ(q.steal(&t), StealResult::Empty);
}

TEST(Wsq, GrowsAndKeepsOrderAcrossRings) {
  WorkStealingQueue q(2);
  Items items(1000);
  for (int i = 0; i < 1000; ++i) q.push(items.at(i));
  EXPECT_GE(q.capacity(), 1000);
  Task* t = nullptr;
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(q.steal(&t), StealResult::Success);
    ASSERT_EQ(items.index(t), i);
  }
  for (int i = 999; i >= 500; --i) ASSERT_EQ(items.index(q.pop()), i);
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(Wsq, WrapsAroundWithoutGrowingWhenDrained) {
  WorkStealingQueue q(8);
  Items items(8);
  for (int round = 0; round < 1000; ++round) {
    for (int i = 0; i < 8; ++i) q.push(items.at(i));
    Task* t = nullptr;
    for (int i = 0; i < 4; ++i) ASSERT_EQ(q.steal(&t), StealResult::Success);
    for (int i = 0; i < 4; ++i) ASSERT_NE(q.pop(), nullptr);
  }
  EXPECT_EQ(q.capacity(), 8);
}

class WsqThieves : public ::testing::TestWithParam<int> {};

// The owner pushes every item and pops some; N thieves steal concurrently. Every item must
// be taken exactly once. Small initial capacity so that growth happens under contention.
TEST_P(WsqThieves, EveryItemTakenExactlyOnceWithNThieves) {
  const int thieves = GetParam();
  WorkStealingQueue q(2);
  Items items(kItems);
  std::vector<std::atomic<int>> taken(static_cast<size_t>(kItems));
  for (auto& x : taken) x.store(0);
  std::atomic<bool> done{false};
  std::atomic<int> total{0};
  std::atomic<long> retries{0};
  std::atomic<int> ready{0};

  std::vector<std::thread> ts;
  for (int k = 0; k < thieves; ++k) {
    ts.emplace_back([&] {
      ready.fetch_add(1);
      for (;;) {
        Task* t = nullptr;
        StealResult r = q.steal(&t);
        if (r == StealResult::Success) {
          taken[size_t(items.index(t))].fetch_add(1, std::memory_order_relaxed);
          total.fetch_add(1, std::memory_order_relaxed);
        } else if (r == StealResult::Retry) {
          retries.fetch_add(1, std::memory_order_relaxed);
        } else if (done.load(std::memory_order_acquire)) {
          if (q.empty()) return;
        }
      }
    });
  }
  while (ready.load() < thieves) std::this_thread::yield();
  for (int i = 0; i < kItems; ++i) {
    q.push(items.at(i));
    if (i % 3 == 0) {  // the owner takes from its end now and then
      if (Task* t = q.pop()) {
        taken[size_t(items.index(t))].fetch_add(1, std::memory_order_relaxed);
        total.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  while (Task* t = q.pop()) {
    taken[size_t(items.index(t))].fetch_add(1, std::memory_order_relaxed);
    total.fetch_add(1, std::memory_order_relaxed);
  }
  done.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  EXPECT_EQ(total.load(), kItems);
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(taken[size_t(i)].load(), 1) << "item " << i;
}

// Stampede: the owner keeps the deque at one or two items, so the owner's pop and every
// thief race for the very last item over and over.
TEST_P(WsqThieves, LastItemRaceHasExactlyOneWinner) {
  const int thieves = GetParam();
  const int rounds = kItems / 4;
  WorkStealingQueue q(4);
  Items items(rounds);
  std::vector<std::atomic<int>> taken(static_cast<size_t>(rounds));
  for (auto& x : taken) x.store(0);
  std::atomic<bool> done{false};
  std::vector<std::thread> ts;
  for (int k = 0; k < thieves; ++k) {
    ts.emplace_back([&] {
      while (!done.load(std::memory_order_acquire)) {
        Task* t = nullptr;
        if (q.steal(&t) == StealResult::Success) taken[size_t(items.index(t))].fetch_add(1);
      }
    });
  }
  for (int i = 0; i < rounds; ++i) {
    q.push(items.at(i));
    if (Task* t = q.pop()) taken[size_t(items.index(t))].fetch_add(1);
  }
  done.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  while (Task* t = q.pop()) taken[size_t(items.index(t))].fetch_add(1);
  for (int i = 0; i < rounds; ++i) ASSERT_EQ(taken[size_t(i)].load(), 1) << "item " << i;
}

INSTANTIATE_TEST_SUITE_P(Thieves, WsqThieves, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "thieves"; });

}  // namespace
}  // namespace flowlane::sched
