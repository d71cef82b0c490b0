// Diagnostics and lifecycle calls under concurrency: stats and dumps taken while other
// threads submit, fail, cancel and wait; per-thread last-error messages; lanes acquired and
// released from threads and callbacks; dumps from inside every kind of callback; destroy
// while other threads' callbacks call the diagnostics. (Traces and the watchdog under
// concurrency: test_trace_watchdog_races.cpp.) Every wait is bounded (Gate, HangGuard), so
// a bug fails the test rather than hanging CI.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"
#include "capi/test_diag_util.hpp"

using namespace fldiag;
using flcapi::slurp;

namespace {

fl_status_t ok_fn(fl_instr_ctx_t*, void*) { return FL_OK; }
fl_status_t failing_fn(fl_instr_ctx_t*, void*) { return FL_ERR_INSTRUCTION_FAILED; }

// ---------------------------------------------------------------------------------------
// Stats and dumps while other threads submit, fail, cancel and wait.

// Every snapshot of fl_engine_stats must be self-consistent: an instruction counted as
// completed was submitted, one counted as failed completed (and no counter goes backwards).
// Lane 1 runs only cheap successes, lane 2 only failures, lane 3 mostly cancelled
// instructions, so a counter read out of order shows. (cancelled <= failed is not checked:
// cancelled counts when the lane reaches the instruction, failed when it completes.)
TEST(StatsRaces, SnapshotsStayConsistentWhileOthersSubmitFailCancelAndWait) {
  HangGuard guard("stats and dumps under churn");
  fl_engine_t* e = make_engine(2, 8);
  std::atomic<bool> stop{false};
  fl_stream_t* ok_lane = host_of(e, 1);
  fl_stream_t* fail_lane = host_of(e, 2);
  fl_stream_t* cancel_lane = host_of(e, 3);
  fl_object_t* a = make_obj(e);
  fl_object_t* b = make_obj(e);
  {  // One cancellation for sure: an instruction queued behind a running one.
    Gate started, go;
    submit(cancel_lane, [&] {
      started.open = true;
      return go.wait() ? FL_OK : FL_ERR_TIMEOUT;
    }, {}, "holds.lane3");
    EXPECT_TRUE(started.wait());
    flguard::submit_raw(cancel_lane, &ok_fn, nullptr, nullptr, 0, "cancelled.for.sure");
    EXPECT_FL_OK(fl_stream_cancel(cancel_lane));
    go.open = true;
    EXPECT_EQ(fl_stream_synchronize(cancel_lane), FL_ERR_CANCELLED);
  }
  std::vector<std::thread> threads;
  // Submitters: multi-object instructions, failures, cancellations, waits.
  threads.emplace_back([&] {
    while (!stop.load()) {
      fl_operand_t ops[2] = {W(a), R(b)};
      for (int k = 0; k < 64; ++k) flguard::submit_raw(ok_lane, &ok_fn, nullptr, ops, 2, "ok");
      fl_object_wait(a, FL_READ);
    }
  });
  threads.emplace_back([&] {
    while (!stop.load()) {
      for (int k = 0; k < 64; ++k) flguard::submit_raw(fail_lane, &failing_fn, nullptr, nullptr, 0, "fails");
      while (fl_stream_synchronize(fail_lane) != FL_OK) {
      }
    }
  });
  threads.emplace_back([&] {
    while (!stop.load()) {
      for (int k = 0; k < 64; ++k) flguard::submit_raw(cancel_lane, &ok_fn, nullptr, nullptr, 0, "cancelled");
      fl_stream_cancel(cancel_lane);
      while (fl_stream_synchronize(cancel_lane) != FL_OK) {
      }
    }
  });
  std::mutex mu;
  std::vector<std::string> bad;
  auto note = [&](const std::string& s) {
    std::lock_guard<std::mutex> lk(mu);
    if (bad.size() < 8) bad.push_back(s);
  };
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      uint64_t last_sub = 0, last_done = 0;
      while (!stop.load()) {
        fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
        if (fl_engine_stats(e, &st) != FL_OK) note(std::string("stats failed: ") + fl_last_error_message());
        if (st.completed > st.submitted)
          note("completed " + std::to_string(st.completed) + " > submitted " + std::to_string(st.submitted));
        if (st.failed > st.completed)
          note("failed " + std::to_string(st.failed) + " > completed " + std::to_string(st.completed));
        if (st.submitted < last_sub || st.completed < last_done) note("a counter went backwards");
        last_sub = st.submitted;
        last_done = st.completed;
        if (r == 1) {
          std::string d = dump_now(e);
          if (!contains(d, "=== end of dump ===")) note("truncated dump: " + d);
        }
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(fl_scaled(600, 1500)));
  stop = true;
  for (auto& t : threads) t.join();
  for (const std::string& s : bad) ADD_FAILURE() << s;
  while (fl_engine_synchronize(e) != FL_OK) {
  }
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(e, &st));
  EXPECT_EQ(st.submitted, st.completed);
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_GT(st.cancelled, 0u);
  fl_object_release(a);
  fl_object_release(b);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// Last-error messages are per thread and per call.

// A task that fails without calling flowlane (so nothing told it anything) must not report
// the text of an unrelated earlier failure on the thread that happened to run it: the
// program thread's own last failed call, or another callback's on that worker. One worker
// and one program thread, both left with a stale message; whichever runs the task, the
// group's failure must not quote it.
TEST(LastErrorPerThread, TaskGroupFailureDoesNotQuoteAStaleErrorOfTheThreadThatRanIt) {
  HangGuard guard("task group failure message");
  fl_engine_t* e = make_engine(1, 4);
  // The worker: an instruction makes a failing call and succeeds.
  submit(host_of(e, 1), [e] {
    fl_lane_release(e, 0);  // "lane 0 is the default lane and cannot be released"
    return FL_OK;
  });
  ASSERT_FL_OK(fl_engine_synchronize(e));
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void*) { return FL_ERR_INSTRUCTION_FAILED; }, nullptr, nullptr));
  // The program thread: the same failing call right before the wait.
  EXPECT_EQ(fl_lane_release(e, 0), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fl_task_group_wait(g), FL_ERR_INSTRUCTION_FAILED);
  std::string msg = fl_last_error_message();
  EXPECT_TRUE(contains(msg, "FL_ERR_INSTRUCTION_FAILED")) << msg;
  EXPECT_FALSE(contains(msg, "lane 0")) << "a stale message of another call leaked into the task's failure: " << msg;
  // A task that is told something by a failing call still reports it.
  struct Ctx {
    fl_engine_t* e;
  } ctx{e};
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void* ud) {
    fl_lane_release(static_cast<Ctx*>(ud)->e, 99);  // out of range
    return FL_ERR_OUT_OF_RANGE;
  }, &ctx, nullptr));
  EXPECT_EQ(fl_task_group_wait(g), FL_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(contains(fl_last_error_message(), "lane 99 is out of range")) << fl_last_error_message();
  EXPECT_FL_OK(fl_task_group_destroy(g));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// A callback's failed calls never show in the program thread's fl_last_error_message: an
// FL_SUBMIT_INLINE instruction and a release callback run on the program thread itself.
TEST(LastErrorPerThread, CallbacksRunOnTheProgramThreadDoNotLeaveTheirErrorsBehind) {
  fl_engine_t* e = make_engine(2, 4);
  fl_instr_id id = 0;
  ASSERT_EQ(fltest::try_submit(host_of(e, 1), [e] {
    EXPECT_EQ(fl_engine_destroy(e), FL_ERR_INVALID_ARGUMENT);  // fails inside the callback
    return FL_OK;
  }, {}, "inline", FL_SUBMIT_INLINE, &id), FL_OK);
  EXPECT_STREQ(fl_last_error_message(), "");
  fl_object_t* o = nullptr;
  ASSERT_FL_OK(fl_object_create(e, e, [](void* ud) {
    EXPECT_EQ(fl_engine_destroy(static_cast<fl_engine_t*>(ud)), FL_ERR_INVALID_ARGUMENT);
  }, &o));
  EXPECT_FL_OK(fl_object_release(o));  // runs the release callback here
  EXPECT_STREQ(fl_last_error_message(), "");
  // And the program thread's own failure survives a callback's failure on a worker.
  EXPECT_EQ(fl_lane_release(e, 3), FL_ERR_INVALID_ARGUMENT);
  std::string mine = fl_last_error_message();
  std::thread other([e] {
    submit(host_of(e, 2), [e] { return fl_engine_destroy(e) == FL_ERR_INVALID_ARGUMENT ? FL_OK : FL_ERR_INTERNAL; });
    EXPECT_EQ(fl_lane_release(e, 0), FL_ERR_INVALID_ARGUMENT);
  });
  other.join();
  EXPECT_EQ(std::string(fl_last_error_message()), mine);
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// Lanes.

// Acquiring beyond max_lanes: FL_ERR_EXHAUSTED with a message that says what to do, also on
// an engine whose only lane is lane 0 (which is never handed out).
TEST(LaneAcquisition, ExhaustedMessagesAreActionableEvenWithOneLane) {
  fl_engine_t* e = make_engine(1, 1);
  uint32_t lane = 77;
  EXPECT_EQ(fl_lane_acquire(e, &lane), FL_ERR_EXHAUSTED);
  std::string msg = fl_last_error_message();
  EXPECT_EQ(lane, 77u) << "outputs are left unchanged on failure";
  EXPECT_FALSE(contains(msg, "(1..0)")) << "an empty range is no help: " << msg;
  EXPECT_TRUE(contains(msg, "max_lanes")) << msg;
  EXPECT_EQ(fl_lane_release(e, 1), FL_ERR_OUT_OF_RANGE);
  EXPECT_EQ(fl_lane_release(e, 0), FL_ERR_INVALID_ARGUMENT);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Several threads and callbacks acquire and release lanes at once: no lane is ever held
// twice, every acquirable lane is handed out, lane 0 never is; releasing a lane with pending
// work leaves the work running, and the lane handed out again keeps its order.
TEST(LaneAcquisition, ConcurrentAcquireReleaseFromThreadsAndCallbacksNeverSharesALane) {
  HangGuard guard("concurrent lane acquire/release");
  constexpr uint32_t kLanes = 6;
  fl_engine_t* e = make_engine(2, kLanes);
  std::atomic<int> holders[kLanes] = {};
  std::atomic<int> errors{0};
  std::atomic<int> exhausted{0};
  auto churn = [&](int rounds) {
    for (int k = 0; k < rounds; ++k) {
      uint32_t l = 0;
      fl_status_t st = fl_lane_acquire(e, &l);
      if (st == FL_ERR_EXHAUSTED) {
        exhausted.fetch_add(1);
        if (!contains(fl_last_error_message(), "fl_lane_release")) errors.fetch_add(1);
        continue;
      }
      if (st != FL_OK || l == 0 || l >= kLanes) {
        errors.fetch_add(1);
        continue;
      }
      if (holders[l].fetch_add(1) != 0) errors.fetch_add(1);  // held twice
      std::this_thread::yield();
      holders[l].fetch_sub(1);
      if (fl_lane_release(e, l) != FL_OK) errors.fetch_add(1);
    }
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) ts.emplace_back([&] { churn(2000); });
  for (int k = 0; k < 8; ++k)
    submit(host_of(e, 0), [&] {
      churn(200);
      return FL_OK;
    });
  for (auto& t : ts) t.join();
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(errors.load(), 0);
  // All lanes free again: every acquirable one is handed out, smallest first.
  for (uint32_t l = 1; l < kLanes; ++l) {
    uint32_t got = 0;
    ASSERT_FL_OK(fl_lane_acquire(e, &got));
    EXPECT_EQ(got, l);
  }
  uint32_t none = 0;
  EXPECT_FL_ERR(fl_lane_acquire(e, &none), FL_ERR_EXHAUSTED, "max_lanes");
  // Release a lane with pending work; it is handed out again and its old work still runs
  // before the new holder's (one lane, one order).
  Gate go;
  std::vector<int> order;
  std::mutex mu;
  submit(host_of(e, 2), [&] {
    if (!go.wait()) return FL_ERR_TIMEOUT;
    std::lock_guard<std::mutex> lk(mu);
    order.push_back(1);
    return FL_OK;
  });
  ASSERT_FL_OK(fl_lane_release(e, 2));
  uint32_t again = 0;
  ASSERT_FL_OK(fl_lane_acquire(e, &again));
  EXPECT_EQ(again, 2u);
  submit(host_of(e, again), [&] {
    std::lock_guard<std::mutex> lk(mu);
    order.push_back(2);
    return FL_OK;
  });
  go.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// Dumps from inside every kind of callback: no deadlock, and the dump describes the caller.

TEST(DumpFromCallbacks, FromEveryKindOfCallbackDescribesTheCaller) {
  HangGuard guard("dumps from callbacks");
  fl_engine_t* e = make_engine(2, 8);
  struct Ctx {
    fl_engine_t* e;
    std::mutex mu;
    std::vector<std::pair<std::string, std::string>> dumps;  // where, text
    void take(const char* where) {
      std::string d = fltest::engine_dump(e);
      std::lock_guard<std::mutex> lk(mu);
      dumps.emplace_back(where, d);
    }
    std::string of(const std::string& where) {
      std::lock_guard<std::mutex> lk(mu);
      for (auto& [w, d] : dumps)
        if (w == where) return d;
      return "";
    }
  } ctx{e, {}, {}};
  // fn and cleanup of an instruction that runs.
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void* ud) {
    static_cast<Ctx*>(ud)->take("fn");
    return FL_OK;
  };
  in.cleanup = [](void* ud) { static_cast<Ctx*>(ud)->take("cleanup"); };
  in.user_data = &ctx;
  in.name = "dumper.runs";
  ASSERT_FL_OK(fl_submit_host(host_of(e, 1), &in, nullptr));
  // The cleanup of an instruction skipped because its input is poisoned.
  fl_object_t* poisoned = make_obj(e);
  flguard::submit_raw(host_of(e, 2), &failing_fn, nullptr, std::vector<fl_operand_t>{W(poisoned)}.data(), 1,
                      "poisons");
  fl_host_instr_t sk = FL_HOST_INSTR_INIT;
  sk.fn = [](fl_instr_ctx_t*, void* ud) {
    static_cast<Ctx*>(ud)->take("skipped.fn (must not run)");
    return FL_OK;
  };
  sk.cleanup = [](void* ud) { static_cast<Ctx*>(ud)->take("skipped.cleanup"); };
  sk.user_data = &ctx;
  sk.name = "dumper.skipped";
  fl_operand_t rp = R(poisoned);
  sk.operands = &rp;
  sk.num_operands = 1;
  ASSERT_FL_OK(fl_submit_host(host_of(e, 3), &sk, nullptr));
  // A release callback run by the completion of the object's last instruction.
  fl_object_t* rel = nullptr;
  ASSERT_FL_OK(fl_object_create(e, &ctx, [](void* ud) { static_cast<Ctx*>(ud)->take("release"); }, &rel));
  submit(host_of(e, 4), [] { return FL_OK; }, {W(rel)}, "last.user");
  ASSERT_FL_OK(fl_object_release(rel));
  // A parallel_for body inside an instruction, and a task of a group.
  submit(host_of(e, 5), [&ctx] {
    return fl_parallel_for(ctx.e, 0, 4, 1, [](uint64_t lo, uint64_t, void* ud) {
      if (lo == 3) static_cast<Ctx*>(ud)->take("loop.body");
      return FL_OK;
    }, &ctx);
  }, {}, "dumper.loop");
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void* ud) {
    static_cast<Ctx*>(ud)->take("task");
    return FL_OK;
  }, &ctx, nullptr));
  EXPECT_FL_OK(fl_task_group_wait(g));
  EXPECT_FL_OK(fl_task_group_destroy(g));
  EXPECT_EQ(fl_engine_synchronize(e), FL_ERR_INSTRUCTION_FAILED);
  EXPECT_FL_OK(fl_engine_synchronize(e));
  fl_object_release(poisoned);

  SCOPED_TRACE([&] {
    std::string all;
    for (auto& [w, d] : ctx.dumps) all += "--- " + w + ":\n" + d;
    return all;
  }());
  EXPECT_EQ(ctx.of("skipped.fn (must not run)"), "");
  for (const char* w : {"fn", "cleanup", "skipped.cleanup", "release", "loop.body", "task"})
    EXPECT_TRUE(contains(ctx.of(w), "=== end of dump ===")) << "no dump from " << w;
  EXPECT_TRUE(contains(ctx.of("fn"), ", lane 1, host) RUNNING")) << ctx.of("fn");
  EXPECT_TRUE(contains(ctx.of("fn"), "'dumper.runs'")) << ctx.of("fn");
  EXPECT_TRUE(contains(ctx.of("loop.body"), "'dumper.loop'")) << ctx.of("loop.body");
  // A skipped instruction never runs its function: the dump taken from its cleanup must
  // not say it does.
  const std::string skipped = ctx.of("skipped.cleanup");
  EXPECT_TRUE(contains(skipped, "'dumper.skipped'")) << skipped;
  EXPECT_FALSE(contains(skipped, ", lane 3, host) RUNNING its callback")) << skipped;
  EXPECT_TRUE(contains(skipped, ", lane 3, host) NOT RUN: skipped")) << skipped;
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// Destroy.

// fl_engine_destroy from the program thread while callbacks of instructions that other
// program threads submitted (those threads have stopped, as the header asks) keep calling
// dump, stats and trace start/stop: each call gets its real answer, submissions answer
// FL_ERR_SHUTDOWN, and destroy returns with every trace written.
TEST(DiagDuringDestroy, WhileCallbacksOfOtherThreadsCallDumpStatsAndTraces) {
  HangGuard guard("destroy while callbacks call diagnostics");
  fl_engine_t* e = make_engine(2, 8);
  struct Shared {
    fl_engine_t* e;
    std::atomic<int> saw_shutdown{0};
    std::atomic<int> bad{0};
    std::atomic<int> seq{0};
    std::mutex mu;
    std::vector<std::string> notes, paths;
    void note(const std::string& s) {
      std::lock_guard<std::mutex> lk(mu);
      if (notes.size() < 8) notes.push_back(s);
    }
  } sh;
  sh.e = e;
  fl_stream_t* lanes[5] = {};
  for (uint32_t l = 1; l < 5; ++l) lanes[l] = host_of(e, l);  // fl_stream_get answers FL_ERR_SHUTDOWN in destroy
  auto body = [&sh, &lanes](uint32_t lane) {
    const auto deadline = fltest::Clock::now() + std::chrono::seconds(60);
    int after = 0;
    while (after < 20 && fltest::Clock::now() < deadline) {
      std::string d = fltest::engine_dump(sh.e);
      if (!contains(d, "=== end of dump ===")) sh.note("bad dump");
      fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
      if (fl_engine_stats(sh.e, &st) != FL_OK) sh.note(std::string("stats: ") + fl_last_error_message());
      std::string path = fltest::unique_temp_path("adv_destroy_trace_" + std::to_string(sh.seq.fetch_add(1)) + ".json");
      fl_status_t ts = fl_trace_start(sh.e, path.c_str());
      if (ts == FL_OK) {
        std::lock_guard<std::mutex> lk(sh.mu);
        sh.paths.push_back(path);
      } else {
        std::remove(path.c_str());
        if (ts != FL_ERR_INVALID_ARGUMENT) sh.note(std::string("trace start: ") + fl_last_error_message());
      }
      fl_status_t tp = fl_trace_stop(sh.e);
      if (tp != FL_OK && tp != FL_ERR_INVALID_ARGUMENT) sh.note(std::string("trace stop: ") + fl_last_error_message());
      fl_status_t sub = flguard::submit_raw(lanes[lane], &ok_fn, nullptr, nullptr, 0, "late");
      if (sub == FL_ERR_SHUTDOWN) {
        if (after++ == 0) sh.saw_shutdown.fetch_add(1);
      } else if (sub != FL_OK) {
        sh.note(std::string("submit: ") + fl_last_error_message());
      }
    }
    return FL_OK;
  };
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < 2; ++t)
    ts.emplace_back([&, t] {
      for (int k = 0; k < 2; ++k) submit(lanes[1 + 2 * t + uint32_t(k)], [&body, t, k] {
        return body(1 + 2 * t + uint32_t(k));
      }, {}, "diag.caller");
    });
  for (auto& t : ts) t.join();
  ASSERT_FL_OK(fl_engine_destroy(e));
  for (const std::string& n : sh.notes) ADD_FAILURE() << n;
  EXPECT_EQ(sh.saw_shutdown.load(), 4) << "every callback ran until destroy refused its submissions";
  for (const std::string& p : sh.paths) {
    std::string json = slurp(p);
    EXPECT_TRUE(json.size() > 2 && json.compare(json.size() - 3, 3, "]}\n") == 0) << p << ": " << json.size();
    std::remove(p.c_str());
  }
}

}  // namespace
