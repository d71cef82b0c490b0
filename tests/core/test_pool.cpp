// White-box tests of the pool, Latch, the parallel loop, task graphs and topology.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "sched/parallel_for.hpp"
#include "sched/latch.hpp"
#include "sched/pool.hpp"
#include "sched/taskgraph.hpp"
#include "sched/topology.hpp"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

// Every sched_yield of a pool's worker, counted (std::this_thread::yield calls it; a
// program thread's yields, such as those of a wait's poll, are not counted). This binary
// links the pool statically, so the pool's calls bind to this definition. While
// g_slow_yields is set, a yield sleeps 1 ms instead: what a yield costs on a machine where
// another thread takes the CPU for the rest of its time slice.
std::atomic<uint64_t> g_sched_yields{0};
std::atomic<bool> g_slow_yields{false};
extern "C" int sched_yield() noexcept {
  if (flowlane::sched::Pool::current() != nullptr) g_sched_yields.fetch_add(1, std::memory_order_relaxed);
  if (g_slow_yields.load(std::memory_order_relaxed)) {
    timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
    return 0;
  }
  return int(syscall(SYS_sched_yield));
}

namespace flowlane::sched {
namespace {

// A Task that counts down a latch after bumping a counter.
struct CountTask : Task {
  std::atomic<int>* counter = nullptr;
  Latch* latch = nullptr;
  CountTask() { run = &CountTask::go; }
  static void go(Task* t) {
    auto* self = static_cast<CountTask*>(t);
    self->counter->fetch_add(1, std::memory_order_relaxed);
    self->latch->count_down();
  }
};

class PoolThreads : public ::testing::TestWithParam<unsigned> {};

TEST_P(PoolThreads, EverySubmittedTaskRunsExactlyOnce) {
  Pool pool(GetParam());
  EXPECT_EQ(pool.size(), GetParam());
  const int n = FL_UNDER_SANITIZER ? 20'000 : 100'000;
  std::vector<CountTask> tasks(static_cast<size_t>(n));
  std::atomic<int> counter{0};
  Latch latch(n);
  for (auto& t : tasks) {
    t.counter = &counter;
    t.latch = &latch;
    pool.submit(&t);
  }
  latch.wait();
  EXPECT_EQ(counter.load(), n);
}

// Every worker is parked (the pool is idle) when a single task is submitted from outside;
// it must be picked up. Repeated many times to hit the window between a worker's re-check
// and its sleep. A lost wake-up hangs the test (ctest timeout).
TEST_P(PoolThreads, NoMissedWakeupWhenEveryWorkerIsParked) {
  Pool pool(GetParam());
  const int rounds = FL_UNDER_SANITIZER ? 1'500 : 5'000;
  std::atomic<int> counter{0};
  for (int i = 0; i < rounds; ++i) {
    // Most rounds: wait until every worker is parked (counted by the notifier), then
    // submit. Every 4th round: submit at once, racing workers on their way to sleep.
    if (i % 4 != 0) {
      while (pool.parked_workers() < pool.size()) std::this_thread::yield();
    }
    CountTask t;
    Latch latch(1);
    t.counter = &counter;
    t.latch = &latch;
    pool.submit(&t);
    latch.wait();
  }
  EXPECT_EQ(counter.load(), rounds);
  EXPECT_GT(pool.stats().parks, 0u);
}

// Submits from several outside threads at once into a pool whose workers park between
// bursts.
TEST_P(PoolThreads, ConcurrentOutsideSubmittersAllServed) {
  Pool pool(GetParam());
  const int per_thread = FL_UNDER_SANITIZER ? 3'000 : 20'000;
  const int submitters = 3;
  std::atomic<int> counter{0};
  std::vector<std::thread> ts;
  for (int s = 0; s < submitters; ++s) {
    ts.emplace_back([&] {
      std::vector<CountTask> tasks(static_cast<size_t>(per_thread));
      Latch latch(per_thread);
      for (auto& t : tasks) {
        t.counter = &counter;
        t.latch = &latch;
        pool.submit(&t);
      }
      latch.wait();
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter.load(), submitters * per_thread);
}

// Recursive fork–join (fib with one task per call) must finish on any worker count,
// including 1: the waiting worker runs its own children through help_until.
struct Fib : Task {
  Pool* pool = nullptr;
  int n = 0;
  long result = 0;
  Latch* done = nullptr;
  static long compute(Pool& pool, int n) {
    if (n < 2) return n;
    Latch latch(1);
    Fib child;
    child.run = &Fib::go;
    child.pool = &pool;
    child.n = n - 1;
    child.done = &latch;
    pool.submit(&child);
    long b = compute(pool, n - 2);
    latch.wait();
    return child.result + b;
  }
  static void go(Task* t) {
    auto* f = static_cast<Fib*>(t);
    f->result = compute(*f->pool, f->n);
    f->done->count_down();
  }
};

TEST_P(PoolThreads, NestedForkJoinCompletes) {
  Pool pool(GetParam());
  const int n = FL_UNDER_SANITIZER ? 18 : 22;
  Fib root;
  Latch latch(1);
  root.run = &Fib::go;
  root.pool = &pool;
  root.n = n;
  root.done = &latch;
  pool.submit(&root);
  latch.wait();
  long a = 0, b = 1;
  for (int i = 0; i < n; ++i) {
    long c = a + b;
    a = b;
    b = c;
  }
  EXPECT_EQ(root.result, a);
}

TEST_P(PoolThreads, OnWorkerIsTrueOnlyOnThisPoolsWorkers) {
  Pool pool(GetParam());
  Pool other(1);
  EXPECT_FALSE(pool.on_worker());
  EXPECT_EQ(worker_index(pool), -1);
  struct Probe : Task {
    Pool* pool;
    Pool* other;
    bool on = false, on_other = true;
    int index = -1;
    Latch latch{1};
  } probe;
  probe.pool = &pool;
  probe.other = &other;
  probe.run = [](Task* t) {
    auto* p = static_cast<Probe*>(t);
    p->on = p->pool->on_worker();
    p->on_other = p->other->on_worker();
    p->index = worker_index(*p->pool);
    p->latch.count_down();
  };
  pool.submit(&probe);
  probe.latch.wait();
  EXPECT_TRUE(probe.on);
  EXPECT_FALSE(probe.on_other);
  EXPECT_GE(probe.index, 0);
  EXPECT_LT(probe.index, int(pool.size()));
}

TEST_P(PoolThreads, RunOneOutsideThePoolDoesNothing) {
  Pool pool(GetParam());
  EXPECT_FALSE(pool.run_one());
}

INSTANTIATE_TEST_SUITE_P(Workers, PoolThreads, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return std::to_string(info.param) + "workers"; });

TEST(Pool, ZeroWorkersMeansOnePerLogicalCore) {
  Pool pool(0);
  EXPECT_EQ(pool.size(), logical_core_count());
}

TEST(Pool, WorkIsStolenWhenOneWorkerSpawnsEverything) {
  Pool pool(2);
  const int n = FL_UNDER_SANITIZER ? 200 : 2'000;
  std::atomic<int> counter{0};
  Latch latch(n);
  std::vector<CountTask> tasks(static_cast<size_t>(n));
  struct Spawner : Task {
    Pool* pool;
    std::vector<CountTask>* tasks;
    std::atomic<int>* counter;
    Latch* latch;
  } spawner;
  spawner.pool = &pool;
  spawner.tasks = &tasks;
  spawner.counter = &counter;
  spawner.latch = &latch;
  spawner.run = [](Task* t) {
    auto* s = static_cast<Spawner*>(t);
    for (auto& c : *s->tasks) {
      c.counter = s->counter;
      c.latch = s->latch;
      s->pool->submit(&c);  // into this worker's deque
    }
    // Stay busy so that the other worker has to steal.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (std::chrono::steady_clock::now() < until && !s->latch->done()) std::this_thread::yield();
  };
  pool.submit(&spawner);
  latch.wait();
  EXPECT_EQ(counter.load(), n);
  EXPECT_GT(pool.stats().steals, 0u);
}

// Waits until at least n of the pool's workers are parked; false after 60 s. It sleeps
// between looks, never yields (the sched_yield count above is the pool's alone).
bool wait_parked(const Pool& pool, unsigned n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (pool.parked_workers() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Submits one CountTask from outside the pool and waits until it has run.
void run_counted(Pool& pool, std::atomic<int>& counter) {
  Latch latch(1);
  CountTask t;
  t.counter = &counter;
  t.latch = &latch;
  pool.submit(&t);
  latch.wait();
}

// A worker that runs out of work spins briefly, then parks; the spin is bounded in wall
// time, not only in rounds: once a yield has cost it the CPU for a time slice, it parks.
// On a machine with more runnable threads than CPUs, a worker that is spinning, not
// parked, is not woken by new work either, and the old spin made 256 yields per idle
// episode whatever each one cost: every hand-off and the pool's destruction waited for
// them (fl_engine_drain racing inline submissions beside two CPU hogs on 2 cores: 5-25 s
// instead of under 1 s for 3 x 30 engines).
TEST(Pool, IdleWorkerParksOnceAYieldHasCostItTheCpu) {
  Pool pool(1);
  auto parked = [&pool] { return wait_parked(pool, 1); };
  ASSERT_TRUE(parked()) << "the new worker never parked";
  g_slow_yields = true;
  std::atomic<int> counter{0};
  int episodes = 0;
  for (int k = 0; k < 5; ++k) {
    const uint64_t yields = g_sched_yields.load();
    run_counted(pool, counter);
    // The worker is running the task when the latch opens, so "parked" afterwards means it
    // went through one idle episode since: its spin, then prepare_wait.
    ASSERT_TRUE(parked()) << "the worker never parked after its task";
    EXPECT_LE(g_sched_yields.load() - yields, 2u) << "the idle worker kept yielding after a yield cost it 1 ms";
    ++episodes;
  }
  g_slow_yields = false;
  EXPECT_EQ(counter.load(), episodes);
}

// Not a timing assertion: reports the CPU the process burns while the pool is idle.
// An idle pool sleeps in the kernel: once its work is done, every worker parks on the
// notifier (the CPU it then costs is measured by bench_pool's BM_IdleEngineCpu), and a
// parked worker wakes for new work having really slept (the pool's `parks` counter).
TEST(Pool, IdlePoolParksEveryWorker) {
  Pool pool(2);
  auto parked_all = [&pool] { return wait_parked(pool, pool.size()); };
  ASSERT_TRUE(parked_all()) << "workers never parked: " << pool.parked_workers() << " of " << pool.size();
  // Work from outside wakes a sleeper, which counts the sleep it woke from. (A worker
  // counted as parked may still be between announcing and sleeping; then it takes the
  // token without a sleep, so a few rounds are allowed.)
  std::atomic<int> counter{0};
  int rounds = 0;
  for (; rounds < 1000 && pool.stats().parks == 0; ++rounds) {
    run_counted(pool, counter);
    ASSERT_TRUE(parked_all()) << "workers did not park again after the work";
  }
  EXPECT_EQ(counter.load(), rounds);
  EXPECT_GE(pool.stats().parks, 1u) << "no worker ever slept in the kernel";
}

// A thread that is no worker polls done() for a short while (caller_spin_ns()) before it
// blocks: what it waits for is often microseconds away. The poll is bounded: a wait for
// something that takes long ends up asleep in the kernel, not spinning.
TEST(Pool, AWaiterOffThePoolPollsBrieflyThenSleeps) {
  std::atomic<bool> flag{false};
  std::atomic<int> polls{0};
  std::atomic<int> polls_at_block{-1};
  std::atomic<pid_t> tid{0};
  std::mutex mu;
  std::condition_variable cv;
  std::thread waiter([&] {
    tid.store(pid_t(::syscall(SYS_gettid)));
    auto done = [&] {
      polls.fetch_add(1);
      return flag.load();
    };
    EXPECT_TRUE(flowlane::sched::wait(done, [&](const flowlane::Deadline&) {
      polls_at_block.store(polls.load());
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return flag.load(); });
    }));
  });
  while (tid.load() == 0) std::this_thread::yield();
  auto asleep = [&] {
    std::ifstream f("/proc/self/task/" + std::to_string(tid.load()) + "/stat");
    std::string line;
    std::getline(f, line);
    const size_t p = line.rfind(')');
    return p != std::string::npos && p + 2 < line.size() && line[p + 2] == 'S';
  };
  // Not a timing assertion: it only has to fall asleep at some point (60 s: a spin that
  // never ended).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(polls_at_block.load() >= 0 && asleep()) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(polls_at_block.load(), 0) << "the waiter never blocked: its poll did not end";
  EXPECT_TRUE(asleep()) << "the waiter is not asleep in the kernel";
  if (flowlane::sched::caller_spin_ns() > 0)
    EXPECT_GT(polls_at_block.load(), 1) << "done() was not polled before blocking";
  {
    std::lock_guard<std::mutex> lock(mu);
    flag.store(true);
  }
  cv.notify_all();
  waiter.join();
}

// ---- Latch ----------------------------------------------------------------------------

TEST(Latch, OutsideWaiterWakesWhenCountedDownFromWorkers) {
  Pool pool(2);
  const int rounds = FL_UNDER_SANITIZER ? 200 : 3'000;
  for (int i = 0; i < rounds; ++i) {
    std::atomic<int> counter{0};
    auto latch = std::make_unique<Latch>(2);  // heap: ASan sees a use after the wait
    CountTask a, b;
    a.counter = b.counter = &counter;
    a.latch = b.latch = latch.get();
    pool.submit(&a);
    pool.submit(&b);
    latch->wait();
    ASSERT_EQ(counter.load(), 2);
    latch.reset();  // freed right after the wait: count_down must not touch it afterwards
  }
}

TEST(Latch, ZeroCountWaitReturnsAtOnce) {
  Pool pool(1);
  Latch latch(0);
  latch.wait();
  EXPECT_TRUE(latch.done());
}

// ---- parallel_for ---------------------------------------------------------------------

struct Coverage {
  std::vector<std::atomic<int>> hits;
  std::atomic<uint64_t> max_len{0};
  explicit Coverage(size_t n) : hits(n) {
    for (auto& h : hits) h.store(0);
  }
  static fl_status_t body(uint64_t lo, uint64_t hi, void* ud) {
    auto* c = static_cast<Coverage*>(ud);
    for (uint64_t i = lo; i < hi; ++i) c->hits[i].fetch_add(1, std::memory_order_relaxed);
    uint64_t len = hi - lo, m = c->max_len.load();
    while (len > m && !c->max_len.compare_exchange_weak(m, len)) {
    }
    return FL_OK;
  }
};

TEST_P(PoolThreads, ParallelForCoversEveryIndexOnceForOddSizesAndGrains) {
  Pool pool(GetParam());
  for (uint64_t n : {1ull, 2ull, 7ull, 1001ull, 65537ull}) {
    for (uint64_t grain : {0ull, 1ull, 3ull, 64ull, 100000ull}) {
      if (FL_UNDER_SANITIZER && n > 2000 && grain < 64) {
        continue;
      }
      Coverage c(n + 5);
      auto r = parallel_for(pool, 5, 5 + n, grain, &Coverage::body, &c);
      ASSERT_EQ(r.status, FL_OK);
      for (uint64_t i = 0; i < 5; ++i) ASSERT_EQ(c.hits[i].load(), 0);
      for (uint64_t i = 5; i < 5 + n; ++i) {
        ASSERT_EQ(c.hits[i].load(), 1) << "n=" << n << " grain=" << grain << " i=" << i;
      }
      if (grain != 0) {
        EXPECT_LE(c.max_len.load(), grain);
      }
    }
  }
}

// grain 0: the loop picks the grain (auto_grain: about 1/64 of a participant's share) and
// splits further only while threads are idle. The body calls cover the range contiguously
// and disjointly, none longer than the grain for the pool's size, and there are few of them
// (calls of one index each would be a million).
TEST_P(PoolThreads, ParallelForWithGrainZeroCallsTheBodyOnFewBoundedRanges) {
  Pool pool(GetParam());
  struct Ranges {
    std::mutex mu;
    std::vector<std::pair<uint64_t, uint64_t>> seen;
  } ranges;
  auto body = [](uint64_t lo, uint64_t hi, void* ud) -> fl_status_t {
    auto* r = static_cast<Ranges*>(ud);
    std::lock_guard<std::mutex> lock(r->mu);
    r->seen.emplace_back(lo, hi);
    return FL_OK;
  };
  const uint64_t n = 1000000;
  ASSERT_EQ(parallel_for(pool, 0, n, 0, body, &ranges).status, FL_OK);
  auto& v = ranges.seen;
  std::sort(v.begin(), v.end());
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.front().first, 0u);
  EXPECT_EQ(v.back().second, n);
  const uint64_t grain = auto_grain(n, pool.size());  // (the caller may count as one more: a smaller grain)
  for (size_t k = 0; k < v.size(); ++k) {
    if (k > 0) {
      ASSERT_EQ(v[k].first, v[k - 1].second) << "ranges are contiguous and disjoint";
    }
    EXPECT_LE(v[k].second - v[k].first, grain) << "call " << k;
  }
  EXPECT_LT(v.size(), 4 * 64 * (pool.size() + 1)) << "too many calls";
}

// Lazy splitting hands work to every thread that looks for it: each thread blocks in its
// first body call until all of them have one, which happens only if each one split its
// range before running it (its deque was empty) and the next thief stole that half.
TEST_P(PoolThreads, ParallelForGivesEveryThreadAPieceWhileTheOthersAreBusy) {
  Pool pool(GetParam());
  struct Ctx {
    std::mutex mu;
    std::vector<std::thread::id> threads;
    size_t want = 0;
    std::atomic<bool> gave_up{false};
  } c;
  c.want = std::min<size_t>(GetParam() + 1, 3);  // the caller and up to two workers
  auto body = [](uint64_t, uint64_t, void* ud) -> fl_status_t {
    auto* c = static_cast<Ctx*>(ud);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (std::find(c->threads.begin(), c->threads.end(), std::this_thread::get_id()) != c->threads.end())
        return FL_OK;  // only a thread's first call waits
      c->threads.push_back(std::this_thread::get_id());
    }
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);;) {
      {
        std::lock_guard<std::mutex> lock(c->mu);
        if (c->threads.size() >= c->want) return FL_OK;
      }
      if (std::chrono::steady_clock::now() > until) {
        c->gave_up = true;
        return FL_OK;
      }
      std::this_thread::yield();
    }
  };
  ASSERT_EQ(parallel_for(pool, 0, 100000, 1, body, &c).status, FL_OK);
  EXPECT_FALSE(c.gave_up.load()) << "only " << c.threads.size() << " of " << c.want << " threads got a piece";
}

TEST_P(PoolThreads, ParallelForStopsAfterFirstFailure) {
  Pool pool(GetParam());
  struct Ctx {
    std::atomic<int> started{0};
  } ctx;
  auto body = [](uint64_t lo, uint64_t, void* ud) -> fl_status_t {
    auto* c = static_cast<Ctx*>(ud);
    c->started.fetch_add(1);
    return lo == 10 ? FL_ERR_CANCELLED : FL_OK;
  };
  auto r = parallel_for(pool, 0, 100000, 1, body, &ctx);
  EXPECT_EQ(r.status, FL_ERR_CANCELLED);
  EXPECT_EQ(r.failed_lo, 10u);
  EXPECT_EQ(r.failed_hi, 11u);
  // The caller runs its share from the front; after the failing call only calls already
  // under way on other threads may run: far fewer than all.
  EXPECT_LT(ctx.started.load(), 100000);
}

// Nested: a parallel_for inside a task, and inside another parallel_for body.
TEST_P(PoolThreads, ParallelForNestedInsideATaskAndInsideItself) {
  Pool pool(GetParam());
  struct Ctx {
    Pool* pool;
    std::atomic<uint64_t> sum{0};
  } ctx;
  ctx.pool = &pool;
  auto inner = [](uint64_t lo, uint64_t hi, void* ud) -> fl_status_t {
    auto* c = static_cast<Ctx*>(ud);
    for (uint64_t i = lo; i < hi; ++i) c->sum.fetch_add(1, std::memory_order_relaxed);
    return FL_OK;
  };
  struct Outer {
    static fl_status_t body(uint64_t lo, uint64_t hi, void* ud) {
      auto* c = static_cast<Ctx*>(ud);
      for (uint64_t i = lo; i < hi; ++i) {
        auto r = parallel_for(*c->pool, 0, 100, 7, +[](uint64_t a, uint64_t b, void* u) -> fl_status_t {
          static_cast<Ctx*>(u)->sum.fetch_add(b - a, std::memory_order_relaxed);
          return FL_OK;
        }, c);
        if (r.status != FL_OK) return r.status;
      }
      return FL_OK;
    }
  };
  (void)inner;
  struct Root : Task {
    Ctx* ctx;
    fl_status_t status = FL_ERR_INTERNAL;
    Latch latch{1};
  } root;
  root.ctx = &ctx;
  root.run = [](Task* t) {
    auto* r = static_cast<Root*>(t);
    r->status = parallel_for(*r->ctx->pool, 0, 40, 3, &Outer::body, r->ctx).status;
    r->latch.count_down();
  };
  pool.submit(&root);
  root.latch.wait();
  EXPECT_EQ(root.status, FL_OK);
  EXPECT_EQ(ctx.sum.load(), 40u * 100u);
}

// ---- TaskGraph ------------------------------------------------------------------------

TEST(TaskGraph, FindsANodeOnTheCycleNotMerelyDownstreamOfIt) {
  TaskGraph g;
  auto fn = [](void*) -> fl_status_t { return FL_OK; };
  // 0 -> 1 -> 2 -> 3 -> 1 (cycle 1,2,3), 3 -> 4 -> 5 (downstream), 6 alone.
  for (int i = 0; i < 7; ++i) g.add(fn, nullptr, nullptr);
  g.precede(0, 1);
  g.precede(1, 2);
  g.precede(2, 3);
  g.precede(3, 1);
  g.precede(3, 4);
  g.precede(4, 5);
  int64_t v = g.find_cycle_node();
  EXPECT_TRUE(v == 1 || v == 2 || v == 3) << v;
  TaskGraph acyclic;
  acyclic.add(fn, nullptr, "a");
  EXPECT_EQ(acyclic.find_cycle_node(), -1);
  EXPECT_EQ(acyclic.label(0), "'a' (#0)");
}

TEST(TaskGraph, PrecedeRejectsUnknownAndSelfEdges) {
  TaskGraph g;
  auto fn = [](void*) -> fl_status_t { return FL_OK; };
  g.add(fn, nullptr, nullptr);
  try {
    g.precede(0, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status, FL_ERR_OUT_OF_RANGE);
  }
  try {
    g.precede(0, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status, FL_ERR_INVALID_ARGUMENT);
  }
}

// A binary tree of depth d, reduced bottom-up: each node adds its children's values.
TEST_P(PoolThreads, TreeReductionIsCorrectAcrossReRuns) {
  Pool pool(GetParam());
  const int depth = FL_UNDER_SANITIZER ? 10 : 12;
  const int n = (1 << depth) - 1;
  struct Cell {
    long value = 0;
    long* left = nullptr;
    long* right = nullptr;
  };
  std::vector<Cell> cells(static_cast<size_t>(n));
  TaskGraph g;
  for (int i = 0; i < n; ++i) {
    g.add([](void* ud) -> fl_status_t {
      auto* c = static_cast<Cell*>(ud);
      c->value = 1 + (c->left ? *c->left : 0) + (c->right ? *c->right : 0);
      return FL_OK;
    }, &cells[size_t(i)], nullptr);
  }
  for (int i = 0; 2 * i + 2 < n; ++i) {
    cells[size_t(i)].left = &cells[size_t(2 * i + 1)].value;
    cells[size_t(i)].right = &cells[size_t(2 * i + 2)].value;
    g.precede(uint64_t(2 * i + 1), uint64_t(i));
    g.precede(uint64_t(2 * i + 2), uint64_t(i));
  }
  for (int run = 0; run < 20; ++run) {
    for (auto& c : cells) c.value = -1000;
    ASSERT_EQ(g.run(pool), FL_OK);
    ASSERT_EQ(cells[0].value, n);
  }
}

// ---- topology -------------------------------------------------------------------------

TEST(Topology, PhysicalCoresCountSmtSiblingsOnce) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("fl_topo_" + std::to_string(::getpid()));
  // 2 packages x 2 cores x 2 threads = 8 logical, 4 physical.
  int cpu = 0;
  for (int pkg = 0; pkg < 2; ++pkg)
    for (int core = 0; core < 2; ++core)
      for (int smt = 0; smt < 2; ++smt, ++cpu) {
        fs::path t = dir / ("cpu" + std::to_string(cpu)) / "topology";
        fs::create_directories(t);
        std::ofstream(t / "core_id") << core << "\n";
        std::ofstream(t / "physical_package_id") << pkg << "\n";
      }
  EXPECT_EQ(physical_core_count(dir.string()), 4u);
  fs::remove_all(dir);
  EXPECT_EQ(physical_core_count((dir / "missing").string()), logical_core_count());
  unsigned phys = physical_core_count();
  EXPECT_GE(phys, 1u);
  EXPECT_LE(phys, logical_core_count());
}

TEST(Topology, ResolveThreadCount) {
  EXPECT_EQ(resolve_thread_count(-1, 4), logical_core_count());
  EXPECT_EQ(resolve_thread_count(0, 4), physical_core_count());
  EXPECT_EQ(resolve_thread_count(1, 4), 1u);
  EXPECT_EQ(resolve_thread_count(1'000'000, 4), std::max(logical_core_count(), 4u));
}

}  // namespace
}  // namespace flowlane::sched
