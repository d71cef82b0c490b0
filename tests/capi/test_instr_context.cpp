// The context handed to an instruction's function (fl_instr_ctx_t*) is checked like any
// handle: valid only inside that function, on its thread; a NULL, stale or foreign context
// is never dereferenced. The deprecated spellings fl_instr_lane / fl_instr_engine stay
// exported and answer exactly as fl_instr_get_lane / fl_instr_get_engine. Public header only.
#include <atomic>
#include <string>
#include <thread>

#include "test_util.hpp"

namespace {

struct Seen {
  fl_instr_ctx_t* ctx = nullptr;
  uint32_t lane = 0, old_lane = 0;
  fl_engine_t* engine = nullptr;
  fl_engine_t* old_engine = nullptr;
  uint32_t lane_from_other_thread = 77;
  std::string other_thread_message;
};

fl_status_t record(fl_instr_ctx_t* ctx, void* ud) {
  auto* s = static_cast<Seen*>(ud);
  s->ctx = ctx;
  s->lane = fl_instr_get_lane(ctx);
  s->old_lane = fl_instr_lane(ctx);
  s->engine = fl_instr_get_engine(ctx);
  s->old_engine = fl_instr_engine(ctx);
  // Another thread holding this (live) context is not inside this function.
  std::thread t([s, ctx] {
    s->lane_from_other_thread = fl_instr_get_lane(ctx);
    s->other_thread_message = fl_last_error_message();
  });
  t.join();
  return FL_OK;
}

// Runs `record` on `lane` and returns what it saw.
Seen run_on(EngineFixture& f, uint32_t lane) {
  Seen seen;
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = record;
  in.user_data = &seen;
  EXPECT_EQ(fl_submit_host(f.host(lane), &in, nullptr), FL_OK) << fl_last_error_message();
  EXPECT_EQ(fl_engine_synchronize(f.engine), FL_OK) << fl_last_error_message();
  return seen;
}

}  // namespace

TEST(InstrContext, NewAndDeprecatedNamesAgree) {
  EngineFixture f;
  Seen seen = run_on(f, 2);
  EXPECT_EQ(seen.lane, 2u);
  EXPECT_EQ(seen.old_lane, 2u);
  EXPECT_EQ(seen.engine, f.engine);
  EXPECT_EQ(seen.old_engine, f.engine);
}

TEST(InstrContext, StaleOrForeignContextIsRefused) {
  EngineFixture f;
  Seen seen = run_on(f, 1);
  // Used from another thread while the function ran: refused, with a message.
  EXPECT_EQ(seen.lane_from_other_thread, 0u);
  EXPECT_NE(seen.other_thread_message.find("fl_instr_get_lane"), std::string::npos) << seen.other_thread_message;
  EXPECT_NE(seen.other_thread_message.find("valid only inside"), std::string::npos) << seen.other_thread_message;
  // Used after the function returned (the record may already serve another instruction).
  ASSERT_NE(seen.ctx, nullptr);
  EXPECT_EQ(fl_instr_get_lane(seen.ctx), 0u);
  EXPECT_EQ(fl_instr_get_engine(seen.ctx), nullptr);
  EXPECT_NE(std::string(fl_last_error_message()).find("fl_instr_get_engine"), std::string::npos);
  EXPECT_EQ(fl_instr_lane(seen.ctx), 0u);
  EXPECT_NE(std::string(fl_last_error_message()).find("fl_instr_lane"), std::string::npos);
  EXPECT_EQ(fl_instr_engine(seen.ctx), nullptr);
  EXPECT_EQ(fl_instr_get_id(seen.ctx), 0u);
  fl_instr_set_error(seen.ctx, "ignored");
  // A forged pointer is looked up, never dereferenced.
  auto* forged = reinterpret_cast<fl_instr_ctx_t*>(uintptr_t(0x10));
  EXPECT_EQ(fl_instr_get_lane(forged), 0u);
  EXPECT_EQ(fl_instr_get_engine(forged), nullptr);
  // NULL.
  EXPECT_EQ(fl_instr_get_lane(nullptr), 0u);
  EXPECT_NE(std::string(fl_last_error_message()).find("ctx is NULL"), std::string::npos);
  EXPECT_EQ(fl_instr_engine(nullptr), nullptr);
}
