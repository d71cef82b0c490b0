// Cycles of waits that run through task groups (issue 38, item 4): a wait for a group
// (fl_task_group_wait, _wait_for, fl_task_group_destroy) and the waits of the group's tasks
// are in the wait-for graph, so the state dump names such a cycle and fl_engine_drain and
// fl_engine_destroy break it. Each cycle here is closed by a different kind of wait or
// group: a task's fl_stream_synchronize and fl_instr_wait_for, a timed group wait, a group
// made inside another instruction's callback, nested groups, two groups of the program's
// threads waiting for each other (no instruction at all), a destroy's wait. Waits that only
// breaking the cycle can end are guarded by a HangGuard; negative controls check that a wait
// not on a cycle is left alone.
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <thread>

#include "capi_test_util.hpp"

using fltest::Clock;
using fltest::make_obj;

namespace {

bool eventually(const std::atomic<bool>& flag) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!flag.load()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A lambda as a task of a group (freed by the task's cleanup).
template <class F>
fl_status_t spawn(fl_task_group_t* g, F f) {
  struct Box {
    F f;
    static fl_status_t run(void* p) { return static_cast<Box*>(p)->f(); }
    static void free(void* p) { delete static_cast<Box*>(p); }
  };
  auto* b = new Box{std::move(f)};
  const fl_status_t st = fl_task_group_spawn(g, &Box::run, b, &Box::free);
  if (st != FL_OK) delete b;
  return st;
}

// "task group 0x000000060000002a", as the dump names a group (its handle).
std::string group_name(const fl_task_group_t* g) {
  char b[48];
  std::snprintf(b, sizeof b, "task group 0x%016" PRIx64, uint64_t(reinterpret_cast<uintptr_t>(g)));
  return b;
}

// A wait's outcome, as a callback or task saw it.
struct Outcome {
  std::atomic<int> status{-1};
  std::string message;
  void set(fl_status_t st) {
    message = fl_last_error_message();
    status = st;
  }
  bool cancelled_on_a_cycle() const {
    return status.load() == FL_ERR_CANCELLED && has(message, "was on a cycle of waits (a deadlock)");
  }
};

// How the task of the group waited for closes the cycle.
enum class TaskWait { kObject, kStream, kInstr };

// Instruction 'A' (lane 1, writes X) waits for group G, made by the program thread; G's task
// waits for 'B' (lane 2, reads X, writes Y) by `how`; B waits for A. `timed`: A waits with
// fl_task_group_wait_for and an hour's timeout.
struct Cycle {
  fl_engine_t* e = make_engine(3);
  fl_object_t* x = make_obj(e);
  fl_object_t* y = make_obj(e);
  fl_stream_t* s2 = host_stream(e, 2);
  fl_task_group_t* g = nullptr;
  std::atomic<fl_instr_id> a_id{0}, b_id{0};
  std::atomic<bool> a_waiting{false};
  Gate a_may_wait;  // opened once the group has its task (a wait for an idle group returns at once)
  Outcome a, task;

  void build(TaskWait how, bool timed) {
    ASSERT_FL_OK(fl_task_group_create(e, &g));
    a_id = submit(host_stream(e, 1), [this, timed] {
      if (!a_may_wait.wait()) return FL_ERR_TIMEOUT;
      a_waiting = true;
      a.set(timed ? fl_task_group_wait_for(g, 3'600'000'000'000ull) : fl_task_group_wait(g));
      return FL_OK;
    }, {W(x)}, "A");
    b_id = submit(s2, [] { return FL_OK; }, {R(x), W(y)}, "B");
    ASSERT_FL_OK(spawn(g, [this, how] {
      switch (how) {
        case TaskWait::kObject: task.set(fl_object_wait(y, FL_READ)); break;
        case TaskWait::kStream: task.set(fl_stream_synchronize(s2)); break;
        case TaskWait::kInstr: task.set(fl_instr_wait_for(s2, b_id, FL_WAIT_FOREVER)); break;
      }
      return FL_OK;
    }));
    a_may_wait.open = true;
    ASSERT_TRUE(eventually(a_waiting));
  }
  // Drain and destroy give up A's group wait (the task's wait, out of the group, is never
  // given up: it returns once B ran).
  void expect_group_wait_given_up(const char* call) {
    EXPECT_TRUE(a.cancelled_on_a_cycle()) << fl_status_name(fl_status_t(a.status.load())) << ": " << a.message;
    EXPECT_TRUE(has(a.message, std::string(call) + " in 'A' (#" + std::to_string(a_id) + ", lane 1, host) was cancelled"))
        << a.message;
    EXPECT_TRUE(has(a.message, "this wait for " + group_name(g))) << a.message;
    EXPECT_EQ(task.status.load(), FL_OK) << task.message;
  }
};

void run_cycle(TaskWait how, bool timed, const char* call) {
  Cycle c;
  c.build(how, timed);
  // The dump names the cycle, through the group.
  const std::string dump = fltest::wait_for_dump(c.e, {"DEADLOCK: cycle of waits"});
  EXPECT_TRUE(has(dump, "DEADLOCK: cycle of waits lane 1 -> " + group_name(c.g) + " -> lane 2 -> lane 1")) << dump;
  EXPECT_FL_OK(fl_engine_drain(c.e, FL_WAIT_FOREVER));  // hangs unless the cycle is broken
  c.expect_group_wait_given_up(call);
  EXPECT_FL_OK(fl_engine_destroy(c.e));
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
}

}  // namespace

TEST(GroupWaitCycles, ATaskWaitingInStreamSynchronizeClosesACycleThatDrainBreaks) {
  HangGuard guard("a cycle through a group whose task waits in fl_stream_synchronize");
  run_cycle(TaskWait::kStream, false, "fl_task_group_wait");
}

TEST(GroupWaitCycles, ATaskWaitingInInstrWaitForClosesACycleThatDrainBreaks) {
  HangGuard guard("a cycle through a group whose task waits in fl_instr_wait_for");
  run_cycle(TaskWait::kInstr, false, "fl_task_group_wait");
}

// A timed group wait on a cycle is given up as an untimed one: FL_ERR_CANCELLED, not a
// timeout an hour later.
TEST(GroupWaitCycles, ATimedGroupWaitOnACycleIsGivenUpNotTimedOut) {
  HangGuard guard("a timed group wait on a cycle");
  run_cycle(TaskWait::kObject, true, "fl_task_group_wait_for");
}

// The dump shows A's group wait, the group with its tasks' waits, and the cycle's edges.
TEST(GroupWaitCycles, TheDumpNamesTheGroupItsUnfinishedTasksAndWhatTheyWaitFor) {
  HangGuard guard("the dump of a cycle through a group");
  Cycle c;
  c.build(TaskWait::kObject, false);
  const std::string g = group_name(c.g);
  const std::string a_is = "'A' (#" + std::to_string(c.a_id) + ", lane 1, host)";
  const std::string b_is = "'B' (#" + std::to_string(c.b_id) + ", lane 2, host)";
  const std::string dump = fltest::wait_for_dump(c.e, {"DEADLOCK: cycle of waits"});
  EXPECT_TRUE(has(dump, a_is + " RUNNING its callback\n    waits in fl_task_group_wait for " + g + " (1 unfinished task)\n"))
      << dump;
  EXPECT_TRUE(has(dump, "task groups waited for: 1\n" + g + ": 1 unfinished task\n  a task waits in fl_object_wait for object "))
      << dump;
  EXPECT_TRUE(has(dump, "written by " + b_is + ", pending; it is the head of lane 2")) << dump;
  EXPECT_TRUE(has(dump, "  " + a_is + " waits in fl_task_group_wait for " + g + " (1 unfinished task)\n")) << dump;
  EXPECT_TRUE(has(dump, "  a task of " + g + " waits in fl_object_wait (object ")) << dump;
  EXPECT_TRUE(has(dump, "  " + b_is + " is blocked until " + a_is)) << dump;
  EXPECT_FALSE(has(dump, "wait cycles: none found")) << dump;
  EXPECT_FL_OK(fl_engine_destroy(c.e));
  c.expect_group_wait_given_up("fl_task_group_wait");
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
}

// The group was made inside the callback of instruction 'M' (lane 3), which is still
// running: its task's wait counts as M's (on M's lane) and as the group's. 'A' waits for the
// group: the cycle runs A -> group -> B -> A, not through M, and the group wait is given up.
TEST(GroupWaitCycles, AGroupMadeInAnotherRunningInstructionsCallbackIsOnTheCycle) {
  HangGuard guard("a cycle through a group made in another instruction's callback");
  fl_engine_t* e = make_engine(4);
  fl_object_t* x = make_obj(e);
  fl_object_t* y = make_obj(e);
  std::atomic<fl_task_group_t*> g{nullptr};
  Gate m_gate, task_go;
  Outcome a, task;
  submit(host_stream(e, 3), [&] {
    fl_task_group_t* made = nullptr;
    if (fl_task_group_create(e, &made) != FL_OK) return FL_ERR_INTERNAL;
    if (spawn(made, [&] {
          if (!task_go.wait()) return FL_ERR_TIMEOUT;  // once 'B' writes y
          task.set(fl_object_wait(y, FL_READ));
          return FL_OK;
        }) != FL_OK)
      return FL_ERR_INTERNAL;
    g = made;
    return m_gate.wait() ? FL_OK : FL_ERR_TIMEOUT;  // M stays pending: its group's tasks count as its callback
  }, {}, "M");
  while (g.load() == nullptr) std::this_thread::sleep_for(std::chrono::microseconds(200));
  std::atomic<bool> a_waiting{false};
  const fl_instr_id a_id = submit(host_stream(e, 1), [&] {
    a_waiting = true;
    a.set(fl_task_group_wait(g.load()));
    return FL_OK;
  }, {W(x)}, "A");
  submit(host_stream(e, 2), [] { return FL_OK; }, {R(x), W(y)}, "B");
  task_go.open = true;
  ASSERT_TRUE(eventually(a_waiting));
  const std::string cycle = "DEADLOCK: cycle of waits lane 1 -> " + group_name(g.load()) + " -> lane 2 -> lane 1";
  const std::string dump = fltest::wait_for_dump(e, {cycle});
  EXPECT_TRUE(has(dump, cycle)) << dump;
  std::thread opener([&] {
    // M ends only once the cycle is broken (the drain below waits for M as well).
    while (a.status.load() == -1) std::this_thread::sleep_for(std::chrono::microseconds(200));
    m_gate.open = true;
  });
  EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
  opener.join();
  EXPECT_TRUE(a.cancelled_on_a_cycle()) << a.message;
  EXPECT_TRUE(has(a.message, "in 'A' (#" + std::to_string(a_id) + ", lane 1, host) was cancelled")) << a.message;
  EXPECT_EQ(task.status.load(), FL_OK) << task.message;
  EXPECT_FL_OK(fl_task_group_destroy(g.load()));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Nested groups: a task T1 of G1 (made by the program thread) waits for its child group G2,
// whose task T2 waits for 'Y' (lane 2), whose callback waits for G1. T2 may run on T1's own
// worker while T1 helps, or on another: either way T1's wait for G2 is in the graph while
// T2's wait is, and the cycle lane 2 -> G1 -> G2 -> lane 2 is broken. Both group waits on it
// are given up in one scan; one of them may see its group finish first (the other's giving
// up ended the cycle) and return FL_OK instead.
TEST(GroupWaitCycles, NestedGroupsCloseACycleThatDestroyBreaks) {
  HangGuard guard("a cycle through nested groups");
  fl_engine_t* e = make_engine(3);
  fl_object_t* y_obj = make_obj(e);
  fl_task_group_t* g1 = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g1));
  Outcome t1, t2, y;
  Gate t1_go;
  std::atomic<bool> y_waiting{false};
  std::atomic<fl_task_group_t*> g2{nullptr};
  ASSERT_FL_OK(spawn(g1, [&] {
    if (!t1_go.wait()) return FL_ERR_TIMEOUT;
    fl_task_group_t* child = nullptr;
    if (fl_task_group_create(e, &child) != FL_OK) return FL_ERR_INTERNAL;
    if (spawn(child, [&] {
          t2.set(fl_object_wait(y_obj, FL_READ));
          return FL_OK;
        }) != FL_OK)
      return FL_ERR_INTERNAL;
    g2 = child;  // destroyed by the test
    t1.set(fl_task_group_wait(child));
    return FL_OK;
  }));
  submit(host_stream(e, 2), [&] {
    y_waiting = true;
    y.set(fl_task_group_wait(g1));
    return FL_OK;
  }, {W(y_obj)}, "Y");
  ASSERT_TRUE(eventually(y_waiting));
  t1_go.open = true;
  while (g2.load() == nullptr) std::this_thread::sleep_for(std::chrono::microseconds(200));
  const std::string g1_is = group_name(g1), g2_is = group_name(g2.load());
  const std::string dump = fltest::wait_for_dump(e, {"DEADLOCK: cycle of waits"});
  EXPECT_TRUE(has(dump, "lane 2 -> " + g1_is + " -> " + g2_is + " -> lane 2")) << dump;
  EXPECT_TRUE(has(dump, "  a task of " + g1_is + " waits in fl_task_group_wait for " + g2_is)) << dump;
  EXPECT_FL_OK(fl_engine_destroy(e));
  EXPECT_TRUE(y.cancelled_on_a_cycle() || t1.cancelled_on_a_cycle()) << y.message << "\n" << t1.message;
  for (const Outcome* o : {&y, &t1}) EXPECT_TRUE(o->status == FL_OK || o->cancelled_on_a_cycle()) << o->message;
  if (t1.status == FL_ERR_CANCELLED) {
    EXPECT_TRUE(has(t1.message, "fl_task_group_wait in a task of " + g1_is + " was cancelled")) << t1.message;
  }
  EXPECT_EQ(t2.status.load(), FL_OK) << t2.message;  // a task's own wait is never given up
  EXPECT_FL_OK(fl_task_group_destroy(g2.load()));
  EXPECT_FL_OK(fl_task_group_destroy(g1));
}

// The same cycle with T2 run by T1's own thread, on top of T1's wait (it helps with its
// region): T1's wait for G2 is not blocked, so only T2's registration can put it in the
// graph (a note that registers also registers the thread's outer group waits). Every other
// thread is kept busy or blocked so that nobody steals T2: worker 0 runs T1, worker 1 runs
// 'Y' (blocked in its wait, a spare stands in), the spare runs 'hold' (a gate).
TEST(GroupWaitCycles, AChildTaskRunOnTopOfItsParentsWaitPutsTheParentsWaitInTheGraph) {
  HangGuard guard("a cycle through a child task run on top of its parent's wait");
  fl_engine_t* e = make_engine(2);
  fl_object_t* y_obj = make_obj(e);
  fl_task_group_t* g1 = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g1));
  Outcome t1, t2, y;
  Gate t1_go, hold_gate;
  std::atomic<bool> y_waiting{false}, holding{false};
  std::atomic<const void*> t1_thread{nullptr}, t2_thread{nullptr};
  std::atomic<fl_task_group_t*> g2{nullptr};
  thread_local int here = 0;  // its address tells the threads apart
  ASSERT_FL_OK(spawn(g1, [&] {
    if (!t1_go.wait()) return FL_ERR_TIMEOUT;
    fl_task_group_t* child = nullptr;
    if (fl_task_group_create(e, &child) != FL_OK) return FL_ERR_INTERNAL;
    t1_thread = &here;
    if (spawn(child, [&] {
          t2_thread = &here;
          t2.set(fl_object_wait(y_obj, FL_READ));
          return FL_OK;
        }) != FL_OK)
      return FL_ERR_INTERNAL;
    g2 = child;
    t1.set(fl_task_group_wait(child));
    return FL_OK;
  }));
  submit(host_stream(e, 2), [&] {
    y_waiting = true;
    y.set(fl_task_group_wait(g1));
    return FL_OK;
  }, {W(y_obj)}, "Y");
  ASSERT_TRUE(eventually(y_waiting));
  submit(host_stream(e, 3), [&] {
    holding = true;
    return hold_gate.wait() ? FL_OK : FL_ERR_TIMEOUT;
  }, {}, "hold");
  ASSERT_TRUE(eventually(holding));
  t1_go.open = true;
  while (g2.load() == nullptr) std::this_thread::sleep_for(std::chrono::microseconds(200));
  const std::string g1_is = group_name(g1), g2_is = group_name(g2.load());
  const std::string dump = fltest::wait_for_dump(e, {"DEADLOCK: cycle of waits"});
  EXPECT_TRUE(has(dump, "lane 2 -> " + g1_is + " -> " + g2_is + " -> lane 2")) << dump;
  EXPECT_EQ(t1_thread.load(), t2_thread.load()) << "T2 ran on another thread: the test did not set up what it checks";
  hold_gate.open = true;
  EXPECT_FL_OK(fl_engine_destroy(e));
  EXPECT_TRUE(y.cancelled_on_a_cycle() || t1.cancelled_on_a_cycle()) << y.message << "\n" << t1.message;
  EXPECT_EQ(t2.status.load(), FL_OK) << t2.message;
  EXPECT_FL_OK(fl_task_group_destroy(g2.load()));
  EXPECT_FL_OK(fl_task_group_destroy(g1));
}

// Two groups of the program's threads whose tasks wait for each other's group: a cycle with
// no instruction on it (nothing is in flight). The drain, which waits for every pool to go
// idle, breaks it, and so does destroy.
void two_groups_waiting_for_each_other(bool drain) {
  fl_engine_t* e = make_engine(3);
  fl_task_group_t *g1 = nullptr, *g2 = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g1));
  ASSERT_FL_OK(fl_task_group_create(e, &g2));
  Outcome t1, t2;
  Gate go;  // both groups have their task before either waits (a wait for an idle group returns at once)
  ASSERT_FL_OK(spawn(g1, [&] {
    if (!go.wait()) return FL_ERR_TIMEOUT;
    t1.set(fl_task_group_wait(g2));
    return FL_OK;
  }));
  ASSERT_FL_OK(spawn(g2, [&] {
    if (!go.wait()) return FL_ERR_TIMEOUT;
    t2.set(fl_task_group_wait(g1));
    return FL_OK;
  }));
  go.open = true;
  const std::string dump = fltest::wait_for_dump(e, {"DEADLOCK: cycle of waits"});
  EXPECT_TRUE(has(dump, group_name(g1) + " -> " + group_name(g2))) << dump;
  if (drain) EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
  EXPECT_FL_OK(fl_engine_destroy(e));
  // Both waits are given up in one scan; one may see the other's group finish first.
  EXPECT_TRUE(t1.cancelled_on_a_cycle() || t2.cancelled_on_a_cycle()) << t1.message << "\n" << t2.message;
  for (const Outcome* o : {&t1, &t2}) EXPECT_TRUE(o->status == FL_OK || o->cancelled_on_a_cycle()) << o->message;
  EXPECT_FL_OK(fl_task_group_destroy(g1));
  EXPECT_FL_OK(fl_task_group_destroy(g2));
}

TEST(GroupWaitCycles, TwoGroupsWaitingForEachOtherAreBrokenByDrain) {
  HangGuard guard("two groups waiting for each other (drain)");
  two_groups_waiting_for_each_other(true);
}

TEST(GroupWaitCycles, TwoGroupsWaitingForEachOtherAreBrokenByDestroy) {
  HangGuard guard("two groups waiting for each other (destroy)");
  two_groups_waiting_for_each_other(false);
}

// fl_task_group_destroy waits for the group's tasks: on a cycle, that wait is given up too.
// The group is then not destroyed (its task still runs): the handle stays valid, and a
// later destroy frees it.
TEST(GroupWaitCycles, ADestroyWaitingOnACycleIsGivenUpAndTheGroupStays) {
  HangGuard guard("fl_task_group_destroy on a cycle");
  fl_engine_t* e = make_engine(3);
  fl_object_t* x = make_obj(e);
  fl_object_t* y = make_obj(e);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  Outcome a, task;
  std::atomic<bool> a_waiting{false};
  Gate go;
  submit(host_stream(e, 1), [&] {
    if (!go.wait()) return FL_ERR_TIMEOUT;
    a_waiting = true;
    a.set(fl_task_group_destroy(g));
    return FL_OK;
  }, {W(x)}, "A");
  submit(host_stream(e, 2), [] { return FL_OK; }, {R(x), W(y)}, "B");
  ASSERT_FL_OK(spawn(g, [&] {
    task.set(fl_object_wait(y, FL_READ));
    return FL_OK;
  }));
  go.open = true;
  ASSERT_TRUE(eventually(a_waiting));
  const std::string dump = fltest::wait_for_dump(e, {"DEADLOCK: cycle of waits"});
  EXPECT_TRUE(has(dump, "waits in fl_task_group_destroy for " + group_name(g))) << dump;
  EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
  EXPECT_TRUE(a.cancelled_on_a_cycle()) << a.message;
  EXPECT_TRUE(has(a.message, "the group was not destroyed")) << a.message;
  EXPECT_EQ(task.status.load(), FL_OK) << task.message;
  EXPECT_FL_OK(fl_task_group_wait(g));  // still a live group
  EXPECT_FL_OK(fl_task_group_destroy(g));
  EXPECT_FL_ERR(fl_task_group_destroy(g), FL_ERR_INVALID_HANDLE, "destroyed");
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Negative control: an instruction waits for a group whose task waits for a slow lane, and a
// second instruction waits on a real cycle through another group. Only the wait on the cycle
// is given up; the other returns FL_OK once the slow lane opens.
TEST(GroupWaitCycles, OnlyTheGroupWaitOnTheCycleIsGivenUp) {
  HangGuard guard("a group wait beside one on a cycle");
  Cycle c;
  fl_object_t* slow_obj = make_obj(c.e);
  Gate slow;
  submit(host_stream(c.e, 3), [&] { return slow.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(slow_obj)}, "slow");
  fl_task_group_t* other = nullptr;
  ASSERT_FL_OK(fl_task_group_create(c.e, &other));
  Outcome waiter, other_task;
  std::atomic<bool> waiting{false};
  ASSERT_FL_OK(spawn(other, [&] {
    other_task.set(fl_object_wait(slow_obj, FL_READ));
    return FL_OK;
  }));
  submit(host_stream(c.e, 4), [&] {
    waiting = true;
    waiter.set(fl_task_group_wait(other));
    return FL_OK;
  }, {}, "waiter");
  ASSERT_TRUE(eventually(waiting));
  c.build(TaskWait::kObject, false);
  std::thread opener([&] {
    while (c.a.status.load() == -1) std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // several scans for cycles
    slow.open = true;
  });
  EXPECT_FL_OK(fl_engine_drain(c.e, FL_WAIT_FOREVER));
  opener.join();
  c.expect_group_wait_given_up("fl_task_group_wait");
  EXPECT_EQ(waiter.status.load(), FL_OK) << waiter.message;
  EXPECT_EQ(other_task.status.load(), FL_OK) << other_task.message;
  EXPECT_FL_OK(fl_engine_destroy(c.e));
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
  EXPECT_FL_OK(fl_task_group_destroy(other));
}

// fl_task_group_destroy claims the handle before it waits, but the handle stays valid until
// the wait is over: a task of the group that spawns into its own group meanwhile succeeds,
// and destroy waits for that task too.
TEST(GroupWaitCycles, ATaskSpawningIntoItsGroupWhileTheGroupIsDestroyedIsWaitedFor) {
  HangGuard guard("spawns into a group being destroyed");
  fl_engine_t* e = make_engine(2);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  Gate gate;
  std::atomic<bool> started{false};
  std::atomic<int> child_ran{0};
  Outcome spawned;
  ASSERT_FL_OK(spawn(g, [&] {
    started = true;
    if (!gate.wait()) return FL_ERR_TIMEOUT;
    spawned.set(spawn(g, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++child_ran;
      return FL_OK;
    }));
    return FL_OK;
  }));
  ASSERT_TRUE(eventually(started));
  std::atomic<int> destroyed{-1};
  std::thread destroyer([&] { destroyed = fl_task_group_destroy(g); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // destroy has claimed the handle and waits
  gate.open = true;
  destroyer.join();
  EXPECT_EQ(destroyed.load(), FL_OK);
  EXPECT_EQ(spawned.status.load(), FL_OK) << spawned.message;
  EXPECT_EQ(child_ran.load(), 1) << "destroy returned before the task spawned during its wait ran";
  EXPECT_FL_OK(fl_engine_destroy(e));
}
