// The C++ guard of capture and replay (flowlane.hpp: engine::begin_capture, capture,
// program): lambdas captured once run at every launch and are destroyed once, when the
// program is; exceptions inside a launch come back from its wait; refusals throw.
#include <flowlane/flowlane.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

namespace {

flowlane::engine_options workers(uint64_t n) {
  flowlane::engine_options o;
  o.workers = n;
  return o;
}

TEST(CppCapture, ACapturedLambdaRunsAtEveryLaunchAndIsDestroyedWithItsProgram) {
  flowlane::engine e(workers(2));
  auto x = e.make_object<std::vector<int>>();
  std::vector<int>* v = &x.value();
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  flowlane::program p;
  {
    flowlane::capture c = e.begin_capture("step");
    e.host(1).submit([v, alive] { v->push_back(int(v->size())); }, {flowlane::read_write(x)}, "append");
    e.host(2).submit([v] { v->push_back(-1); }, {flowlane::read_write(x)}, "mark");
    p = c.end();
  }
  alive.reset();
  EXPECT_TRUE(v->empty()) << "nothing runs while capturing";
  EXPECT_EQ(p.info().instructions, 2u);
  flowlane::stream s = e.host(0);
  for (int k = 0; k < 3; ++k) s.wait(p.launch(s));
  EXPECT_EQ(*v, (std::vector<int>{0, -1, 2, -1, 4, -1}));
  EXPECT_FALSE(watch.expired()) << "the program keeps its lambdas";
  p.reset();
  e.synchronize();
  EXPECT_TRUE(watch.expired()) << "destroyed once, with the program";
}

TEST(CppCapture, AnExceptionInsideALaunchIsRethrownByItsWait) {
  flowlane::engine e(workers(2));
  auto x = e.make_object<int>(0);
  flowlane::capture c = e.begin_capture();
  e.host(1).submit([]() -> void { throw std::invalid_argument("bad row 12"); }, {flowlane::write(x)}, "parse");
  flowlane::program p = c.end();
  flowlane::stream s = e.host(0);
  fl_instr_id id = p.launch(s);
  EXPECT_THROW(s.wait(id), std::invalid_argument);
}

TEST(CppCapture, ADestroyedCaptureIsDiscardedAndRefusalsThrow) {
  flowlane::engine e(workers(1));
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  std::atomic<int> ran{0};
  {
    flowlane::capture c = e.begin_capture();
    e.host(1).submit([alive, &ran] { ran.fetch_add(1); });
    alive.reset();
    try {
      e.synchronize();
      ADD_FAILURE() << "synchronize while capturing must throw";
    } catch (const flowlane::error& err) {
      EXPECT_EQ(err.status(), FL_ERR_CAPTURING);
    }
    try {
      flowlane::capture nested = e.begin_capture();
      ADD_FAILURE() << "captures do not nest";
    } catch (const flowlane::error& err) {
      EXPECT_EQ(err.status(), FL_ERR_CAPTURING);
    }
  }
  EXPECT_TRUE(watch.expired()) << "the discarded capture destroyed its lambdas";
  e.host(1).submit([&ran] { ran.fetch_add(10); });
  e.synchronize();
  EXPECT_EQ(ran.load(), 10) << "the captured lambda never ran; the thread submits eagerly again";
}

}  // namespace
