// Conformance of fl_parallel_for: public header only.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "flowlane/flowlane.h"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace {

struct Engine {
  fl_engine_t* e = nullptr;
  explicit Engine(uint64_t workers) {
    fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
    desc.num_workers = workers;
    EXPECT_EQ(fl_engine_create(&desc, &e), FL_OK) << fl_last_error_message();
  }
  ~Engine() { EXPECT_EQ(fl_engine_destroy(e), FL_OK); }
};

struct Cover {
  std::vector<std::atomic<int>> hits;
  uint64_t grain = 0;
  std::atomic<bool> too_long{false};
  explicit Cover(size_t n) : hits(n) {
    for (auto& h : hits) h.store(0);
  }
};
fl_status_t cover_body(uint64_t lo, uint64_t hi, void* ud) {
  auto* c = static_cast<Cover*>(ud);
  if (hi <= lo || (c->grain != 0 && hi - lo > c->grain)) c->too_long.store(true);
  for (uint64_t i = lo; i < hi; ++i) c->hits[i].fetch_add(1, std::memory_order_relaxed);
  return FL_OK;
}

class ParallelForWorkers : public ::testing::TestWithParam<uint64_t> {};

TEST_P(ParallelForWorkers, CoversEveryIndexExactlyOnceForOddSizesAndGrains) {
  Engine eng(GetParam());
  for (uint64_t n : {1ull, 3ull, 17ull, 999ull, 10007ull}) {
    for (uint64_t grain : {0ull, 1ull, 2ull, 5ull, 333ull, 1000000ull}) {
      if (FL_UNDER_SANITIZER && n > 1000 && grain < 5) {
        continue;
      }
      const uint64_t begin = 3;
      Cover c(begin + n + 2);
      c.grain = grain;
      ASSERT_EQ(fl_parallel_for(eng.e, begin, begin + n, grain, cover_body, &c), FL_OK) << fl_last_error_message();
      EXPECT_FALSE(c.too_long.load()) << "a chunk was empty or longer than grain " << grain;
      for (uint64_t i = 0; i < c.hits.size(); ++i) {
        int want = (i >= begin && i < begin + n) ? 1 : 0;
        ASSERT_EQ(c.hits[i].load(), want) << "n=" << n << " grain=" << grain << " i=" << i;
      }
    }
  }
}

TEST_P(ParallelForWorkers, EmptyRangeCallsNothing) {
  Engine eng(GetParam());
  Cover c(1);
  EXPECT_EQ(fl_parallel_for(eng.e, 5, 5, 1, cover_body, &c), FL_OK);
  EXPECT_EQ(c.hits[0].load(), 0);
}

TEST_P(ParallelForWorkers, FirstFailureIsReturnedAndLaterChunksDoNotStart) {
  Engine eng(GetParam());
  struct Ctx {
    std::atomic<uint64_t> started{0};
  } ctx;
  auto body = [](uint64_t lo, uint64_t, void* ud) -> fl_status_t {
    static_cast<Ctx*>(ud)->started.fetch_add(1);
    return lo == 0 ? FL_ERR_INSTRUCTION_FAILED : FL_OK;
  };
  const uint64_t chunks = 100000;
  EXPECT_EQ(fl_parallel_for(eng.e, 0, chunks, 1, body, &ctx), FL_ERR_INSTRUCTION_FAILED);
  std::string msg = fl_last_error_message();
  EXPECT_NE(msg.find("[0, 1)"), std::string::npos) << msg;
  EXPECT_LT(ctx.started.load(), chunks);
}

// Nested inside a task graph task and inside another parallel_for body.
TEST_P(ParallelForWorkers, NestedInsideATaskAndInsideItself) {
  Engine eng(GetParam());
  struct Ctx {
    fl_engine_t* e;
    std::atomic<uint64_t> sum{0};
  } ctx{eng.e};
  auto task = [](void* ud) -> fl_status_t {
    auto* c = static_cast<Ctx*>(ud);
    return fl_parallel_for(c->e, 0, 30, 4, [](uint64_t lo, uint64_t hi, void* u) -> fl_status_t {
      auto* c2 = static_cast<Ctx*>(u);
      for (uint64_t i = lo; i < hi; ++i) {
        fl_status_t s = fl_parallel_for(c2->e, 0, 50, 3, [](uint64_t a, uint64_t b, void* u2) -> fl_status_t {
          static_cast<Ctx*>(u2)->sum.fetch_add(b - a);
          return FL_OK;
        }, c2);
        if (s != FL_OK) return s;
      }
      return FL_OK;
    }, c);
  };
  fl_taskgraph_t* g = nullptr;
  ASSERT_EQ(fl_taskgraph_create(eng.e, &g), FL_OK);
  uint64_t id;
  ASSERT_EQ(fl_taskgraph_add(g, task, &ctx, "outer", &id), FL_OK);
  ASSERT_EQ(fl_taskgraph_run(g, int64_t(GetParam())), FL_OK) << fl_last_error_message();
  EXPECT_EQ(ctx.sum.load(), 30u * 50u);
  EXPECT_EQ(fl_taskgraph_destroy(g), FL_OK);
}

INSTANTIATE_TEST_SUITE_P(Workers, ParallelForWorkers, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return std::to_string(info.param) + "workers"; });

TEST(ParallelForErrors, RejectsNullEngineNullBodyAndReversedRange) {
  Cover c(4);
  EXPECT_EQ(fl_parallel_for(nullptr, 0, 4, 1, cover_body, &c), FL_ERR_INVALID_HANDLE);
  EXPECT_STRNE(fl_last_error_message(), "");
  Engine eng(1);
  EXPECT_EQ(fl_parallel_for(eng.e, 0, 4, 1, nullptr, &c), FL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fl_last_error_message()).find("body"), std::string::npos);
  EXPECT_EQ(fl_parallel_for(eng.e, 4, 0, 1, cover_body, &c), FL_ERR_INVALID_ARGUMENT);
  for (auto& h : c.hits) EXPECT_EQ(h.load(), 0);
  EXPECT_EQ(fl_parallel_for(eng.e, 0, 4, 1, cover_body, &c), FL_OK);
  EXPECT_STREQ(fl_last_error_message(), "");
}

TEST(ParallelForErrors, DestroyedEngineIsAStaleHandle) {
  fl_engine_t* e = nullptr;
  ASSERT_EQ(fl_engine_create(nullptr, &e), FL_OK);
  ASSERT_EQ(fl_engine_destroy(e), FL_OK);
  Cover c(1);
  EXPECT_EQ(fl_parallel_for(e, 0, 1, 1, cover_body, &c), FL_ERR_INVALID_HANDLE);
}

}  // namespace
