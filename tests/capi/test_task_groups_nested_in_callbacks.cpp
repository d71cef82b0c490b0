// Task groups created inside a running task of a group that an instruction's callback made:
// such a group borrows the instruction from the running task instead of referencing it
// (core/engine/fork_join.hpp). These tests destroy such groups from everywhere the header
// allows — the creating thread, another thread while the creating task still runs, after
// it ended, racing with its end, and only after the engine is gone — from several
// instructions at once, and check that every group works and every later group too (a
// record given back twice, or an instruction record freed under a running group, shows up
// as wrong results here and as reports under ASan and TSan).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "test_util.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace {

using namespace fltest;

fl_status_t count(void* p) {
  static_cast<std::atomic<int>*>(p)->fetch_add(1, std::memory_order_relaxed);
  return FL_OK;
}

// One "inner" group: made inside a task of the callback's group, with kTasks tasks.
constexpr int kTasks = 8;
struct Inner {
  fl_engine_t* e = nullptr;
  std::atomic<fl_task_group_t*> group{nullptr};
  std::atomic<int> ran{0};
  std::atomic<bool> destroyed{false};   // set by whoever destroyed the group
  std::atomic<int> create_status{-1};
  bool wait_for_destroy = false;  // (b): the creating task runs until another thread destroyed it
};

fl_status_t make_inner(void* p) {
  auto* in = static_cast<Inner*>(p);
  fl_task_group_t* g = nullptr;
  in->create_status = fl_task_group_create(in->e, &g);
  if (in->create_status != FL_OK) return FL_ERR_INTERNAL;
  for (int k = 0; k < kTasks; ++k)
    if (fl_task_group_spawn(g, &count, &in->ran, nullptr) != FL_OK) return FL_ERR_INTERNAL;
  in->group.store(g, std::memory_order_release);
  if (in->wait_for_destroy) {
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (!in->destroyed.load(std::memory_order_acquire) && Clock::now() < until) std::this_thread::yield();
    if (!in->destroyed.load()) return FL_ERR_INTERNAL;
  }
  return FL_OK;  // the group stays, undestroyed, for someone else
}

fl_task_group_t* await_group(Inner& in) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  fl_task_group_t* g = nullptr;
  while ((g = in.group.load(std::memory_order_acquire)) == nullptr && Clock::now() < until) std::this_thread::yield();
  return g;
}

// In a host instruction's callback: a group whose tasks each make an Inner group (the
// borrowing ones), and a fib afterwards that reuses the records given back.
struct Round {
  std::vector<Inner> inners;
  std::atomic<int> status{-1};
  uint64_t fib = 0;
  explicit Round(int n) : inners(size_t(n)) {}
};

void submit_round(fl_engine_t* e, fl_stream_t* s, Round& r, bool wait_for_destroy) {
  for (Inner& in : r.inners) {
    in.e = e;
    in.wait_for_destroy = wait_for_destroy;
  }
  submit(s, [e, &r] {
    fl_task_group_t* outer = nullptr;
    if (fl_task_group_create(e, &outer) != FL_OK) return FL_ERR_INTERNAL;
    for (Inner& in : r.inners)
      if (fl_task_group_spawn(outer, &make_inner, &in, nullptr) != FL_OK) return FL_ERR_INTERNAL;
    fl_status_t st = fl_task_group_wait(outer);
    if (fl_task_group_destroy(outer) != FL_OK) return FL_ERR_INTERNAL;
    GroupFib f{e, 12};
    fl_task_group_t* g = nullptr;
    if (fl_task_group_create(e, &g) != FL_OK) return FL_ERR_INTERNAL;
    fl_task_group_spawn(g, &GroupFib::run, &f, nullptr);
    fl_status_t fst = fl_task_group_wait(g);
    fl_task_group_destroy(g);
    r.fib = f.result;
    r.status = st != FL_OK ? st : fst;
    return FL_OK;
  }, {}, "round");
}

TEST(NestedGroupsInCallbacks, DestroyedOnTheCreatingThreadFromManyInstructionsAtOnce) {
  EngineFixture f(4, 4);
  std::vector<GroupFib> fibs(4, GroupFib{f.engine, 16});
  for (int rep = 0; rep < 4; ++rep) {
    for (uint32_t lane = 0; lane < 4; ++lane)
      submit(f.host(lane), [&, lane] {
        fibs[lane] = GroupFib{f.engine, 16};
        return GroupFib::run(&fibs[lane]);
      }, {}, "fib");
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
    for (const GroupFib& x : fibs) EXPECT_EQ(x.result, fib_sequential(16));
  }
}

TEST(NestedGroupsInCallbacks, DestroyedOnAnotherThreadWhileTheCreatingTaskStillRuns) {
  // Up to four creating tasks spin on workers: six leave two for the groups' tasks.
  EngineFixture f(6, 2);
  for (int rep = 0; rep < 20; ++rep) {
    Round r0(2), r1(2);
    submit_round(f.engine, f.host(0), r0, true);
    submit_round(f.engine, f.host(1), r1, true);
    // Program threads destroy each group while its creating task spins until they did.
    std::vector<std::thread> destroyers;
    std::atomic<int> destroy_failures{0};
    for (Round* r : {&r0, &r1})
      for (Inner& in : r->inners)
        destroyers.emplace_back([&in, &destroy_failures] {
          fl_task_group_t* g = await_group(in);
          if (g == nullptr || fl_task_group_destroy(g) != FL_OK) destroy_failures.fetch_add(1);
          in.destroyed.store(true, std::memory_order_release);
        });
    for (std::thread& t : destroyers) t.join();
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
    EXPECT_EQ(destroy_failures.load(), 0);
    for (Round* r : {&r0, &r1}) {
      EXPECT_EQ(r->status.load(), FL_OK);
      EXPECT_EQ(r->fib, fib_sequential(12));
      for (Inner& in : r->inners) {
        EXPECT_EQ(in.create_status.load(), FL_OK);
        EXPECT_EQ(in.ran.load(), kTasks);  // destroy waited for every task
      }
    }
  }
}

TEST(NestedGroupsInCallbacks, DestroyedAfterTheCreatingTaskEndedOrRacingWithItsEnd) {
  EngineFixture f(4, 2);
  for (int rep = 0; rep < 50; ++rep) {
    Round r0(3), r1(3);
    // Lane 0: the groups are destroyed by program threads as soon as they exist, racing
    // with the end of the task that made them. Lane 1: destroyed after the instruction.
    std::vector<std::thread> destroyers;
    std::atomic<int> destroy_failures{0};
    submit_round(f.engine, f.host(0), r0, false);
    submit_round(f.engine, f.host(1), r1, false);
    for (Inner& in : r0.inners)
      destroyers.emplace_back([&in, &destroy_failures] {
        fl_task_group_t* g = await_group(in);
        if (g == nullptr || fl_task_group_destroy(g) != FL_OK) destroy_failures.fetch_add(1);
      });
    for (std::thread& t : destroyers) t.join();
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
    EXPECT_EQ(destroy_failures.load(), 0);
    for (Inner& in : r1.inners) {
      fl_task_group_t* g = in.group.load();
      ASSERT_NE(g, nullptr);
      ASSERT_FL_OK(fl_task_group_spawn(g, &count, &in.ran, nullptr));  // still a working group
      ASSERT_FL_OK(fl_task_group_wait(g));
      ASSERT_FL_OK(fl_task_group_destroy(g));
      EXPECT_EQ(in.ran.load(), kTasks + 1);
    }
    for (Round* r : {&r0, &r1}) {
      EXPECT_EQ(r->status.load(), FL_OK);
      EXPECT_EQ(r->fib, fib_sequential(12));
    }
    for (Inner& in : r0.inners) EXPECT_EQ(in.ran.load(), kTasks);
  }
}

TEST(NestedGroupsInCallbacks, DestroyedOnlyAfterTheEngineIsDestroyed) {
#if defined(__SANITIZE_ADDRESS__)
  // A group that outlives its engine leaves its instruction's record behind (the engine
  // that would recycle it is gone: EngineTaskGroup::close), one record per round here, as
  // for any group made in a callback; LeakSanitizer is told not to count what this thread
  // allocates (the records come from its submissions). Use-after-free is still checked.
  __lsan::ScopedDisabler leaves_the_instruction_records;
#endif
  for (int rep = 0; rep < 10; ++rep) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 3;
    fl_engine_t* e = nullptr;
    ASSERT_FL_OK(fl_engine_create(&d, &e));
    fl_stream_t* s = nullptr;
    ASSERT_FL_OK(fl_stream_get(e, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
    Round r(3);
    submit_round(e, s, r, false);
    ASSERT_FL_OK(fl_engine_synchronize(e));
    ASSERT_FL_OK(fl_engine_destroy(e));  // the inner groups were never destroyed
    EXPECT_EQ(r.status.load(), FL_OK);
    for (Inner& in : r.inners) {
      fl_task_group_t* g = in.group.load();
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(in.ran.load(), kTasks);
      EXPECT_FL_ERR(fl_task_group_spawn(g, &count, &in.ran, nullptr), FL_ERR_INVALID_HANDLE, "engine");
      EXPECT_FL_OK(fl_task_group_destroy(g));
    }
  }
}

}  // namespace
