// Conformance of fl_taskgraph_*: public header only.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace {

struct EngineFixture {
  fl_engine_t* engine = nullptr;
  explicit EngineFixture(uint64_t workers) {
    fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
    desc.num_workers = workers;
    EXPECT_EQ(fl_engine_create(&desc, &engine), FL_OK) << fl_last_error_message();
  }
  ~EngineFixture() { EXPECT_EQ(fl_engine_destroy(engine), FL_OK); }
};

fl_status_t ok_task(void*) { return FL_OK; }

// Records the order in which nodes start and checks that every predecessor has finished.
struct OrderLog {
  std::atomic<int> clock{0};
  std::vector<std::atomic<int>> finished_at;
  explicit OrderLog(size_t n) : finished_at(n) {
    for (auto& f : finished_at) f.store(-1);
  }
};
struct OrderNode {
  OrderLog* log;
  int id;
  std::vector<int> preds;
  bool preds_done_at_start = true;
  int runs = 0;
};
fl_status_t order_task(void* ud) {
  auto* n = static_cast<OrderNode*>(ud);
  for (int p : n->preds)
    if (n->log->finished_at[size_t(p)].load() < 0) n->preds_done_at_start = false;
  n->runs += 1;
  n->log->finished_at[size_t(n->id)].store(n->log->clock.fetch_add(1));
  return FL_OK;
}

class TaskGraphThreads : public ::testing::TestWithParam<int64_t> {};

TEST_P(TaskGraphThreads, DiamondRunsEachNodeOnceInDependencyOrder) {
  EngineFixture f(2);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  OrderLog log(4);
  std::vector<OrderNode> nodes(4);
  const char* names[] = {"top", "left", "right", "bottom"};
  for (int i = 0; i < 4; ++i) {
    nodes[size_t(i)].log = &log;
    nodes[size_t(i)].id = i;
    uint64_t id = 99;
    ASSERT_EQ(fl_taskgraph_add(g, order_task, &nodes[size_t(i)], names[i], &id), FL_OK);
    EXPECT_EQ(id, uint64_t(i));  // dense from 0
  }
  nodes[1].preds = {0};
  nodes[2].preds = {0};
  nodes[3].preds = {1, 2};
  ASSERT_EQ(fl_taskgraph_precede(g, 0, 1), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, 0, 2), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, 1, 3), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, 2, 3), FL_OK);
  ASSERT_EQ(fl_taskgraph_run(g, GetParam()), FL_OK) << fl_last_error_message();
  EXPECT_STREQ(fl_last_error_message(), "");
  for (auto& n : nodes) {
    EXPECT_EQ(n.runs, 1);
    EXPECT_TRUE(n.preds_done_at_start) << "node " << n.id;
  }
  EXPECT_EQ(log.finished_at[0].load(), 0);
  EXPECT_EQ(log.finished_at[3].load(), 3);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

// A layered random DAG run 100 times: every node once per run, predecessors first.
TEST_P(TaskGraphThreads, HundredReRunsOfOneGraphRespectEveryEdge) {
  EngineFixture f(2);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  const int layers = 8, width = FL_UNDER_SANITIZER ? 6 : 24;
  const int n = layers * width;
  OrderLog log(static_cast<size_t>(n));
  std::vector<OrderNode> nodes(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    nodes[size_t(i)] = OrderNode{&log, i, {}, true, 0};
    uint64_t id;
    ASSERT_EQ(fl_taskgraph_add(g, order_task, &nodes[size_t(i)], nullptr, &id), FL_OK);
  }
  uint32_t rng = 12345;
  for (int l = 1; l < layers; ++l)
    for (int w = 0; w < width; ++w) {
      int to = l * width + w;
      for (int k = 0; k < 3; ++k) {
        rng = rng * 1664525u + 1013904223u;
        int from = (l - 1) * width + int((rng >> 8) % uint32_t(width));
        ASSERT_EQ(fl_taskgraph_precede(g, uint64_t(from), uint64_t(to)), FL_OK);
        nodes[size_t(to)].preds.push_back(from);
      }
    }
  for (int run = 0; run < 100; ++run) {
    for (auto& fa : log.finished_at) fa.store(-1);
    ASSERT_EQ(fl_taskgraph_run(g, GetParam()), FL_OK) << "run " << run << ": " << fl_last_error_message();
  }
  for (auto& node : nodes) {
    EXPECT_EQ(node.runs, 100);
    EXPECT_TRUE(node.preds_done_at_start) << "node " << node.id;
  }
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

TEST_P(TaskGraphThreads, CycleIsRejectedNamingANodeOnIt) {
  EngineFixture f(2);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  std::atomic<int> ran{0};
  auto count = [](void* ud) -> fl_status_t {
    static_cast<std::atomic<int>*>(ud)->fetch_add(1);
    return FL_OK;
  };
  uint64_t a, b, c, d;
  ASSERT_EQ(fl_taskgraph_add(g, count, &ran, "source", &a), FL_OK);
  ASSERT_EQ(fl_taskgraph_add(g, count, &ran, "ping", &b), FL_OK);
  ASSERT_EQ(fl_taskgraph_add(g, count, &ran, "pong", &c), FL_OK);
  ASSERT_EQ(fl_taskgraph_add(g, count, &ran, "sink", &d), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, a, b), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, b, c), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, c, b), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, c, d), FL_OK);
  EXPECT_EQ(fl_taskgraph_run(g, GetParam()), FL_ERR_INVALID_ARGUMENT);
  std::string msg = fl_last_error_message();
  EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("'ping'") != std::string::npos || msg.find("'pong'") != std::string::npos) << msg;
  EXPECT_EQ(ran.load(), 0);  // nothing runs when the graph is rejected
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

TEST(TaskGraph, UnnamedCycleNodeIsNamedById) {
  EngineFixture f(1);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  uint64_t a, b;
  ASSERT_EQ(fl_taskgraph_add(g, ok_task, nullptr, nullptr, &a), FL_OK);
  ASSERT_EQ(fl_taskgraph_add(g, ok_task, nullptr, nullptr, &b), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, a, b), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, b, a), FL_OK);
  EXPECT_EQ(fl_taskgraph_run(g, 1), FL_ERR_INVALID_ARGUMENT);
  std::string msg = fl_last_error_message();
  EXPECT_TRUE(msg.find("#0") != std::string::npos || msg.find("#1") != std::string::npos) << msg;
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

// A chain a -> fail -> c plus independent nodes: the failing node's status comes back with
// its name, and its dependent never starts. The graph can be run again afterwards.
TEST_P(TaskGraphThreads, FailingTaskIsReportedAndNoDependentStarts) {
  EngineFixture f(2);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  struct Ctx {
    std::atomic<int> a{0}, c{0};
    bool fail = true;
  } ctx;
  uint64_t a, b, c;
  ASSERT_EQ(fl_taskgraph_add(g, [](void* ud) -> fl_status_t {
    static_cast<Ctx*>(ud)->a.fetch_add(1);
    return FL_OK;
  }, &ctx, "load", &a), FL_OK);
  ASSERT_EQ(fl_taskgraph_add(g, [](void* ud) -> fl_status_t {
    return static_cast<Ctx*>(ud)->fail ? FL_ERR_INSTRUCTION_FAILED : FL_OK;
  }, &ctx, "parse", &b), FL_OK);
  ASSERT_EQ(fl_taskgraph_add(g, [](void* ud) -> fl_status_t {
    static_cast<Ctx*>(ud)->c.fetch_add(1);
    return FL_OK;
  }, &ctx, "emit", &c), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, a, b), FL_OK);
  ASSERT_EQ(fl_taskgraph_precede(g, b, c), FL_OK);
  EXPECT_EQ(fl_taskgraph_run(g, GetParam()), FL_ERR_INSTRUCTION_FAILED);
  std::string msg = fl_last_error_message();
  EXPECT_NE(msg.find("'parse'"), std::string::npos) << msg;
  EXPECT_EQ(ctx.a.load(), 1);
  EXPECT_EQ(ctx.c.load(), 0);
  ctx.fail = false;
  EXPECT_EQ(fl_taskgraph_run(g, GetParam()), FL_OK);
  EXPECT_EQ(ctx.a.load(), 2);
  EXPECT_EQ(ctx.c.load(), 1);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

// A wide fan-out behind a failing root: none of the many dependents starts.
TEST_P(TaskGraphThreads, FailingRootStopsAWideFanOut) {
  EngineFixture f(2);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  std::atomic<int> started{0};
  uint64_t root;
  ASSERT_EQ(fl_taskgraph_add(g, [](void*) -> fl_status_t { return FL_ERR_CANCELLED; }, nullptr, "root", &root),
            FL_OK);
  for (int i = 0; i < 200; ++i) {
    uint64_t id;
    ASSERT_EQ(fl_taskgraph_add(g, [](void* ud) -> fl_status_t {
      static_cast<std::atomic<int>*>(ud)->fetch_add(1);
      return FL_OK;
    }, &started, nullptr, &id), FL_OK);
    ASSERT_EQ(fl_taskgraph_precede(g, root, id), FL_OK);
  }
  EXPECT_EQ(fl_taskgraph_run(g, GetParam()), FL_ERR_CANCELLED);
  EXPECT_EQ(started.load(), 0);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

INSTANTIATE_TEST_SUITE_P(NumThreads, TaskGraphThreads, ::testing::Values(-1, 0, 1, 2, 3),
                         [](const auto& info) {
                           return info.param < 0 ? std::string("logical") : info.param == 0 ? std::string("physical")
                                                                                           : std::to_string(info.param) + "threads";
                         });

// Running the graph from inside one of its own tasks is a concurrent run: rejected.
TEST(TaskGraph, RunningTheSameGraphConcurrentlyIsRejected) {
  EngineFixture f(2);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  struct Ctx {
    fl_taskgraph_t* g;
    fl_status_t inner = FL_OK;
    std::string msg;
  } ctx{g, FL_OK, {}};
  uint64_t id;
  ASSERT_EQ(fl_taskgraph_add(g, [](void* ud) -> fl_status_t {
    auto* c = static_cast<Ctx*>(ud);
    c->inner = fl_taskgraph_run(c->g, 1);
    c->msg = fl_last_error_message();
    return FL_OK;
  }, &ctx, "reentrant", &id), FL_OK);
  EXPECT_EQ(fl_taskgraph_run(g, 2), FL_OK);
  EXPECT_EQ(ctx.inner, FL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(ctx.msg.find("already running"), std::string::npos) << ctx.msg;
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

// Two threads race to run one graph many times: every call either runs it or is rejected
// with FL_ERR_INVALID_ARGUMENT; nothing else happens, and the node count adds up.
TEST(TaskGraph, RacingRunsEitherRunOrAreRejected) {
  EngineFixture f(2);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  std::atomic<int> ran{0};
  for (int i = 0; i < 16; ++i) {
    uint64_t id;
    ASSERT_EQ(fl_taskgraph_add(g, [](void* ud) -> fl_status_t {
      static_cast<std::atomic<int>*>(ud)->fetch_add(1);
      return FL_OK;
    }, &ran, nullptr, &id), FL_OK);
  }
  std::atomic<int> ok{0}, rejected{0}, other{0};
  auto racer = [&] {
    for (int i = 0; i < (FL_UNDER_SANITIZER ? 50 : 500); ++i) {
      fl_status_t s = fl_taskgraph_run(g, 2);
      if (s == FL_OK)
        ok.fetch_add(1);
      else if (s == FL_ERR_INVALID_ARGUMENT)
        rejected.fetch_add(1);
      else
        other.fetch_add(1);
    }
  };
  std::thread t1(racer), t2(racer);
  t1.join();
  t2.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ran.load(), ok.load() * 16);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

TEST(TaskGraph, EmptyGraphRuns) {
  EngineFixture f(1);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  EXPECT_EQ(fl_taskgraph_run(g, -1), FL_OK);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

// ---- error paths of every function ----------------------------------------------------

TEST(TaskGraphErrors, CreateRejectsNullEngineAndNullOut) {
  fl_taskgraph_t* g = nullptr;
  EXPECT_EQ(fl_taskgraph_create(nullptr, &g), FL_ERR_INVALID_HANDLE);
  EXPECT_STRNE(fl_last_error_message(), "");
  EXPECT_EQ(g, nullptr);
  EngineFixture f(1);
  EXPECT_EQ(fl_taskgraph_create(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fl_last_error_message()).find("out_graph"), std::string::npos);
}

TEST(TaskGraphErrors, AddRejectsNullGraphNullFnAndNullOut) {
  EngineFixture f(1);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  uint64_t id = 77;
  EXPECT_EQ(fl_taskgraph_add(nullptr, ok_task, nullptr, "x", &id), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_add(g, nullptr, nullptr, "x", &id), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fl_taskgraph_add(g, ok_task, nullptr, "x", nullptr), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(id, 77u);  // outputs unchanged on failure
  ASSERT_EQ(fl_taskgraph_add(g, ok_task, nullptr, nullptr, &id), FL_OK);
  EXPECT_EQ(id, 0u);  // a failed add did not consume an id
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

TEST(TaskGraphErrors, PrecedeRejectsBadNodeIdsAndSelfEdges) {
  EngineFixture f(1);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  uint64_t a, b;
  ASSERT_EQ(fl_taskgraph_add(g, ok_task, nullptr, "a", &a), FL_OK);
  ASSERT_EQ(fl_taskgraph_add(g, ok_task, nullptr, "b", &b), FL_OK);
  EXPECT_EQ(fl_taskgraph_precede(nullptr, a, b), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_precede(g, a, 2), FL_ERR_OUT_OF_RANGE);
  EXPECT_NE(std::string(fl_last_error_message()).find("2"), std::string::npos);
  EXPECT_EQ(fl_taskgraph_precede(g, UINT64_MAX, b), FL_ERR_OUT_OF_RANGE);
  EXPECT_EQ(fl_taskgraph_precede(g, a, a), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fl_taskgraph_run(g, 1), FL_OK);  // the rejected edges were not added
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

TEST(TaskGraphErrors, RunRejectsNullGraphAndBadThreadCounts) {
  EngineFixture f(1);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  EXPECT_EQ(fl_taskgraph_run(nullptr, 1), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_run(g, -2), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fl_taskgraph_run(g, INT64_MIN), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fl_taskgraph_run(g, INT64_MAX), FL_OK);  // "at most N"
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

TEST(TaskGraphErrors, DestroyedGraphHandleIsStaleAndNullDestroyIsANoOp) {
  EngineFixture f(1);
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
  uint64_t id;
  EXPECT_EQ(fl_taskgraph_add(g, ok_task, nullptr, nullptr, &id), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_precede(g, 0, 1), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_run(g, 1), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_destroy(nullptr), FL_OK);
}

TEST(TaskGraphErrors, GraphOutlivingItsEngineCannotRunButCanBeDestroyed) {
  fl_taskgraph_t* g = nullptr;
  {
    EngineFixture f(1);
    ASSERT_EQ(fl_taskgraph_create(f.engine, &g), FL_OK);
    uint64_t id;
    ASSERT_EQ(fl_taskgraph_add(g, ok_task, nullptr, nullptr, &id), FL_OK);
  }
  EXPECT_EQ(fl_taskgraph_run(g, 1), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

}  // namespace
