// Task groups, loops and graphs waited for by a program thread, through the public API: the
// waiting thread takes part in the engine's work (core/sched/README.md, "Program threads"),
// runs only the work it waits for, and what it runs is engine code (the header's "Calls from
// callbacks" rules apply there).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"
#include "test_util.hpp"

namespace {

using namespace fltest;

// Holds the engine's only worker in an instruction's callback until released.
struct HeldWorker {
  fl_stream_t* stream;
  Gate gate;
  std::atomic<bool> entered{false};
  explicit HeldWorker(EngineFixture& f) : stream(f.host(0)) {
    submit(stream, [this] {
      entered = true;
      return gate.wait() ? FL_OK : FL_ERR_INTERNAL;
    });
    while (!entered.load()) std::this_thread::yield();
  }
  void release() {
    if (gate.open.exchange(true)) return;
    EXPECT_FL_OK(fl_stream_synchronize(stream));
  }
  ~HeldWorker() { release(); }
};

struct OnMain {
  std::thread::id main = std::this_thread::get_id();
  std::atomic<int> on_main{0};
  std::atomic<int> elsewhere{0};
  void note() { (std::this_thread::get_id() == main ? on_main : elsewhere).fetch_add(1); }
};

// With the only worker busy, the main thread's wait runs the group's tasks itself. (Before
// program threads took part, this wait slept until the worker was released.)
TEST(ProgramThreadGroups, TheWaitingThreadRunsTheTasksWhileTheWorkerIsBusy) {
  EngineFixture f(1);
  HeldWorker held(f);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  OnMain seen;
  for (int i = 0; i < 64; ++i)
    ASSERT_FL_OK(fl_task_group_spawn(g, [](void* p) {
      static_cast<OnMain*>(p)->note();
      return FL_OK;
    }, &seen, nullptr));
  EXPECT_FL_OK(fl_task_group_wait(g));
  EXPECT_EQ(seen.on_main.load(), 64);
  EXPECT_FL_OK(fl_task_group_destroy(g));
}

// A task the waiting main thread runs is code the engine runs: draining or destroying the
// engine from it is refused, as from a worker.
TEST(ProgramThreadGroups, ATaskTheMainThreadRunsIsEngineCode) {
  EngineFixture f(1);
  HeldWorker held(f);
  struct Ctx {
    fl_engine_t* engine;
    OnMain seen;
    fl_status_t drain = FL_OK, destroy = FL_OK;
    std::string message;
  } c{f.engine, {}, FL_OK, FL_OK, {}};
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    c->seen.note();
    c->drain = fl_engine_drain(c->engine, 0);
    c->destroy = fl_engine_destroy(c->engine);
    c->message = fl_last_error_message();
    return FL_OK;
  }, &c, nullptr));
  EXPECT_FL_OK(fl_task_group_wait(g));
  ASSERT_EQ(c.seen.on_main.load(), 1) << "the worker was held: the main thread ran the task";
  EXPECT_EQ(c.drain, FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c.destroy, FL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(c.message.find("fl_engine_destroy"), std::string::npos) << c.message;
  EXPECT_FL_OK(fl_task_group_destroy(g));
}

// A failure in a task the waiting main thread ran carries the task's own error text.
TEST(ProgramThreadGroups, AFailureTheMainThreadRanIsReturnedWithItsMessage) {
  EngineFixture f(1);
  HeldWorker held(f);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  ASSERT_FL_OK(fl_task_group_spawn(g, [](void*) {
    return fl_task_group_spawn(nullptr, nullptr, nullptr, nullptr);  // fails: invalid handle
  }, nullptr, nullptr));
  EXPECT_FL_ERR(fl_task_group_wait(g), FL_ERR_INVALID_HANDLE, "fl_task_group_spawn");
  EXPECT_FL_OK(fl_task_group_wait(g));
  EXPECT_FL_OK(fl_task_group_destroy(g));
}

// A loop and a graph (num_threads = workers + 1: the caller is one of the threads) from the
// main thread with the only worker busy: the main thread runs them whole.
TEST(ProgramThreadGroups, LoopsAndGraphsRunOnTheMainThreadWhileTheWorkerIsBusy) {
  EngineFixture f(1);
  HeldWorker held(f);
  OnMain seen;
  ASSERT_FL_OK(fl_parallel_for(f.engine, 0, 1000, 1, [](uint64_t lo, uint64_t hi, void* p) {
    for (uint64_t i = lo; i < hi; ++i) static_cast<OnMain*>(p)->note();
    return FL_OK;
  }, &seen));
  EXPECT_EQ(seen.on_main.load(), 1000);
  fl_taskgraph_t* graph = nullptr;
  ASSERT_FL_OK(fl_taskgraph_create(f.engine, &graph));
  OnMain nodes;
  for (uint64_t i = 0; i < 32; ++i) {
    uint64_t id = 0;
    ASSERT_FL_OK(fl_taskgraph_add(graph, [](void* p) {
      static_cast<OnMain*>(p)->note();
      return FL_OK;
    }, &nodes, nullptr, &id));
    if (i > 0) ASSERT_FL_OK(fl_taskgraph_precede(graph, (i - 1) / 2, id));
  }
  EXPECT_FL_OK(fl_taskgraph_run(graph, 2));
  EXPECT_EQ(nodes.on_main.load(), 32);
  EXPECT_FL_OK(fl_taskgraph_destroy(graph));
}

// num_threads 1 from the main thread keeps the run to one thread: the caller does not take
// part (it would be a second thread beside the graph's worker).
TEST(ProgramThreadGroups, AGraphWithOneThreadNeverRunsOnTheCaller) {
  EngineFixture f(2);
  fl_taskgraph_t* graph = nullptr;
  ASSERT_FL_OK(fl_taskgraph_create(f.engine, &graph));
  OnMain nodes;
  for (int i = 0; i < 16; ++i) {
    uint64_t id = 0;
    ASSERT_FL_OK(fl_taskgraph_add(graph, [](void* p) {
      static_cast<OnMain*>(p)->note();
      return FL_OK;
    }, &nodes, nullptr, &id));
  }
  EXPECT_FL_OK(fl_taskgraph_run(graph, 1));
  EXPECT_EQ(nodes.on_main.load(), 0);
  EXPECT_EQ(nodes.elsewhere.load(), 16);
  EXPECT_FL_OK(fl_taskgraph_destroy(graph));
}

// fib through the C API from several program threads at once, each group created, spawned
// into, waited for and destroyed by whoever runs the call.
struct Fib {
  fl_engine_t* engine;
  long n;
  long result;
};
fl_status_t fib(void* p) {
  auto* f = static_cast<Fib*>(p);
  if (f->n < 2) {
    f->result = f->n;
    return FL_OK;
  }
  Fib a{f->engine, f->n - 1, 0}, b{f->engine, f->n - 2, 0};
  fl_task_group_t* g = nullptr;
  fl_status_t st = fl_task_group_create(f->engine, &g);
  if (st != FL_OK) return st;
  st = fl_task_group_spawn(g, &fib, &a, nullptr);
  if (st == FL_OK) st = fib(&b);
  fl_status_t w = fl_task_group_wait(g);
  fl_status_t d = fl_task_group_destroy(g);
  f->result = a.result + b.result;
  return st != FL_OK ? st : w != FL_OK ? w : d;
}
long fib_seq(long n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

TEST(ProgramThreadGroups, FibFromSeveralProgramThreadsAtOnce) {
  EngineFixture f(2);
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int round = 0; round < fl_scaled(10, 2); ++round) {
        Fib x{f.engine, 12 + (t + round) % 4, 0};
        if (fib(&x) != FL_OK || x.result != fib_seq(x.n)) wrong.fetch_add(1);
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
}

// A traced loop shows who ran how much: a slice per share (a range a thread started with or
// stole) on the track of the thread that ran it, with the number of indices; the shares add
// up to the loop. Each thread's first body call waits until two threads have one, so the
// loop really is shared.
TEST(LoopTrace, EachThreadsShareOfALoopIsASliceOnItsOwnTrack) {
  EngineFixture f(2);
  std::string path = unique_temp_path("flowlane_trace_shares.json");
  ASSERT_FL_OK(fl_trace_start(f.engine, path.c_str()));
  struct Ctx {
    std::mutex mu;
    std::set<std::thread::id> threads;
    std::atomic<bool> gave_up{false};
  } c;
  const uint64_t n = 20000;
  ASSERT_FL_OK(fl_parallel_for(f.engine, 0, n, 1, [](uint64_t, uint64_t, void* p) {
    auto* c = static_cast<Ctx*>(p);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (!c->threads.insert(std::this_thread::get_id()).second) return FL_OK;
    }
    for (auto until = Clock::now() + std::chrono::seconds(20);;) {
      {
        std::lock_guard<std::mutex> lock(c->mu);
        if (c->threads.size() >= 2) return FL_OK;
      }
      if (Clock::now() > until) {
        c->gave_up = true;
        return FL_OK;
      }
      std::this_thread::yield();
    }
  }, &c));
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  ASSERT_FALSE(c.gave_up.load());
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string json = ss.str();
  std::remove(path.c_str());
  const std::string name = "\"name\":\"fl_parallel_for share\"";
  uint64_t items = 0;
  std::set<std::string> tids;
  for (size_t at = json.find(name); at != std::string::npos; at = json.find(name, at + 1)) {
    size_t tid = json.find("\"tid\":", at), end = json.find(',', tid);
    tids.insert(json.substr(tid, end - tid));
    const std::string key = "\"args\":{\"items\":";
    size_t arg = json.find(key, at);
    ASSERT_NE(arg, std::string::npos) << json;
    items += std::stoull(json.substr(arg + key.size()));
  }
  EXPECT_EQ(items, n) << json;
  EXPECT_GE(tids.size(), 2u) << json;
}

}  // namespace
