// Adversarial tests for FL_SUBMIT_INLINE (review of the inline path): many threads on the
// SAME lane mixing inline and queued submissions, inline callbacks that wait for work on
// other lanes, dumps / stats / queries taken concurrently, cancel and drain racing with
// inline submissions. Public API only; HangGuard turns a lost wake-up into a failure.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

namespace {

template <class F>
fl_status_t submit_flags(fl_stream_t* s, F f, std::vector<fl_operand_t> ops, bool inl, fl_instr_id* out_id = nullptr,
                         const char* name = "adv") {
  return fltest::try_submit(s, std::move(f), std::move(ops), name, inl ? FL_SUBMIT_INLINE : 0u, out_id);
}

uint64_t xorshift(uint64_t& r) {
  r ^= r << 13, r ^= r >> 7, r ^= r << 17;
  return r;
}

}  // namespace

// Four threads hammer ONE lane (plus a second lane for cross-lane edges) with half of the
// submissions inline. Checks: the lane is a strand (never two callbacks of it at once),
// each thread's instructions on the lane run in its submission order, nothing is lost or
// run twice, stats agree, and a poller sees every instruction's state only move forward
// (last_completed_id, now a plain store, never goes back).
TEST(SubmitInlineRaces, OneLaneManyThreadsStrandFifoCountersAndMonotonicQuery) {
  HangGuard guard("one lane, many threads, inline and queued");
  constexpr int kThreads = 4, kObjects = 2;
  const int per_thread = int(fl_scaled(4000, 500));
  fl_engine_t* e = make_engine(2, 3);
  fl_stream_t* s1 = host_stream(e, 1);
  fl_stream_t* s2 = host_stream(e, 2);
  std::vector<fl_object_t*> objs;
  for (int k = 0; k < kObjects; ++k) objs.push_back(fltest::make_obj(e));
  std::atomic<int> running1{0};
  std::atomic<uint64_t> overlap{0}, ran{0}, out_of_order{0}, inline_ran{0}, bad_submit{0};
  int64_t last_seq[kThreads] = {};  // lane-1 strand only (plain: TSan checks the hand-offs)
  for (auto& v : last_seq) v = -1;
  std::vector<std::vector<fl_instr_id>> ids(kThreads);
  for (auto& v : ids) v.assign(size_t(per_thread), 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> went_back{0};
  // Poller: once an instruction of s1 is seen completed, it stays completed.
  std::thread poller([&] {
    uint64_t rng = 77;
    fl_instr_id seen_done = 0;  // highest id of s1 seen non-pending
    while (!stop.load(std::memory_order_relaxed)) {
      int t = int(xorshift(rng) % kThreads);
      size_t k = size_t(xorshift(rng) % uint64_t(per_thread));
      fl_instr_id id = __atomic_load_n(&ids[size_t(t)][k], __ATOMIC_ACQUIRE);
      if (seen_done != 0) {
        uint32_t st = 99;
        if (fl_instr_query(s1, seen_done, &st) == FL_OK && st == FL_INSTR_PENDING) went_back.fetch_add(1);
      }
      if (id == 0) continue;
      uint32_t st = 99;
      if (fl_instr_query(s1, id, &st) == FL_OK && st != FL_INSTR_PENDING && id > seen_done) seen_done = id;
      fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
      (void)fl_engine_stats(e, &stats);
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t rng = 0x9E3779B97F4A7C15ull * uint64_t(t + 3);
      const std::thread::id me = std::this_thread::get_id();
      for (int k = 0; k < per_thread; ++k) {
        if (xorshift(rng) % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
        const bool inl = xorshift(rng) % 2 == 0;
        const bool other_lane = xorshift(rng) % 5 == 0;
        fl_object_t* o = objs[size_t(xorshift(rng) % kObjects)];
        const bool write = xorshift(rng) % 3 == 0;
        std::vector<fl_operand_t> ops = {write ? RW(o) : R(o)};
        if (other_lane) {
          // Cross-lane writer: lane-1 readers of o get edges to it.
          if (submit_flags(s2, [&] { return ran.fetch_add(1), FL_OK; }, {RW(o)}, inl) != FL_OK) bad_submit.fetch_add(1);
          continue;
        }
        fl_instr_id id = 0;
        fl_status_t st = submit_flags(
            s1,
            [&, t, k, me] {
              if (running1.fetch_add(1) != 0) overlap.fetch_add(1);
              if (last_seq[t] >= k) out_of_order.fetch_add(1);
              last_seq[t] = k;
              if (std::this_thread::get_id() == me) inline_ran.fetch_add(1);
              ran.fetch_add(1);
              running1.fetch_sub(1);
              return FL_OK;
            },
            ops, inl, &id);
        if (st != FL_OK) bad_submit.fetch_add(1);
        __atomic_store_n(&ids[size_t(t)][size_t(k)], id, __ATOMIC_RELEASE);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_FL_OK(fl_engine_synchronize(e));
  stop.store(true);
  poller.join();
  EXPECT_EQ(bad_submit.load(), 0u);
  EXPECT_EQ(ran.load(), uint64_t(kThreads) * uint64_t(per_thread));
  EXPECT_EQ(overlap.load(), 0u) << "two callbacks of one lane ran at once";
  EXPECT_EQ(out_of_order.load(), 0u) << "a thread's instructions on one lane ran out of order";
  EXPECT_EQ(went_back.load(), 0u) << "fl_instr_query went back to PENDING";
  fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(e, &stats));
  EXPECT_EQ(stats.submitted, uint64_t(kThreads) * uint64_t(per_thread));
  EXPECT_EQ(stats.completed, stats.submitted);
  EXPECT_EQ(stats.in_flight, 0u);
  for (int t = 0; t < kThreads; ++t)
    for (fl_instr_id id : ids[size_t(t)]) {
      if (id == 0) continue;
      uint32_t st = 99;
      ASSERT_FL_OK(fl_instr_query(s1, id, &st));
      ASSERT_EQ(st, uint32_t(FL_INSTR_DONE)) << "id " << id;
    }
  std::printf("inline ran %llu of %llu\n", (unsigned long long)inline_ran.load(), (unsigned long long)ran.load());
  for (auto* o : objs) ASSERT_FL_OK(fl_object_release(o));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// Inline callbacks on lane 1 wait (fl_object_wait, fl_stream_synchronize) for writers
// queued by another thread on lane 2, while a third thread takes dumps and stats in a
// loop. Every wait must see what was submitted before it; nothing may hang or crash.
TEST(SubmitInlineRaces, InlineCallbacksWaitForOtherLanesWhileDumpsRun) {
  HangGuard guard("inline callbacks waiting while dumps run");
  const int rounds = int(fl_scaled(3000, 300));
  fl_engine_t* e = make_engine(2, 3);
  fl_stream_t* s1 = host_stream(e, 1);
  fl_stream_t* s2 = host_stream(e, 2);
  fl_object_t* x = fltest::make_obj(e);
  fl_object_t* y = fltest::make_obj(e);  // lane-1 instructions share y with each other
  std::atomic<uint64_t> value{0}, submitted_upto{0}, stale{0}, wait_err{0}, dumps{0}, ran{0};
  std::atomic<bool> stop{false};
  std::thread dumper([&] {
    while (!stop.load()) {
      std::string d = fltest::engine_dump(e);
      if (!d.empty()) dumps.fetch_add(1);
      fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
      (void)fl_engine_stats(e, &st);
    }
  });
  // The dumps must overlap the submissions: start them only once the dumper has run one
  // (on a loaded machine it may otherwise not get a CPU before everything is done).
  while (dumps.load() == 0) std::this_thread::yield();
  std::thread writer([&] {
    for (uint64_t k = 1; k <= uint64_t(rounds); ++k) {
      submit_flags(
          s2,
          [&, k] {
            // Writers of varying length; a busy spin, not yields (on a loaded machine each
            // yield can give the CPU away for a whole time slice).
            for (int spin = 0; spin < int(k % 50) * 40; ++spin) std::atomic_signal_fence(std::memory_order_seq_cst);
            value.store(k);
            return FL_OK;
          },
          {W(x)}, k % 3 == 0);
      submitted_upto.store(k);
    }
  });
  for (int k = 0; k < rounds; ++k) {
    const bool use_sync = k % 4 == 0;
    ASSERT_FL_OK(submit_flags(
        s1,
        [&, use_sync] {
          uint64_t need = submitted_upto.load();
          fl_status_t st = use_sync ? fl_stream_synchronize(s2) : fl_object_wait(x, FL_READ);
          if (st != FL_OK) wait_err.fetch_add(1);
          if (value.load() < need) stale.fetch_add(1);
          ran.fetch_add(1);
          return FL_OK;
        },
        {RW(y)}, true));
  }
  writer.join();
  ASSERT_FL_OK(fl_engine_synchronize(e));
  stop.store(true);
  dumper.join();
  EXPECT_EQ(ran.load(), uint64_t(rounds));
  EXPECT_EQ(wait_err.load(), 0u) << fl_last_error_message();
  EXPECT_EQ(stale.load(), 0u) << "a wait from an inline callback returned before a writer submitted earlier";
  EXPECT_GT(dumps.load(), 0u);
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_object_release(y));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// While an inline callback runs (blocked on a gate), a dump names it as its lane's head;
// other threads queue behind it on the same lane meanwhile; once the gate opens, the work
// queued behind it runs (the inline runner hands the lane to the pool: no lost wake-up).
TEST(SubmitInlineRaces, WorkQueuedBehindABlockedInlineCallbackRunsAndTheDumpShowsIt) {
  HangGuard guard("queued behind an inline callback");
  const int rounds = int(fl_scaled(200, 40));
  fl_engine_t* e = make_engine(2, 3);
  fl_stream_t* s1 = host_stream(e, 1);
  fl_object_t* x = fltest::make_obj(e);
  for (int r = 0; r < rounds; ++r) {
    Gate started, release;
    std::atomic<int> behind{0};
    std::thread inl([&] {
      EXPECT_EQ(submit_flags(
                    s1,
                    [&] {
                      started.open.store(true);
                      return release.wait() ? FL_OK : FL_ERR_TIMEOUT;
                    },
                    {RW(x)}, true, nullptr, "inline_head"),
                FL_OK);
    });
    ASSERT_TRUE(started.wait());
    // Queued (inline or not: the lane is busy) behind the running inline instruction.
    std::vector<std::thread> producers;
    for (int p = 0; p < 3; ++p)
      producers.emplace_back([&, p] {
        for (int k = 0; k < 5; ++k)
          EXPECT_EQ(submit_flags(s1, [&] { return behind.fetch_add(1), FL_OK; }, {R(x)}, (p + k) % 2 == 0),
                    FL_OK);
      });
    for (auto& th : producers) th.join();
    if (r % 10 == 0) {
      std::string d = fltest::engine_dump(e);
      EXPECT_TRUE(has(d, "inline_head")) << d;
    }
    EXPECT_EQ(behind.load(), 0) << "an instruction queued behind a running one started";
    release.open.store(true);
    inl.join();
    ASSERT_FL_OK(fl_stream_synchronize(s1));
    EXPECT_EQ(behind.load(), 15);
  }
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// fl_stream_cancel / fl_instr_cancel race with inline and queued submissions to one lane.
// Every instruction either ran (DONE) or was cancelled without running (CANCELLED), its
// cleanup ran exactly once, and the engine neither hangs nor loses a wake-up.
TEST(SubmitInlineRaces, CancelRequestsRaceWithInlineSubmissions) {
  HangGuard guard("cancel racing inline submissions");
  const int n = int(fl_scaled(6000, 600));
  fl_engine_t* e = make_engine(2, 3);
  fl_stream_t* s1 = host_stream(e, 1);
  fl_object_t* x = fltest::make_obj(e);
  std::vector<std::atomic<int>> ran(static_cast<size_t>(n)), cleaned(static_cast<size_t>(n));
  std::vector<std::atomic<fl_instr_id>> ids(static_cast<size_t>(n));
  std::atomic<int> published{0};
  std::atomic<bool> stop{false};
  std::thread canceller([&] {
    uint64_t rng = 5;
    while (!stop.load()) {
      int p = published.load();
      if (p == 0) continue;
      uint64_t r = xorshift(rng);
      if (r % 64 == 0) {
        EXPECT_EQ(fl_stream_cancel(s1), FL_OK);
      } else {
        fl_instr_id id = ids[size_t(p - 1 - int(r % uint64_t(p < 4 ? p : 4)))].load();
        fl_status_t st = fl_instr_cancel(s1, id);
        EXPECT_TRUE(st == FL_OK || st == FL_ERR_INVALID_ARGUMENT) << fl_status_name(st);
      }
    }
  });
  struct Probe {
    std::atomic<int>* ran;
    std::atomic<int>* cleaned;
  };
  for (int k = 0; k < n; ++k) {
    auto* pr = new Probe{&ran[size_t(k)], &cleaned[size_t(k)]};
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = [](fl_instr_ctx_t*, void* ud) {
      for (int spin = 0; spin < 200; ++spin) std::atomic_signal_fence(std::memory_order_seq_cst);
      return static_cast<Probe*>(ud)->ran->fetch_add(1), FL_OK;
    };
    in.cleanup = [](void* ud) {
      static_cast<Probe*>(ud)->cleaned->fetch_add(1);
      delete static_cast<Probe*>(ud);
    };
    in.user_data = pr;
    fl_operand_t op = (k % 3 == 0) ? W(x) : R(x);
    in.operands = &op;
    in.num_operands = 1;
    in.flags = (k % 4 != 3) ? FL_SUBMIT_INLINE : 0u;
    if (k % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));  // let the canceller in
    fl_instr_id id = 0;
    ASSERT_FL_OK(fl_submit_host(s1, &in, &id));
    ids[size_t(k)].store(id);
    published.store(k + 1);
  }
  stop.store(true);
  canceller.join();
  // Failures (cancellations) are entries: synchronize returns them one per call.
  for (int k = 0; k < 3 * n + 10; ++k) {
    fl_status_t st = fl_engine_synchronize(e);
    if (st == FL_OK) break;
    ASSERT_TRUE(st == FL_ERR_CANCELLED || st == FL_ERR_DEPENDENCY_FAILED) << fl_status_name(st);
  }
  int cancelled = 0, done = 0, skipped = 0;
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(cleaned[size_t(k)].load(), 1) << k;
    EXPECT_LE(ran[size_t(k)].load(), 1) << k;
    uint32_t st = 99;
    ASSERT_FL_OK(fl_instr_query(s1, ids[size_t(k)].load(), &st));
    if (st == FL_INSTR_COMPLETED) continue;  // outcome forgotten (history bound)
    if (st == FL_INSTR_DONE) {
      ++done;
      EXPECT_EQ(ran[size_t(k)].load(), 1) << k;
    } else {
      EXPECT_EQ(ran[size_t(k)].load(), 0) << k << " state " << st;
      if (st == FL_INSTR_CANCELLED) ++cancelled;
      else if (st == FL_INSTR_SKIPPED) ++skipped;
      else ADD_FAILURE() << "state " << st;
    }
  }
  fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(e, &stats));
  EXPECT_EQ(stats.completed, stats.submitted);
  std::printf("done %d cancelled %d skipped %d (stats cancelled %llu)\n", done, cancelled, skipped,
              (unsigned long long)stats.cancelled);
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// fl_engine_drain races with threads submitting inline: each submission either is refused
// (FL_ERR_SHUTDOWN, fn and cleanup never run) or runs exactly once; drain returns.
TEST(SubmitInlineRaces, DrainRacesWithInlineSubmissions) {
  HangGuard guard("drain racing inline submissions");
  const int rounds = int(fl_scaled(30, 5));
  for (int r = 0; r < rounds; ++r) {
    fl_engine_t* e = make_engine(2, 3);
    fl_object_t* x = fltest::make_obj(e);
    std::atomic<uint64_t> ok{0}, refused{0}, ran{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&, t] {
        fl_stream_t* s = host_stream(e, uint32_t(1 + t % 2));
        for (int k = 0; k < 2000; ++k) {
          fl_status_t st = submit_flags(s, [&] { return ran.fetch_add(1), FL_OK; }, {k % 2 ? R(x) : RW(x)}, k % 3 != 0);
          if (st == FL_OK) ok.fetch_add(1);
          else if (st == FL_ERR_SHUTDOWN) { refused.fetch_add(1); break; }
          else other.fetch_add(1);
        }
      });
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (r % 7)));
    ASSERT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
    for (auto& th : threads) th.join();
    ASSERT_FL_OK(fl_engine_synchronize(e));
    EXPECT_EQ(other.load(), 0u);
    EXPECT_EQ(ran.load(), ok.load());
    fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
    ASSERT_FL_OK(fl_engine_stats(e, &stats));
    EXPECT_EQ(stats.completed, ok.load());
    EXPECT_EQ(stats.submitted, ok.load());
    ASSERT_FL_OK(fl_object_release(x));
    ASSERT_FL_OK(fl_engine_destroy(e));
  }
}

// A callback queued on lane 2 synchronizes lane 1's stream over and over while this thread
// submits inline to lane 1 (and inline callbacks synchronize lane 3, fed by a third
// thread). The synchronizes must return; nothing hangs.
TEST(SubmitInlineRaces, InlineSubmissionsWhileAnotherCallbackSynchronizesTheirStream) {
  HangGuard guard("inline while a callback synchronizes");
  const int n = int(fl_scaled(4000, 400));
  fl_engine_t* e = make_engine(2, 4);
  fl_stream_t* s1 = host_stream(e, 1);
  fl_stream_t* s2 = host_stream(e, 2);
  fl_stream_t* s3 = host_stream(e, 3);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> syncs{0}, errs{0}, ran{0};
  std::atomic<bool> syncing{false};
  for (int c = 0; c < 2; ++c)
    submit(s2, [&] {
      syncing.store(true);
      while (!stop.load()) {
        if (fl_stream_synchronize(s1) != FL_OK) errs.fetch_add(1);
        syncs.fetch_add(1);
      }
      return FL_OK;
    });
  // The inline submissions must overlap the synchronizes: on a loaded machine a worker may
  // otherwise not start the first synchronizing callback before they are all done.
  while (!syncing.load()) std::this_thread::yield();
  std::thread feeder([&] {
    for (int k = 0; k < n; ++k) submit(s3, [&] { return ran.fetch_add(1), FL_OK; });
  });
  for (int k = 0; k < n; ++k)
    ASSERT_FL_OK(submit_flags(
        s1,
        [&, k] {
          if (k % 8 == 0 && fl_stream_synchronize(s3) != FL_OK) errs.fetch_add(1);
          ran.fetch_add(1);
          return FL_OK;
        },
        {}, true));
  feeder.join();
  ASSERT_FL_OK(fl_stream_synchronize(s1));
  stop.store(true);
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(errs.load(), 0u) << fl_last_error_message();
  EXPECT_EQ(ran.load(), uint64_t(2 * n));
  EXPECT_GT(syncs.load(), 0u);
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// A tiny window: submitters on one lane block in admit while inline callbacks submit more
// (admitted over the window) and wait for queued work on another lane.
TEST(SubmitInlineRaces, TinyWindowInlineCallbacksSubmittingAndWaiting) {
  HangGuard guard("tiny window with inline callbacks");
  const int n = int(fl_scaled(2000, 300));
  fl_engine_t* e = make_engine(2, 4, 2);
  fl_stream_t* s1 = host_stream(e, 1);
  fl_stream_t* s2 = host_stream(e, 2);  // only the writers the callbacks submit
  fl_stream_t* s3 = host_stream(e, 3);
  fl_object_t* x = fltest::make_obj(e);
  std::atomic<uint64_t> ran{0}, errs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < n; ++k) {
        fl_status_t st = submit_flags(
            t == 2 ? s3 : s1,
            [&, k] {
              ran.fetch_add(1);
              if (k % 5 == 0) {
                if (submit_flags(s2, [&] { return ran.fetch_add(1), FL_OK; }, {RW(x)}, true) != FL_OK) errs.fetch_add(1);
                if (fl_object_wait(x, FL_READ) != FL_OK) errs.fetch_add(1);
              }
              return FL_OK;
            },
            {}, true);
        if (st != FL_OK) errs.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(errs.load(), 0u);
  EXPECT_EQ(ran.load(), uint64_t(3 * n + 3 * ((n + 4) / 5)));
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_engine_destroy(e));
}
