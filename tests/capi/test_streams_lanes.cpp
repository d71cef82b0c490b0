// Lanes (acquire, release, recycling) and streams (one per lane, device and kind; stale handles;
// synchronize): success and error paths (public API only).
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"
#include "test_util.hpp"

using flcapi::bump;
using flcapi::noop;
using flcapi::submit;


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
