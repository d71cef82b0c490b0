// Waits made inside callbacks: they deadlock only on a cycle of waits (never because a
// waiting worker ran another callback that waits for it), waits for the caller's own
// instruction or for a later writer of its own lane are refused, never a hang. Each test runs
// under a HangGuard: an engine that deadlocks fails the test with a message instead of hanging.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

using flcapi::check_usable_and_destroy;

namespace {

fl_status_t noop_fn(fl_instr_ctx_t*, void*) { return FL_OK; }

}  // namespace

// ---------------------------------------------------------------------------------------
// Waits inside callbacks deadlock only on a cycle of waits. A on lane 1 writes o and waits
// for B (lane 3) — through each kind of wait a callback can make; C (lane 2) waits for o.
// With one worker, the waiting worker used to run C on its own stack, and C could never
// return while A below it waited: a hang without a cycle.

namespace {

enum class WaitKind { kObjectWait, kStreamSync, kParallelFor, kTaskGraph };

struct WaitCase {
  fl_object_t* p = nullptr;   // written by B
  fl_stream_t* lane3 = nullptr;
  fl_engine_t* e = nullptr;
  std::atomic<int> a_status{-1};
};

fl_status_t wait_for_b(WaitCase* c, WaitKind kind) {
  switch (kind) {
    case WaitKind::kObjectWait: return fl_object_wait(c->p, FL_READ);
    case WaitKind::kStreamSync: return fl_stream_synchronize(c->lane3);
    case WaitKind::kParallelFor:
      return fl_parallel_for(c->e, 0, 1, 1, [](uint64_t, uint64_t, void* ud) {
        return fl_object_wait(static_cast<WaitCase*>(ud)->p, FL_READ);
      }, c);
    case WaitKind::kTaskGraph: {
      fl_taskgraph_t* g = nullptr;
      if (fl_taskgraph_create(c->e, &g) != FL_OK) return FL_ERR_INTERNAL;
      uint64_t node = 0;
      fl_taskgraph_add(g, [](void* ud) { return fl_object_wait(static_cast<WaitCase*>(ud)->p, FL_READ); }, c,
                       "wait_p", &node);
      fl_status_t st = fl_taskgraph_run(g, -1);
      fl_taskgraph_destroy(g);
      return st;
    }
  }
  return FL_ERR_INTERNAL;
}

void run_wait_case(WaitKind kind, const char* what) {
  HangGuard guard(std::string("wait inside a callback without a cycle: ") + what);
  fl_engine_t* e = make_engine(1, 4);
  ASSERT_NE(e, nullptr);
  WaitCase c;
  c.e = e;
  c.lane3 = host_stream(e, 3);
  fl_object_t* o = fltest::make_obj(e);
  c.p = fltest::make_obj(e);
  Gate queued;
  std::atomic<int> c_status{-1};
  std::atomic<bool> b_ran{false};
  submit(host_stream(e, 1), [&] {
    if (!queued.wait()) return FL_ERR_TIMEOUT;
    c.a_status = wait_for_b(&c, kind);
    return FL_OK;
  }, {W(o)}, "A");
  submit(host_stream(e, 2), [&] {
    c_status = fl_object_wait(o, FL_READ);
    return FL_OK;
  }, {}, "C");
  submit(c.lane3, [&] {
    b_ran = true;
    return FL_OK;
  }, {W(c.p)}, "B");
  queued.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(c.a_status.load(), FL_OK) << what;
  EXPECT_EQ(c_status.load(), FL_OK) << what;
  EXPECT_TRUE(b_ran.load());
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_object_release(c.p));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

}  // namespace

TEST(WaitsInCallbacks, ObjectWaitDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kObjectWait, "fl_object_wait");
}
TEST(WaitsInCallbacks, StreamSynchronizeOfAnotherLaneDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kStreamSync, "fl_stream_synchronize");
}
TEST(WaitsInCallbacks, NestedParallelForBodyWaitDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kParallelFor, "fl_parallel_for body");
}
TEST(WaitsInCallbacks, NestedTaskGraphTaskWaitDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kTaskGraph, "fl_taskgraph_run task");
}

// Chains of waiting callbacks on one worker: every instruction of lanes 1..8 waits for the
// object the next lane writes; the last one is written by a plain instruction. Every wait
// finishes (the pool stands in for blocked workers), none deadlocks.
TEST(WaitsInCallbacks, ChainOfWaitingCallbacksOnOneWorkerCompletes) {
  HangGuard guard("chain of 8 waiting callbacks on one worker");
  fl_engine_t* e = make_engine(1, 10);
  ASSERT_NE(e, nullptr);
  fl_object_t* objs[9];
  for (auto& o : objs) o = fltest::make_obj(e);
  std::atomic<int> ok{0};
  Gate all_submitted;
  for (uint32_t l = 1; l <= 8; ++l)
    submit(host_stream(e, l), [&, l] {
      if (!all_submitted.wait()) return FL_ERR_TIMEOUT;
      if (fl_object_wait(objs[l], FL_READ) == FL_OK) ok.fetch_add(1);
      return FL_OK;
    }, {W(objs[l - 1])});
  submit(host_stream(e, 9), [] { return FL_OK; }, {W(objs[8])});
  all_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(ok.load(), 8);
  for (auto& o : objs) EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_engine_destroy(e));
}


// ---------------------------------------------------------------------------------------
// Cleanup and release callbacks that wait for their own instruction: refused (or served),
// never a hang.

TEST(WaitsInCallbacks, CleanupAndReleaseWaitingForTheirOwnInstructionAnswer) {
  HangGuard guard("cleanup/release callbacks waiting for their own instruction");
  fl_engine_t* e = make_engine(2, 4);
  struct Ctx {
    fl_engine_t* e;
    fl_object_t* out;
    fl_stream_t* own;
    std::atomic<int> obj_wait{-1}, eng_sync{-1}, own_sync{-1}, release_sync{-1};
  } ctx{e, nullptr, host_stream(e, 1), {}, {}, {}, {}};
  ctx.out = fltest::make_obj(e);
  fl_operand_t op{ctx.out, FL_WRITE, 0};
  ASSERT_FL_OK(flguard::submit_raw(ctx.own, &noop_fn, &ctx, &op, 1, "writes_out", [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->obj_wait = fl_object_wait(c->out, FL_READ);  // its own instruction's output
    c->eng_sync = fl_engine_synchronize(c->e);
    c->own_sync = fl_stream_synchronize(c->own);
  }));
  // A release callback run by the completion of the object's last instruction.
  fl_object_t* r = nullptr;
  ASSERT_FL_OK(fl_object_create(e, &ctx, [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->release_sync = fl_engine_synchronize(c->e);
  }, &r));
  Gate go;
  submit(ctx.own, [&] { return go.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(r)}, "last_user_of_r");
  ASSERT_FL_OK(fl_object_release(r));
  go.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  auto refused_or_ok = [](int st) { return st == FL_OK || st == FL_ERR_INVALID_ARGUMENT; };
  EXPECT_TRUE(refused_or_ok(ctx.obj_wait.load())) << fl_status_name(fl_status_t(ctx.obj_wait.load()));
  EXPECT_EQ(ctx.eng_sync.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.own_sync.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.release_sync.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_FL_OK(fl_object_release(ctx.out));
  check_usable_and_destroy(e);
}


// ---------------------------------------------------------------------------------------
// fl_object_wait from a callback for a writer queued behind the caller on its own lane can
// never return: refused (as fl_stream_synchronize of the own lane is), never a hang. A
// writer on another lane is waited for normally.

TEST(OwnLaneWait, ObjectWaitForALaterWriterOfTheOwnLaneIsRefused) {
  HangGuard guard("fl_object_wait for a later own-lane writer");
  fl_engine_t* e = make_engine(2, 4);
  ASSERT_NE(e, nullptr);
  fl_object_t* o = fltest::make_obj(e);
  fl_object_t* q = fltest::make_obj(e);
  Gate later_submitted;
  std::atomic<int> own{-1}, other{-1};
  std::string own_msg;
  submit(host_stream(e, 1), [&] {
    if (!later_submitted.wait()) return FL_ERR_TIMEOUT;
    own = fl_object_wait(o, FL_READ);
    own_msg = fl_last_error_message();
    other = fl_object_wait(q, FL_WRITE);  // written on lane 2: fine
    return FL_OK;
  }, {}, "waiter");
  std::atomic<bool> later_ran{false};
  submit(host_stream(e, 1), [&] {
    later_ran = true;
    return FL_OK;
  }, {W(o)}, "later_writer");
  submit(host_stream(e, 2), [] { return FL_OK; }, {W(q)}, "other_lane_writer");
  later_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(own.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(own_msg, "later_writer")) << own_msg;
  EXPECT_EQ(other.load(), FL_OK);
  EXPECT_TRUE(later_ran.load());
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_object_release(q));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// A callback waiting on an object it lists itself, whose latest writer was recorded after it
// on another lane: that writer depends on the caller through the object, so the wait would
// wait for the caller itself.
// (It used to hang: only the caller itself and later instructions of its own lane were refused.)
TEST(OwnLaneWait, ObjectWaitOnAnOwnOperandWithALaterWriterOnAnotherLaneIsRefused) {
  HangGuard guard("fl_object_wait on an own operand with a later writer on another lane");
  fl_engine_t* e = make_engine(2, 4);
  ASSERT_NE(e, nullptr);
  fl_object_t* o = fltest::make_obj(e);
  Gate later_submitted;
  std::atomic<int> st{-1};
  submit(host_stream(e, 1), [&] {
    if (!later_submitted.wait()) return FL_ERR_TIMEOUT;
    st = fl_object_wait(o, FL_READ);
    return FL_OK;
  }, {W(o)}, "writes_then_waits");
  submit(host_stream(e, 2), [] { return FL_OK; }, {W(o)}, "later_writer_other_lane");
  later_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(st.load(), FL_ERR_INVALID_ARGUMENT);
  // A reader recorded after a caller that only reads does not depend on it: no refusal.
  std::atomic<int> st2{-1};
  Gate reader_submitted;
  fl_object_t* q = fltest::make_obj(e);
  submit(host_stream(e, 1), [&] {
    if (!reader_submitted.wait()) return FL_ERR_TIMEOUT;
    st2 = fl_object_wait(q, FL_READ);
    return FL_OK;
  }, {R(q)}, "reads_then_waits");
  submit(host_stream(e, 2), [] { return FL_OK; }, {R(q)}, "later_reader_other_lane");
  reader_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(st2.load(), FL_OK);
  EXPECT_FL_OK(fl_object_release(q));
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Timed waits from cleanup and release callbacks on their own instruction: refused, never a
// hang and never a timeout standing in for a refusal.
TEST(TimedWaitsInCallbacks, CleanupWaitingForItsOwnInstructionIsRefusedNotTimedOut) {
  HangGuard guard("timed waits from a cleanup on its own instruction");
  fl_engine_t* e = make_engine(2, 4);
  struct Ctx {
    fl_engine_t* e;
    fl_object_t* out;
    fl_stream_t* own;
    fl_instr_id id = 0;
    std::atomic<int> obj{-1}, eng{-1}, str{-1}, drain{-1};
  } ctx{e, fltest::make_obj(e), host_stream(e, 1)};
  fl_operand_t op{ctx.out, FL_WRITE, 0};
  ASSERT_FL_OK(flguard::submit_raw(ctx.own, [](fl_instr_ctx_t*, void*) { return FL_OK; }, &ctx, &op, 1, "own",
                                   [](void* ud) {
                                     auto* c = static_cast<Ctx*>(ud);
                                     c->obj = fl_object_wait_for(c->out, FL_READ, FL_WAIT_FOREVER);
                                     c->eng = fl_engine_synchronize_for(c->e, FL_WAIT_FOREVER);
                                     c->str = fl_stream_synchronize_for(c->own, FL_WAIT_FOREVER);
                                     c->drain = fl_engine_drain(c->e, FL_WAIT_FOREVER);
                                   }));
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_TRUE(ctx.obj.load() == FL_OK || ctx.obj.load() == FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.eng.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.str.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.drain.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_FL_OK(fl_object_release(ctx.out));
  EXPECT_FL_OK(fl_engine_destroy(e));
}
