// Timed waits, instruction queries by id, cancel and drain (public API only).
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace fltest;
using std::chrono::milliseconds;

constexpr uint64_t kMs = 1'000'000;  // nanoseconds

bool contains(const std::string& s, const std::string& frag) { return s.find(frag) != std::string::npos; }

// A gate held by the test: instructions behind it stay pending until it opens.
struct Held {
  Gate gate;
  std::atomic<bool> started{false};
  fl_instr_id id = 0;
  Held(fl_stream_t* s, fl_object_t* w) {
    id = submit(s, [this] {
      started = true;
      return gate.wait() ? FL_OK : FL_ERR_TIMEOUT;
    }, {W(w)}, "held");
  }
  void wait_started() const {
    while (!started.load()) std::this_thread::yield();
  }
};

TEST(TimedWaits, ReturnTimeoutWhileWorkIsPendingAndConsumeNothing) {
  EngineFixture f(2);
  fl_object_t* o = make_obj(f.engine);
  Held held(f.host(1), o);
  auto t0 = Clock::now();
  EXPECT_FL_ERR(fl_object_wait_for(o, FL_READ, 30 * kMs), FL_ERR_TIMEOUT, "timed out");
  EXPECT_GE(Clock::now() - t0, milliseconds(30)) << "returned before its timeout";
  EXPECT_FL_ERR(fl_object_wait_for(o, FL_READ, 0), FL_ERR_TIMEOUT, "'held'");  // 0 polls
  EXPECT_FL_ERR(fl_stream_synchronize_for(f.host(1), 0), FL_ERR_TIMEOUT, "has completed 0 of the 1");
  t0 = Clock::now();
  EXPECT_FL_ERR(fl_engine_synchronize_for(f.engine, 20 * kMs), FL_ERR_TIMEOUT, "timed out");
  EXPECT_GE(Clock::now() - t0, milliseconds(20));
  EXPECT_FL_ERR(fl_instr_wait_for(f.host(1), held.id, 0), FL_ERR_TIMEOUT, "has not completed");
  held.gate.open = true;
  EXPECT_FL_OK(fl_object_wait_for(o, FL_READ, FL_WAIT_FOREVER));
  EXPECT_FL_OK(fl_stream_synchronize_for(f.host(1), 0));
  EXPECT_FL_OK(fl_engine_synchronize_for(f.engine, 0));
  fl_object_release(o);
}

// An object whose release callback takes a while (its completion is still running after
// the user's result is published); `done` is set when the callback returns.
struct SlowRelease {
  std::atomic<bool> started{false};
  std::atomic<bool> done{false};
  std::function<void()> body;  // runs inside the callback (default: a 100 ms sleep)
  static void release(void* ud) {
    auto* self = static_cast<SlowRelease*>(ud);
    self->started = true;
    if (self->body)
      self->body();
    else
      std::this_thread::sleep_for(milliseconds(100));
    self->done = true;
  }
  fl_object_t* make(fl_engine_t* e) {
    fl_object_t* o = nullptr;
    EXPECT_FL_OK(fl_object_create(e, this, &SlowRelease::release, &o));
    return o;
  }
};

// fl_object_wait from a program thread returns at the end of the users' completion: the
// release callbacks that completion runs have returned and the stream counts them, so a
// zero-timeout stream wait, a query and stats right after agree with it. (It used to return
// as soon as the user's state was published, while its release callbacks still ran: this
// test then found `done` false and the stream wait timed out.)
TEST(ObjectWait, FromAProgramThreadReturnsAfterTheUsersWholeCompletion) {
  EngineFixture f(2);
  fl_stream_t* s = f.host(1);
  fl_object_t* value = make_obj(f.engine);
  for (uint32_t access : {uint32_t(FL_READ), uint32_t(FL_WRITE)}) {
    SCOPED_TRACE(access == FL_READ ? "read: waits for the writer" : "write: waits for the reader too");
    SlowRelease slow;
    fl_object_t* scratch = slow.make(f.engine);
    Gate gate;
    // The last user of `value` (a writer, then a reader) also uses `scratch`, whose last
    // reference the test drops: its completion runs the slow release callback.
    fl_operand_t use = access == FL_READ ? W(value) : R(value);
    fl_instr_id id = submit(s, [&] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {use, W(scratch)}, "user");
    EXPECT_FL_OK(fl_object_release(scratch));
    gate.open = true;
    EXPECT_FL_OK(fl_object_wait(value, access));
    EXPECT_TRUE(slow.started.load()) << "the wait returned before the user completed";
    EXPECT_TRUE(slow.done.load()) << "the wait returned while the user's release callback still ran";
    EXPECT_FL_OK(fl_stream_synchronize_for(s, 0));
    EXPECT_FL_OK(fl_instr_wait_for(s, id, 0));
    uint32_t state = FL_INSTR_PENDING;
    EXPECT_FL_OK(fl_instr_query(s, id, &state));
    EXPECT_EQ(state, FL_INSTR_DONE);
  }
  fl_object_release(value);
}

// From code the engine runs, fl_object_wait returns at the users' result, as their
// dependents start: a release callback run by the writer's completion that waits for the
// waiting instruction is no cycle. (Waiting there for the writer's whole completion, as a
// program thread does, would hang: the guard below turns that into a failed test.)
TEST(ObjectWait, FromACallbackReturnsAtTheResultSoTheWritersReleaseMayWaitForTheCaller) {
  EngineFixture f(2);
  fl_object_t* value = make_obj(f.engine);
  fl_object_t* other = make_obj(f.engine);
  SlowRelease slow;
  slow.body = [&] { EXPECT_FL_OK(fl_object_wait_for(other, FL_READ, 30'000 * kMs)); };
  fl_object_t* scratch = slow.make(f.engine);
  Gate writer_gate;
  // The waiter, on lane 2: writes `other`, and waits for `value` once the writer's
  // completion is inside its release callback (which waits for `other`, i.e. the waiter).
  std::atomic<fl_status_t> waited{FL_ERR_INTERNAL};
  submit(f.host(2), [&](fl_instr_ctx_t*) {
    while (!slow.started.load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    waited = fl_object_wait_for(value, FL_READ, 10'000 * kMs);
    return FL_OK;
  }, {W(other)}, "waiter");
  submit(f.host(1), [&] { return writer_gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(value), W(scratch)}, "writer");
  EXPECT_FL_OK(fl_object_release(scratch));
  writer_gate.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(waited.load(), FL_OK) << "the waiter's fl_object_wait_for waited for the writer's release callback, "
                                     "which waits for the waiter";
  EXPECT_TRUE(slow.done.load());
  fl_object_release(value);
  fl_object_release(other);
}

TEST(TimedWaits, ATimedOutWaitLeavesTheFailureToTheNextWait) {
  EngineFixture f(2);
  fl_object_t* o = make_obj(f.engine);
  Gate gate;
  submit(f.host(1), [&] {
    if (!gate.wait()) return FL_ERR_TIMEOUT;
    return FL_ERR_INSTRUCTION_FAILED;
  }, {W(o)}, "fails_later");
  EXPECT_EQ(fl_engine_synchronize_for(f.engine, 5 * kMs), FL_ERR_TIMEOUT);
  gate.open = true;
  EXPECT_FL_ERR(fl_engine_synchronize_for(f.engine, FL_WAIT_FOREVER), FL_ERR_INSTRUCTION_FAILED, "'fails_later'");
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));  // returned once
  fl_object_release(o);
}

TEST(TimedWaits, ErrorPaths) {
  EngineFixture f(1);
  fl_object_t* o = make_obj(f.engine);
  EXPECT_FL_ERR(fl_object_wait_for(nullptr, FL_READ, 0), FL_ERR_INVALID_HANDLE, "NULL");
  EXPECT_FL_ERR(fl_object_wait_for(o, 7, 0), FL_ERR_INVALID_ARGUMENT, "fl_object_wait_for: access 7");
  EXPECT_FL_ERR(fl_stream_synchronize_for(nullptr, 0), FL_ERR_INVALID_HANDLE, "stream");
  EXPECT_FL_ERR(fl_engine_synchronize_for(nullptr, 0), FL_ERR_INVALID_HANDLE, "engine");
  EXPECT_FL_ERR(fl_engine_synchronize_for(reinterpret_cast<fl_engine_t*>(o), 0), FL_ERR_INVALID_HANDLE,
                "an object handle");
  fl_object_release(o);
}

TEST(InstrQueries, StateFollowsTheInstructionAndWaitReturnsItsOutcome) {
  EngineFixture f(2);
  fl_object_t* o = make_obj(f.engine);
  fl_stream_t* s = f.host(1);
  Held held(s, o);
  fl_instr_id ok = submit(s, [] { return FL_OK; }, {}, "ok");
  fl_instr_id bad = submit(s, [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(o)}, "bad");
  fl_instr_id dep = submit(f.host(2), [] { return FL_OK; }, {R(o)}, "dep");
  uint32_t state = 99;
  ASSERT_FL_OK(fl_instr_query(s, ok, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_PENDING));
  held.gate.open = true;
  EXPECT_FL_OK(fl_instr_wait_for(s, ok, FL_WAIT_FOREVER));
  ASSERT_FL_OK(fl_instr_query(s, ok, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_DONE));
  EXPECT_FL_ERR(fl_instr_wait_for(f.host(2), dep, FL_WAIT_FOREVER), FL_ERR_DEPENDENCY_FAILED, "'bad'");
  ASSERT_FL_OK(fl_instr_query(f.host(2), dep, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_SKIPPED));
  ASSERT_FL_OK(fl_instr_query(s, bad, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_FAILED));
  // The outcome is reported again (a query by id is not consumed) ...
  EXPECT_FL_ERR(fl_instr_wait_for(s, bad, 0), FL_ERR_INSTRUCTION_FAILED, "'bad'");
  // ... and observing it counted as returning the failure: synchronize has nothing left.
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  fl_object_release(o);
}

TEST(InstrQueries, ErrorPaths) {
  EngineFixture f(1);
  fl_stream_t* s = f.host(0);
  fl_instr_id id = submit(s, [] { return FL_OK; });
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  uint32_t state = 0;
  EXPECT_FL_ERR(fl_instr_query(s, 0, &state), FL_ERR_INVALID_ARGUMENT, "#0 was not submitted");
  EXPECT_FL_ERR(fl_instr_query(s, id + 1000, &state), FL_ERR_INVALID_ARGUMENT, "not submitted to this stream");
  EXPECT_FL_ERR(fl_instr_query(s, id, nullptr), FL_ERR_INVALID_ARGUMENT, "out_state is NULL");
  EXPECT_FL_ERR(fl_instr_query(nullptr, id, &state), FL_ERR_INVALID_HANDLE, "stream is NULL");
  EXPECT_FL_ERR(fl_instr_wait_for(s, id + 1000, 0), FL_ERR_INVALID_ARGUMENT, "not submitted");
  EXPECT_FL_ERR(fl_instr_cancel(s, id), FL_ERR_INVALID_ARGUMENT, "already completed");
  EXPECT_FL_ERR(fl_instr_cancel(s, 0), FL_ERR_INVALID_ARGUMENT, "not submitted");
  EXPECT_FL_ERR(fl_stream_cancel(nullptr), FL_ERR_INVALID_HANDLE, "stream");
  EXPECT_FL_ERR(fl_engine_cancel(nullptr), FL_ERR_INVALID_HANDLE, "engine");
  EXPECT_FL_ERR(fl_engine_drain(nullptr, 0), FL_ERR_INVALID_HANDLE, "engine");
}

TEST(InstrQueries, WaitingForWorkQueuedBehindTheCallerIsRefused) {
  EngineFixture f(2);
  fl_stream_t* s = f.host(1);
  Gate later_submitted;
  std::atomic<fl_instr_id> later{0};
  std::atomic<int> st{-1};
  submit(s, [&] {
    if (!later_submitted.wait()) return FL_ERR_TIMEOUT;
    st = fl_instr_wait_for(s, later.load(), FL_WAIT_FOREVER);
    return FL_OK;
  });
  later = submit(s, [] { return FL_OK; });
  later_submitted.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(st.load(), FL_ERR_INVALID_ARGUMENT);
}

// Sleeps of the calling thread so far that really slept (voluntary context switches).
long voluntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// A thread waiting for one instruction sleeps through the completions before it: it is
// woken when that instruction completes, not at every completion of its stream (which
// cost the waiter a wake-up, and the lane a notify, per instruction before it: a waiter
// for the last of 400 instructions slept over a hundred times).
TEST(InstrQueries, AWaiterSleepsThroughTheCompletionsBeforeItsInstruction) {
  EngineFixture f(1);
  fl_stream_t* s = f.host(1);
  Gate gate;
  submit(s, [&] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "gate");
  const int n = 400;
  const std::vector<fl_instr_id> ids = submit_busy(s, n, std::chrono::microseconds(2));
  struct Waiter {
    fl_instr_id id = 0;
    fl_status_t st = FL_ERR_INTERNAL;
    long sleeps = -1;
  };
  std::vector<Waiter> waiters{{ids[n / 4]}, {ids[n - 1]}, {ids[n - 1]}};
  std::vector<std::thread> threads;
  for (Waiter& w : waiters)
    threads.emplace_back([s, &w] {
      const long before = voluntary_switches();
      w.st = fl_instr_wait_for(s, w.id, FL_WAIT_FOREVER);
      w.sleeps = voluntary_switches() - before;
    });
  // Let the waiters fall asleep first. (Not needed for the check: a late waiter sleeps less.)
  std::this_thread::sleep_for(milliseconds(20));
  gate.open = true;
  for (auto& t : threads) t.join();
  for (const Waiter& w : waiters) {
    EXPECT_FL_OK(w.st);
    EXPECT_LE(w.sleeps, 10) << "the waiter for #" << w.id << " was woken at completions before its instruction";
  }
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
}

TEST(Cancel, AQueuedInstructionIsCancelledItsReadersSkippedItsCleanupRun) {
  EngineFixture f(2);
  fl_object_t* gate_obj = make_obj(f.engine);
  fl_object_t* o = make_obj(f.engine);
  fl_stream_t* s = f.host(1);
  Held held(s, gate_obj);
  std::atomic<int> ran{0};
  fl_instr_id victim = submit(s, [&] { ++ran; return FL_OK; }, {W(o)}, "victim");
  fl_instr_id reader = submit(f.host(2), [&] { ++ran; return FL_OK; }, {R(o)}, "reader");
  fl_instr_id other = submit(s, [&] { ran += 10; return FL_OK; }, {}, "other");
  held.wait_started();
  ASSERT_FL_OK(fl_instr_cancel(s, victim));
  held.gate.open = true;
  EXPECT_FL_ERR(fl_engine_synchronize(f.engine), FL_ERR_CANCELLED,
                "'victim' (#" + std::to_string(victim) + ", lane 1, host) failed: cancelled before it started");
  EXPECT_TRUE(contains(fl_last_error_message(), "1 instruction that depended on it was skipped"))
      << fl_last_error_message();
  EXPECT_EQ(ran.load(), 10) << "only 'other' ran";
  uint32_t state = 0;
  ASSERT_FL_OK(fl_instr_query(s, victim, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_CANCELLED));
  ASSERT_FL_OK(fl_instr_query(f.host(2), reader, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_SKIPPED));
  ASSERT_FL_OK(fl_instr_query(s, other, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_DONE));
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.cancelled, 1u);
  // The cleanups of the cancelled and the skipped instruction ran (Closure frees itself in
  // its cleanup: ASan would report a leak otherwise).
  fl_object_release(o);
  fl_object_release(gate_obj);
}

TEST(Cancel, StreamAndEngineCancelEveryInstructionNotStarted) {
  EngineFixture f(2);
  fl_object_t* g = make_obj(f.engine);
  Held held(f.host(1), g);
  std::atomic<int> ran{0};
  const int n = 50;
  for (int k = 0; k < n; ++k) submit(f.host(1), [&] { ++ran; return FL_OK; });
  Held held2(f.host(2), g);
  for (int k = 0; k < n; ++k) submit(f.host(2), [&] { ++ran; return FL_OK; });
  held.wait_started();  // running: a cancel no longer applies to it
  ASSERT_FL_OK(fl_stream_cancel(f.host(1)));
  ASSERT_FL_OK(fl_engine_cancel(f.engine));  // lane 2 too ('held2' waits for lane 1's 'held')
  held.gate.open = true;
  held2.gate.open = true;
  (void)fl_engine_synchronize(f.engine);
  while (fl_engine_synchronize(f.engine) != FL_OK) {
  }
  EXPECT_EQ(ran.load(), 0);
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.cancelled, uint64_t(2 * n + 1)) << "every queued instruction and 'held2' (not started)";
  // Work submitted after the cancel runs.
  submit(f.host(1), [&] { ++ran; return FL_OK; });
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ran.load(), 1);
  fl_object_release(g);
}

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
