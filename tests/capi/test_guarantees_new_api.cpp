// Concurrency guarantees for the calls added with timed waits, cancel, drain and task
// groups: the same rules from callbacks as for the older calls (destroy and drain refused,
// waits that would wait for the caller refused, never a hang).
#include <atomic>
#include <chrono>
#include <thread>

#include "capi/capi_test_util.hpp"

namespace {

struct GroupCtx {
  fl_engine_t* e = nullptr;
  std::thread::id caller;
  std::atomic<int> destroy{-1}, drain{-1}, sync{-1};
  std::atomic<bool> elsewhere{false};
};

fl_status_t group_task(void* ud) {
  auto* c = static_cast<GroupCtx*>(ud);
  if (std::this_thread::get_id() == c->caller) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // leave the other task to another worker
    return FL_OK;
  }
  c->elsewhere = true;
  c->destroy = fl_engine_destroy(c->e);
  c->drain = fl_engine_drain(c->e, 0);
  c->sync = fl_engine_synchronize_for(c->e, FL_WAIT_FOREVER);
  return FL_OK;
}

}  // namespace

// Task-group tasks spawned by an instruction and run by another worker: destroy and drain
// are refused, and a synchronize there (which would wait for the instruction that waits for
// the group) is refused too: the group, created inside the instruction's callback, runs its
// tasks under a frame that stands for the instruction while it is pending.
TEST(TaskGroupsInCallbacks, TasksOfAnInstructionsGroupCannotDestroyDrainOrSynchronize) {
  HangGuard guard("destroy/drain/synchronize from task-group tasks of an instruction");
  fl_engine_t* e = make_engine(2, 4);
  GroupCtx ctx;
  ctx.e = e;
  for (int attempt = 0; attempt < 200 && !ctx.elsewhere.load(); ++attempt) {
    submit(host_stream(e, 1), [&] {
      ctx.caller = std::this_thread::get_id();
      fl_task_group_t* g = nullptr;
      if (fl_task_group_create(e, &g) != FL_OK) return FL_ERR_INTERNAL;
      fl_task_group_spawn(g, &group_task, &ctx, nullptr);
      fl_task_group_spawn(g, &group_task, &ctx, nullptr);
      fl_status_t st = fl_task_group_wait(g);
      fl_task_group_destroy(g);
      return st;
    });
    EXPECT_FL_OK(fl_engine_synchronize(e));
  }
  if (!ctx.elsewhere.load()) GTEST_SKIP() << "no task ever ran on another worker";
  EXPECT_EQ(ctx.destroy.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.drain.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.sync.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// A group created inside an instruction may outlive it: once the instruction has completed
// nothing waits for the group's tasks, and their synchronize works (a refusal then would be
// a false one). The group keeps the instruction's record until it is destroyed.
TEST(TaskGroupsInCallbacks, TasksOfAGroupThatOutlivedItsInstructionMaySynchronize) {
  HangGuard guard("synchronize from a task of a group that outlived its instruction");
  fl_engine_t* e = make_engine(2, 4);
  struct Late {
    fl_engine_t* e;
    std::atomic<bool> go{false};
    std::atomic<int> sync{-1};
  } late{e};
  fl_task_group_t* g = nullptr;
  submit(host_stream(e, 1), [&] {
    if (fl_task_group_create(e, &g) != FL_OK) return FL_ERR_INTERNAL;
    return fl_task_group_spawn(
        g,
        [](void* ud) {
          auto* l = static_cast<Late*>(ud);
          while (!l->go.load()) std::this_thread::yield();
          l->sync = fl_engine_synchronize(l->e);
          return FL_OK;
        },
        &late, nullptr);
  });
  ASSERT_FL_OK(fl_stream_synchronize(host_stream(e, 1)));  // the instruction has completed
  late.go = true;
  ASSERT_FL_OK(fl_task_group_wait(g));
  EXPECT_EQ(late.sync.load(), FL_OK) << fl_last_error_message();
  ASSERT_FL_OK(fl_task_group_destroy(g));
  // The record the group held goes back to the engine: more work runs normally.
  submit(host_stream(e, 1), [] { return FL_OK; });
  ASSERT_FL_OK(fl_engine_synchronize(e));
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
