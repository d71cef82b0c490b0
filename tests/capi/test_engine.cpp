// Conformance of the foundation entry points: version, status names, thread-local error
// messages, engine descriptors, create/destroy (and destroy with work pending). Public
// header only.
#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "capi_test_util.hpp"
#include "test_util.hpp"

using flcapi::make_object;
using flcapi::noop;

TEST(Version, HexMatchesHeaderMacros) {
  EXPECT_EQ(fl_version_hex(), uint32_t(FL_VERSION_HEX));
  EXPECT_EQ(fl_version_hex(), (uint32_t(FL_VERSION_MAJOR) << 16) | (FL_VERSION_MINOR << 8) | FL_VERSION_PATCH);
  std::string v = fl_version_string();
  EXPECT_EQ(v, std::to_string(FL_VERSION_MAJOR) + "." + std::to_string(FL_VERSION_MINOR) + "." +
                   std::to_string(FL_VERSION_PATCH));
}

TEST(Status, ValuesArePinned) {
  EXPECT_EQ(FL_OK, 0);
  EXPECT_EQ(FL_ERR_INVALID_ARGUMENT, 1);
  EXPECT_EQ(FL_ERR_INVALID_HANDLE, 2);
  EXPECT_EQ(FL_ERR_OUT_OF_RANGE, 3);
  EXPECT_EQ(FL_ERR_NO_MEMORY, 4);
  EXPECT_EQ(FL_ERR_WOULD_BLOCK, 5);
  EXPECT_EQ(FL_ERR_EXHAUSTED, 6);
  EXPECT_EQ(FL_ERR_SHUTDOWN, 7);
  EXPECT_EQ(FL_ERR_INSTRUCTION_FAILED, 8);
  EXPECT_EQ(FL_ERR_DEPENDENCY_FAILED, 9);
  EXPECT_EQ(FL_ERR_CANCELLED, 10);
  EXPECT_EQ(FL_ERR_TIMEOUT, 11);
  EXPECT_EQ(FL_ERR_UNSUPPORTED, 12);
  EXPECT_EQ(FL_ERR_NO_DEVICE, 13);
  EXPECT_EQ(FL_ERR_CUDA, 14);
  EXPECT_EQ(FL_ERR_NCCL, 15);
  EXPECT_EQ(FL_ERR_INTERNAL, 16);
}

TEST(Status, EveryStatusHasAUniqueNameAndText) {
  std::set<std::string> names;
#define FL_COUNT_STATUS_(name, value, text) +1
  constexpr int kStatusCount = 0 FL_STATUS_MAP(FL_COUNT_STATUS_);
#undef FL_COUNT_STATUS_
  for (int s = 0; s < kStatusCount; ++s) {
    std::string name = fl_status_name(fl_status_t(s));
    EXPECT_EQ(name.rfind("FL_", 0), 0u) << name;
    EXPECT_NE(name, "FL_STATUS_UNKNOWN");
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_GT(std::strlen(fl_status_string(fl_status_t(s))), 3u);
  }
  EXPECT_STREQ(fl_status_name(FL_ERR_OUT_OF_RANGE), "FL_ERR_OUT_OF_RANGE");
  EXPECT_STREQ(fl_status_name(fl_status_t(kStatusCount)), "FL_STATUS_UNKNOWN");
  EXPECT_STREQ(fl_status_name(fl_status_t(9999)), "FL_STATUS_UNKNOWN");
  EXPECT_STREQ(fl_status_name(fl_status_t(-1)), "FL_STATUS_UNKNOWN");
  EXPECT_STREQ(fl_status_string(fl_status_t(9999)), "unknown status");
}

TEST(Errors, MessageIsEmptyAfterSuccessAndSetAfterFailure) {
  fl_engine_t* e = nullptr;
  EXPECT_FL_ERR(fl_engine_create(nullptr, nullptr), FL_ERR_INVALID_ARGUMENT, "out_engine is NULL");
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  EXPECT_STREQ(fl_last_error_message(), "");
  EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(Errors, MessageIsThreadLocal) {
  EXPECT_FL_ERR(fl_engine_create(nullptr, nullptr), FL_ERR_INVALID_ARGUMENT, "out_engine");
  std::string other;
  std::thread t([&] { other = fl_last_error_message(); });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(fl_last_error_message()), "");
}

TEST(Engine, NullDescriptorMeansDefaults) {
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(fl_engine_lane_count(e), 8u);
  EXPECT_EQ(fl_engine_worker_count(e), std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(Engine, DescriptorFieldsAreHonoured) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 3;
  d.max_lanes = 5;
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  EXPECT_EQ(fl_engine_lane_count(e), 5u);
  EXPECT_EQ(fl_engine_worker_count(e), 3u);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(Engine, BadStructSizeIsRejected) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.struct_size = 8;
  fl_engine_t* e = nullptr;
  EXPECT_FL_ERR(fl_engine_create(&d, &e), FL_ERR_INVALID_ARGUMENT, "struct_size is 8");
  EXPECT_EQ(e, nullptr);
  d.struct_size = 0;
  EXPECT_FL_ERR(fl_engine_create(&d, &e), FL_ERR_INVALID_ARGUMENT, "FL_ENGINE_DESC_INIT"[0] ? "struct_size" : "");
}

TEST(Engine, LargerDescriptorWithZeroTailIsAccepted) {
  struct Bigger {
    fl_engine_desc_t base;
    uint64_t future_field;
  } big;
  std::memset(&big, 0, sizeof(big));
  big.base.struct_size = sizeof(big);
  big.base.num_workers = 1;
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(&big.base, &e));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(Engine, NonZeroUnknownTailIsRejected) {
  struct Bigger {
    fl_engine_desc_t base;
    uint64_t future_field;
  } big;
  std::memset(&big, 0, sizeof(big));
  big.base.struct_size = sizeof(big);
  big.future_field = 7;
  fl_engine_t* e = nullptr;
  EXPECT_FL_ERR(fl_engine_create(&big.base, &e), FL_ERR_INVALID_ARGUMENT, "non-zero bytes beyond");
  EXPECT_EQ(e, nullptr);
}

TEST(Engine, UnknownFlagsAndOutOfRangeValuesAreRejected) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.flags = 4;
  EXPECT_FL_ERR(fl_engine_create(&d, &e), FL_ERR_INVALID_ARGUMENT, "flags");
  d = FL_ENGINE_DESC_INIT;
  d.max_lanes = 5000;
  EXPECT_FL_ERR(fl_engine_create(&d, &e), FL_ERR_OUT_OF_RANGE, "max_lanes 5000");
  d = FL_ENGINE_DESC_INIT;
  d.num_workers = 100000;
  EXPECT_FL_ERR(fl_engine_create(&d, &e), FL_ERR_OUT_OF_RANGE, "num_workers");
  EXPECT_EQ(e, nullptr);
}

TEST(Engine, DestroyNullIsNoOpAndStaleHandleIsDetected) {
  EXPECT_FL_OK(fl_engine_destroy(nullptr));
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_FL_ERR(fl_engine_destroy(e), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_ERR(fl_engine_synchronize(e), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_EQ(fl_engine_lane_count(e), 0u);
  EXPECT_EQ(fl_engine_worker_count(e), 0u);
  EXPECT_EQ(fl_engine_lane_count(nullptr), 0u);
  // A made-up handle value is not an engine either.
  EXPECT_FL_ERR(fl_engine_synchronize(reinterpret_cast<fl_engine_t*>(uintptr_t(0xdeadbeef))), FL_ERR_INVALID_HANDLE,
                "engine");
}

TEST(Engine, ManyEnginesCanLiveAtOnce) {
  fl_engine_t* es[8];
  for (auto& e : es) ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  for (auto& e : es) EXPECT_FL_OK(fl_engine_synchronize(e));
  for (auto& e : es) EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(Engine, StatsReportCountersAndCheckStructSize) {
  EngineFixture f;
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.submitted, 0u);
  EXPECT_EQ(st.in_flight, 0u);
  st.struct_size = 0;
  EXPECT_FL_ERR(fl_engine_stats(f.engine, &st), FL_ERR_INVALID_ARGUMENT, "struct_size");
  EXPECT_FL_ERR(fl_engine_stats(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "out_stats");
  EXPECT_FL_ERR(fl_engine_stats(nullptr, &st), FL_ERR_INVALID_HANDLE, "NULL");
}

TEST(Gpu, CpuOnlyEntryPointsAnswerUnsupportedOrNoDevice) {
  int32_t n = -1;
  fl_status_t st = fl_cuda_device_count(&n);
  EXPECT_TRUE(st == FL_ERR_UNSUPPORTED || st == FL_OK) << fl_status_name(st);
  EXPECT_FL_ERR(fl_cuda_device_count(nullptr), FL_ERR_INVALID_ARGUMENT, "out_count");
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
