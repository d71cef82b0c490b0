// Recycler<T> (core/base/recycler.hpp): per-thread caches, batches moving between threads
// through the depot, emptied batch vectors reused. Each test uses its own record type, so
// that it starts from an empty depot.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/recycler.hpp"

namespace {

using flowlane::Recycler;

template <int Tag>
struct Rec {
  static inline std::atomic<int> made{0};
  std::atomic<bool> in_use{false};
  Rec() { made.fetch_add(1); }
};

// Takes a record and marks it in use; false if it was handed out twice.
template <class R>
bool take(std::vector<R*>& out) {
  R* r = Recycler<R>::get();
  out.push_back(r);
  return !r->in_use.exchange(true);
}

template <class R>
void give(R* r) {
  r->in_use.store(false);
  Recycler<R>::put(r);
}

}  // namespace

// One thread takes, another gives back (the engine's submitter and worker): after the first
// round the taker is served from the batches the giver handed to the depot, not from new.
TEST(Recycler, RecordsGivenBackOnAnotherThreadAreReusedInBatches) {
  using R = Rec<1>;
  constexpr size_t kN = 20 * Recycler<R>::kBatch;
  std::unordered_set<R*> first;
  for (int round = 0; round < 5; ++round) {
    std::vector<R*> got;
    std::thread taker([&] {
      for (size_t k = 0; k < kN; ++k) ASSERT_TRUE(take(got)) << "a record was handed out twice";
    });
    taker.join();
    if (round == 0) {
      first.insert(got.begin(), got.end());
      EXPECT_EQ(first.size(), kN);
    } else {
      // Later rounds: at most what the giver keeps in its own cache (fewer than 2 batches)
      // is missing from the depot and made anew; everything else is a record seen before.
      size_t reused = 0;
      for (R* r : got) reused += first.count(r);
      EXPECT_GE(reused, kN - 2 * Recycler<R>::kBatch) << "round " << round;
    }
    const int made_before = R::made.load();
    std::thread giver([&] {
      for (R* r : got) give(r);
    });
    giver.join();  // the giver's exit hands its cache to the depot in batches
    EXPECT_EQ(R::made.load(), made_before) << "giving back made records";
    for (R* r : got) first.insert(r);
  }
  // 5 rounds of kN records each, but the depot served all rounds after the first.
  EXPECT_LE(R::made.load(), int(kN + 8 * Recycler<R>::kBatch));
}

// Several threads take and give at once, passing records to each other: no record is ever
// handed out twice, and records in circulation are reused (the total made stays bounded by
// what is live plus the caches).
TEST(Recycler, ThreadsTakingAndGivingAtOnceNeverHandOutARecordTwice) {
  using R = Rec<2>;
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  constexpr size_t kPer = 300;  // more than 2 batches: every round moves batches
  std::mutex mu;
  std::vector<R*> exchange;  // records one thread took and another gives back
  std::atomic<bool> twice{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<R*> got;
        for (size_t k = 0; k < kPer; ++k)
          if (!take(got)) twice = true;
        std::vector<R*> mine;
        {
          std::lock_guard<std::mutex> lock(mu);
          // Give back half of what another thread left, keep half of ours for it.
          mine.swap(exchange);
          exchange.assign(got.begin() + kPer / 2, got.end());
        }
        for (size_t k = 0; k < kPer / 2; ++k) give(got[k]);
        for (R* r : mine) give(r);
      }
    });
  for (auto& t : ts) t.join();
  for (R* r : exchange) give(r);
  EXPECT_FALSE(twice.load()) << "a record was handed out to two holders at once";
  // Live at once: at most kThreads * kPer taken plus kPer / 2 parked in `exchange`; each
  // thread's cache and the depot hold the rest. Without reuse 4 * 200 * 300 would be made.
  EXPECT_LT(R::made.load(), int(kThreads * kPer * 4 + kThreads * 4 * Recycler<R>::kBatch));
}
