// Timed waits, object waits and instruction queries by id, also racing completions and with
// ids of another stream or engine (public API only).
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"
#include "test_util.hpp"

namespace {

using namespace fltest;
using flcapi::contains;
using flcapi::Held;
using flcapi::kMs;
using flcapi::submit_failing;
using std::chrono::milliseconds;

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

// ---------------------------------------------------------------------------------------
// Timed waits with zero and tiny timeouts racing the completion of a failure

// Each round submits a failing instruction and polls one kind of timed wait (0 or 1 µs)
// until it answers something other than FL_ERR_TIMEOUT, racing the completion: the first
// answer is the failure (with its name), the timeouts before it consumed nothing, and the
// failure was returned exactly once (a synchronize after it has nothing left).
TEST(TimedWaitRaces, PollsRacingAFailuresCompletionReturnItExactlyOnce) {
  EngineFixture f(2, 4);
  fl_stream_t* s = f.host(1);
  fl_object_t* o = make_obj(f.engine);
  const int rounds = int(fl_scaled(400, 100));
  int timeouts = 0;
  for (int k = 0; k < rounds; ++k) {
    const int kind = k % 5;
    const uint64_t t = (k / 5) % 2 ? 1000 : 0;
    fl_instr_id id = submit_failing(s, o, "raced_failure");
    fl_status_t st;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      switch (kind) {
        case 0: st = fl_instr_wait_for(s, id, t); break;
        case 1: st = fl_engine_synchronize_for(f.engine, t); break;
        case 2: st = fl_stream_synchronize_for(s, t); break;
        case 3: st = fl_object_wait_for(o, FL_READ, t); break;
        default: st = fl_object_wait_for(o, FL_WRITE, t); break;
      }
      if (st != FL_ERR_TIMEOUT) break;
      ++timeouts;
      ASSERT_TRUE(contains(fl_last_error_message(), "wait again")) << fl_last_error_message();
      ASSERT_LT(Clock::now(), deadline);
    }
    ASSERT_EQ(st, FL_ERR_INSTRUCTION_FAILED) << "round " << k << " kind " << kind << ": " << fl_last_error_message();
    ASSERT_TRUE(contains(fl_last_error_message(), "'raced_failure' (#" + std::to_string(id)))
        << fl_last_error_message();
    ASSERT_EQ(fl_engine_synchronize(f.engine), FL_OK)
        << "round " << k << " kind " << kind << ": returned twice: " << fl_last_error_message();
    uint32_t qs = 0;
    ASSERT_FL_OK(fl_instr_query(s, id, &qs));
    ASSERT_EQ(qs, uint32_t(FL_INSTR_FAILED));
  }
  RecordProperty("timeouts", timeouts);
  fl_object_release(o);
}

// Huge finite timeouts (every value below FL_WAIT_FOREVER is a real deadline) wait like
// forever: they neither time out at once (an overflowed clock) nor hang; each wait returns
// the outcome once the gated work completes, from a program thread and from a callback.
TEST(TimedWaitRaces, HugeFiniteTimeoutsWaitForTheWork) {
  EngineFixture f(2, 4);
  fl_object_t* o = make_obj(f.engine);
  fl_stream_t* s1 = f.host(1);
  for (uint64_t t : {UINT64_MAX - 1, uint64_t(INT64_MAX), (uint64_t(1) << 62) + 1}) {
    for (int kind = 0; kind < 5; ++kind) {
      Gate gate;
      fl_instr_id id = submit(s1, [&] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(o)}, "gated");
      std::thread opener([&] {
        std::this_thread::sleep_for(milliseconds(2));
        gate.open = true;
      });
      fl_status_t st;
      switch (kind) {
        case 0: st = fl_object_wait_for(o, FL_READ, t); break;
        case 1: st = fl_instr_wait_for(s1, id, t); break;
        case 2: st = fl_stream_synchronize_for(s1, t); break;
        case 3: st = fl_engine_synchronize_for(f.engine, t); break;
        default: {
          // From a callback of another lane.
          std::atomic<int> inner{-1};
          submit(f.host(2), [&] {
            inner = fl_instr_wait_for(s1, id, t);
            return FL_OK;
          }, {}, "waits_in_a_callback");
          st = fl_stream_synchronize(f.host(2));
          if (st == FL_OK) st = fl_status_t(inner.load());
        }
      }
      opener.join();
      EXPECT_EQ(st, FL_OK) << "timeout " << t << " kind " << kind << ": " << fl_last_error_message();
      uint32_t qs = 0;
      EXPECT_FL_OK(fl_instr_query(s1, id, &qs));
      EXPECT_EQ(qs, uint32_t(FL_INSTR_DONE));
    }
  }
  fl_object_release(o);
}


// ---------------------------------------------------------------------------------------
// Ids of another stream or engine, huge and invalid ids

TEST(InstrIds, IdsOfAnotherStreamOrEngineAndHugeIdsAreAnsweredNotMisapplied) {
  EngineFixture f(2, 4);
  EngineFixture f2(1, 2);
  fl_stream_t* s1 = f.host(1);
  fl_stream_t* s2 = f.host(2);
  Gate g1, g2;
  submit(s1, [&] { return g1.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "gate1");
  submit(s2, [&] { return g2.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "gate2");
  std::atomic<int> ran1{0}, ran2{0};
  fl_instr_id v1 = submit(s1, [&] { ++ran1; return FL_OK; }, {}, "v1");
  fl_instr_id x2 = submit(s2, [&] { ++ran2; return FL_OK; }, {}, "x2");
  ASSERT_LT(v1, x2);
  // Not submitted to this stream (yet), 0, and the largest id: refused with the reason.
  for (fl_instr_id bad : {fl_instr_id(0), x2 + 1, fl_instr_id(UINT64_MAX), fl_instr_id(UINT64_MAX - 1)}) {
    uint32_t qs = 77;
    EXPECT_FL_ERR(fl_instr_query(s1, bad, &qs), FL_ERR_INVALID_ARGUMENT, "was not submitted to this stream");
    EXPECT_EQ(qs, 77u) << "outputs are left unchanged on failure";
    EXPECT_FL_ERR(fl_instr_wait_for(s1, bad, 0), FL_ERR_INVALID_ARGUMENT, "was not submitted to this stream");
    EXPECT_FL_ERR(fl_instr_wait_for(s1, bad, FL_WAIT_FOREVER), FL_ERR_INVALID_ARGUMENT,
                  "was not submitted to this stream");
    EXPECT_FL_ERR(fl_instr_cancel(s1, bad), FL_ERR_INVALID_ARGUMENT, "was not submitted to this stream");
  }
  EXPECT_FL_ERR(fl_instr_query(s1, v1, nullptr), FL_ERR_INVALID_ARGUMENT, "NULL");
  // Stale and foreign handles.
  EXPECT_FL_ERR(fl_instr_cancel(nullptr, v1), FL_ERR_INVALID_HANDLE, "");
  EXPECT_FL_ERR(fl_stream_cancel(nullptr), FL_ERR_INVALID_HANDLE, "");
  EXPECT_FL_ERR(fl_engine_cancel(nullptr), FL_ERR_INVALID_HANDLE, "");
  EXPECT_FL_ERR(fl_engine_drain(nullptr, 0), FL_ERR_INVALID_HANDLE, "");
  EXPECT_FL_ERR(fl_instr_cancel(reinterpret_cast<fl_stream_t*>(f.engine), v1), FL_ERR_INVALID_HANDLE, "");
  // s2 has submitted past v1 (an id of s1): a cancel there must not touch s1's v1, nor any
  // instruction of s2 (the call's effect on a foreign id is unspecified, never a misfire).
  EXPECT_FL_OK(fl_instr_cancel(s2, v1));
  // The other engine's stream: its own ids only.
  fl_stream_t* e2s = f2.host(1);
  EXPECT_FL_ERR(fl_instr_cancel(e2s, x2), FL_ERR_INVALID_ARGUMENT, "was not submitted to this stream");
  EXPECT_FL_ERR(fl_instr_query(e2s, v1, nullptr), FL_ERR_INVALID_ARGUMENT, "");
  g1.open = true;
  g2.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ran2.load(), 1) << "an instruction of s2 was cancelled by an id of s1";
  uint32_t qs = 0;
  ASSERT_FL_OK(fl_instr_query(s2, x2, &qs));
  EXPECT_EQ(qs, uint32_t(FL_INSTR_DONE));
  // A completed id: refused, "has already completed", for every completed one.
  EXPECT_FL_ERR(fl_instr_cancel(s2, x2), FL_ERR_INVALID_ARGUMENT, "has already completed");
  EXPECT_FL_ERR(fl_instr_cancel(s1, v1), FL_ERR_INVALID_ARGUMENT, "has already completed");
  EXPECT_FL_OK(fl_instr_wait_for(s1, v1, 0));
}


}  // namespace
