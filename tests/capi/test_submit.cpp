// Conformance of lanes, streams, objects and host instructions: success and error paths
// of every function. Public header only.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"
#include "test_util.hpp"

namespace {

fl_status_t noop(fl_instr_ctx_t*, void*) { return FL_OK; }

fl_status_t bump(fl_instr_ctx_t*, void* ud) {
  static_cast<std::atomic<int>*>(ud)->fetch_add(1);
  return FL_OK;
}

void count_release(void* ud) { static_cast<std::atomic<int>*>(ud)->fetch_add(1); }

fl_instr_id submit(fl_stream_t* s, fl_host_fn fn, void* ud, std::vector<fl_operand_t> ops = {},
                   const char* name = nullptr, fl_release_fn cleanup = nullptr) {
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = fn;
  in.user_data = ud;
  in.cleanup = cleanup;
  in.operands = ops.empty() ? nullptr : ops.data();
  in.num_operands = ops.size();
  in.name = name;
  fl_instr_id id = 0;
  fl_status_t st = fl_submit_host(s, &in, &id);
  EXPECT_EQ(st, FL_OK) << fl_last_error_message();
  return id;
}

fl_object_t* make_object(fl_engine_t* e, void* ud = nullptr, fl_release_fn rel = nullptr) {
  fl_object_t* o = nullptr;
  EXPECT_EQ(fl_object_create(e, ud, rel, &o), FL_OK) << fl_last_error_message();
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Lanes

TEST(Lanes, AcquireHandsOutSmallestFreeIdAndRecyclesIt) {
  EngineFixture f(2, 4);
  uint32_t a, b, c;
  ASSERT_FL_OK(fl_lane_acquire(f.engine, &a));
  ASSERT_FL_OK(fl_lane_acquire(f.engine, &b));
  ASSERT_FL_OK(fl_lane_acquire(f.engine, &c));
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(c, 3u);
  uint32_t d = 99;
  EXPECT_FL_ERR(fl_lane_acquire(f.engine, &d), FL_ERR_EXHAUSTED, "are held");
  EXPECT_EQ(d, 99u);
  ASSERT_FL_OK(fl_lane_release(f.engine, 2));
  ASSERT_FL_OK(fl_lane_acquire(f.engine, &d));
  EXPECT_EQ(d, 2u);
}

TEST(Lanes, ReleaseErrors) {
  EngineFixture f(1, 4);
  EXPECT_FL_ERR(fl_lane_release(f.engine, 0), FL_ERR_INVALID_ARGUMENT, "lane 0");
  EXPECT_FL_ERR(fl_lane_release(f.engine, 3), FL_ERR_INVALID_ARGUMENT, "not held");
  EXPECT_FL_ERR(fl_lane_release(f.engine, 9), FL_ERR_OUT_OF_RANGE, "this engine has 4 lanes");
  EXPECT_FL_ERR(fl_lane_release(nullptr, 1), FL_ERR_INVALID_HANDLE, "NULL");
  EXPECT_FL_ERR(fl_lane_acquire(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "out_lane");
  EXPECT_FL_ERR(fl_lane_acquire(nullptr, nullptr), FL_ERR_INVALID_HANDLE, "NULL");
}

TEST(Lanes, WorkSubmittedOnAReleasedLaneStillRuns) {
  EngineFixture f(2, 4);
  uint32_t l;
  ASSERT_FL_OK(fl_lane_acquire(f.engine, &l));
  std::atomic<int> n{0};
  for (int k = 0; k < 100; ++k) submit(f.host(l), bump, &n);
  ASSERT_FL_OK(fl_lane_release(f.engine, l));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(n.load(), 100);
}

// One worker, a lane with a long backlog, another lane with one instruction: the busy lane
// re-queues itself behind waiting work after each batch, so the other lane runs long
// before the backlog is done (with a LIFO re-queue it would run only after all of it).
TEST(Lanes, BusyLaneYieldsToAnotherLaneOnOneWorker) {
  EngineFixture f(1, 4, 16384);  // window above the backlog: everything is queued before the gate opens
  const int kBacklog = 5000;
  fltest::Gate gate;
  std::atomic<int> a_done{0};
  std::atomic<int> seen_by_b{-1};
  fltest::submit(f.host(1), [&] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; });
  for (int k = 0; k < kBacklog; ++k) fltest::submit(f.host(1), [&] { a_done++; return FL_OK; });
  fltest::submit(f.host(2), [&] { seen_by_b = a_done.load(); return FL_OK; });
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(a_done.load(), kBacklog);
  EXPECT_GE(seen_by_b.load(), 0);
  EXPECT_LT(seen_by_b.load(), kBacklog / 2) << "lane 2 waited for lane 1's whole backlog";
}

// ---------------------------------------------------------------------------------------
// Streams

TEST(Streams, SameTripleYieldsSameStream) {
  EngineFixture f;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  fl_stream_t *a, *b, *c;
  ASSERT_FL_OK(fl_stream_get(f.engine, 1, cpu, FL_STREAM_HOST, &a));
  ASSERT_FL_OK(fl_stream_get(f.engine, 1, cpu, FL_STREAM_HOST, &b));
  ASSERT_FL_OK(fl_stream_get(f.engine, 2, cpu, FL_STREAM_HOST, &c));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  uint32_t lane = 0;
  fl_device_t dev{9, 9};
  fl_stream_kind_t kind = FL_STREAM_COMPUTE;
  ASSERT_FL_OK(fl_stream_info(c, &lane, &dev, &kind));
  EXPECT_EQ(lane, 2u);
  EXPECT_EQ(dev.type, FL_DEVICE_CPU);
  EXPECT_EQ(dev.index, 0);
  EXPECT_EQ(kind, FL_STREAM_HOST);
  ASSERT_FL_OK(fl_stream_info(c, nullptr, nullptr, nullptr));
}

TEST(Streams, BadArgumentsGetSpecificStatuses) {
  EngineFixture f(1, 8);
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  fl_stream_t* s = nullptr;
  EXPECT_FL_ERR(fl_stream_get(f.engine, 8, cpu, FL_STREAM_HOST, &s), FL_ERR_OUT_OF_RANGE,
                "lane 8 is out of range: this engine has 8 lanes");
  EXPECT_FL_ERR(fl_stream_get(f.engine, 0, cpu, FL_STREAM_HOST, nullptr), FL_ERR_INVALID_ARGUMENT, "out_stream");
  EXPECT_FL_ERR(fl_stream_get(nullptr, 0, cpu, FL_STREAM_HOST, &s), FL_ERR_INVALID_HANDLE, "NULL");
  EXPECT_FL_ERR(fl_stream_get(f.engine, 0, cpu, fl_stream_kind_t(17), &s), FL_ERR_INVALID_ARGUMENT, "kind 17");
  EXPECT_FL_ERR(fl_stream_get(f.engine, 0, fl_device_t{FL_DEVICE_CPU, 1}, FL_STREAM_HOST, &s),
                FL_ERR_INVALID_ARGUMENT, "index 0");
  EXPECT_FL_ERR(fl_stream_get(f.engine, 0, cpu, FL_STREAM_COMPUTE, &s), FL_ERR_INVALID_ARGUMENT, "CUDA device");
  EXPECT_FL_ERR(fl_stream_get(f.engine, 0, fl_device_t{7, 0}, FL_STREAM_HOST, &s), FL_ERR_INVALID_ARGUMENT,
                "device type 7");
  EXPECT_FL_ERR(fl_stream_get(f.engine, 0, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_HOST, &s),
                FL_ERR_INVALID_ARGUMENT, "FL_DEVICE_CPU");
  fl_status_t st = fl_stream_get(f.engine, 0, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_COMPUTE, &s);
  EXPECT_TRUE(st == FL_ERR_UNSUPPORTED || st == FL_ERR_NO_DEVICE || st == FL_OK) << fl_status_name(st);
  if (st == FL_OK) {
    EXPECT_NE(s, nullptr);  // a CUDA build on a machine with a GPU
  } else {
    EXPECT_EQ(s, nullptr);  // outputs untouched on failure
  }
  s = nullptr;
  int32_t devices = 0;
  const bool cuda_build = fl_cuda_device_count(&devices) != FL_ERR_UNSUPPORTED;
  EXPECT_FL_ERR(fl_stream_get(f.engine, 0, fl_device_t{FL_DEVICE_CUDA, 4096}, FL_STREAM_COMPUTE, &s),
                cuda_build ? FL_ERR_NO_DEVICE : FL_ERR_UNSUPPORTED, "");
  EXPECT_EQ(s, nullptr);
  EXPECT_FL_ERR(fl_stream_synchronize(nullptr), FL_ERR_INVALID_HANDLE, "NULL");
  EXPECT_FL_ERR(fl_stream_info(nullptr, nullptr, nullptr, nullptr), FL_ERR_INVALID_HANDLE, "NULL");
}

TEST(Streams, HandlesGoStaleWithTheirEngine) {
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  fl_stream_t* s = nullptr;
  ASSERT_FL_OK(fl_stream_get(e, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_FL_ERR(fl_stream_synchronize(s), FL_ERR_INVALID_HANDLE, "stale");
  std::atomic<int> n{0};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = bump;
  in.user_data = &n;
  EXPECT_FL_ERR(fl_submit_host(s, &in, nullptr), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_EQ(n.load(), 0);
}

TEST(Streams, SynchronizeWaitsForItsStreamOnly) {
  EngineFixture f(2);
  std::atomic<bool> release_lane1{false};
  std::atomic<int> done{0};
  struct Ctx {
    std::atomic<bool>* gate;
    std::atomic<int>* done;
  } ctx{&release_lane1, &done};
  submit(f.host(1), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    while (!c->gate->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return FL_OK;
  }, &ctx);
  for (int k = 0; k < 10; ++k) submit(f.host(2), bump, &done);
  ASSERT_FL_OK(fl_stream_synchronize(f.host(2)));  // returns although lane 1 is stuck
  EXPECT_EQ(done.load(), 10);
  release_lane1 = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
}

TEST(Streams, SynchronizeFromACallbackRefusesItsOwnLaneOnly) {
  EngineFixture f(2);
  struct Ctx {
    fl_stream_t* own;
    fl_stream_t* other;
    fl_status_t own_st = FL_OK, other_st = FL_ERR_INTERNAL;
    std::string own_msg;
  } ctx{f.host(1), f.host(2), FL_OK, FL_ERR_INTERNAL, {}};
  submit(f.host(2), noop, nullptr);
  submit(f.host(1), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->own_st = fl_stream_synchronize(c->own);
    c->own_msg = fl_last_error_message();
    c->other_st = fl_stream_synchronize(c->other);  // another lane: allowed
    return FL_OK;
  }, &ctx);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ctx.own_st, FL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(ctx.own_msg.find("own lane"), std::string::npos) << ctx.own_msg;
  EXPECT_EQ(ctx.other_st, FL_OK);
}

// ---------------------------------------------------------------------------------------
// Objects

TEST(Objects, ReleaseCallbackRunsOnceAfterLastUse) {
  EngineFixture f(2);
  std::atomic<int> released{0};
  std::atomic<bool> gate{false};
  fl_object_t* o = make_object(f.engine, &released, count_release);
  fl_operand_t op{o, FL_WRITE, 0};
  fl_instr_id id = submit(f.host(1), [](fl_instr_ctx_t*, void* ud) {
    auto* g = static_cast<std::atomic<bool>*>(ud);
    while (!g->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return FL_OK;
  }, &gate, {op}, "user");
  ASSERT_FL_OK(fl_object_release(o));
  // The state, not a sleep: the user is running and cannot complete before the gate opens.
  std::string dump = fltest::wait_for_dump(f.engine, {"'user' (#1, lane 1, host) RUNNING"});
  EXPECT_NE(dump.find("RUNNING"), std::string::npos) << dump;
  uint32_t state = 99;
  ASSERT_FL_OK(fl_instr_query(f.host(1), id, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_PENDING));
  EXPECT_EQ(released.load(), 0) << "released while an instruction still uses it";
  gate = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(released.load(), 1);
}

TEST(Objects, ReleasedHandleIsStale) {
  EngineFixture f;
  std::atomic<int> released{0};
  fl_object_t* o = make_object(f.engine, &released, count_release);
  ASSERT_FL_OK(fl_object_release(o));
  EXPECT_EQ(released.load(), 1);
  EXPECT_FL_ERR(fl_object_release(o), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_ERR(fl_object_wait(o, FL_READ), FL_ERR_INVALID_HANDLE, "stale");
  void* ud;
  EXPECT_FL_ERR(fl_object_user_data(o, &ud), FL_ERR_INVALID_HANDLE, "stale");
  fl_operand_t op{o, FL_READ, 0};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = noop;
  in.operands = &op;
  in.num_operands = 1;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &in, nullptr), FL_ERR_INVALID_HANDLE, "operand 0");
  EXPECT_EQ(released.load(), 1);
}

TEST(Objects, ErrorPaths) {
  EngineFixture f;
  fl_object_t* o = nullptr;
  EXPECT_FL_ERR(fl_object_create(nullptr, nullptr, nullptr, &o), FL_ERR_INVALID_HANDLE, "NULL");
  EXPECT_FL_ERR(fl_object_create(f.engine, nullptr, nullptr, nullptr), FL_ERR_INVALID_ARGUMENT, "out_object");
  EXPECT_FL_ERR(fl_object_release(nullptr), FL_ERR_INVALID_HANDLE, "NULL");
  EXPECT_FL_ERR(fl_object_wait(nullptr, FL_READ), FL_ERR_INVALID_HANDLE, "NULL");
  o = make_object(f.engine, reinterpret_cast<void*>(uintptr_t(42)));
  EXPECT_FL_ERR(fl_object_wait(o, 0), FL_ERR_INVALID_ARGUMENT, "access 0");
  EXPECT_FL_ERR(fl_object_wait(o, 8), FL_ERR_INVALID_ARGUMENT, "access 8");
  void* ud = nullptr;
  ASSERT_FL_OK(fl_object_user_data(o, &ud));
  EXPECT_EQ(ud, reinterpret_cast<void*>(uintptr_t(42)));
  EXPECT_FL_ERR(fl_object_user_data(o, nullptr), FL_ERR_INVALID_ARGUMENT, "out_user_data");
  EXPECT_FL_OK(fl_object_wait(o, FL_READ_WRITE));  // nothing submitted: returns at once
  ASSERT_FL_OK(fl_object_release(o));
}

TEST(Objects, DestroyRunsReleaseOfObjectsStillHeld) {
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  std::atomic<int> released{0};
  fl_object_t* held[3];
  for (auto& o : held) o = make_object(e, &released, count_release);
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_EQ(released.load(), 3);
  EXPECT_FL_ERR(fl_object_release(held[0]), FL_ERR_INVALID_HANDLE, "stale");
}

TEST(Objects, ForeignObjectIsRejected) {
  EngineFixture a, b;
  fl_object_t* o = make_object(b.engine);
  fl_operand_t op{o, FL_READ, 0};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = noop;
  in.operands = &op;
  in.num_operands = 1;
  EXPECT_FL_ERR(fl_submit_host(a.host(0), &in, nullptr), FL_ERR_INVALID_HANDLE, "another engine");
  ASSERT_FL_OK(fl_object_release(o));
}

// ---------------------------------------------------------------------------------------
// Host instructions

TEST(Submit, RunsCallbackThenCleanupExactlyOnce) {
  EngineFixture f;
  struct Ctx {
    std::atomic<int> ran{0}, cleaned{0};
    uint32_t lane = 99;
    fl_instr_id id = 0;
    bool engine_ok = false;
  } ctx;
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t* c, void* ud) {
    auto* x = static_cast<Ctx*>(ud);
    x->ran++;
    x->lane = fl_instr_get_lane(c);
    x->id = fl_instr_get_id(c);
    x->engine_ok = fl_engine_lane_count(fl_instr_get_engine(c)) == 8;
    return FL_OK;
  };
  in.cleanup = [](void* ud) {
    auto* x = static_cast<Ctx*>(ud);
    EXPECT_EQ(x->ran.load(), 1);
    x->cleaned++;
  };
  in.user_data = &ctx;
  in.name = "probe";
  fl_instr_id id = 0;
  ASSERT_FL_OK(fl_submit_host(f.host(3), &in, &id));
  EXPECT_NE(id, 0u);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ctx.ran.load(), 1);
  EXPECT_EQ(ctx.cleaned.load(), 1);
  EXPECT_EQ(ctx.lane, 3u);
  EXPECT_EQ(ctx.id, id);
  EXPECT_TRUE(ctx.engine_ok);
  EXPECT_EQ(fl_instr_get_lane(nullptr), 0u);
  EXPECT_EQ(fl_instr_get_id(nullptr), 0u);
  EXPECT_EQ(fl_instr_get_engine(nullptr), nullptr);
  fl_instr_set_error(nullptr, "ignored");
}

TEST(Submit, BadDescriptorsAreRejectedAndNothingIsCalled) {
  EngineFixture f;
  std::atomic<int> calls{0};
  fl_object_t* o = make_object(f.engine);
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = bump;
  in.user_data = &calls;
  in.cleanup = count_release;  // also bumps `calls` if ever called
  EXPECT_FL_ERR(fl_submit_host(nullptr, &in, nullptr), FL_ERR_INVALID_HANDLE, "NULL");
  EXPECT_FL_ERR(fl_submit_host(f.host(0), nullptr, nullptr), FL_ERR_INVALID_ARGUMENT, "NULL");
  fl_host_instr_t bad = in;
  bad.struct_size = 16;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_ARGUMENT, "struct_size");
  bad = in;
  bad.fn = nullptr;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_ARGUMENT, "fn is NULL");
  bad = in;
  bad.flags = 0x80;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_ARGUMENT, "unknown flags");
  bad = in;
  bad.num_operands = 2;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_ARGUMENT, "operands is NULL");
  fl_operand_t zero{o, 0, 0};
  bad = in;
  bad.operands = &zero;
  bad.num_operands = 1;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_ARGUMENT, "access 0");
  fl_operand_t weird{o, 6, 0};
  bad.operands = &weird;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_ARGUMENT, "access 6");
  fl_operand_t reserved{o, FL_READ, 1};
  bad.operands = &reserved;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_ARGUMENT, "reserved");
  fl_operand_t null_obj{nullptr, FL_READ, 0};
  bad.operands = &null_obj;
  EXPECT_FL_ERR(fl_submit_host(f.host(0), &bad, nullptr), FL_ERR_INVALID_HANDLE, "NULL object");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(calls.load(), 0);
  ASSERT_FL_OK(fl_object_release(o));
}

TEST(Submit, FailureIsReportedOnceAndNamesTheInstruction) {
  EngineFixture f;
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t* c, void*) {
    fl_instr_set_error(c, "disk on fire");
    return FL_ERR_INSTRUCTION_FAILED;
  };
  in.name = "loss.backward";
  fl_instr_id id = 0;
  ASSERT_FL_OK(fl_submit_host(f.host(0), &in, &id));
  fl_status_t st = fl_engine_synchronize(f.engine);
  EXPECT_EQ(st, FL_ERR_INSTRUCTION_FAILED);
  std::string msg = fl_last_error_message();
  EXPECT_NE(msg.find("instruction 'loss.backward' (#" + std::to_string(id) + ", lane 0, host) failed: disk on fire"),
            std::string::npos)
      << msg;
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));  // returned once
  // The engine stays usable.
  std::atomic<int> n{0};
  submit(f.host(0), bump, &n);
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(n.load(), 1);
}

TEST(Submit, CppExceptionInCallbackBecomesFailure) {
  EngineFixture f;
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) -> fl_status_t { throw std::runtime_error("kaboom"); };
  in.name = "thrower";
  ASSERT_FL_OK(fl_submit_host(f.host(1), &in, nullptr));
  EXPECT_FL_ERR(fl_engine_synchronize(f.engine), FL_ERR_INSTRUCTION_FAILED, "C++ exception: kaboom");
}

TEST(Submit, FailureWithoutMessageNamesTheStatus) {
  EngineFixture f;
  submit(f.host(0), [](fl_instr_ctx_t*, void*) { return FL_ERR_TIMEOUT; }, nullptr, {}, "slow");
  EXPECT_FL_ERR(fl_engine_synchronize(f.engine), FL_ERR_TIMEOUT, "'slow'");
  EXPECT_NE(std::string(fl_last_error_message()).find("FL_ERR_TIMEOUT"), std::string::npos);
}

TEST(Submit, DuplicateOperandsCountOnceWithUnionOfAccesses) {
  EngineFixture f(2);
  fl_object_t* o = make_object(f.engine);
  std::atomic<int> value{0};
  fltest::Gate gate;
  struct Writer {
    std::atomic<int>* v;
    fltest::Gate* gate;
  } writer{&value, &gate};
  // Listed as READ and WRITE: acts as READ_WRITE, so the reader on lane 2 must wait for it.
  submit(f.host(1), [](fl_instr_ctx_t*, void* ud) {
    auto* w = static_cast<Writer*>(ud);
    if (!w->gate->wait()) return FL_ERR_TIMEOUT;
    w->v->store(7);
    return FL_OK;
  }, &writer, {{o, FL_READ, 0}, {o, FL_WRITE, 0}, {o, FL_READ, 0}}, "writer");
  std::atomic<int> seen{-1};
  struct Ctx {
    std::atomic<int>* v;
    std::atomic<int>* seen;
  } ctx{&value, &seen};
  submit(f.host(2), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->seen->store(c->v->load());
    return FL_OK;
  }, &ctx, {{o, FL_READ, 0}}, "reader");
  // The state, not a sleep: the reader is blocked on the held writer.
  std::string dump = fltest::wait_for_dump(f.engine, {"oldest: 'reader' (#2, lane 2, host) BLOCKED", "'writer'"});
  EXPECT_NE(dump.find("oldest: 'reader' (#2, lane 2, host) BLOCKED"), std::string::npos) << dump;
  EXPECT_EQ(seen.load(), -1);
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(seen.load(), 7);
  ASSERT_FL_OK(fl_object_release(o));
}

TEST(Submit, NonHostStreamIsRejectedForHostInstructions) {
  EngineFixture f;
  fl_stream_t* coll = nullptr;
  ASSERT_FL_OK(fl_stream_get(f.engine, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE, &coll));
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = noop;
  EXPECT_FL_ERR(fl_submit_host(coll, &in, nullptr), FL_ERR_INVALID_ARGUMENT, "not a FL_STREAM_HOST");
}

// ---------------------------------------------------------------------------------------
// In-flight window

TEST(Window, NonblockingSubmitReportsWouldBlockWhenFull) {
  EngineFixture f(1, 0, 4);
  std::atomic<bool> gate{false};
  auto wait_gate = [](fl_instr_ctx_t*, void* ud) {
    auto* g = static_cast<std::atomic<bool>*>(ud);
    while (!g->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return FL_OK;
  };
  for (int k = 0; k < 4; ++k) submit(f.host(1), wait_gate, &gate);
  std::atomic<int> calls{0};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = bump;
  in.user_data = &calls;
  in.flags = FL_SUBMIT_NONBLOCKING;
  EXPECT_FL_ERR(fl_submit_host(f.host(2), &in, nullptr), FL_ERR_WOULD_BLOCK, "window is full");
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.in_flight, 4u);
  gate = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_FL_OK(fl_submit_host(f.host(2), &in, nullptr));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(calls.load(), 1);
}

TEST(Window, BlockingSubmitWaitsForRoomAndLosesNothing) {
  EngineFixture f(2, 0, 8);
  std::atomic<int> n{0};
  const int kCount = int(fl_scaled(20000, 2000));
  for (int k = 0; k < kCount; ++k) submit(f.host(uint32_t(k % 3)), bump, &n);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(n.load(), kCount);
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.submitted, uint64_t(kCount));
  EXPECT_EQ(st.completed, uint64_t(kCount));
  EXPECT_EQ(st.in_flight, 0u);
}

TEST(Window, CallbackSubmittingIntoAFullWindowDoesNotHang) {
  // One worker, window of 2: a callback submits 50 follow-ups; they are admitted over
  // the limit instead of blocking the only worker.
  EngineFixture f(1, 0, 2);
  struct Ctx {
    fl_stream_t* s;
    std::atomic<int> n{0};
  } ctx{f.host(1)};
  submit(f.host(0), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    for (int k = 0; k < 50; ++k) {
      fl_host_instr_t in = FL_HOST_INSTR_INIT;
      in.fn = bump;
      in.user_data = &c->n;
      if (fl_submit_host(c->s, &in, nullptr) != FL_OK) return FL_ERR_INTERNAL;
    }
    return FL_OK;
  }, &ctx);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));  // the follow-ups were submitted during the first
  EXPECT_EQ(ctx.n.load(), 50);
}

// Outside threads park on a tiny window while callbacks keep submitting follow-ups
// (admitted over the limit, so the count can rise while a submitter is deciding whether
// to sleep): a parked submitter is always woken again, and nothing is lost. A stress
// guard: the narrow interleaving that stranded a submitter under an earlier
// one-notification scheme (it looked, a follow-up pushed the count back above the mark,
// and it slept after the only notification) did not show up in 30 runs of this test; the
// protocol that rules it out is argued in core/engine/README.md, "The in-flight window".
TEST(Window, ParkedSubmittersAreNeverStrandedWhileCallbacksSubmitOverTheLimit) {
  flguard::HangGuard guard("Window.ParkedSubmittersAreNeverStrandedWhileCallbacksSubmitOverTheLimit");
  EngineFixture f(1, 0, 2);
  struct Ctx {
    fl_stream_t* follow_up_stream;
    std::atomic<int> ran{0};
    std::atomic<int> follow_ups{0};
  } ctx{f.host(3)};
  auto fn = [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (c->ran.fetch_add(1) % 2 == 0) {
      fl_host_instr_t in = FL_HOST_INSTR_INIT;
      in.fn = bump;
      in.user_data = &c->follow_ups;
      if (fl_submit_host(c->follow_up_stream, &in, nullptr) != FL_OK) return FL_ERR_INTERNAL;
    }
    return FL_OK;
  };
  constexpr int kThreads = 4;
  const int kEach = int(fl_scaled(20000, 2000));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kEach; ++k) submit(f.host(uint32_t((t + k) % 3)), fn, &ctx);
    });
  for (auto& th : threads) th.join();
  ASSERT_FL_OK(fl_engine_drain(f.engine, FL_WAIT_FOREVER));
  EXPECT_EQ(ctx.ran.load(), kThreads * kEach);
  EXPECT_EQ(ctx.follow_ups.load(), (kThreads * kEach + 1) / 2);
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.in_flight, 0u);
}

// ---------------------------------------------------------------------------------------
// Waits from inside callbacks

TEST(Callbacks, SynchronizeFromInsideAnInstructionIsRejected) {
  EngineFixture f;
  std::atomic<int> status{-1};
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int>* status;
  } ctx{f.engine, &status};
  submit(f.host(0), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->status->store(fl_engine_synchronize(c->e));
    return FL_OK;
  }, &ctx);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(status.load(), FL_ERR_INVALID_ARGUMENT);
}

TEST(Callbacks, DestroyFromInsideAnInstructionIsRejected) {
  EngineFixture f;
  std::atomic<int> status{-1};
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int>* status;
  } ctx{f.engine, &status};
  submit(f.host(0), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->status->store(fl_engine_destroy(c->e));
    return FL_OK;
  }, &ctx);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(status.load(), FL_ERR_INVALID_ARGUMENT);
}

TEST(Callbacks, ObjectWaitOnOwnOperandIsRejected) {
  EngineFixture f;
  fl_object_t* o = make_object(f.engine);
  std::atomic<int> status{-1};
  struct Ctx {
    fl_object_t* o;
    std::atomic<int>* status;
  } ctx{o, &status};
  submit(f.host(0), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->status->store(fl_object_wait(c->o, FL_READ));
    return FL_OK;
  }, &ctx, {{o, FL_WRITE, 0}});
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(status.load(), FL_ERR_INVALID_ARGUMENT);
  ASSERT_FL_OK(fl_object_release(o));
}

// ---------------------------------------------------------------------------------------
// Destroy

TEST(Destroy, DrainsPendingWorkAndRunsEveryCleanup) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  std::atomic<int> ran{0}, cleaned{0};
  struct Ctx {
    std::atomic<int>*ran, *cleaned;
  } ctx{&ran, &cleaned};
  fl_object_t* o = make_object(e);
  fl_stream_t* s[3];
  for (uint32_t l = 0; l < 3; ++l) ASSERT_FL_OK(fl_stream_get(e, l, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s[l]));
  const int kCount = 3000;
  for (int k = 0; k < kCount; ++k) {
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = [](fl_instr_ctx_t*, void* ud) {
      static_cast<Ctx*>(ud)->ran->fetch_add(1);
      return FL_OK;
    };
    in.cleanup = [](void* ud) { static_cast<Ctx*>(ud)->cleaned->fetch_add(1); };
    in.user_data = &ctx;
    fl_operand_t op{o, (k % 5 == 0) ? uint32_t(FL_WRITE) : uint32_t(FL_READ), 0};
    in.operands = &op;
    in.num_operands = 1;
    ASSERT_FL_OK(fl_submit_host(s[k % 3], &in, nullptr));
  }
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_EQ(ran.load(), kCount);
  EXPECT_EQ(cleaned.load(), kCount);
}

TEST(Destroy, SubmissionsFromCallbacksDuringDestroyGetShutdown) {
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  fl_stream_t* s = nullptr;
  ASSERT_FL_OK(fl_stream_get(e, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
  struct Ctx {
    fl_stream_t* s;
    std::atomic<int> status{-1};
    std::atomic<int> stream_get_status{-1};
  } ctx{s};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t* ictx, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    // Keep submitting follow-ups until destroy has begun: from then on, SHUTDOWN.
    fl_host_instr_t next = FL_HOST_INSTR_INIT;
    next.fn = noop;
    fl_status_t st = FL_OK;
    for (int k = 0; k < 20000 && st == FL_OK; ++k) {
      st = fl_submit_host(c->s, &next, nullptr);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    c->status.store(st);
    // The engine handle stays valid while the drain runs its callbacks.
    fl_stream_t* other = nullptr;
    c->stream_get_status.store(
        fl_stream_get(fl_instr_engine(ictx), 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &other));
    return FL_OK;
  };
  in.user_data = &ctx;
  ASSERT_FL_OK(fl_submit_host(s, &in, nullptr));
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_EQ(ctx.status.load(), FL_ERR_SHUTDOWN);
  EXPECT_EQ(ctx.stream_get_status.load(), FL_ERR_SHUTDOWN);
}
