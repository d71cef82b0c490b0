// Task groups under the concurrency real programs bring (public API only): engine destroy
// while a group still has tasks, spawns from several threads and tasks while another thread
// waits, failures taken while others spawn. Every gate gives up after 60 s so that a bug
// fails the test instead of hanging it.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"
#include "test_util.hpp"

namespace {

using namespace fltest;
using flcapi::contains;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------------------
// Engine destroy while a task group still has tasks

struct DestroyCtx {
  fl_engine_t* e = nullptr;
  fl_stream_t* s = nullptr;
  fl_task_group_t* g = nullptr;
  Gate gate;
  std::atomic<int> ran{0}, cleaned{0}, spawn_ok{0}, spawn_shutdown{0}, submit_shutdown{0}, other{0};
  std::string spawn_msg;
  std::mutex mu;
};

fl_status_t destroy_task(void* ud) {
  auto* c = static_cast<DestroyCtx*>(ud);
  if (!c->gate.wait()) return FL_ERR_TIMEOUT;
  ++c->ran;
  // The engine is being destroyed now: new tasks and instructions are refused.
  fl_status_t st = fl_task_group_spawn(c->g, [](void*) { return FL_OK; }, c, [](void* p) {
    ++static_cast<DestroyCtx*>(p)->cleaned;  // must never run: the spawn was refused
  });
  if (st == FL_OK) {
    ++c->spawn_ok;
  } else if (st == FL_ERR_SHUTDOWN) {
    ++c->spawn_shutdown;
    std::lock_guard<std::mutex> lock(c->mu);
    c->spawn_msg = fl_last_error_message();
  } else {
    ++c->other;
  }
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  st = fl_submit_host(c->s, &in, nullptr);
  if (st == FL_ERR_SHUTDOWN)
    ++c->submit_shutdown;
  else
    ++c->other;
  return FL_OK;
}

TEST(TaskGroupRaces, EngineDestroyWhileAGroupHasTasksRunsEachTaskAndCleanupOnce) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  DestroyCtx c;
  c.e = e;
  ASSERT_FL_OK(fl_stream_get(e, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &c.s));
  ASSERT_FL_OK(fl_task_group_create(e, &c.g));
  std::atomic<int> task_cleanups{0};
  const int n = 20;
  for (int k = 0; k < n; ++k)
    ASSERT_FL_OK(fl_task_group_spawn(c.g, &destroy_task, &c, nullptr));
  for (int k = 0; k < n; ++k)
    ASSERT_FL_OK(fl_task_group_spawn(c.g, [](void*) { return FL_OK; }, &task_cleanups,
                                     [](void* p) { ++*static_cast<std::atomic<int>*>(p); }));
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(20));  // widens the window: destroy is under way
    c.gate.open = true;
  });
  ASSERT_FL_OK(fl_engine_destroy(e));  // the group's tasks finish first
  opener.join();
  EXPECT_EQ(c.ran.load(), n);
  EXPECT_EQ(task_cleanups.load(), n);
  EXPECT_EQ(c.cleaned.load(), c.spawn_ok.load()) << "a refused spawn's cleanup ran";
  EXPECT_EQ(c.other.load(), 0);
  EXPECT_EQ(c.submit_shutdown.load(), n);
  EXPECT_EQ(c.spawn_shutdown.load(), n) << "spawns while the engine is destroyed are refused";
  EXPECT_TRUE(contains(c.spawn_msg, "being destroyed")) << c.spawn_msg;
  EXPECT_FL_ERR(fl_task_group_spawn(c.g, [](void*) { return FL_OK; }, nullptr, nullptr), FL_ERR_INVALID_HANDLE,
                "engine");
  // Once the engine is destroyed its groups answer FL_ERR_INVALID_HANDLE to every call but
  // destroy (flowlane.h, fl_engine_destroy).
  EXPECT_FL_ERR(fl_task_group_wait(c.g), FL_ERR_INVALID_HANDLE, "engine was destroyed");
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
  EXPECT_FL_ERR(fl_task_group_destroy(c.g), FL_ERR_INVALID_HANDLE, "");
}


// ---------------------------------------------------------------------------------------
// Task groups used from several threads at once

struct GroupStorm {
  fl_engine_t* e = nullptr;
  fl_task_group_t* g = nullptr;
  std::atomic<int> ran{0}, cleaned{0}, spawned{0}, errors{0};
};

fl_status_t storm_leaf(void* ud) {
  ++static_cast<GroupStorm*>(ud)->ran;
  return FL_OK;
}
void storm_cleanup(void* ud) { ++static_cast<GroupStorm*>(ud)->cleaned; }

// A task that spawns two children into its own group, and waits for a child group of its own.
fl_status_t storm_parent(void* ud) {
  auto* c = static_cast<GroupStorm*>(ud);
  ++c->ran;
  for (int k = 0; k < 2; ++k) {
    ++c->spawned;
    if (fl_task_group_spawn(c->g, &storm_leaf, c, &storm_cleanup) != FL_OK) ++c->errors;
  }
  fl_task_group_t* child = nullptr;
  if (fl_task_group_create(c->e, &child) != FL_OK) {
    ++c->errors;
    return FL_OK;
  }
  for (int k = 0; k < 3; ++k) {
    ++c->spawned;
    if (fl_task_group_spawn(child, &storm_leaf, c, &storm_cleanup) != FL_OK) ++c->errors;
  }
  if (fl_task_group_wait(child) != FL_OK) ++c->errors;
  if (fl_task_group_destroy(child) != FL_OK) ++c->errors;
  return FL_OK;
}

// Three program threads spawn into one group (tasks spawn into it too, and wait for child
// groups) while a fourth thread waits for the group again and again: every task runs once
// and is cleaned up once, and the final wait finds the group quiet.
TEST(TaskGroupRaces, SpawnsFromSeveralThreadsAndTasksWhileAnotherThreadWaits) {
  EngineFixture f(2, 4);
  GroupStorm c;
  c.e = f.engine;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &c.g));
  std::atomic<bool> done{false};
  std::atomic<int> wait_errors{0};
  std::thread waiter([&] {
    while (!done.load())
      if (fl_task_group_wait(c.g) != FL_OK) ++wait_errors;
  });
  const int per = int(fl_scaled(300, 60));
  std::vector<std::thread> spawners;
  for (int t = 0; t < 3; ++t)
    spawners.emplace_back([&, t] {
      for (int k = 0; k < per; ++k) {
        ++c.spawned;
        fl_task_fn fn = (k + t) % 4 == 0 ? &storm_parent : &storm_leaf;
        if (fl_task_group_spawn(c.g, fn, &c, &storm_cleanup) != FL_OK) ++c.errors;
        if (k % 32 == 0) std::this_thread::yield();
      }
    });
  for (auto& t : spawners) t.join();
  done = true;
  waiter.join();
  EXPECT_FL_OK(fl_task_group_wait(c.g));
  EXPECT_EQ(c.errors.load(), 0);
  EXPECT_EQ(wait_errors.load(), 0);
  EXPECT_EQ(c.ran.load(), c.spawned.load());
  EXPECT_EQ(c.cleaned.load(), c.spawned.load());
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
}

// A task of another group waits for `g` again and again (its waits are the engine's: in
// the wait-for graph while they block) until `stop`, while a program thread spawns into `g`
// a task at a time, each as soon as the previous one's cleanup ran: the group's count
// reaches zero and goes up again about when the waiter sees it reach zero.
struct RoundWaiter {
  fl_task_group_t* g = nullptr;
  std::atomic<bool> stop{false}, ending{false};
  std::atomic<int> waits{0}, bad{0}, cleaned{0};
  std::string first_bad;  // written once, by the waiting task, before `bad` is raised
};

fl_status_t round_waiter(void* ud) {
  auto* w = static_cast<RoundWaiter*>(ud);
  while (!w->stop.load()) {
    fl_status_t st = fl_task_group_wait(w->g);
    ++w->waits;
    if (st != FL_OK && w->bad.load() == 0) {
      w->first_bad = std::string(fl_status_name(st)) + ": " + fl_last_error_message();
      ++w->bad;
    }
  }
  return FL_OK;
}

// Every untimed wait of the task returns FL_OK: a wait that saw the count reach zero has
// reached its target, even if the next round's task is spawned before it returns. (A wait
// that looked at the count again before it returned answered FL_ERR_TIMEOUT then: once in
// about 300 runs of 20000 rounds; the window is a few instructions wide.)
TEST(TaskGroupRaces, ATaskWaitingForAGroupOthersSpawnIntoNeverTimesOut) {
  EngineFixture f(2, 4);
  RoundWaiter w;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &w.g));
  fl_task_group_t* outer = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &outer));
  ASSERT_FL_OK(fl_task_group_spawn(outer, &round_waiter, &w, nullptr));
  const int n = int(fl_scaled(5000, 1000));  // rounds (slow on a loaded machine: three threads poll)
  int spawned = 0;
  bool stuck = false;  // no ASSERT before `stop` is set: the waiting task would go on
  for (int k = 0; k < n && w.bad.load() == 0 && !stuck; ++k) {
    fl_status_t st = fl_task_group_spawn(w.g, [](void*) { return FL_OK; }, &w, [](void* p) {
      auto* rw = static_cast<RoundWaiter*>(p);
      ++rw->cleaned;
      rw->ending.store(true);  // the task's count is dropped right after this
    });
    EXPECT_FL_OK(st);
    if (st != FL_OK) break;
    ++spawned;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (unsigned spins = 1; !w.ending.exchange(false) && !stuck; ++spins)
      if (spins % 64 == 0) {
        stuck = Clock::now() > deadline;
        std::this_thread::yield();
      }
  }
  EXPECT_FALSE(stuck) << "a task of the group did not end within 60 s";
  w.stop = true;
  EXPECT_FL_OK(fl_task_group_wait(outer));
  EXPECT_FL_OK(fl_task_group_wait(w.g));
  EXPECT_EQ(w.bad.load(), 0) << "first: " << w.first_bad << " (of " << w.waits.load() << " waits)";
  EXPECT_EQ(w.cleaned.load(), spawned);
  EXPECT_FL_OK(fl_task_group_destroy(outer));
  EXPECT_FL_OK(fl_task_group_destroy(w.g));
}

fl_status_t storm_failing(void* ud) {
  ++static_cast<GroupStorm*>(ud)->ran;
  return FL_ERR_INSTRUCTION_FAILED;
}

// One thread spawns failing tasks into a group while another waits for it again and again:
// each wait returns FL_OK or the failure (with its text), every task is cleaned up once
// (run or skipped), and once the spawner stopped a last wait leaves the group usable: a
// task spawned after it runs. (The failure record is shared by the failing tasks and the
// waits that take it: ThreadSanitizer checks that they synchronize.)
TEST(TaskGroupRaces, FailuresWhileAnotherThreadSpawnsAndWaitsAreTakenCleanly) {
  EngineFixture f(2, 4);
  GroupStorm c;
  c.e = f.engine;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &c.g));
  std::atomic<bool> done{false};
  std::atomic<int> failures{0}, bad{0};
  std::thread waiter([&] {
    while (!done.load()) {
      fl_status_t st = fl_task_group_wait(c.g);
      if (st == FL_OK) continue;
      ++failures;
      if (st != FL_ERR_INSTRUCTION_FAILED || !contains(fl_last_error_message(), "FL_ERR_INSTRUCTION_FAILED")) ++bad;
    }
  });
  const int n = int(fl_scaled(600, 200));
  for (int k = 0; k < n; ++k) {
    ++c.spawned;
    if (fl_task_group_spawn(c.g, k % 3 ? &storm_leaf : &storm_failing, &c, &storm_cleanup) != FL_OK) ++c.errors;
    if (k % 16 == 0) std::this_thread::yield();
  }
  done = true;
  waiter.join();
  (void)fl_task_group_wait(c.g);  // the last failure, if any is left
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(c.errors.load(), 0);
  EXPECT_EQ(c.cleaned.load(), c.spawned.load());
  std::atomic<int> after{0};
  ASSERT_FL_OK(fl_task_group_spawn(c.g, [](void* p) {
    ++*static_cast<std::atomic<int>*>(p);
    return FL_OK;
  }, &after, nullptr));
  EXPECT_FL_OK(fl_task_group_wait(c.g));
  EXPECT_EQ(after.load(), 1) << "the group is usable again after its failure was taken";
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
}

}  // namespace
