// White-box tests of the handle tables (capi/src/handles.hpp): a handle's type is part of its
// value, and a slot whose generation would wrap around is retired, so a released handle can
// never become valid again. The C API reaches the wrap only after 2^30 create/release cycles
// of one slot; here the table's last generation is lowered to get there at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "../../capi/src/handles.hpp"

using flowlane::capi::HandleTable;
using flowlane::capi::HandleType;

TEST(HandleTable, ReleasedHandlesNeverComeBackWhenTheGenerationWouldWrap) {
  // Tables live as long as the process (their slot segments are never freed), as the C API's.
  static auto& table = *new HandleTable<int, HandleType::kObject>(13);  // live generations 1, 5, 9, 13, then retired
  int x = 0;
  std::vector<uint64_t> released;
  std::set<uint32_t> indices;
  for (int k = 0; k < 64; ++k) {
    uint64_t h = table.insert(&x);
    ASSERT_NE(h, 0u);
    for (uint64_t old : released) ASSERT_NE(h, old) << "a released handle value was handed out again";
    indices.insert(uint32_t(h) & flowlane::capi::kIndexMask);
    ASSERT_EQ(table.erase(h), &x);
    released.push_back(h);
  }
  for (uint64_t old : released) EXPECT_EQ(table.lookup(old), nullptr);
  EXPECT_GE(indices.size(), 64u / 4) << "a retired slot was reused";
}

TEST(HandleTable, AHandleOfAnotherTypeWithTheSameSlotIsNotFound) {
  static auto& objects = *new HandleTable<int, HandleType::kObject>();
  static auto& engines = *new HandleTable<int, HandleType::kEngine>();
  int a = 0, b = 0;
  uint64_t o = objects.insert(&a);
  uint64_t e = engines.insert(&b);
  EXPECT_EQ(uint32_t(o) & flowlane::capi::kIndexMask, uint32_t(e) & flowlane::capi::kIndexMask);  // same slot
  EXPECT_NE(o, e);
  EXPECT_EQ(objects.lookup(e), nullptr);
  EXPECT_EQ(engines.lookup(o), nullptr);
  EXPECT_EQ(objects.erase(e), nullptr);
  EXPECT_EQ(objects.lookup(o), &a);
}

// Threads that create and drop handles in a loop (a task group per recursive call on every
// worker) get their fresh slots a cache line at a time: no two threads write one line.
TEST(HandleTable, ThreadsTakeFreshSlotsAWholeCacheLineAtATime) {
  static auto& table = *new HandleTable<char, HandleType::kGroup>();
  constexpr int kThreads = 4, kLive = 10;
  std::vector<std::set<uint32_t>> lines(kThreads);
  std::vector<std::thread> threads;
  char x = 0;
  std::atomic<int> inserted{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<uint64_t> live;
      for (int k = 0; k < kLive; ++k) live.push_back(table.insert(&x));
      // All alive at once (a thread's exit gives its slots back for others to reuse).
      inserted.fetch_add(1);
      while (inserted.load() < kThreads) std::this_thread::yield();
      for (uint64_t h : live) {
        ASSERT_NE(h, 0u);
        lines[size_t(t)].insert((uint32_t(h) & flowlane::capi::kIndexMask) / 4);  // 16-byte slots, 64-byte lines
      }
      for (uint64_t h : live) ASSERT_EQ(table.erase(h), &x);
    });
  for (auto& th : threads) th.join();
  for (int a = 0; a < kThreads; ++a)
    for (int b = a + 1; b < kThreads; ++b)
      for (uint32_t line : lines[size_t(a)]) EXPECT_EQ(lines[size_t(b)].count(line), 0u) << "threads " << a << " and " << b << " share line " << line;
}

// One thread only creates, another only releases: the releaser's slots come back to the
// creator through the shared list, so the table does not grow with the number of cycles.
TEST(HandleTable, ACreatorFedByAnotherThreadsReleasesKeepsTheTableFlat) {
  static auto& table = *new HandleTable<short, HandleType::kGroup>();
  short x = 0;
  constexpr int kRounds = 2000, kPerRound = 100;
  uint32_t max_index = 0;
  std::vector<uint64_t> batch;
  for (int r = 0; r < kRounds; ++r) {
    batch.clear();
    for (int k = 0; k < kPerRound; ++k) {
      uint64_t h = table.insert(&x);
      ASSERT_NE(h, 0u);
      max_index = std::max(max_index, uint32_t(h) & flowlane::capi::kIndexMask);
      batch.push_back(h);
    }
    std::thread([&] {
      for (uint64_t h : batch) ASSERT_EQ(table.erase(h), &x);
    }).join();
  }
  // Each releasing thread is new, so all but the 64 slots its cache keeps return at its exit.
  EXPECT_LT(max_index, 4u * kPerRound) << "the table grew with the number of rounds";
}

// A destructor claims a handle before it waits or checks (capi/src/handles.hpp): a claimed
// handle is still found by lookups (a group's tasks spawn into it while its destroy waits),
// but neither claimed nor erased a second time; given back, it is live again; erased by
// its claimer, it is stale.
TEST(HandleTable, AClaimedHandleIsFoundButNeitherClaimedNorErasedAgain) {
  static auto& table = *new HandleTable<int, HandleType::kGroup>();
  int x = 0;
  const uint64_t h = table.insert(&x);
  ASSERT_EQ(table.claim(h), &x);
  EXPECT_EQ(table.lookup(h), &x);
  EXPECT_EQ(table.claim(h), nullptr);
  EXPECT_EQ(table.erase(h), nullptr);
  table.unclaim(h);
  EXPECT_EQ(table.lookup(h), &x);
  ASSERT_EQ(table.claim(h), &x);
  table.erase_claimed(h);
  EXPECT_EQ(table.lookup(h), nullptr);
  EXPECT_EQ(table.claim(h), nullptr);
  EXPECT_EQ(table.erase(h), nullptr);
  // The slot's next handle is a new one; the old one stays stale.
  const uint64_t h2 = table.insert(&x);
  EXPECT_NE(h2, h);
  EXPECT_EQ(table.lookup(h), nullptr);
  EXPECT_EQ(table.erase(h2), &x);
}

// Threads racing to claim or erase one handle: exactly one of them wins, every round.
TEST(HandleTable, OfThreadsClaimingAndErasingOneHandleExactlyOneWins) {
  static auto& table = *new HandleTable<int, HandleType::kGraph>();
  constexpr int kThreads = 4;
  int x = 0;
  for (int round = 0; round < 500; ++round) {
    const uint64_t h = table.insert(&x);
    std::atomic<int> ready{0}, winners{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        if (t % 2 == 0) {
          if (table.claim(h) != nullptr) {
            ++winners;
            table.erase_claimed(h);
          }
        } else if (table.erase(h) != nullptr) {
          ++winners;
        }
      });
    for (auto& t : ts) t.join();
    ASSERT_EQ(winners.load(), 1) << "round " << round;
    ASSERT_EQ(table.lookup(h), nullptr);
  }
}
