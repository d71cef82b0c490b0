// Promises of the header that the newer calls once broke, each checked through the public
// API on the exact sequence that broke it:
//   - fl_engine_drain refuses a submission that is still waiting for the in-flight window;
//   - every destructor called twice at once answers FL_OK once and FL_ERR_INVALID_HANDLE
//     to the other caller, which never waits on (or touches) what the first one frees;
//   - a task group outlives its engine as a task graph does: every call but destroy
//     answers FL_ERR_INVALID_HANDLE, and destroy frees it;
//   - a cycle of waits that passes through fl_task_group_wait is in the wait-for graph:
//     the dump names it, and drain and destroy break it (FL_ERR_CANCELLED).
// Waits that only a fix can end are bounded (a HangGuard, or a bounded poll that fails).
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"

using fltest::Clock;
using fltest::make_obj;

namespace {

// Polls `done` every 200 us for up to `limit`; true once it holds.
template <class Pred>
bool eventually(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

fl_engine_stats_t stats_of(fl_engine_t* e) {
  fl_engine_stats_t st{};
  st.struct_size = sizeof(st);
  EXPECT_FL_OK(fl_engine_stats(e, &st));
  return st;
}

// Runs `destroy` from `threads` threads at once on one handle; returns the statuses.
template <class Destroy>
std::vector<fl_status_t> destroy_at_once(int threads, Destroy destroy) {
  std::vector<fl_status_t> got(size_t(threads), FL_ERR_INTERNAL);
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      got[size_t(t)] = destroy();
    });
  for (auto& t : ts) t.join();
  return got;
}

// Exactly one FL_OK, every other status FL_ERR_INVALID_HANDLE.
void expect_one_winner(const std::vector<fl_status_t>& got, const char* what) {
  int ok = 0, stale = 0;
  for (fl_status_t st : got) {
    ok += st == FL_OK;
    stale += st == FL_ERR_INVALID_HANDLE;
  }
  EXPECT_EQ(ok, 1) << what;
  EXPECT_EQ(stale, int(got.size()) - 1) << what;
}

}  // namespace

// Window 1, held by a gated instruction; another thread's submission waits for the window.
// From the drain on, that submission is refused at once (FL_ERR_SHUTDOWN), while the gated
// instruction still holds the window: it does not wait for the window to free.
TEST(HeaderPromises, ADrainRefusesASubmissionWaitingForTheWindow) {
  HangGuard guard("a drain refusing a submission parked on the window");
  fl_engine_t* e = make_engine(2, 0, /*window=*/1);
  fl_stream_t* s = host_stream(e, 1);
  Gate gate;
  std::atomic<bool> started{false};
  submit(s, [&] {
    started = true;
    return gate.wait() ? FL_OK : FL_ERR_INTERNAL;
  });
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  std::atomic<int> parked{-1};
  std::atomic<bool> ran{false};
  std::thread submitter([&] {
    parked = fltest::try_submit(s, [&] {
      ran = true;
      return FL_OK;
    }, {}, "parked", 0, nullptr);
  });
  // The submission is parked once the engine counts a window stall.
  ASSERT_TRUE(eventually([&] { return stats_of(e).window_stalls > 0; }));
  EXPECT_FL_ERR(fl_engine_drain(e, 100'000'000), FL_ERR_TIMEOUT, "fl_engine_drain");
  // Refused while the window is still held (the gate is closed).
  const bool refused = eventually([&] { return parked.load() != -1; }, std::chrono::seconds(10));
  EXPECT_TRUE(refused) << "the submission parked on the window was not refused by the drain";
  EXPECT_FALSE(gate.open.load());
  gate.open = true;
  submitter.join();
  EXPECT_EQ(parked.load(), FL_ERR_SHUTDOWN);
  EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
  EXPECT_FALSE(ran.load()) << "a refused submission's function ran";
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Two threads destroy one group whose task is still running: the first claims the handle
// and waits for the task; the second is answered FL_ERR_INVALID_HANDLE at once, without
// waiting on the group the first one frees.
TEST(HeaderPromises, TwoConcurrentDestroysOfOneGroupAnswerOneOkAndOneInvalidHandle) {
  HangGuard guard("two destroys of one task group");
  fl_engine_t* e = make_engine(2);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  static Gate gate;
  gate.open = false;
  static std::atomic<bool> started;
  started = false;
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void*) -> fl_status_t {
    started = true;
    return gate.wait() ? FL_OK : FL_ERR_INTERNAL;
  }, nullptr, nullptr));
  ASSERT_TRUE(eventually([] { return started.load(); }));
  std::atomic<int> a{-1}, b{-1};
  std::thread ta([&] { a = fl_task_group_destroy(g); });
  std::thread tb([&] { b = fl_task_group_destroy(g); });
  // One of them is answered while the task still runs.
  const bool one_answered = eventually([&] { return a.load() != -1 || b.load() != -1; }, std::chrono::seconds(10));
  EXPECT_TRUE(one_answered) << "both destroys waited for the group's task";
  if (one_answered) {
    EXPECT_EQ(a.load() != -1 ? a.load() : b.load(), FL_ERR_INVALID_HANDLE);
  }
  gate.open = true;
  ta.join();
  tb.join();
  expect_one_winner({fl_status_t(a.load()), fl_status_t(b.load())}, "fl_task_group_destroy");
  EXPECT_FL_ERR(fl_task_group_wait(g), FL_ERR_INVALID_HANDLE, "destroyed");
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// The same promise for every destructor: many threads at once, exactly one FL_OK, the
// others FL_ERR_INVALID_HANDLE, nothing freed twice (ASan), for each kind of handle.
class EveryDestructor : public ::testing::Test {
 protected:
  static constexpr int kThreads = 4;
  const int rounds_ = int(fl_scaled(200, 30));
  fl_engine_t* e_ = make_engine(2);
  ~EveryDestructor() override { EXPECT_FL_OK(fl_engine_destroy(e_)); }
};

TEST_F(EveryDestructor, TaskGroupsHaveOneWinner) {
  HangGuard guard("concurrent fl_task_group_destroy");
  for (int r = 0; r < rounds_; ++r) {
    fl_task_group_t* g = nullptr;
    ASSERT_FL_OK(fl_task_group_create(e_, &g));
    ASSERT_FL_OK(fl_task_group_spawn(g, [](void*) -> fl_status_t { return FL_OK; }, nullptr, nullptr));
    expect_one_winner(destroy_at_once(kThreads, [g] { return fl_task_group_destroy(g); }), "fl_task_group_destroy");
  }
}

TEST_F(EveryDestructor, ObjectsHaveOneWinner) {
  HangGuard guard("concurrent fl_object_release");
  for (int r = 0; r < rounds_; ++r) {
    fl_object_t* o = make_obj(e_);
    submit(host_stream(e_, 1), [] { return FL_OK; }, {W(o)});
    expect_one_winner(destroy_at_once(kThreads, [o] { return fl_object_release(o); }), "fl_object_release");
  }
}

TEST_F(EveryDestructor, TaskGraphsHaveOneWinner) {
  HangGuard guard("concurrent fl_taskgraph_destroy");
  for (int r = 0; r < rounds_; ++r) {
    fl_taskgraph_t* tg = nullptr;
    ASSERT_FL_OK(fl_taskgraph_create(e_, &tg));
    uint64_t node = 0;
    ASSERT_FL_OK(fl_taskgraph_add(tg, [](void*) -> fl_status_t { return FL_OK; }, nullptr, "n", &node));
    expect_one_winner(destroy_at_once(kThreads, [tg] { return fl_taskgraph_destroy(tg); }), "fl_taskgraph_destroy");
  }
}

TEST_F(EveryDestructor, CommunicatorsHaveOneWinner) {
  HangGuard guard("concurrent fl_comm_destroy");
  for (int r = 0; r < rounds_; ++r) {
    fl_comm_desc_t cd = FL_COMM_DESC_INIT;
    cd.backend = FL_COMM_HOST_FAKE;
    cd.nranks = 1;
    cd.rank = 0;
    cd.lane = 3;
    fl_comm_unique_id_t id;
    ASSERT_FL_OK(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id));
    fl_comm_t* c = nullptr;
    ASSERT_FL_OK(fl_comm_create(e_, &cd, &id, &c));
    expect_one_winner(destroy_at_once(kThreads, [c] { return fl_comm_destroy(c); }), "fl_comm_destroy");
  }
}

// Engines too: of concurrent fl_engine_destroy calls one drains and frees, the others are
// answered FL_ERR_INVALID_HANDLE without touching the engine the first one frees.
TEST(HeaderPromises, ConcurrentEngineDestroysHaveOneWinner) {
  HangGuard guard("concurrent fl_engine_destroy");
  for (int r = 0; r < int(fl_scaled(100, 20)); ++r) {
    fl_engine_t* e = make_engine(2);
    submit(host_stream(e, 1), [] { return FL_OK; });
    expect_one_winner(destroy_at_once(4, [e] { return fl_engine_destroy(e); }), "fl_engine_destroy");
  }
}

// A group outlives its engine as a task graph does: spawn, wait and wait_for answer
// FL_ERR_INVALID_HANDLE (never FL_OK, nor a failure from before the destroy), and destroy
// frees it.
TEST(HeaderPromises, AGroupWhoseEngineWasDestroyedAnswersInvalidHandleAndCanBeDestroyed) {
  fl_engine_t* e = make_engine(2);
  fl_task_group_t* ok_group = nullptr;
  fl_task_group_t* failed_group = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &ok_group));
  ASSERT_FL_OK(fl_task_group_create(e, &failed_group));
  ASSERT_FL_OK(fl_task_group_spawn(ok_group, [](void*) -> fl_status_t { return FL_OK; }, nullptr, nullptr));
  ASSERT_FL_OK(fl_task_group_spawn(failed_group, [](void*) -> fl_status_t { return FL_ERR_INTERNAL; }, nullptr, nullptr));
  ASSERT_FL_OK(fl_engine_destroy(e));
  for (fl_task_group_t* g : {ok_group, failed_group}) {
    EXPECT_FL_ERR(fl_task_group_wait(g), FL_ERR_INVALID_HANDLE, "engine was destroyed");
    EXPECT_FL_ERR(fl_task_group_wait_for(g, 0), FL_ERR_INVALID_HANDLE, "engine was destroyed");
    EXPECT_FL_ERR(fl_task_group_wait_for(g, FL_WAIT_FOREVER), FL_ERR_INVALID_HANDLE, "engine was destroyed");
    EXPECT_FL_ERR(fl_task_group_spawn(g, [](void*) -> fl_status_t { return FL_OK; }, nullptr, nullptr),
                  FL_ERR_INVALID_HANDLE, "engine was destroyed");
    EXPECT_FL_OK(fl_task_group_destroy(g));
    EXPECT_FL_ERR(fl_task_group_destroy(g), FL_ERR_INVALID_HANDLE, "destroyed");
  }
}

namespace {

// The cycle: instruction 'A' (writes X, lane 1) waits in fl_task_group_wait for group G,
// made by the program thread; G's task waits (fl_object_wait) for Y; Y is written by 'B'
// (lane 2), which reads X, so B waits for A.
struct GroupCycle {
  fl_engine_t* e = make_engine(3);
  fl_object_t* x = make_obj(e);
  fl_object_t* y = make_obj(e);
  fl_task_group_t* g = nullptr;
  Gate a_may_wait;
  std::atomic<bool> a_waiting{false};
  std::atomic<int> a_status{-1};
  std::atomic<int> task_status{-1};
  std::string a_message, task_message;

  void build() {
    ASSERT_FL_OK(fl_task_group_create(e, &g));
    submit(host_stream(e, 1), [this] {
      if (!a_may_wait.wait()) return FL_ERR_INTERNAL;
      a_waiting = true;
      a_status = fl_task_group_wait(g);
      a_message = fl_last_error_message();
      return FL_OK;
    }, {W(x)}, "A");
    submit(host_stream(e, 2), [] { return FL_OK; }, {R(x), W(y)}, "B");
    ASSERT_FL_OK(fl_task_group_spawn(g, [](void* self) -> fl_status_t {
      auto* c = static_cast<GroupCycle*>(self);
      c->task_status = fl_object_wait(c->y, FL_READ);
      c->task_message = fl_last_error_message();
      return FL_OK;
    }, this, nullptr));
    a_may_wait.open = true;
    ASSERT_TRUE(eventually([this] { return a_waiting.load(); }));
  }
  void expect_broken() {
    const bool a_cancelled = a_status.load() == FL_ERR_CANCELLED;
    const bool task_cancelled = task_status.load() == FL_ERR_CANCELLED;
    EXPECT_TRUE(a_cancelled || task_cancelled)
        << "A: " << fl_status_name(fl_status_t(a_status.load())) << " " << a_message
        << "\ntask: " << fl_status_name(fl_status_t(task_status.load())) << " " << task_message;
    if (a_cancelled) {
      EXPECT_TRUE(has(a_message, "cycle of waits")) << a_message;
    }
    if (task_cancelled) {
      EXPECT_TRUE(has(task_message, "cycle of waits")) << task_message;
    }
  }
};

}  // namespace

// The dump names the cycle through the group (not "none found", not A "not waiting on
// anything flowlane tracks").
TEST(HeaderPromises, ACycleThroughATaskGroupWaitIsNamedInTheDump) {
  HangGuard guard("a cycle of waits through fl_task_group_wait (dump)");
  GroupCycle c;
  c.build();
  const std::string dump = fltest::wait_for_dump(c.e, {"DEADLOCK: cycle of waits"});
  EXPECT_TRUE(has(dump, "DEADLOCK: cycle of waits")) << dump;
  EXPECT_TRUE(has(dump, "task group")) << dump;
  EXPECT_FALSE(has(dump, "not waiting on anything flowlane tracks")) << dump;
  EXPECT_FL_OK(fl_engine_destroy(c.e));
  c.expect_broken();
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
}

// fl_engine_drain breaks it (a cycle never completes on its own), then destroy returns.
TEST(HeaderPromises, ADrainBreaksACycleThroughATaskGroupWait) {
  HangGuard guard("a cycle of waits through fl_task_group_wait (drain)");
  GroupCycle c;
  c.build();
  EXPECT_FL_OK(fl_engine_drain(c.e, 30'000'000'000ull));
  c.expect_broken();
  EXPECT_FL_OK(fl_engine_destroy(c.e));
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
}

// fl_engine_destroy alone breaks it too.
TEST(HeaderPromises, DestroyBreaksACycleThroughATaskGroupWait) {
  HangGuard guard("a cycle of waits through fl_task_group_wait (destroy)");
  GroupCycle c;
  c.build();
  EXPECT_FL_OK(fl_engine_destroy(c.e));
  c.expect_broken();
  EXPECT_FL_OK(fl_task_group_destroy(c.g));
}

// Negative control: a group wait that is not on a cycle (its task waits for a slow lane
// that waits for nothing) is never cancelled by a drain.
TEST(HeaderPromises, AGroupWaitNotOnACycleIsNotCancelled) {
  HangGuard guard("a group wait not on a cycle");
  fl_engine_t* e = make_engine(3);
  fl_object_t* y = make_obj(e);
  static Gate slow;
  slow.open = false;
  submit(host_stream(e, 2), [] { return slow.wait() ? FL_OK : FL_ERR_INTERNAL; }, {W(y)}, "slow");
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  std::atomic<int> a_status{-1}, task_status{-1};
  struct Ctx {
    fl_object_t* y;
    std::atomic<int>* st;
  } ctx{y, &task_status};
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void* p) -> fl_status_t {
    auto* c = static_cast<Ctx*>(p);
    *c->st = fl_object_wait(c->y, FL_READ);
    return FL_OK;
  }, &ctx, nullptr));
  submit(host_stream(e, 1), [&] {
    a_status = fl_task_group_wait(g);
    return FL_OK;
  }, {}, "A");
  // Not a cycle: the drain waits (and times out) instead of cancelling anything.
  EXPECT_FL_ERR(fl_engine_drain(e, 200'000'000), FL_ERR_TIMEOUT, "fl_engine_drain");
  slow.open = true;
  EXPECT_FL_OK(fl_engine_drain(e, FL_WAIT_FOREVER));
  EXPECT_EQ(a_status.load(), FL_OK);
  EXPECT_EQ(task_status.load(), FL_OK);
  EXPECT_FL_OK(fl_engine_destroy(e));
  EXPECT_FL_OK(fl_task_group_destroy(g));
}
