// Task groups through the public API: recursive algorithms (fib, quicksort, a tree walk),
// failures, use from inside instructions, and every error path.
#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace fltest;

fl_engine_t* g_engine = nullptr;  // the engine of the recursive helpers below

// Quicksort: partition, then sort both halves in parallel (small ranges sequentially).
struct Sort {
  int* lo;
  int* hi;
  static fl_status_t run(void* p) {
    auto* s = static_cast<Sort*>(p);
    if (s->hi - s->lo < 256) {
      std::sort(s->lo, s->hi);
      return FL_OK;
    }
    int pivot = s->lo[(s->hi - s->lo) / 2];
    int* mid1 = std::partition(s->lo, s->hi, [pivot](int x) { return x < pivot; });
    int* mid2 = std::partition(mid1, s->hi, [pivot](int x) { return x == pivot; });
    Sort left{s->lo, mid1}, right{mid2, s->hi};
    fl_task_group_t* g = nullptr;
    if (fl_task_group_create(g_engine, &g) != FL_OK) return FL_ERR_INTERNAL;
    fl_task_group_spawn(g, &Sort::run, &left, nullptr);
    fl_task_group_spawn(g, &Sort::run, &right, nullptr);
    fl_status_t st = fl_task_group_wait(g);
    fl_task_group_destroy(g);
    return st;
  }
};

// A tree walk: sum of a complete binary tree's node values, one task per node, all in
// one group (tasks spawn their children into the group they belong to).
struct Tree {
  fl_task_group_t* group;
  std::atomic<uint64_t> sum{0};
  uint32_t depth;
  struct Node {
    Tree* tree;
    uint64_t index;  // heap numbering from 1
    uint32_t level;
  };
  std::vector<std::unique_ptr<Node>> nodes;  // kept alive until the walk ends
  std::atomic<size_t> next{0};
  static fl_status_t visit(void* p) {
    auto* n = static_cast<Node*>(p);
    Tree* t = n->tree;
    t->sum.fetch_add(n->index, std::memory_order_relaxed);
    if (n->level + 1 < t->depth) {
      for (uint64_t c = 0; c < 2; ++c) {
        Node* child = t->nodes[t->next.fetch_add(1)].get();
        *child = Node{t, n->index * 2 + c, n->level + 1};
        fl_status_t st = fl_task_group_spawn(t->group, &Tree::visit, child, nullptr);
        if (st != FL_OK) return st;
      }
    }
    return FL_OK;
  }
};

class TaskGroups : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = uint64_t(GetParam());
    ASSERT_FL_OK(fl_engine_create(&d, &g_engine));
  }
  void TearDown() override { ASSERT_FL_OK(fl_engine_destroy(g_engine)); }
};

TEST_P(TaskGroups, FibWithOneTaskPerCall) {
  const uint64_t n = fl_scaled(24, 16);
  GroupFib root{g_engine, n};
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(g_engine, &g));
  ASSERT_FL_OK(fl_task_group_spawn(g, &GroupFib::run, &root, nullptr));
  ASSERT_FL_OK(fl_task_group_wait(g));
  ASSERT_FL_OK(fl_task_group_destroy(g));
  EXPECT_EQ(root.result, fib_sequential(n));
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(g_engine, &st));
  EXPECT_GE(st.tasks, fib_sequential(n)) << "every task is counted";
}

TEST_P(TaskGroups, QuicksortSortsAndKeepsTheElements) {
  std::vector<int> v(size_t(fl_scaled(200000, 20000)));
  std::mt19937 rng(42);
  for (int& x : v) x = int(rng() % 1000);
  std::vector<int> expect = v;
  std::sort(expect.begin(), expect.end());
  Sort root{v.data(), v.data() + v.size()};
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(g_engine, &g));
  ASSERT_FL_OK(fl_task_group_spawn(g, &Sort::run, &root, nullptr));
  ASSERT_FL_OK(fl_task_group_wait(g));
  ASSERT_FL_OK(fl_task_group_destroy(g));
  EXPECT_EQ(v, expect);
}

TEST_P(TaskGroups, TreeWalkSpawnsIntoItsOwnGroupWhileItIsWaitedFor) {
  Tree t;
  t.depth = uint32_t(fl_scaled(14, 10));
  const size_t count = (size_t(1) << t.depth) - 1;
  for (size_t k = 0; k < count; ++k) t.nodes.push_back(std::make_unique<Tree::Node>());
  ASSERT_FL_OK(fl_task_group_create(g_engine, &t.group));
  Tree::Node* root = t.nodes[t.next.fetch_add(1)].get();
  *root = Tree::Node{&t, 1, 0};
  ASSERT_FL_OK(fl_task_group_spawn(t.group, &Tree::visit, root, nullptr));
  ASSERT_FL_OK(fl_task_group_wait(t.group));  // returns only once the whole tree was visited
  EXPECT_EQ(t.next.load(), count);
  EXPECT_EQ(t.sum.load(), uint64_t(count) * (count + 1) / 2);
  ASSERT_FL_OK(fl_task_group_destroy(t.group));
}

TEST_P(TaskGroups, TheFirstFailureIsReturnedOnceAndTheGroupIsReusable) {
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(g_engine, &g));
  std::atomic<int> ran{0};
  auto fails = [](void*) -> fl_status_t { return FL_ERR_OUT_OF_RANGE; };
  auto counts = [](void* p) -> fl_status_t {
    ++*static_cast<std::atomic<int>*>(p);
    return FL_OK;
  };
  ASSERT_FL_OK(fl_task_group_spawn(g, fails, nullptr, nullptr));
  for (int k = 0; k < 100; ++k) ASSERT_FL_OK(fl_task_group_spawn(g, counts, &ran, nullptr));
  EXPECT_FL_ERR(fl_task_group_wait(g), FL_ERR_OUT_OF_RANGE, "a task of the group failed with FL_ERR_OUT_OF_RANGE");
  EXPECT_LE(ran.load(), 100);
  ran = 0;
  for (int k = 0; k < 10; ++k) ASSERT_FL_OK(fl_task_group_spawn(g, counts, &ran, nullptr));
  EXPECT_FL_OK(fl_task_group_wait(g));  // the failure was returned once; the group runs again
  EXPECT_EQ(ran.load(), 10);
  ASSERT_FL_OK(fl_task_group_destroy(g));
}

INSTANTIATE_TEST_SUITE_P(Workers, TaskGroups, ::testing::Values(1, 2, 4));

TEST(TaskGroupsInInstructions, AGroupWaitedForInsideAnInstructionNeverDeadlocks) {
  // One worker: the instruction's wait must not run other instructions on its stack (the
  // second instruction waits for the first's output), and its group's tasks still run.
  EngineFixture f(1, 4);
  g_engine = f.engine;
  fl_object_t* o = make_obj(f.engine);
  std::atomic<uint64_t> result{0};
  std::atomic<int> reader_status{-1};
  submit(f.host(1), [&] {
    GroupFib root{f.engine, 18};
    fl_task_group_t* g = nullptr;
    if (fl_task_group_create(f.engine, &g) != FL_OK) return FL_ERR_INTERNAL;
    fl_task_group_spawn(g, &GroupFib::run, &root, nullptr);
    fl_status_t st = fl_task_group_wait(g);
    fl_task_group_destroy(g);
    result = root.result;
    return st;
  }, {W(o)}, "computes");
  submit(f.host(2), [&] {
    reader_status = fl_object_wait(o, FL_READ);  // waits for 'computes' (another lane)
    return FL_OK;
  }, {}, "waits");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(result.load(), fib_sequential(18));
  EXPECT_EQ(reader_status.load(), FL_OK);
  fl_object_release(o);
}

TEST(TaskGroupErrors, EveryCallChecksItsArguments) {
  EngineFixture f(2);
  fl_task_group_t* g = nullptr;
  EXPECT_FL_ERR(fl_task_group_create(nullptr, &g), FL_ERR_INVALID_HANDLE, "engine is NULL");
  EXPECT_FL_ERR(fl_task_group_create(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "out_group is NULL");
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  EXPECT_FL_ERR(fl_task_group_spawn(g, nullptr, nullptr, nullptr), FL_ERR_INVALID_ARGUMENT, "fn is NULL");
  EXPECT_FL_ERR(fl_task_group_spawn(nullptr, [](void*) { return FL_OK; }, nullptr, nullptr), FL_ERR_INVALID_HANDLE,
                "group is NULL");
  EXPECT_FL_ERR(fl_task_group_wait(reinterpret_cast<fl_task_group_t*>(f.engine)), FL_ERR_INVALID_HANDLE,
                "an engine handle");
  ASSERT_FL_OK(fl_task_group_destroy(g));
  EXPECT_FL_ERR(fl_task_group_wait(g), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_ERR(fl_task_group_destroy(g), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_OK(fl_task_group_destroy(nullptr));
}

TEST(TaskGroupErrors, WaitingForOrDestroyingAGroupFromItsOwnTaskIsRefused) {
  EngineFixture f(2);
  struct Ctx {
    fl_task_group_t* g;
    std::atomic<int> wait_st{-1}, destroy_st{-1};
  } c;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &c.g));
  ASSERT_FL_OK(fl_task_group_spawn(c.g, [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    c->wait_st = fl_task_group_wait(c->g);
    c->destroy_st = fl_task_group_destroy(c->g);
    return FL_OK;
  }, &c, nullptr));
  ASSERT_FL_OK(fl_task_group_wait(c.g));
  EXPECT_EQ(c.wait_st.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c.destroy_st.load(), FL_ERR_INVALID_ARGUMENT);
  ASSERT_FL_OK(fl_task_group_destroy(c.g));
}

TEST(TaskGroupErrors, AGroupOutlivingItsEngineRefusesSpawnsAndCanBeDestroyed) {
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(e, &g));
  std::atomic<int> ran{0};
  for (int k = 0; k < 1000; ++k)
    ASSERT_FL_OK(fl_task_group_spawn(g, [](void* p) {
      ++*static_cast<std::atomic<int>*>(p);
      return FL_OK;
    }, &ran, nullptr));
  ASSERT_FL_OK(fl_engine_destroy(e));  // the group's tasks finish first
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_FL_ERR(fl_task_group_spawn(g, [](void*) { return FL_OK; }, nullptr, nullptr), FL_ERR_INVALID_HANDLE, "engine");
  // Every call but destroy answers so (flowlane.h, fl_engine_destroy).
  EXPECT_FL_ERR(fl_task_group_wait(g), FL_ERR_INVALID_HANDLE, "engine was destroyed");
  EXPECT_FL_OK(fl_task_group_destroy(g));
}

}  // namespace

namespace {

TEST(TaskGroupCleanup, RunsOnceForEveryTaskRunOrSkipped) {
  EngineFixture f(2);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  struct Owned {
    std::atomic<int>* cleanups;
    bool fail;
  };
  std::atomic<int> cleanups{0};
  const int n = 200;
  for (int k = 0; k < n; ++k)
    ASSERT_FL_OK(fl_task_group_spawn(
        g, [](void* p) { return static_cast<Owned*>(p)->fail ? FL_ERR_INSTRUCTION_FAILED : FL_OK; },
        new Owned{&cleanups, k == 0},
        [](void* p) {
          auto* o = static_cast<Owned*>(p);
          ++*o->cleanups;
          delete o;  // under ASan a missed cleanup is a leak, a second one a double free
        }));
  EXPECT_EQ(fl_task_group_wait(g), FL_ERR_INSTRUCTION_FAILED);
  EXPECT_EQ(cleanups.load(), n);
  ASSERT_FL_OK(fl_task_group_destroy(g));
}

}  // namespace

// A thread_local destructor that runs after the handle table's per-thread slot cache was
// destroyed (thread_locals die in reverse order of construction) may still create and
// destroy handles: the table then takes its locked path instead of the dead cache (which
// ASan reports as a use after free).
TEST(TaskGroupErrors, HandlesWorkFromAThreadLocalDestructorAtThreadExit) {
  EngineFixture f(2);
  static std::atomic<int> result{-1};
  result = -1;
  std::thread([&] {
    struct AtExit {
      fl_engine_t* engine = nullptr;
      ~AtExit() {
        fl_task_group_t* g = nullptr;
        fl_status_t st = fl_task_group_create(engine, &g);
        if (st == FL_OK) st = fl_task_group_destroy(g);
        result = int(st);
      }
    };
    thread_local AtExit at_exit;  // constructed before this thread's first handle operation
    at_exit.engine = f.engine;
    fl_task_group_t* g = nullptr;
    ASSERT_FL_OK(fl_task_group_create(f.engine, &g));  // makes the thread's slot cache
    ASSERT_FL_OK(fl_task_group_destroy(g));
  }).join();
  EXPECT_EQ(result.load(), int(FL_OK));
}

// fl_task_group_wait_for: the timed wait, from a program thread (futex with a timeout) and
// from an instruction's callback on a worker (helping, then blocking with a spare).
namespace {

using namespace fltest;

fl_status_t wait_on_gate(void* p) { return static_cast<Gate*>(p)->wait() ? FL_OK : FL_ERR_INTERNAL; }

TEST(TaskGroupWaitFor, TimesOutWhileATaskRunsAndTheGroupStaysUsable) {
  EngineFixture f(2);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  Gate gate;
  ASSERT_FL_OK(fl_task_group_spawn(g, &wait_on_gate, &gate, nullptr));
  EXPECT_FL_ERR(fl_task_group_wait_for(g, 0), FL_ERR_TIMEOUT, "1 task(s) of the group had not finished");
  EXPECT_FL_ERR(fl_task_group_wait_for(g, 2'000'000), FL_ERR_TIMEOUT, "fl_task_group_wait_for");
  gate.open = true;
  EXPECT_FL_OK(fl_task_group_wait_for(g, FL_WAIT_FOREVER));
  EXPECT_FL_OK(fl_task_group_wait_for(g, 0));  // an idle group answers at once

  // A failure that happens after a timed-out wait is returned by the next wait, once. The
  // held task starts before the failing one is spawned (a task not started once another
  // has failed is skipped).
  struct Held {
    Gate gate;
    std::atomic<bool> started{false};
  } second;
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void* p) {
    auto* h = static_cast<Held*>(p);
    h->started = true;
    return h->gate.wait() ? FL_OK : FL_ERR_INTERNAL;
  }, &second, nullptr));
  for (auto until = Clock::now() + std::chrono::seconds(60); !second.started && Clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  ASSERT_TRUE(second.started.load());
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void*) { return FL_ERR_OUT_OF_RANGE; }, nullptr, nullptr));
  EXPECT_FL_ERR(fl_task_group_wait_for(g, 1'000'000), FL_ERR_TIMEOUT, "had not finished");
  second.gate.open = true;
  EXPECT_FL_ERR(fl_task_group_wait_for(g, FL_WAIT_FOREVER), FL_ERR_OUT_OF_RANGE, "failed with FL_ERR_OUT_OF_RANGE");
  EXPECT_FL_OK(fl_task_group_wait(g));
  ASSERT_FL_OK(fl_task_group_destroy(g));
}

TEST(TaskGroupWaitFor, ChecksItsArgumentsAndRefusesTheGroupsOwnTask) {
  EngineFixture f(2);
  EXPECT_FL_ERR(fl_task_group_wait_for(nullptr, 0), FL_ERR_INVALID_HANDLE, "group is NULL");
  EXPECT_FL_ERR(fl_task_group_wait_for(reinterpret_cast<fl_task_group_t*>(f.engine), 0), FL_ERR_INVALID_HANDLE,
                "an engine handle");
  struct Ctx {
    fl_task_group_t* g = nullptr;
    std::atomic<int> st{-1};
  } c;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &c.g));
  ASSERT_FL_OK(fl_task_group_spawn(c.g, [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    c->st = fl_task_group_wait_for(c->g, 1'000'000);
    return FL_OK;
  }, &c, nullptr));
  ASSERT_FL_OK(fl_task_group_wait(c.g));
  EXPECT_EQ(c.st.load(), FL_ERR_INVALID_ARGUMENT);
  ASSERT_FL_OK(fl_task_group_destroy(c.g));
  EXPECT_FL_ERR(fl_task_group_wait_for(c.g, 0), FL_ERR_INVALID_HANDLE, "stale");
}

// A callback's timed wait for a group whose task another worker is running: the waiting
// worker finds nothing of its own to run, blocks with a timeout, and returns
// FL_ERR_TIMEOUT while the task still runs.
TEST(TaskGroupWaitFor, ACallbacksTimedWaitReturnsWhileAnotherWorkerRunsTheTask) {
  EngineFixture f(2);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));  // outside any callback
  Gate gate;
  ASSERT_FL_OK(fl_task_group_spawn(g, &wait_on_gate, &gate, nullptr));
  std::atomic<int> st{-1};
  submit(f.host(1), [&] {
    st = fl_task_group_wait_for(g, 5'000'000);
    return FL_OK;
  }, {}, "waits-for-the-group");
  ASSERT_FL_OK(fl_stream_synchronize(f.host(1)));
  EXPECT_EQ(st.load(), FL_ERR_TIMEOUT);
  gate.open = true;
  EXPECT_FL_OK(fl_task_group_wait(g));
  ASSERT_FL_OK(fl_task_group_destroy(g));
}

// A callback's timed wait for a group whose tasks keep spawning successors: the waiting
// worker always finds one of them to run, and still gives up after the timeout (it used to
// check the time only when it found nothing to run, so it helped until the chain ended).
struct Chain {
  fl_task_group_t* g = nullptr;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> links{0};
  Clock::time_point give_up;  // the chain ends by itself here, so the old code fails, not hangs
  static fl_status_t run(void* p) {
    auto* c = static_cast<Chain*>(p);
    c->links.fetch_add(1, std::memory_order_relaxed);
    if (c->stop.load() || Clock::now() > c->give_up) return FL_OK;
    return fl_task_group_spawn(c->g, &Chain::run, c, nullptr);
  }
};

TEST(TaskGroupWaitFor, ACallbacksTimedWaitGivesUpWhileTheGroupKeepsItBusy) {
  EngineFixture f(1);
  std::atomic<int> st{-1};
  Chain chain;
  chain.give_up = Clock::now() + std::chrono::seconds(20);
  submit(f.host(1), [&]() -> fl_status_t {
    fl_status_t s = fl_task_group_create(f.engine, &chain.g);  // the callback's own group
    if (s != FL_OK) return s;
    if ((s = fl_task_group_spawn(chain.g, &Chain::run, &chain, nullptr)) != FL_OK) return s;
    st = fl_task_group_wait_for(chain.g, 10'000'000);
    chain.stop = true;
    s = fl_task_group_wait(chain.g);
    fl_task_group_destroy(chain.g);
    return s;
  }, {}, "waits-while-helping");
  ASSERT_FL_OK(fl_stream_synchronize(f.host(1)));
  EXPECT_EQ(st.load(), FL_ERR_TIMEOUT) << "links run: " << chain.links.load();
  EXPECT_GT(chain.links.load(), 0u);
}

}  // namespace
