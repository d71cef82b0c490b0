// Cycles of waits made by running callbacks with fl_instr_wait_for and
// fl_stream_synchronize (docs/design.md, guarantee 9): two callbacks on two lanes, each
// waiting for the other, with no dependency between their instructions (so nothing refuses
// the waits up front). The state dump must show both waits in its wait-for graph and name
// the cycle, and fl_engine_destroy must give the waits up (FL_ERR_CANCELLED) instead of
// hanging. A wait that is not on a cycle must not be given up. Waits use FL_WAIT_FOREVER:
// only the cancellation can end them; a HangGuard turns a regression into a failure.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "capi_test_util.hpp"
#include "test_diag_util.hpp"

using namespace fldiag;
using flguard::HangGuard;

namespace {

// One side of a cycle: what a callback waits in, and what it reports.
struct Side {
  std::atomic<fl_instr_id> id{0};  // published by the test once submitted
  std::atomic<int> status{-1};
  std::string message;
};

// Waits (bounded) until `id` has been published by the submitting thread.
fl_instr_id await_id(const std::atomic<fl_instr_id>& id) {
  auto deadline = fltest::Clock::now() + std::chrono::seconds(60);
  while (id.load() == 0 && fltest::Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return id.load();
}

// An engine of `workers` workers (null, with a failure recorded, if it cannot be made).
fl_engine_t* engine_with_workers(uint64_t workers) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = workers;
  EXPECT_FL_OK(fl_engine_create(&d, &e));
  return e;
}

// Two workers: both callbacks of a cycle run at once.
fl_engine_t* two_worker_engine() { return engine_with_workers(2); }

enum class How { kInstrWait, kStreamSync, kObjectWait };

// Runs `how` from inside lane `mine`'s callback against the other side: its instruction
// `other` on stream `theirs`, or (kObjectWait) object `x`, which the other side writes.
fl_status_t wait_other(How how, fl_stream_t* theirs, const Side& other, fl_object_t* x) {
  const fl_instr_id id = await_id(other.id);
  switch (how) {
    case How::kInstrWait: return fl_instr_wait_for(theirs, id, FL_WAIT_FOREVER);
    case How::kStreamSync: return fl_stream_synchronize_for(theirs, FL_WAIT_FOREVER);
    case How::kObjectWait: return fl_object_wait_for(x, FL_READ, FL_WAIT_FOREVER);
  }
  return FL_ERR_INTERNAL;
}

// Lane 1's 'one' waits for lane 2's 'two' (`how1`), and 'two' for 'one' (`how2`). 'one'
// writes x (for an object wait of 'two'); 'two' writes y. The engine is destroyed (after an
// fl_engine_drain with no timeout, when `drain`). Returns the dump the watchdog gave.
std::string run_cycle(How how1, How how2, Side& one, Side& two, bool drain = false) {
  fl_engine_t* e = two_worker_engine();
  DumpCatcher dc;
  dc.install(e, 200);
  fl_object_t* x = make_obj(e);
  fl_object_t* y = make_obj(e);
  fl_stream_t* s1 = host_of(e, 1);
  fl_stream_t* s2 = host_of(e, 2);
  one.id = submit(s1, [&](fl_instr_ctx_t*) {
    one.status = wait_other(how1, s2, two, y);
    one.message = fl_last_error_message();
    return FL_OK;
  }, {W(x)}, "one");
  two.id = submit(s2, [&](fl_instr_ctx_t*) {
    two.status = wait_other(how2, s1, one, x);
    two.message = fl_last_error_message();
    return FL_OK;
  }, {W(y)}, "two");
  std::string dump = dc.wait_for(1);
  std::printf("%s", dump.c_str());
  fl_object_release(x);
  fl_object_release(y);
  if (drain) {
    EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));  // hangs without the cancellation
    EXPECT_NE(one.status.load(), -1);  // both callbacks have returned
    EXPECT_NE(two.status.load(), -1);
  }
  EXPECT_FL_OK(fl_engine_destroy(e));  // hangs without the cancellation
  return dump;
}

// Destroy gives up the waits on the cycle: at least one returns FL_ERR_CANCELLED with a
// message naming it; the other may return FL_OK instead (what it waited for completed
// once the first gave up).
void expect_given_up(const Side& one, const char* call1, const Side& two, const char* call2) {
  const Side* sides[] = {&one, &two};
  const char* calls[] = {call1, call2};
  int cancelled = 0;
  for (int k = 0; k < 2; ++k) {
    const Side& me = *sides[k];
    const int st = me.status.load();
    EXPECT_TRUE(st == FL_OK || st == FL_ERR_CANCELLED) << "side " << k << ": " << st << " " << me.message;
    if (st != FL_ERR_CANCELLED) continue;
    ++cancelled;
    const std::string who = std::string(calls[k]) + " in '" + (k == 0 ? "one" : "two") + "' (#" +
                            std::to_string(me.id) + ", lane " + std::to_string(k + 1) + ", host) was cancelled: " +
                            "the engine is being drained or destroyed and this wait for ";
    EXPECT_TRUE(contains(me.message, who)) << me.message;
    EXPECT_TRUE(contains(me.message, "was on a cycle of waits (a deadlock)")) << me.message;
  }
  EXPECT_GE(cancelled, 1);
}

std::string cycle_line(const std::string& dump) {
  if (contains(dump, "DEADLOCK: cycle of waits lane 1 -> lane 2 -> lane 1")) return "1-2-1";
  if (contains(dump, "DEADLOCK: cycle of waits lane 2 -> lane 1 -> lane 2")) return "2-1-2";
  return "";
}

}  // namespace

TEST(WaitCycles, TwoCallbacksWaitingForEachOtherByIdAreNamedAndGivenUpAtDestroy) {
  HangGuard guard("two fl_instr_wait_for calls waiting for each other");
  Side one, two;
  std::string dump = run_cycle(How::kInstrWait, How::kInstrWait, one, two);
  EXPECT_NE(cycle_line(dump), "") << dump;
  EXPECT_TRUE(contains(dump, "'one' (#" + std::to_string(one.id) + ", lane 1, host) waits in fl_instr_wait_for (lane 2, "
                             "host): for its instruction #" + std::to_string(two.id) + ", not completed yet")) << dump;
  EXPECT_TRUE(contains(dump, "'two' (#" + std::to_string(two.id) + ", lane 2, host) waits in fl_instr_wait_for (lane 1, "
                             "host): for its instruction #" + std::to_string(one.id))) << dump;
  expect_given_up(one, "fl_instr_wait_for", two, "fl_instr_wait_for");
  if (one.status == FL_ERR_CANCELLED)
    EXPECT_TRUE(contains(one.message, "this wait for instruction #" + std::to_string(two.id) + " of lane 2, host was"))
        << one.message;
}

TEST(WaitCycles, StreamSynchronizeAgainstAnObjectWaitIsNamedAndGivenUpAtDestroy) {
  HangGuard guard("fl_stream_synchronize against fl_object_wait");
  Side one, two;
  // 'one' synchronizes lane 2's stream ('two' pending); 'two' waits for x, which 'one' writes.
  std::string dump = run_cycle(How::kStreamSync, How::kObjectWait, one, two);
  EXPECT_NE(cycle_line(dump), "") << dump;
  EXPECT_TRUE(contains(dump, "'one' (#" + std::to_string(one.id) + ", lane 1, host) waits in fl_stream_synchronize "
                             "(lane 2, host): for 1 of its instructions to complete, 0 have")) << dump;
  EXPECT_TRUE(contains(dump, "'two' (#" + std::to_string(two.id) + ", lane 2, host) waits in fl_object_wait")) << dump;
  expect_given_up(one, "fl_stream_synchronize", two, "fl_object_wait");
}

TEST(WaitCycles, StreamSynchronizeAgainstAnInstructionWaitIsGivenUpAtDestroy) {
  HangGuard guard("fl_stream_synchronize against fl_instr_wait_for");
  Side one, two;
  EXPECT_NE(cycle_line(run_cycle(How::kStreamSync, How::kInstrWait, one, two)), "");
  expect_given_up(one, "fl_stream_synchronize", two, "fl_instr_wait_for");
}

// fl_engine_drain, which waits for everything in flight, gives the cycle's waits up as
// destroy does (a cycle never completes on its own).
TEST(WaitCycles, ADrainGivesUpTheWaitsOfACycle) {
  HangGuard guard("a drain waiting for a cycle of waits");
  Side one, two;
  EXPECT_NE(cycle_line(run_cycle(How::kInstrWait, How::kStreamSync, one, two, /*drain=*/true)), "");
  expect_given_up(one, "fl_instr_wait_for", two, "fl_stream_synchronize");
}

// Negative control: a callback that waits for a slow lane (no cycle) is shown waiting, with
// no cycle named, and destroy lets the wait finish: FL_OK, not FL_ERR_CANCELLED.
TEST(WaitCycles, AWaitThatIsNotOnACycleIsNotGivenUpByDestroy) {
  HangGuard guard("a wait with no cycle during destroy");
  fl_engine_t* e = two_worker_engine();
  ASSERT_NE(e, nullptr);
  DumpCatcher dc;
  dc.install(e, 200);
  fl_stream_t* s1 = host_of(e, 1);
  fl_stream_t* s2 = host_of(e, 2);
  Gate gate;
  std::atomic<fl_instr_id> slow_id{0};
  std::atomic<int> by_id{-1}, by_sync{-1};
  slow_id = submit(s2, [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "slow");
  submit(s1, [&](fl_instr_ctx_t*) {
    by_id = fl_instr_wait_for(s2, await_id(slow_id), FL_WAIT_FOREVER);
    by_sync = fl_stream_synchronize_for(s2, FL_WAIT_FOREVER);
    return FL_OK;
  }, {}, "waiter");
  std::string dump = dc.wait_for(1);
  std::printf("%s", dump.c_str());
  EXPECT_TRUE(contains(dump, "waits in fl_instr_wait_for (lane 2, host): for its instruction #" +
                             std::to_string(slow_id.load()) + ", not completed yet")) << dump;
  EXPECT_TRUE(contains(dump, "wait cycles: none found")) << dump;
  // Destroy from another thread while the wait is in progress; the gate opens only after
  // several of destroy's scans for cycles have run.
  std::thread destroyer([e] { EXPECT_FL_OK(fl_engine_destroy(e)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  gate.open = true;
  destroyer.join();
  EXPECT_EQ(by_id.load(), FL_OK);
  EXPECT_EQ(by_sync.load(), FL_OK);
}

// Two tasks of one instruction's task group wait at once on other workers: task A on a
// cycle (it waits for lane 2's 'y', whose callback waits for A's instruction 'x'), task B,
// which starts waiting after A, for a slow lane (no cycle). The lane has one registration
// for the waits of its running instruction: B must not take it over. When it did, the dump
// showed only B's wait, A's cancel flag was reset, and once B's wait ended nothing
// registered A's any more: destroy hung on the cycle for good. Each task waits by id
// (fl_instr_wait_for) or for an object the instruction it waits for writes (fl_object_wait).
// The end of the instruction 'x' in the task-group cycle tests below: waits for its group,
// records the wait's status in *group, destroys the group; returns the spawns' status `st`
// if it failed, else the wait's.
fl_status_t finish_group(fl_task_group_t* g, fl_status_t st, std::atomic<int>* group) {
  fl_status_t ws = fl_task_group_wait(g);
  *group = ws;
  fl_task_group_destroy(g);
  return st != FL_OK ? st : ws;
}

// The engine and host streams of lanes 1 to 3 that the task-group cycle tests below share
// with their callbacks.
struct ThreeLanes {
  fl_engine_t* e = nullptr;
  fl_stream_t *s1 = nullptr, *s2 = nullptr, *s3 = nullptr;
  void open(fl_engine_t* engine) {
    e = engine;
    s1 = host_of(e, 1);
    s2 = host_of(e, 2);
    s3 = host_of(e, 3);
  }
};

void run_two_waiting_tasks(bool a_waits_object, bool b_waits_object) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 6;  // x's fn, tasks A and B, y's fn and the slow lane's gate all block
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  struct Shared : ThreeLanes {
    fl_object_t *y_obj, *slow_obj;  // written by 'y' and 'slow'
    bool a_object, b_object;
    std::atomic<fl_instr_id> x_id{0}, y_id{0}, slow_id{0};
    std::atomic<int> a{-1}, b{-1}, y{-1}, group{-1};
    std::atomic<bool> b_entering{false};
    Gate b_go, slow_gate;
    std::string a_msg, b_msg;
  } sh;
  sh.open(e);
  sh.y_obj = make_obj(e);
  sh.slow_obj = make_obj(e);
  sh.a_object = a_waits_object;
  sh.b_object = b_waits_object;
  sh.slow_id = submit(sh.s3, [&](fl_instr_ctx_t*) { return sh.slow_gate.wait() ? FL_OK : FL_ERR_TIMEOUT; },
                      {W(sh.slow_obj)}, "slow");
  sh.x_id = submit(sh.s1, [&](fl_instr_ctx_t*) {
    fl_task_group_t* g = nullptr;
    fl_status_t st = fl_task_group_create(sh.e, &g);
    if (st != FL_OK) return st;
    st = fl_task_group_spawn(g, [](void* p) {  // A: on the cycle
      auto* x = static_cast<Shared*>(p);
      const fl_instr_id y = await_id(x->y_id);
      x->a = x->a_object ? fl_object_wait_for(x->y_obj, FL_READ, FL_WAIT_FOREVER)
                         : fl_instr_wait_for(x->s2, y, FL_WAIT_FOREVER);
      x->a_msg = fl_last_error_message();
      return FL_OK;
    }, &sh, nullptr);
    if (st == FL_OK)
      st = fl_task_group_spawn(g, [](void* p) {  // B: waits for the slow lane, after A
        auto* x = static_cast<Shared*>(p);
        if (!x->b_go.wait()) return FL_ERR_TIMEOUT;
        x->b_entering = true;
        x->b = x->b_object ? fl_object_wait_for(x->slow_obj, FL_READ, FL_WAIT_FOREVER)
                           : fl_instr_wait_for(x->s3, x->slow_id, FL_WAIT_FOREVER);
        x->b_msg = fl_last_error_message();
        return FL_OK;
      }, &sh, nullptr);
    return finish_group(g, st, &sh.group);
  }, {}, "x");
  sh.y_id = submit(sh.s2, [&](fl_instr_ctx_t*) {
    sh.y = fl_instr_wait_for(sh.s1, sh.x_id, FL_WAIT_FOREVER);
    return FL_OK;
  }, {W(sh.y_obj)}, "y");
  const std::string x_waits = "'x' (#" + std::to_string(sh.x_id.load()) + ", lane 1, host) waits in ";
  const std::string a_waits = a_waits_object ? x_waits + "fl_object_wait"
                                             : x_waits + "fl_instr_wait_for (lane 2, host): for its instruction #" +
                                                   std::to_string(sh.y_id.load());
  std::string dump = fltest::wait_for_dump(e, {a_waits, "'y' (#" + std::to_string(sh.y_id.load()) + ", lane 2, host) waits in"});
  ASSERT_TRUE(contains(dump, a_waits)) << dump;
  sh.b_go.open = true;
  for (auto deadline = fltest::Clock::now() + std::chrono::seconds(60); !sh.b_entering.load();)
    ASSERT_LT(fltest::Clock::now(), deadline);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // B is in its wait
  dump = fltest::engine_dump(e);
  EXPECT_TRUE(contains(dump, a_waits)) << "B's wait hid A's:\n" << dump;
  EXPECT_NE(cycle_line(dump), "") << dump;
  fl_object_release(sh.y_obj);  // both waits are in progress: their users hold the objects
  fl_object_release(sh.slow_obj);
  // Destroy from another thread; the slow lane's gate opens only after several of
  // destroy's scans: by then A's wait (or y's) must have been given up, not hidden.
  std::thread destroyer([e] { EXPECT_FL_OK(fl_engine_destroy(e)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  sh.slow_gate.open = true;
  destroyer.join();
  EXPECT_TRUE(sh.a.load() == FL_ERR_CANCELLED || sh.y.load() == FL_ERR_CANCELLED)
      << "A: " << sh.a.load() << " " << sh.a_msg << "; y: " << sh.y.load();
  EXPECT_TRUE(sh.a.load() == FL_OK || sh.a.load() == FL_ERR_CANCELLED) << sh.a_msg;
  if (sh.a.load() == FL_ERR_CANCELLED)
    EXPECT_TRUE(contains(sh.a_msg, "in 'x' (#" + std::to_string(sh.x_id.load()) + ", lane 1, host) was cancelled"))
        << sh.a_msg;
  EXPECT_EQ(sh.b.load(), FL_OK) << "B was on no cycle: " << sh.b_msg;
  EXPECT_EQ(sh.group.load(), FL_OK);
}

TEST(WaitCycles, ASecondTaskWaitingBesideOneOnACycleDoesNotHideIt) {
  HangGuard guard("two task-group tasks of one instruction waiting by id at once, one on a cycle");
  run_two_waiting_tasks(false, false);
}

TEST(WaitCycles, ASecondTasksObjectWaitBesideAnIdWaitOnACycleDoesNotHideIt) {
  HangGuard guard("a task's fl_object_wait beside another task's fl_instr_wait_for on a cycle");
  run_two_waiting_tasks(false, true);
}

TEST(WaitCycles, ASecondTasksIdWaitBesideAnObjectWaitOnACycleDoesNotHideIt) {
  HangGuard guard("a task's fl_instr_wait_for beside another task's fl_object_wait on a cycle");
  run_two_waiting_tasks(true, false);
}

// Two tasks of one instruction's task group wait at once, each on its own cycle: x's task A
// waits for y, which waits for x; its task B waits for z's object, and z waits for x's.
// Both waits are in the wait-for graph, and destroy breaks both cycles. (With one wait
// registered per lane, B's was not: once A's cycle was broken, z -> x remained with no edge
// out of x, and destroy hung.)
TEST(WaitCycles, TwoTasksOfOneInstructionOnTwoCyclesAreBothInTheGraphAndBothBroken) {
  HangGuard guard("two task-group tasks of one instruction, each waiting on its own cycle");
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 6;  // x's fn, tasks A and B, y and z all block
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  struct Shared : ThreeLanes {
    fl_object_t *x_obj, *z_obj;  // written by 'x' and 'z'
    std::atomic<fl_instr_id> x_id{0}, y_id{0}, z_id{0};
    std::atomic<int> a{-1}, b{-1}, y{-1}, z{-1}, group{-1};
    Gate b_go;
    std::string a_msg, b_msg;
  } sh;
  sh.open(e);
  sh.x_obj = make_obj(e);
  sh.z_obj = make_obj(e);
  sh.x_id = submit(sh.s1, [&](fl_instr_ctx_t*) {
    fl_task_group_t* g = nullptr;
    fl_status_t st = fl_task_group_create(sh.e, &g);
    if (st != FL_OK) return st;
    st = fl_task_group_spawn(g, [](void* p) {  // A: x -> y -> x
      auto* x = static_cast<Shared*>(p);
      x->a = fl_instr_wait_for(x->s2, await_id(x->y_id), FL_WAIT_FOREVER);
      x->a_msg = fl_last_error_message();
      return FL_OK;
    }, &sh, nullptr);
    if (st == FL_OK)
      st = fl_task_group_spawn(g, [](void* p) {  // B: x -> z -> x, once A waits
        auto* x = static_cast<Shared*>(p);
        if (!x->b_go.wait()) return FL_ERR_TIMEOUT;
        await_id(x->z_id);
        x->b = fl_object_wait_for(x->z_obj, FL_READ, FL_WAIT_FOREVER);
        x->b_msg = fl_last_error_message();
        return FL_OK;
      }, &sh, nullptr);
    return finish_group(g, st, &sh.group);
  }, {W(sh.x_obj)}, "x");
  sh.y_id = submit(sh.s2, [&](fl_instr_ctx_t*) {
    sh.y = fl_instr_wait_for(sh.s1, sh.x_id, FL_WAIT_FOREVER);
    return FL_OK;
  }, {}, "y");
  sh.z_id = submit(sh.s3, [&](fl_instr_ctx_t*) {
    sh.z = fl_object_wait(sh.x_obj, FL_READ);
    return FL_OK;
  }, {W(sh.z_obj)}, "z");
  const std::string x_is = "'x' (#" + std::to_string(sh.x_id.load()) + ", lane 1, host)";
  const std::string a_waits = x_is + " waits in fl_instr_wait_for (lane 2, host): for its instruction #" +
                              std::to_string(sh.y_id.load());
  std::string dump = fltest::wait_for_dump(e, {a_waits});
  ASSERT_TRUE(contains(dump, a_waits)) << dump;
  sh.b_go.open = true;
  const std::string b_waits = x_is + " waits in fl_object_wait (object ";
  const std::string b_for = "for 'z' (#" + std::to_string(sh.z_id.load()) + ", lane 3, host)";
  dump = fltest::wait_for_dump(e, {a_waits, b_waits, b_for, "written by 'z' (#"});
  EXPECT_TRUE(contains(dump, a_waits) && contains(dump, b_for)) << "both of x's waits are in the graph:\n" << dump;
  fl_object_release(sh.x_obj);
  fl_object_release(sh.z_obj);
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_TRUE(sh.a.load() == FL_ERR_CANCELLED || sh.y.load() == FL_ERR_CANCELLED)
      << "A: " << sh.a.load() << " " << sh.a_msg << "; y: " << sh.y.load();
  EXPECT_TRUE(sh.b.load() == FL_ERR_CANCELLED || sh.z.load() == FL_ERR_CANCELLED)
      << "B: " << sh.b.load() << " " << sh.b_msg << "; z: " << sh.z.load();
  for (int st : {sh.a.load(), sh.b.load(), sh.y.load(), sh.z.load()})
    EXPECT_TRUE(st == FL_OK || st == FL_ERR_CANCELLED) << st;
  if (sh.b.load() == FL_ERR_CANCELLED) EXPECT_TRUE(contains(sh.b_msg, "in " + x_is + " was cancelled")) << sh.b_msg;
  EXPECT_EQ(sh.group.load(), FL_OK);
}

// Two tasks of one instruction wait for two instructions of one lane, whose head is blocked
// on the instruction's own output: two waits on cycles through the same two lanes. Each is
// given up (a cycle is a set of lanes, and cancelling the waits of one cycle per set would
// leave the other task waiting: the lane's head waits on a dependency, which nothing
// cancels).
// A task of the test below: waits for instruction `*id` of lane 2's stream.
struct LaneTwoWaiter {
  fl_stream_t* s2 = nullptr;
  std::atomic<fl_instr_id> id{0};
  std::atomic<bool> in{false};
  std::atomic<int> status{-1};
  std::string msg;
  static fl_status_t run(void* p) {
    auto* w = static_cast<LaneTwoWaiter*>(p);
    const fl_instr_id target = await_id(w->id);
    w->in = true;
    w->status = fl_instr_wait_for(w->s2, target, FL_WAIT_FOREVER);
    w->msg = fl_last_error_message();
    return FL_OK;
  }
};

TEST(WaitCycles, TwoTasksWaitingThroughTheSameLanesAreBothCancelled) {
  HangGuard guard("two task-group tasks of one instruction on cycles through the same lanes");
  fl_engine_t* e = engine_with_workers(4);
  ASSERT_NE(e, nullptr);
  ThreeLanes lanes;
  lanes.open(e);
  LaneTwoWaiter waiter[2];  // for 'y' and 'y2'
  for (LaneTwoWaiter& w : waiter) w.s2 = lanes.s2;
  std::atomic<int> group{-1};
  fl_object_t* x_obj = make_obj(e);
  const fl_instr_id x_id = submit(lanes.s1, [&](fl_instr_ctx_t*) {
    fl_task_group_t* g = nullptr;
    fl_status_t st = fl_task_group_create(e, &g);
    if (st != FL_OK) return st;
    for (LaneTwoWaiter& w : waiter)
      if (st == FL_OK) st = fl_task_group_spawn(g, &LaneTwoWaiter::run, &w, nullptr);
    // Both tasks start on other workers, as tasks of the group: x's own worker, helping in
    // fl_task_group_wait, would run them as part of x's function, whose waits for what
    // waits for x are refused.
    for (auto until = fltest::Clock::now() + std::chrono::seconds(60);
         !(waiter[0].in && waiter[1].in) && fltest::Clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    return finish_group(g, st, &group);
  }, {W(x_obj)}, "x");
  waiter[0].id = submit(lanes.s2, [] { return FL_OK; }, {R(x_obj)}, "y");  // blocked until x completes
  waiter[1].id = submit(lanes.s2, [] { return FL_OK; }, {}, "y2");         // behind y
  // x's section of the dump lists both waits (the cycle, a set of lanes, is named once).
  const std::string x_is = "'x' (#" + std::to_string(x_id) + ", lane 1, host)";
  const std::string first = x_is + " RUNNING its callback\n    waits in fl_instr_wait_for (lane 2, host): for its";
  const std::string second = "    waits in fl_instr_wait_for (lane 2, host): for its instruction #" +
                             std::to_string(waiter[1].id.load()) + ", not completed yet\n";
  std::string dump = fltest::wait_for_dump(e, {first, second, "DEADLOCK"});
  ASSERT_TRUE(contains(dump, first) && contains(dump, second)) << dump;
  fl_object_release(x_obj);
  ASSERT_FL_OK(fl_engine_destroy(e));
  for (LaneTwoWaiter& w : waiter) {
    EXPECT_EQ(w.status.load(), FL_ERR_CANCELLED) << w.msg;
    EXPECT_TRUE(contains(w.msg, "in " + x_is + " was cancelled")) << w.msg;
  }
  EXPECT_EQ(group.load(), FL_OK);
}

// A task of instruction x's group that goes on waiting after x has completed (the group
// outlives x) is not shown as the wait of the lane's next instruction y, nor does it hide
// y's own wait, and destroy does not take it for y's.
TEST(WaitCycles, AWaitOfATaskThatOutlivedItsInstructionIsNotTheNextHeadsWait) {
  HangGuard guard("a task-group task waiting after its instruction completed");
  fl_engine_t* e = engine_with_workers(4);
  ASSERT_NE(e, nullptr);
  ThreeLanes lanes;
  lanes.open(e);
  struct Task {
    fl_object_t* z_obj = nullptr;
    std::atomic<bool> in{false};
    std::atomic<int> status{-1};
  } task;
  Gate z_gate;
  fl_object_t* z_obj = make_obj(e);
  task.z_obj = z_obj;
  const fl_instr_id z_id = submit(lanes.s3, [&] { return z_gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(z_obj)}, "z");
  fl_task_group_t* group = nullptr;
  submit(lanes.s1, [&]() -> fl_status_t {
    fl_status_t st = fl_task_group_create(e, &group);  // made here, waited for by the test
    if (st != FL_OK) return st;
    st = fl_task_group_spawn(group, [](void* p) {
      auto* t = static_cast<Task*>(p);
      t->in = true;
      t->status = fl_object_wait(t->z_obj, FL_READ);  // registered while x is pending
      return FL_OK;
    }, &task, nullptr);
    for (auto until = fltest::Clock::now() + std::chrono::seconds(60); !task.in && fltest::Clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the task is in its wait
    return st;
  }, {}, "x");
  Gate y_gate;
  fl_object_t* y_obj = make_obj(e);
  const fl_instr_id w_id = submit(lanes.s2, [&] { return y_gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(y_obj)}, "w");
  std::atomic<int> y_status{-1};
  const fl_instr_id y_id = submit(lanes.s1, [&] {
    y_status = fl_object_wait(y_obj, FL_READ);  // y's own wait, for 'w'
    return FL_OK;
  }, {}, "y");
  const std::string y_is = "'y' (#" + std::to_string(y_id) + ", lane 1, host)";
  const std::string w_is = "'w' (#" + std::to_string(w_id) + ", lane 2, host)";
  const std::string z_is = "'z' (#" + std::to_string(z_id) + ", lane 3, host)";
  std::string dump = fltest::wait_for_dump(e, {y_is + " RUNNING its callback\n    waits in fl_object_wait for object",
                                              "written by " + w_is});
  EXPECT_TRUE(contains(dump, "written by " + w_is)) << "y's own wait is shown:\n" << dump;
  EXPECT_FALSE(contains(dump, "written by " + z_is)) << "the task's wait is not y's:\n" << dump;
  EXPECT_FALSE(contains(dump, "DEADLOCK")) << dump;
  y_gate.open = true;
  z_gate.open = true;
  ASSERT_FL_OK(fl_task_group_wait(group));
  ASSERT_FL_OK(fl_task_group_destroy(group));
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(task.status.load(), FL_OK);
  EXPECT_EQ(y_status.load(), FL_OK);
  fl_object_release(y_obj);
  fl_object_release(z_obj);
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// A bounded wait on a cycle ends at its timeout as before (destroy is not involved), and
// the engine goes on: the cycle dissolves once one side stops waiting.
TEST(WaitCycles, ABoundedWaitOnACycleTimesOutAndTheEngineGoesOn) {
  HangGuard guard("bounded waits on a cycle");
  fl_engine_t* e = two_worker_engine();
  ASSERT_NE(e, nullptr);
  fl_stream_t* s1 = host_of(e, 1);
  fl_stream_t* s2 = host_of(e, 2);
  std::atomic<fl_instr_id> one{0}, two{0};
  std::atomic<int> st1{-1}, st2{-1};
  one = submit(s1, [&](fl_instr_ctx_t*) {
    st1 = fl_instr_wait_for(s2, await_id(two), 300'000'000);  // gives up after 0.3 s
    return FL_OK;
  }, {}, "one");
  two = submit(s2, [&](fl_instr_ctx_t*) {
    st2 = fl_instr_wait_for(s1, await_id(one), FL_WAIT_FOREVER);  // ends once 'one' returns
    return FL_OK;
  }, {}, "two");
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(st1.load(), FL_ERR_TIMEOUT);
  EXPECT_EQ(st2.load(), FL_OK);
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// Several cycles at once, of every kind of wait, formed while drain or destroy already runs,
// beside a wait that is not on a cycle, round after round (for ThreadSanitizer too): every
// cycle is broken (at least one of its waits cancelled, none failing otherwise), and the
// wait that is not on a cycle returns FL_OK once its gate opens.
TEST(WaitCycles, ManyCyclesFormingDuringDrainAndDestroyAreAllBroken) {
  HangGuard guard("many cycles during drain and destroy");
  const How hows[][2] = {{How::kInstrWait, How::kInstrWait},
                         {How::kStreamSync, How::kObjectWait},
                         {How::kObjectWait, How::kInstrWait}};
  constexpr int kCycles = 3;
  for (int round = 0; round < int(fl_scaled(12, 4)); ++round) {
    fl_engine_t* e = nullptr;
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 2 * kCycles + 2;  // every callback runs at once
    d.max_lanes = 2 * kCycles + 3;
    ASSERT_FL_OK(fl_engine_create(&d, &e));
    Side sides[kCycles][2];
    fl_object_t* objs[kCycles][2];
    for (int c = 0; c < kCycles; ++c) {
      const How* how = hows[(c + round) % 3];
      fl_stream_t* s[2] = {host_of(e, uint32_t(2 * c + 1)), host_of(e, uint32_t(2 * c + 2))};
      for (int k = 0; k < 2; ++k) objs[c][k] = make_obj(e);
      for (int k = 0; k < 2; ++k) {
        Side& me = sides[c][k];
        const Side& other = sides[c][1 - k];
        fl_stream_t* theirs = s[1 - k];
        fl_object_t* theirs_obj = objs[c][1 - k];
        const How h = how[k];
        me.id = submit(s[k], [&me, &other, theirs, theirs_obj, h](fl_instr_ctx_t*) {
          me.status = wait_other(h, theirs, other, theirs_obj);
          me.message = fl_last_error_message();
          return FL_OK;
        }, {W(objs[c][k])}, k == 0 ? "one" : "two");
      }
    }
    Gate gate;
    std::atomic<fl_instr_id> slow_id{0};
    std::atomic<int> not_on_a_cycle{-1};
    fl_stream_t* slow_stream = host_of(e, 2 * kCycles + 2);
    slow_id = submit(slow_stream, [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "slow");
    submit(host_of(e, 2 * kCycles + 1), [&](fl_instr_ctx_t*) {
      not_on_a_cycle = fl_instr_wait_for(slow_stream, await_id(slow_id), FL_WAIT_FOREVER);
      return FL_OK;
    }, {}, "waiter");
    std::thread opener([&gate] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      gate.open = true;
    });
    // The objects stay the test's until destroy frees them: the callbacks may not have
    // reached their fl_object_wait yet.
    if (round % 2 == 0) EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
    EXPECT_FL_OK(fl_engine_destroy(e));
    opener.join();
    for (int c = 0; c < kCycles; ++c) {
      SCOPED_TRACE("round " + std::to_string(round) + ", cycle " + std::to_string(c));
      int cancelled = 0;
      for (const Side& me : sides[c]) {
        EXPECT_TRUE(me.status == FL_OK || me.status == FL_ERR_CANCELLED) << me.status << " " << me.message;
        cancelled += me.status == FL_ERR_CANCELLED;
      }
      EXPECT_GE(cancelled, 1);
    }
    EXPECT_EQ(not_on_a_cycle.load(), FL_OK);
  }
}
