// Drain (public API only): work old and new, callbacks and tasks during a drain, then drains
// racing failures (the ledger), program threads waiting for the window, and task spawns.
// Outcomes are deterministic: sleeps only widen windows, and every gate gives up after 60 s
// so that a bug fails the test instead of hanging it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"
#include "test_util.hpp"

namespace {

using namespace fltest;
using flcapi::kMs;
using flcapi::submit_failing;
using flcapi::wait_terminal;
using std::chrono::milliseconds;

// A task-group task that holds the engine's pool busy until its gate opens.
fl_status_t hold_task(void* ud) { return static_cast<Gate*>(ud)->wait() ? FL_OK : FL_ERR_TIMEOUT; }

// Two failures recorded one after the other ('first_failure', then 'second_failure', on two
// lanes), then a task-group task that keeps the pool busy until `gate` opens.
struct TwoFailuresAndABusyPool {
  EngineFixture f{2};
  fl_object_t* a = make_obj(f.engine);
  fl_object_t* b = make_obj(f.engine);
  fl_task_group_t* g = nullptr;
  Gate gate;
  void start() {
    // The ledger keeps failures in the order they were recorded: the second is submitted
    // once the first has failed (on two lanes they could fail in either order).
    fl_stream_t* s1 = f.host(1);
    ASSERT_TRUE(wait_terminal(s1, submit_failing(s1, a, "first_failure")));
    fl_stream_t* s2 = f.host(2);
    ASSERT_TRUE(wait_terminal(s2, submit_failing(s2, b, "second_failure")));
    ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
    ASSERT_FL_OK(fl_task_group_spawn(g, &hold_task, &gate, nullptr));
  }
  ~TwoFailuresAndABusyPool() {
    gate.open = true;
    fl_object_release(a);
    fl_object_release(b);
  }
};

// ---------------------------------------------------------------------------------------
// Drain and the failure ledger

// A drain that times out has returned nothing, so it must have consumed nothing either
// ("A wait that times out ... changes nothing"). Two failures have completed before the
// drain; a task-group task keeps the pool busy, so the drain times out: both failures are
// still there for the waits after it, oldest first.
TEST(DrainRaces, ATimedOutDrainConsumesNoFailure) {
  TwoFailuresAndABusyPool t;
  ASSERT_NO_FATAL_FAILURE(t.start());
  EXPECT_FL_ERR(fl_engine_drain(t.f.engine, 20 * kMs), FL_ERR_TIMEOUT, "timed out");
  t.gate.open = true;
  EXPECT_FL_OK(fl_task_group_wait(t.g));
  EXPECT_FL_ERR(fl_engine_synchronize(t.f.engine), FL_ERR_INSTRUCTION_FAILED, "'first_failure'");
  EXPECT_FL_ERR(fl_engine_synchronize(t.f.engine), FL_ERR_INSTRUCTION_FAILED, "'second_failure'");
  EXPECT_FL_OK(fl_engine_synchronize(t.f.engine));
  EXPECT_FL_OK(fl_task_group_destroy(t.g));
}

// Two program threads drain at once while a task keeps the pool busy, and failures are
// waiting: between the two drains and the synchronizes after them, each failure is
// returned exactly once.
TEST(DrainRaces, ConcurrentDrainsReturnEachFailureOnce) {
  EngineFixture f(2);
  std::vector<fl_object_t*> objs;
  const int n = 3;
  for (int k = 0; k < n; ++k) {
    objs.push_back(make_obj(f.engine));
    std::string name = "failure_" + std::to_string(k);
    fl_stream_t* s = f.host(uint32_t(1 + k));
    ASSERT_TRUE(wait_terminal(s, submit_failing(s, objs.back(), name.c_str())));
  }
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  Gate gate;
  ASSERT_FL_OK(fl_task_group_spawn(g, &hold_task, &gate, nullptr));
  std::mutex mu;
  std::vector<std::string> got;
  auto take = [&](fl_status_t st) {
    if (st == FL_OK) return;
    std::lock_guard<std::mutex> lock(mu);
    std::string m = fl_last_error_message();
    got.push_back(st == FL_ERR_INSTRUCTION_FAILED ? m.substr(m.find("'failure_"), 11) : "unexpected: " + m);
  };
  std::thread other([&] { take(fl_engine_drain(f.engine, FL_WAIT_FOREVER)); });
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(10));  // widens the window: both drains loop
    gate.open = true;
  });
  take(fl_engine_drain(f.engine, FL_WAIT_FOREVER));
  other.join();
  opener.join();
  for (int k = 0; k < n + 1; ++k) take(fl_engine_synchronize(f.engine));
  std::sort(got.begin(), got.end());
  std::vector<std::string> want;
  for (int k = 0; k < n; ++k) want.push_back("'failure_" + std::to_string(k) + "'");
  EXPECT_EQ(got, want);
  EXPECT_FL_OK(fl_task_group_destroy(g));
  for (auto* o : objs) fl_object_release(o);
}

// fl_engine_drain "returns what fl_engine_synchronize would": one entry, the oldest. When
// the drain needs several rounds (a task-group task still runs), the entries after the
// first must stay for later waits, not be consumed by the rounds and dropped.
TEST(DrainRaces, ADrainInRoundsReturnsTheOldestFailureAndLeavesTheOthers) {
  TwoFailuresAndABusyPool t;
  ASSERT_NO_FATAL_FAILURE(t.start());
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(20));  // widens the window: the drain loops meanwhile
    t.gate.open = true;
  });
  EXPECT_FL_ERR(fl_engine_drain(t.f.engine, FL_WAIT_FOREVER), FL_ERR_INSTRUCTION_FAILED, "'first_failure'");
  opener.join();
  EXPECT_FL_ERR(fl_engine_synchronize(t.f.engine), FL_ERR_INSTRUCTION_FAILED, "'second_failure'");
  EXPECT_FL_OK(fl_engine_synchronize(t.f.engine));
  EXPECT_FL_OK(fl_task_group_wait(t.g));
  EXPECT_FL_OK(fl_task_group_destroy(t.g));
}

// ---------------------------------------------------------------------------------------
// Drain racing program threads that wait for the in-flight window

// Program threads wait in fl_submit_host for a full window (of 1) when fl_engine_drain
// starts. A submission may be accepted or refused (FL_ERR_SHUTDOWN), but one that is
// accepted belongs to the work the drain waits for: when the drain returns, nothing is in
// flight and no accepted instruction runs afterwards.
TEST(DrainRaces, SubmittersWaitingForTheWindowAreDrainedOrRefused) {
  const int rounds = int(fl_scaled(20, 5));
  int accepted_total = 0, late_total = 0;
  for (int round = 0; round < rounds; ++round) {
    EngineFixture f(2, 4, /*window=*/1);
    fl_stream_t* s = f.host(1);
    Gate gate;
    submit(s, [&] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "holds_the_window");
    std::atomic<bool> drain_returned{false};
    std::atomic<int> ran{0}, late{0}, accepted{0}, refused{0}, other{0};
    const int kSubmitters = 4;
    std::vector<std::thread> subs;
    for (int t = 0; t < kSubmitters; ++t)
      subs.emplace_back([&, t] {
        fl_stream_t* st_s = f.host(uint32_t(1 + t % 3));
        for (;;) {
          fl_instr_id id = 0;
          fl_status_t st = try_submit(st_s, [&] {
            if (drain_returned.load()) ++late;
            ++ran;
            return FL_OK;
          }, {}, "blocked_submitter", 0, &id);
          if (st == FL_OK) {
            ++accepted;
          } else {
            (st == FL_ERR_SHUTDOWN ? refused : other)++;
            return;
          }
        }
      });
    // Every submitter waits for the window (counted as a stall) before the drain starts.
    auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
      ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
      if (st.window_stalls >= uint64_t(kSubmitters)) break;
      ASSERT_LT(Clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::thread opener([&] {
      std::this_thread::sleep_for(milliseconds(2));
      gate.open = true;
    });
    fl_status_t dst = fl_engine_drain(f.engine, FL_WAIT_FOREVER);
    const int ran_at_drain = ran.load();
    drain_returned = true;
    opener.join();
    for (auto& t : subs) t.join();
    EXPECT_EQ(dst, FL_OK) << fl_last_error_message();
    // (stats' in_flight may briefly count a submission that is being refused: it gives its
    // window slot back. What matters is that every accepted one had run.)
    EXPECT_EQ(ran_at_drain, accepted.load()) << "round " << round << ": drain returned before an accepted instruction ran";
    EXPECT_EQ(other.load(), 0);
    EXPECT_EQ(refused.load(), kSubmitters);
    EXPECT_FL_OK(fl_engine_synchronize(f.engine));
    EXPECT_EQ(ran.load(), accepted.load());
    accepted_total += accepted.load();
    late_total += late.load();
  }
  EXPECT_EQ(late_total, 0) << "accepted instructions ran after fl_engine_drain returned";
  RecordProperty("accepted", accepted_total);
}

// Program threads keep spawning task-group tasks while fl_engine_drain starts: a spawn is
// accepted or refused (FL_ERR_SHUTDOWN), and an accepted task belongs to the drained work:
// it has finished when the drain returns (here it also submits an instruction, which is
// accepted as the work of a callback: nothing may be in flight after the drain).
TEST(DrainRaces, TaskSpawnsRacingTheDrainAreDrainedOrRefused) {
  const int rounds = int(fl_scaled(40, 8));
  int late_total = 0, accepted_total = 0;
  for (int round = 0; round < rounds; ++round) {
    EngineFixture f(2, 4);
    struct Ctx {
      fl_stream_t* s;
      std::atomic<bool> drain_returned{false};
      std::atomic<int> late{0}, ran{0};
    } c;
    c.s = f.host(1);
    fl_task_group_t* g = nullptr;
    ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
    std::atomic<int> accepted{0}, refused{0}, other{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> spawners;
    for (int t = 0; t < 4; ++t)
      spawners.emplace_back([&] {
        while (!go.load()) std::this_thread::yield();
        for (;;) {
          fl_status_t st = fl_task_group_spawn(g, [](void* p) {
            auto* x = static_cast<Ctx*>(p);
            if (x->drain_returned.load()) ++x->late;
            if (++x->ran % 64 == 0) submit(x->s, [] { return FL_OK; }, {}, "from_a_task");
            return FL_OK;
          }, &c, nullptr);
          if (st == FL_OK) {
            ++accepted;
          } else {
            (st == FL_ERR_SHUTDOWN ? refused : other)++;
            return;
          }
          std::this_thread::yield();  // preempted anywhere, the check-to-hand-over window too
        }
      });
    go = true;
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    fl_status_t dst = fl_engine_drain(f.engine, FL_WAIT_FOREVER);
    fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
    ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
    c.drain_returned = true;
    for (auto& t : spawners) t.join();
    EXPECT_EQ(dst, FL_OK) << fl_last_error_message();
    EXPECT_EQ(st.in_flight, 0u) << "round " << round;
    EXPECT_EQ(other.load(), 0);
    EXPECT_FL_OK(fl_task_group_wait(g));
    EXPECT_FL_OK(fl_task_group_destroy(g));
    EXPECT_EQ(c.ran.load(), accepted.load());
    late_total += c.late.load();
    accepted_total += accepted.load();
  }
  EXPECT_EQ(late_total, 0) << "accepted tasks ran after fl_engine_drain returned";
  RecordProperty("accepted", accepted_total);
}

// ---------------------------------------------------------------------------------------
// Drain, one at a time

TEST(Drain, RefusesNewWorkWaitsForTheOldAndLeavesTheEngineQueryable) {
  EngineFixture f(2);
  fl_object_t* o = make_obj(f.engine);
  Gate gate;
  std::atomic<int> followups{0};
  fl_stream_t* s1 = f.host(1);
  submit(s1, [&] {
    if (!gate.wait()) return FL_ERR_TIMEOUT;
    // A callback of the draining work may still submit: it is part of that work.
    submit(s1, [&] { ++followups; return FL_OK; }, {}, "followup");
    return FL_ERR_INSTRUCTION_FAILED;
  }, {W(o)}, "drained_work");
  EXPECT_FL_ERR(fl_engine_drain(f.engine, 10 * kMs), FL_ERR_TIMEOUT, "timed out");
  EXPECT_FL_ERR(fl_submit_host(s1, nullptr, nullptr), FL_ERR_INVALID_ARGUMENT, "NULL");
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  EXPECT_FL_ERR(fl_submit_host(s1, &in, nullptr), FL_ERR_SHUTDOWN, "drained");
  gate.open = true;
  EXPECT_FL_ERR(fl_engine_drain(f.engine, FL_WAIT_FOREVER), FL_ERR_INSTRUCTION_FAILED, "'drained_work'");
  EXPECT_FL_OK(fl_engine_drain(f.engine, FL_WAIT_FOREVER));  // again: nothing left
  EXPECT_EQ(followups.load(), 1);
  EXPECT_EQ(fl_object_wait(o, FL_WRITE), FL_ERR_INSTRUCTION_FAILED) << "the poison is still observable";
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  EXPECT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.in_flight, 0u);
  fl_object_release(o);
}

// Work a callback submits while the drain already waits — to another lane, or from a
// task-group task that starts later — is waited for too: when drain returns, nothing is in
// flight (it used to return once the streams reached the counts it saw at its start).
TEST(Drain, WaitsForWorkCallbacksAndTasksSubmitDuringTheDrain) {
  EngineFixture f(2);
  Gate gate;
  std::atomic<int> late{0};
  fl_stream_t* s1 = f.host(1);
  fl_stream_t* s2 = f.host(2);
  fl_engine_t* e = f.engine;
  submit(s1, [&] {
    if (!gate.wait()) return FL_ERR_TIMEOUT;
    submit(s2, [&] {  // another lane: not in the counts the drain started with
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ++late;
      return FL_OK;
    }, {}, "late_other_lane");
    return FL_OK;
  }, {}, "submits_later");
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  struct Spawned {
    Gate* gate;
    fl_stream_t* s;
    std::atomic<int>* late;
  } sp{&gate, s2, &late};
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void* ud) -> fl_status_t {
    auto* x = static_cast<Spawned*>(ud);
    if (!x->gate->wait()) return FL_ERR_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic<int>* late = x->late;
    submit(x->s, [late] { ++*late; return FL_OK; }, {}, "from_a_task");
    return FL_OK;
  }, &sp, nullptr));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.open = true;
  });
  EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  EXPECT_FL_OK(fl_engine_stats(e, &st));
  EXPECT_EQ(st.in_flight, 0u) << "drain returned with work in flight";
  EXPECT_EQ(late.load(), 2);
  opener.join();
  EXPECT_FL_OK(fl_task_group_wait(g));
  EXPECT_FL_OK(fl_task_group_destroy(g));
}

TEST(Drain, FromACallbackIsRefused) {
  EngineFixture f(2);
  std::atomic<int> st{-1};
  submit(f.host(0), [&] {
    st = fl_engine_drain(f.engine, 0);
    return FL_OK;
  });
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(st.load(), FL_ERR_INVALID_ARGUMENT);
}


}  // namespace
