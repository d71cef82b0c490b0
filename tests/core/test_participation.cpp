// White-box tests of program threads taking part in a pool's work (sched/participation.cpp,
// core/sched/README.md "Program threads"): external slots and their leases, the waits that
// help, the regions that keep a program thread to its own work, and no task stranded in a
// slot whatever its lessee does.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "sched/latch.hpp"
#include "sched/parallel_for.hpp"
#include "sched/pool.hpp"
#include "sched/task_group.hpp"
#include "sched/taskgraph.hpp"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace flowlane::sched {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPatience = std::chrono::seconds(20);  // a hang fails the test instead of hanging it

// Holds every worker of a pool inside a task until opened (or kPatience passes: `timed_out`).
struct WorkerGate {
  struct Hold : Task {
    WorkerGate* gate = nullptr;
  };
  std::vector<Hold> holds;
  std::atomic<int> entered{0};
  std::atomic<bool> open{false};
  std::atomic<bool> timed_out{false};
  Latch done{0};

  explicit WorkerGate(Pool& pool) : holds(pool.size()) {
    done.add(int64_t(holds.size()));
    for (auto& h : holds) {
      h.gate = this;
      h.run = [](Task* t) {
        WorkerGate* g = static_cast<Hold*>(t)->gate;
        g->entered.fetch_add(1);
        for (auto until = Clock::now() + kPatience; !g->open.load();) {
          if (Clock::now() > until) {
            g->timed_out = true;
            break;
          }
          std::this_thread::yield();
        }
        g->done.count_down();
      };
    }
    // Submitted from a thread of the test's own (injection queue): the holds must not sit in
    // the test thread's slot, where its own waits could run them.
    std::thread([&] {
      for (auto& h : holds) pool.submit(&h);
    }).join();
    while (entered.load() < int(holds.size())) std::this_thread::yield();
  }
  void release() {
    open = true;
    done.wait();
  }
  ~WorkerGate() {
    if (!open) release();
  }
};

// A task group task that records the thread it ran on.
struct Probe {
  std::atomic<int> on_main{0};
  std::atomic<int> elsewhere{0};
  std::thread::id main = std::this_thread::get_id();
  static fl_status_t run(void* p) {
    auto* probe = static_cast<Probe*>(p);
    (std::this_thread::get_id() == probe->main ? probe->on_main : probe->elsewhere).fetch_add(1);
    return FL_OK;
  }
};

// The program thread's spawns go to its own slot and its wait runs them: with every worker
// held, the wait completes only because the waiting thread runs the tasks itself. (Before
// program threads took part, the tasks sat in the injection queue and the wait slept
// until the gate's patience ran out.)
TEST(Participation, AWaitingProgramThreadRunsItsGroupsTasks) {
  Pool pool(2);
  WorkerGate gate(pool);
  TaskGroup group(pool);
  Probe probe;
  for (int i = 0; i < 100; ++i) group.spawn(&Probe::run, &probe, nullptr);
  EXPECT_EQ(pool.leased_slots(), 1u) << "the spawns leased a slot";
  EXPECT_EQ(group.wait(nullptr), FL_OK);
  EXPECT_EQ(probe.on_main.load(), 100);
  EXPECT_FALSE(gate.timed_out.load()) << "the wait slept instead of running the tasks";
  EXPECT_EQ(pool.leased_slots(), 0u) << "a wait that ends with an empty deque lets the slot go";
  gate.release();
  // The holds counted their latch down from inside their run: the workers account for the
  // run just after, so quiescence comes a moment later (bounded, so that a task left behind
  // fails the test instead of hanging it).
  for (auto until = Clock::now() + kPatience; !pool.quiescent() && Clock::now() < until;) std::this_thread::yield();
  EXPECT_TRUE(pool.quiescent());
}

// The same through the nested pattern users write (fib: one group per call, spawned and
// waited on by whoever runs the call), with every worker held and then with them free.
struct Fib {
  Pool* pool;
  int n;
  long result = 0;
  static fl_status_t run(void* p) {
    auto* f = static_cast<Fib*>(p);
    if (f->n < 2) {
      f->result = f->n;
      return FL_OK;
    }
    Fib a{f->pool, f->n - 1}, b{f->pool, f->n - 2};
    TaskGroup g(*f->pool);
    g.spawn(&Fib::run, &a, nullptr);
    fl_status_t st = run(&b);
    fl_status_t w = g.wait(nullptr);
    f->result = a.result + b.result;
    return st != FL_OK ? st : w;
  }
};

long fib_seq(int n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

TEST(Participation, NestedGroupsFromAProgramThreadWithTheWorkersHeldAndFree) {
  for (unsigned workers : {1u, 2u, 4u}) {
    Pool pool(workers);
    {
      WorkerGate gate(pool);
      Fib f{&pool, 16};
      EXPECT_EQ(Fib::run(&f), FL_OK);
      EXPECT_EQ(f.result, fib_seq(16));
      EXPECT_FALSE(gate.timed_out.load());
    }
    Fib f{&pool, FL_UNDER_SANITIZER ? 16 : 22};
    EXPECT_EQ(Fib::run(&f), FL_OK);
    EXPECT_EQ(f.result, fib_seq(f.n));
    pool.wait_quiescent();
  }
}

// Only the work it waits for: a program thread holding two groups, waiting for the second,
// never runs the first one's task, whose end waits for the caller to have returned from
// that wait (running it there would deadlock). Before groups had regions of their own the
// thread's top-level region held both groups' tasks, and the wait, popping its deque, ran
// the first.
TEST(Participation, AWaitRunsOnlyTheWaitedGroupsTasks) {
  Pool pool(1);
  WorkerGate gate(pool);
  struct Blocked {
    std::atomic<bool> returned{false};  // the caller has returned from the second wait
    std::atomic<bool> ran_on_main{false};
    std::atomic<bool> gave_up{false};
    std::thread::id main = std::this_thread::get_id();
  } blocked;
  TaskGroup first(pool), second(pool);
  Probe probe;
  for (int i = 0; i < 10; ++i) second.spawn(&Probe::run, &probe, nullptr);
  // On top of the caller's deque: the first thing a wait that took any task of the
  // caller's would run.
  first.spawn(
      [](void* p) -> fl_status_t {
        auto* b = static_cast<Blocked*>(p);
        if (std::this_thread::get_id() == b->main && !b->returned.load()) b->ran_on_main = true;
        for (auto until = Clock::now() + std::chrono::seconds(5); !b->returned.load();) {
          if (Clock::now() > until) {
            b->gave_up = true;
            break;
          }
          std::this_thread::yield();
        }
        return FL_OK;
      },
      &blocked, nullptr);
  EXPECT_EQ(second.wait(nullptr), FL_OK);
  blocked.returned = true;
  EXPECT_EQ(probe.on_main.load(), 10);
  gate.release();  // the worker steals the first group's task from the caller's slot
  EXPECT_EQ(first.wait(nullptr), FL_OK);
  EXPECT_FALSE(blocked.ran_on_main.load()) << "the second group's wait ran the first group's task";
  EXPECT_FALSE(blocked.gave_up.load());
}

// Timed waits do not take part: a task run meanwhile could hold the caller past its
// deadline, and a poll (timeout 0) must never run one.
TEST(Participation, ATimedWaitNeverRunsATask) {
  Pool pool(1);
  WorkerGate gate(pool);
  TaskGroup group(pool);
  Probe probe;
  group.spawn(&Probe::run, &probe, nullptr);
  EXPECT_EQ(group.wait(nullptr, Deadline::after_ns(0)), FL_ERR_TIMEOUT);
  EXPECT_EQ(group.wait(nullptr, Deadline::after_ns(2'000'000)), FL_ERR_TIMEOUT);
  EXPECT_EQ(probe.on_main.load(), 0);
  gate.release();
  EXPECT_EQ(group.wait(nullptr, Deadline::after_ns(uint64_t(60) * 1'000'000'000)), FL_OK);
  EXPECT_EQ(probe.elsewhere.load(), 1);
}

// A slot's tasks run whatever its lessee does after spawning: here it never waits through
// the pool (it sleeps on a condition variable of its own), and every worker was parked
// when it spawned. The workers must be woken by the push and find the slot in their scan.
// Many rounds, to hit the window between a worker's re-check and its sleep.
TEST(Participation, TasksInASlotWhoseLesseeNeverWaitsAreRunByTheWorkers) {
  for (unsigned workers : {1u, 2u}) {
    Pool pool(workers);
    const int rounds = FL_UNDER_SANITIZER ? 300 : 1000;
    for (int i = 0; i < rounds; ++i) {
      if (i % 4 != 0)
        while (pool.parked_workers() < pool.size()) std::this_thread::yield();
      struct Done {
        std::mutex mu;
        std::condition_variable cv;
        bool ran = false;
      } done;
      TaskGroup group(pool);
      group.spawn(
          [](void* p) -> fl_status_t {
            auto* d = static_cast<Done*>(p);
            std::lock_guard<std::mutex> lock(d->mu);
            d->ran = true;
            d->cv.notify_one();
            return FL_OK;
          },
          &done, nullptr);
      {
        std::unique_lock<std::mutex> lock(done.mu);
        ASSERT_TRUE(done.cv.wait_for(lock, kPatience, [&] { return done.ran; }))
            << "round " << i << ": a task pushed onto a program thread's slot was never run";
      }
      EXPECT_EQ(group.wait(nullptr), FL_OK);
    }
  }
}

// Many program threads at once, each with nested groups, a loop and a graph, on pools of
// 1, 2 and 4 workers; each thread holds one slot at a time and lets it go.
TEST(Participation, ManyProgramThreadsSpawnAndWaitAtOnce) {
  for (unsigned workers : {1u, 2u, 4u}) {
    Pool pool(workers);
    const int threads = 8;
    std::atomic<int> wrong{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (int round = 0; round < (FL_UNDER_SANITIZER ? 3 : 20); ++round) {
          Fib f{&pool, 12 + (t + round) % 5};
          if (Fib::run(&f) != FL_OK || f.result != fib_seq(f.n)) wrong.fetch_add(1);
          std::atomic<uint64_t> sum{0};
          auto r = parallel_for(
              pool, 0, 3000, uint64_t(1 + t % 3),
              [](uint64_t lo, uint64_t hi, void* s) -> fl_status_t {
                static_cast<std::atomic<uint64_t>*>(s)->fetch_add(hi - lo);
                return FL_OK;
              },
              &sum);
          if (r.status != FL_OK || sum.load() != 3000) wrong.fetch_add(1);
        }
      });
    for (auto& th : ts) th.join();
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(pool.leased_slots(), 0u);
    EXPECT_LE(pool.external_slots(), unsigned(threads));
    pool.wait_quiescent();
  }
}

// More program threads than slots: the ones without a slot spawn to the injection queue and
// sleep in their waits, and everything still runs.
TEST(Participation, MoreProgramThreadsThanSlotsStillComplete) {
  Pool pool(2);
  const int threads = int(Pool::kMaxExternalSlots) + 8;
  std::atomic<int> holding{0};
  std::atomic<bool> go{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      TaskGroup group(pool);
      Probe probe;
      probe.main = std::this_thread::get_id();
      group.spawn(&Probe::run, &probe, nullptr);  // leases a slot while there is one
      holding.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      Fib f{&pool, 10};
      if (group.wait(nullptr) != FL_OK || Fib::run(&f) != FL_OK || f.result != fib_seq(10)) wrong.fetch_add(1);
      if (probe.on_main.load() + probe.elsewhere.load() != 1) wrong.fetch_add(1);
    });
  while (holding.load() < threads) std::this_thread::yield();
  EXPECT_EQ(pool.external_slots(), Pool::kMaxExternalSlots);
  go = true;
  for (auto& th : ts) th.join();
  EXPECT_EQ(wrong.load(), 0);
  pool.wait_quiescent();
}

// A thread that spawns and exits without waiting lets its slot go at exit; its task runs.
TEST(Participation, AThreadsLeaseEndsWithTheThread) {
  Pool pool(1);
  TaskGroup group(pool);
  Probe probe;
  std::thread([&] {
    group.spawn(&Probe::run, &probe, nullptr);
    EXPECT_EQ(pool.leased_slots(), 1u);
  }).join();
  EXPECT_EQ(pool.leased_slots(), 0u);
  EXPECT_EQ(group.wait(nullptr), FL_OK);
  EXPECT_EQ(probe.on_main.load() + probe.elsewhere.load(), 1);
}

// A lease that outlives its pool: the thread spawns into pool A and never waits (another
// thread does), A is destroyed, then the thread uses pool B (made where A was, often) and
// exits. Its stale lease must neither match B nor touch freed memory (ASan checks).
TEST(Participation, ALeaseThatOutlivesItsPoolIsDroppedSafely) {
  std::atomic<int> step{0};
  std::unique_ptr<Pool> a = std::make_unique<Pool>(1);
  auto group = std::make_unique<TaskGroup>(*a);
  Probe probe;
  std::thread user([&] {
    group->spawn(&Probe::run, &probe, nullptr);
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
    Pool* b = a.get();  // the new pool
    TaskGroup g(*b);
    Probe p2;
    g.spawn(&Probe::run, &p2, nullptr);
    EXPECT_EQ(g.wait(nullptr), FL_OK);
    EXPECT_EQ(p2.on_main.load() + p2.elsewhere.load(), 1);
    // B's lease, taken by the spawn, may still be held here: a wait that finds the group
    // done already (the worker ran the task first) returns without taking part, and the
    // lease is kept until a later wait or the thread's exit (core/sched/participation.cpp).
    EXPECT_LE(b->leased_slots(), 1u);
  });
  while (step.load() != 1) std::this_thread::yield();
  EXPECT_EQ(group->wait(nullptr), FL_OK);
  group.reset();
  a.reset();
  a = std::make_unique<Pool>(1);
  step = 2;
  user.join();
  EXPECT_EQ(a->leased_slots(), 0u);  // the thread's lease of B ended with it
}

// A failure in a task the waiting program thread ran itself is returned, and the group's
// tasks not started yet are skipped.
TEST(Participation, AFailureInATaskTheWaiterRanIsReturned) {
  Pool pool(1);
  WorkerGate gate(pool);
  TaskGroup group(pool);
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i)
    group.spawn(
        [](void* p) -> fl_status_t {
          int k = static_cast<std::atomic<int>*>(p)->fetch_add(1);
          return k == 0 ? FL_ERR_CANCELLED : FL_OK;  // the first one to run fails
        },
        &ran, nullptr);
  std::string message;
  EXPECT_EQ(group.wait(&message), FL_ERR_CANCELLED);
  EXPECT_EQ(ran.load(), 1) << "tasks not started when the failure was seen are skipped";
  EXPECT_EQ(group.wait(nullptr), FL_OK) << "the failure is returned once";
}

// The task graph and the loop take part too: with every worker held, a program thread runs
// a whole graph and a whole loop itself.
TEST(Participation, GraphsAndLoopsFromAProgramThreadRunWithTheWorkersHeld) {
  Pool pool(2);
  WorkerGate gate(pool);
  TaskGraph graph;
  std::atomic<int> ran{0};
  auto fn = [](void* p) -> fl_status_t {
    static_cast<std::atomic<int>*>(p)->fetch_add(1);
    return FL_OK;
  };
  for (int i = 0; i < 64; ++i) {
    graph.add(fn, &ran, nullptr);
    if (i > 1) graph.precede(uint64_t(i / 2), uint64_t(i));
  }
  EXPECT_EQ(graph.run(pool), FL_OK);
  EXPECT_EQ(ran.load(), 64);
  std::atomic<uint64_t> sum{0};
  auto r = parallel_for(
      pool, 0, 10000, 1,
      [](uint64_t lo, uint64_t hi, void* s) -> fl_status_t {
        static_cast<std::atomic<uint64_t>*>(s)->fetch_add(hi - lo);
        return FL_OK;
      },
      &sum);
  EXPECT_EQ(r.status, FL_OK);
  EXPECT_EQ(sum.load(), 10000u);
  EXPECT_FALSE(gate.timed_out.load());
}

// Inside a participation the thread is one of the pool's workers (what the tasks it runs
// call sees the pool as theirs), and outside it is not.
TEST(Participation, TheThreadIsAWorkerOnlyInsideTheScope) {
  Pool pool(1);
  EXPECT_EQ(Pool::current(), nullptr);
  {
    Participation part(pool);
    ASSERT_TRUE(part.joined());
    EXPECT_EQ(Pool::current(), &pool);
    EXPECT_TRUE(pool.on_worker());
    EXPECT_GE(worker_index(pool), int(pool.size()));
    Participation nested(pool);
    EXPECT_FALSE(nested.joined()) << "a worker does not take part again";
  }
  EXPECT_EQ(Pool::current(), nullptr);
  EXPECT_FALSE(pool.on_worker());
  EXPECT_EQ(worker_index(pool), -1);
  EXPECT_EQ(pool.leased_slots(), 0u);
}

}  // namespace
}  // namespace flowlane::sched
