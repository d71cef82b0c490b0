// Work an instruction runs on other workers — fl_parallel_for bodies, task-graph tasks —
// counts as part of that instruction on every thread: waits that would wait for the
// instruction are refused there as on the instruction's own thread (they used to hang: the
// helping worker carried no callback frame), and the instruction's context stays usable
// only on its own thread.
#include <atomic>
#include <chrono>
#include <thread>

#include "capi/capi_test_util.hpp"

namespace {

struct LoopCtx {
  fl_engine_t* e = nullptr;
  fl_stream_t* own_lane = nullptr;
  fl_instr_ctx_t* instr = nullptr;
  std::thread::id caller;
  std::atomic<bool> elsewhere{false};
  std::atomic<int> engine_sync{-1};
  std::atomic<int> stream_sync{-1};
  std::atomic<uint64_t> id_from_helper{~uint64_t(0)};
};

fl_status_t body(uint64_t, uint64_t, void* ud) {
  auto* c = static_cast<LoopCtx*>(ud);
  if (std::this_thread::get_id() == c->caller) {
    // Leave the other chunk to a helper: the caller's chunk waits until one ran elsewhere
    // (bounded, so that a machine too busy to start a helper only skips the test).
    for (int k = 0; k < 2000 && !c->elsewhere.load(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return FL_OK;
  }
  c->engine_sync = fl_engine_synchronize(c->e);
  c->stream_sync = fl_stream_synchronize(c->own_lane);
  c->id_from_helper = fl_instr_get_id(c->instr);
  c->elsewhere = true;
  return FL_OK;
}

}  // namespace

TEST(LoopContext, WaitsFromAParallelForBodyOnAHelperAreRefusedLikeOnTheCaller) {
  HangGuard guard("fl_engine_synchronize from a parallel_for body on a helping worker");
  EngineFixture f(2);
  LoopCtx c;
  c.e = f.engine;
  c.own_lane = f.host(1);
  for (int attempt = 0; attempt < 20 && !c.elsewhere.load(); ++attempt) {
    submit(f.host(1), [&c](fl_instr_ctx_t* ctx) {
      c.caller = std::this_thread::get_id();
      c.instr = ctx;
      return fl_parallel_for(c.e, 0, 2, 1, body, &c);
    }, {}, "loops");
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  }
  if (!c.elsewhere.load()) GTEST_SKIP() << "no chunk ever ran on another worker (machine too busy)";
  EXPECT_EQ(c.engine_sync.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c.stream_sync.load(), FL_ERR_INVALID_ARGUMENT) << "a stream of the instruction's own lane";
  EXPECT_EQ(c.id_from_helper.load(), 0u) << "the instruction's context is valid only on its own thread";
  // The engine is still usable.
  std::atomic<bool> ran{false};
  submit(f.host(0), [&ran] { ran = true; return FL_OK; });
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_TRUE(ran.load());
}

TEST(LoopContext, WaitsFromATaskGraphTaskOnAnotherThreadAreRefused) {
  HangGuard guard("fl_engine_synchronize from a task-graph task an instruction runs");
  EngineFixture f(2);
  struct Ctx {
    fl_engine_t* e;
    std::thread::id caller;
    std::atomic<int> sync{-1};
    std::atomic<int> other_thread{0};
  } ctx{f.engine, {}, {}, {}};
  std::atomic<int> run{-1};
  submit(f.host(1), [&] {
    ctx.caller = std::this_thread::get_id();
    fl_taskgraph_t* g = nullptr;
    if (fl_taskgraph_create(ctx.e, &g) != FL_OK) return FL_ERR_INTERNAL;
    uint64_t n = 0;
    fl_taskgraph_add(g, [](void* ud) {
      auto* c = static_cast<Ctx*>(ud);
      if (std::this_thread::get_id() != c->caller) c->other_thread++;
      c->sync = fl_engine_synchronize(c->e);
      return FL_OK;
    }, &ctx, "syncs", &n);
    run = fl_taskgraph_run(g, 1);  // a pool of one thread: the task may run there
    fl_taskgraph_destroy(g);
    return FL_OK;
  }, {}, "graph");
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(run.load(), FL_OK);
  EXPECT_EQ(ctx.sync.load(), FL_ERR_INVALID_ARGUMENT) << "ran on another thread: " << ctx.other_thread.load();
}

// A parallel_for started outside every callback: its bodies may wait for anything (nothing
// they wait for waits for them).
TEST(LoopContext, BodiesOfALoopStartedOutsideCallbacksMayWait) {
  HangGuard guard("waits from the bodies of a top-level parallel_for");
  EngineFixture f(2);
  std::atomic<bool> done{false};
  submit(f.host(1), [&done] { done = true; return FL_OK; });
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int> failures{0};
  } ctx{f.engine, {}};
  ASSERT_FL_OK(fl_parallel_for(f.engine, 0, 8, 1, [](uint64_t, uint64_t, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (fl_engine_synchronize(c->e) != FL_OK) c->failures++;
    return FL_OK;
  }, &ctx));
  EXPECT_EQ(ctx.failures.load(), 0);
  EXPECT_TRUE(done.load());
}
