// Traces and the watchdog under concurrency: traces started and stopped from several threads
// and from callbacks (also by a release callback during destroy, and with names cut inside
// a UTF-8 character); the watchdog callback calling back in and being reconfigured while it
// fires. Every wait is bounded (Gate, HangGuard), so a bug fails the test rather than
// hanging CI.
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

// ---------------------------------------------------------------------------------------
// Traces.

// A trace started by a release callback that fl_engine_destroy runs (objects the caller
// still held) must be written (or refused), never left an empty file.
TEST(TraceRaces, TraceStartedByAReleaseCallbackDuringDestroyIsNotLostSilently) {
  HangGuard guard("trace started during destroy");
  const std::string path = fltest::unique_temp_path("adv_trace_in_destroy.json");
  std::remove(path.c_str());
  fl_engine_t* e = make_engine(2, 4);
  struct Ctx {
    fl_engine_t* e;
    std::string path;
    std::atomic<int> start{-1};
    std::string message;
  } ctx{e, path, {}, {}};
  fl_object_t* held = nullptr;
  ASSERT_FL_OK(fl_object_create(e, &ctx, [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->start = fl_trace_start(c->e, c->path.c_str());
    c->message = fl_last_error_message();
    fl_parallel_for(c->e, 0, 8, 1, [](uint64_t, uint64_t, void*) { return FL_OK; }, nullptr);
  }, &held));
  submit(host_of(e, 1), [] { return FL_OK; }, {W(held)}, "uses.held");
  ASSERT_FL_OK(fl_engine_destroy(e));  // runs held's release callback
  std::string json = slurp(path);
  if (ctx.start.load() == FL_OK) {
    EXPECT_TRUE(contains(json, "\"traceEvents\"")) << "fl_trace_start returned FL_OK but the file holds: '" << json
                                                   << "'";
  } else {
    EXPECT_EQ(ctx.start.load(), FL_ERR_SHUTDOWN) << ctx.message;
    EXPECT_TRUE(contains(ctx.message, "destroyed")) << ctx.message;
  }
  std::remove(path.c_str());
}

// Several threads start and stop traces (each start on a fresh path) while two threads
// submit and complete instructions and a callback stops the trace now and then: every call
// answers FL_OK or the documented FL_ERR_INVALID_ARGUMENT with its reason, and every trace
// that started is written as a complete file exactly once.
TEST(TraceRaces, StartStopRacingSubmissionsCompletionsAndCallbacks) {
  HangGuard guard("trace start/stop races");
  fl_engine_t* e = make_engine(2, 8);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::mutex mu;
  std::vector<std::string> started;
  std::vector<std::string> notes;
  auto note = [&](const std::string& s) {
    std::lock_guard<std::mutex> lk(mu);
    if (notes.size() < 8) notes.push_back(s);
  };
  std::atomic<int> seq{0};
  auto start_one = [&](const char* who) {
    std::string path = fltest::unique_temp_path("adv_trace_race_" + std::to_string(seq.fetch_add(1)) + ".json");
    fl_status_t st = fl_trace_start(e, path.c_str());
    if (st == FL_OK) {
      std::lock_guard<std::mutex> lk(mu);
      started.push_back(path);
    } else {
      std::remove(path.c_str());
      if (st != FL_ERR_INVALID_ARGUMENT || !contains(fl_last_error_message(), "already tracing"))
        note(std::string(who) + " start: " + fl_status_name(st) + " " + fl_last_error_message());
    }
  };
  auto stop_one = [&](const char* who) {
    fl_status_t st = fl_trace_stop(e);
    if (st != FL_OK && (st != FL_ERR_INVALID_ARGUMENT || !contains(fl_last_error_message(), "not tracing")))
      note(std::string(who) + " stop: " + fl_status_name(st) + " " + fl_last_error_message());
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; ++t)
    ts.emplace_back([&] {
      while (!stop.load()) {
        start_one("thread");
        std::this_thread::yield();
        stop_one("thread");
      }
    });
  for (int t = 0; t < 2; ++t)
    ts.emplace_back([&, t] {
      fl_object_t* o = make_obj(e);
      int n = 0;
      while (!stop.load()) {
        if (++n % 50 == 0) {
          submit(host_of(e, 1 + t), [&] {
            stop_one("callback");
            start_one("callback");
            return FL_OK;
          }, {RW(o)}, "tracer");
        }
        submit(host_of(e, 1 + t), [n] { return n % 7 == 0 ? FL_ERR_INSTRUCTION_FAILED : FL_OK; }, {RW(o)}, "work");
        if (n % 64 == 0) fl_stream_synchronize(host_of(e, 1 + t));
      }
      fl_object_release(o);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(fl_scaled(400, 1000)));
  stop = true;
  for (auto& t : ts) t.join();
  while (fl_engine_synchronize(e) != FL_OK) {
  }
  fl_trace_stop(e);  // the last one, if any is running
  EXPECT_FL_ERR(fl_trace_stop(e), FL_ERR_INVALID_ARGUMENT, "not tracing");
  for (const std::string& n : notes) ADD_FAILURE() << n;
  EXPECT_EQ(bad.load(), 0);
  EXPECT_FALSE(started.empty());
  for (const std::string& p : started) {
    std::string json = slurp(p);
    EXPECT_TRUE(json.size() > 2 && json.compare(json.size() - 3, 3, "]}\n") == 0)
        << p << " is not a complete trace (" << json.size() << " bytes)";
    std::remove(p.c_str());
  }
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// A trace whose file cannot be written at stop: FL_ERR_INVALID_ARGUMENT naming the file and
// the reason; the engine is no longer tracing, and a new trace starts cleanly.
TEST(TraceRaces, StopThatCannotWriteSaysWhyAndTheEngineCanTraceAgain) {
  if (std::FILE* f = std::fopen("/dev/full", "w")) {
    std::fclose(f);
  } else {
    GTEST_SKIP() << "no /dev/full";
  }
  fl_engine_t* e = make_engine(1, 2);
  ASSERT_FL_OK(fl_trace_start(e, "/dev/full"));
  EXPECT_FL_ERR(fl_trace_start(e, "/dev/full"), FL_ERR_INVALID_ARGUMENT, "already tracing to '/dev/full'");
  for (int k = 0; k < 200; ++k) submit(host_of(e, 1), [] { return FL_OK; }, {}, "some.work");
  EXPECT_FL_OK(fl_engine_synchronize(e));
  fl_status_t st = fl_trace_stop(e);
  EXPECT_EQ(st, FL_ERR_INVALID_ARGUMENT);
  std::string msg = fl_last_error_message();
  EXPECT_TRUE(contains(msg, "/dev/full")) << msg;
  EXPECT_TRUE(contains(msg, "No space left")) << msg;
  EXPECT_FL_ERR(fl_trace_stop(e), FL_ERR_INVALID_ARGUMENT, "not tracing");
  const std::string path = fltest::unique_temp_path("adv_trace_after_full.json");
  ASSERT_FL_OK(fl_trace_start(e, path.c_str()));
  submit(host_of(e, 1), [] { return FL_OK; }, {}, "after.full");
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(fl_trace_stop(e));
  std::string json = slurp(path);
  EXPECT_TRUE(contains(json, "after.full"));
  EXPECT_FALSE(contains(json, "some.work"));
  std::remove(path.c_str());
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// The watchdog.

// The watchdog callback calls back in: a dump that describes the stalled instruction,
// stats, a submission, a trace started and stopped, the watchdog reconfigured, and destroy
// (refused with FL_ERR_INVALID_ARGUMENT and a message that says why and what to do).
TEST(WatchdogRaces, CallbackCallsDumpStatsSubmitTraceReconfigureAndDestroy) {
  HangGuard guard("watchdog callback calling back in");
  fl_engine_t* e = make_engine(2, 4);
  const std::string path = fltest::unique_temp_path("adv_trace_from_watchdog.json");
  struct Ctx {
    fl_engine_t* e;
    std::string path;
    Gate stalled, done;
    std::atomic<int> calls{0};
    std::string dump, destroy_msg, trace_msg;
    fl_status_t stats = FL_ERR_INTERNAL, sub = FL_ERR_INTERNAL, tstart = FL_ERR_INTERNAL, tstop = FL_ERR_INTERNAL,
                tstop2 = FL_ERR_INTERNAL, rewd = FL_ERR_INTERNAL, destroy = FL_ERR_INTERNAL;
    std::atomic<bool> submitted_ran{false};
  } ctx{e, path, {}, {}, {}, {}, {}, {}};
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 50;
  w.user_data = &ctx;
  w.callback = [](const char* text, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (c->calls.fetch_add(1) != 0) return;
    c->tstart = fl_trace_start(c->e, c->path.c_str());
    c->dump = fltest::engine_dump(c->e);
    (void)text;
    fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
    c->stats = fl_engine_stats(c->e, &st);
    c->sub = flguard::submit_raw(host_of(c->e, 2), [](fl_instr_ctx_t*, void* u) {
      static_cast<Ctx*>(u)->submitted_ran = true;
      return FL_OK;
    }, c, nullptr, 0, "from.watchdog");
    c->destroy = fl_engine_destroy(c->e);
    c->destroy_msg = fl_last_error_message();
    c->tstop = fl_trace_stop(c->e);
    c->tstop2 = fl_trace_stop(c->e);
    c->trace_msg = fl_last_error_message();
    fl_watchdog_desc_t again = FL_WATCHDOG_DESC_INIT;  // off, from its own callback
    c->rewd = fl_engine_set_watchdog(c->e, &again);
    c->stalled.open = true;
    c->done.open = true;
  };
  ASSERT_FL_OK(fl_engine_set_watchdog(e, &w));
  submit(host_of(e, 1), [&] { return ctx.stalled.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "stalled.one");
  ASSERT_TRUE(ctx.done.wait()) << "the watchdog never fired";
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_TRUE(contains(ctx.dump, "'stalled.one'")) << ctx.dump;
  EXPECT_TRUE(contains(ctx.dump, "RUNNING")) << ctx.dump;
  EXPECT_EQ(ctx.stats, FL_OK);
  EXPECT_EQ(ctx.sub, FL_OK);
  EXPECT_TRUE(ctx.submitted_ran.load());
  EXPECT_EQ(ctx.tstart, FL_OK);
  EXPECT_EQ(ctx.tstop, FL_OK);
  EXPECT_EQ(ctx.tstop2, FL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(ctx.trace_msg, "not tracing")) << ctx.trace_msg;
  EXPECT_EQ(ctx.rewd, FL_OK);
  EXPECT_EQ(ctx.destroy, FL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(ctx.destroy_msg, "watchdog callback")) << ctx.destroy_msg;
  EXPECT_TRUE(contains(ctx.destroy_msg, "stays usable")) << ctx.destroy_msg;
  EXPECT_TRUE(contains(slurp(path), "\"traceEvents\""));
  std::remove(path.c_str());
  // Turned off from its own callback: a second stall is not reported.
  Gate second;
  submit(host_of(e, 1), [&] { return second.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "second.stall");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // widens the window only
  second.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(ctx.calls.load(), 1);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Several threads reconfigure the watchdog (new callback data each time) while it keeps
// firing on a stalled engine. Once fl_engine_set_watchdog has returned, the configuration
// it replaced is never used again: a callback never sees user_data its owner has retired.
TEST(WatchdogRaces, ReconfiguredFromSeveralThreadsWhileItFires) {
  HangGuard guard("watchdog reconfigured while firing");
  fl_engine_t* e = make_engine(2, 4);
  struct Data {
    std::atomic<int> alive{1};
    std::atomic<int> fired{0};
  };
  std::atomic<int> stale{0}, total{0};
  struct Shared {
    std::atomic<int>* stale;
    std::atomic<int>* total;
  } shared{&stale, &total};
  static Shared* g_shared;
  g_shared = &shared;
  auto cb = [](const char* text, void* ud) {
    auto* d = static_cast<Data*>(ud);
    if (d->alive.load() != 1) g_shared->stale->fetch_add(1);
    g_shared->total->fetch_add(1);
    d->fired.fetch_add(1);
    if (!contains(text, "'stalled.forever'")) g_shared->stale->fetch_add(1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // widens the window
    if (d->alive.load() != 1) g_shared->stale->fetch_add(1);
  };
  Gate release_stall;
  submit(host_of(e, 1), [&] { return release_stall.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "stalled.forever");
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&, t] {
      int k = 0;
      while (!stop.load()) {
        auto* d = new Data;
        fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
        w.timeout_ms = 5 + uint64_t((t + k++) % 3);
        w.callback = cb;
        w.user_data = d;
        if (fl_engine_set_watchdog(e, &w) != FL_OK) errors.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(8));
        fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;  // retire d: replace the configuration
        if (k % 2 == 0) {
          off.timeout_ms = 7;
          off.callback = [](const char*, void*) {};
        }
        if (fl_engine_set_watchdog(e, &off) != FL_OK) errors.fetch_add(1);
        // Another thread may have installed its own meanwhile; d is retired only when
        // nobody can still be handed it: after our own replacement returned, d may still be
        // the configuration of nobody, so it is safe to retire.
        d->alive = 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        delete d;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(fl_scaled(500, 1200)));
  stop = true;
  for (auto& t : ts) t.join();
  // However often the churn re-armed it, a configuration left in place fires.
  Data last;
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 5;
  w.callback = cb;
  w.user_data = &last;
  EXPECT_FL_OK(fl_engine_set_watchdog(e, &w));
  for (auto until = fltest::Clock::now() + std::chrono::seconds(60); last.fired.load() == 0 && fltest::Clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;
  EXPECT_FL_OK(fl_engine_set_watchdog(e, &off));
  release_stall.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(stale.load(), 0) << "a callback ran with retired user_data (or a dump missed the stalled instruction)";
  EXPECT_GT(total.load(), 0) << "the watchdog never fired";
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// An instruction turns the watchdog off while the watchdog callback waits for that
// instruction's output (an allowed wait: "Calls from callbacks"). fl_engine_set_watchdog must
// not wait for the running callback from code the engine runs: that hidden wait closes a
// cycle no user wrote, which the state dump cannot name either. The callback's wait is
// bounded (60 s) so that the bug fails the test instead of hanging it.
TEST(WatchdogRaces, InstructionReconfiguringWhileTheCallbackWaitsForItDoesNotDeadlock) {
  HangGuard guard("set_watchdog from an instruction the watchdog callback waits for", 180);
  fl_engine_t* e = make_engine(2, 4);
  struct Ctx {
    fl_engine_t* e;
    fl_object_t* o;
    Gate in_callback;
    std::atomic<int> fired{0};
    std::atomic<int> wait_status{-1};
    std::atomic<int> set_status{-1};
  } ctx{e, make_obj(e), {}, {}, {}, {}};
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 30;
  w.user_data = &ctx;
  w.callback = [](const char*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (c->fired.fetch_add(1) != 0) return;
    c->in_callback.open = true;
    c->wait_status = fl_object_wait_for(c->o, FL_READ, 60ull * 1000 * 1000 * 1000);
  };
  ASSERT_FL_OK(fl_engine_set_watchdog(e, &w));
  submit(host_of(e, 1), [&ctx] {
    if (!ctx.in_callback.wait()) return FL_ERR_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // widens the window only
    fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;
    ctx.set_status = fl_engine_set_watchdog(ctx.e, &off);
    return FL_OK;
  }, {W(ctx.o)}, "turns.watchdog.off");
  EXPECT_FL_OK(fl_engine_synchronize(e));
  // The callback may still be returning: a configuration from this thread waits for it.
  fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;
  EXPECT_FL_OK(fl_engine_set_watchdog(e, &off));
  EXPECT_EQ(ctx.set_status.load(), FL_OK);
  EXPECT_EQ(ctx.wait_status.load(), FL_OK) << "the watchdog callback's wait for the instruction timed out: "
                                              "fl_engine_set_watchdog in the instruction waited for the callback";
  fl_object_release(ctx.o);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Instruction names are cut to fit a trace event; a cut inside a multi-byte UTF-8 character
// would leave invalid UTF-8 in the JSON file (RFC 8259 requires UTF-8; strict readers
// reject the whole trace).
TEST(TraceRaces, LongNonAsciiNamesStayValidUtf8) {
  const std::string path = fltest::unique_temp_path("adv_trace_utf8.json");
  fl_engine_t* e = make_engine(1, 2);
  ASSERT_FL_OK(fl_trace_start(e, path.c_str()));
  std::string name = "x";
  for (int k = 0; k < 20; ++k) name += "\xC3\xA9";  // U+00E9, two bytes each: 41 bytes in all
  std::string name3 = "ab";
  for (int k = 0; k < 12; ++k) name3 += "\xE2\x82\xAC";  // U+20AC, three bytes each
  submit(host_of(e, 1), [] { return FL_OK; }, {}, name.c_str());
  submit(host_of(e, 1), [] { return FL_OK; }, {}, name3.c_str());
  EXPECT_FL_OK(fl_engine_synchronize(e));
  ASSERT_FL_OK(fl_trace_stop(e));
  std::string json = slurp(path);
  std::remove(path.c_str());
  auto valid_utf8 = [](const std::string& s) {
    for (size_t k = 0; k < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[k]);
      size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
      if (n == 0 || k + n > s.size()) return false;
      for (size_t j = 1; j < n; ++j)
        if ((static_cast<unsigned char>(s[k + j]) & 0xC0) != 0x80) return false;
      k += n;
    }
    return true;
  };
  EXPECT_TRUE(contains(json, "x\xC3\xA9\xC3\xA9")) << json;
  EXPECT_TRUE(valid_utf8(json)) << "the trace file is not valid UTF-8";
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// An instruction reconfigures the watchdog over and over while the watchdog keeps firing on
// the engine it stalls (set_watchdog from code the engine runs does not wait for the running
// callback): every fire is delivered with a configuration that was set, and nothing the
// watchdog thread reads while it builds and delivers the dump is written concurrently (run
// under ThreadSanitizer to see the latter).
TEST(WatchdogRaces, ReconfiguredFromAnInstructionWhileItFires) {
  HangGuard guard("watchdog reconfigured from an instruction while firing");
  fl_engine_t* e = make_engine(2, 4);
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int> fired_a{0}, fired_b{0}, bad{0};
  } ctx{e, {}, {}, {}};
  auto cb_a = [](const char* text, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->fired_a.fetch_add(1);
    if (!contains(text, "'reconfigures'")) c->bad.fetch_add(1);
  };
  auto cb_b = [](const char* text, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->fired_b.fetch_add(1);
    if (!contains(text, "'reconfigures'")) c->bad.fetch_add(1);
  };
  submit(host_of(e, 1), [&ctx, cb_a, cb_b] {
    const auto until = fltest::Clock::now() + std::chrono::milliseconds(fl_scaled(250, 600));
    int k = 0;
    while (fltest::Clock::now() < until) {
      fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
      w.timeout_ms = 3 + uint64_t(k % 3);
      w.callback = (k++ % 2) ? +cb_a : +cb_b;
      w.user_data = &ctx;
      if (fl_engine_set_watchdog(ctx.e, &w) != FL_OK) ctx.bad.fetch_add(100);
      std::this_thread::sleep_for(std::chrono::milliseconds(12));  // lets it fire between
    }
    // However often the loop re-armed it, the configuration left in place fires.
    for (auto limit = fltest::Clock::now() + std::chrono::seconds(60);
         ctx.fired_a.load() + ctx.fired_b.load() == 0 && fltest::Clock::now() < limit;)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return FL_OK;
  }, {}, "reconfigures");
  EXPECT_FL_OK(fl_engine_synchronize(e));
  fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;
  EXPECT_FL_OK(fl_engine_set_watchdog(e, &off));
  EXPECT_EQ(ctx.bad.load(), 0);
  EXPECT_GT(ctx.fired_a.load() + ctx.fired_b.load(), 0) << "the watchdog never fired";
  EXPECT_FL_OK(fl_engine_destroy(e));
}

}  // namespace
