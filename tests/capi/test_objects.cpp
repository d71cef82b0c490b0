// Objects: release callbacks, stale and foreign handles, error paths (public API only).
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"
#include "test_util.hpp"

using flcapi::count_release;
using flcapi::make_object;
using flcapi::noop;
using flcapi::submit;


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
