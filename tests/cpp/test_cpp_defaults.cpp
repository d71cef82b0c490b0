// What the C++ header does by default, as a thread-pool user expects: the default host
// stream (engine::host()) runs submissions without operands side by side, an instruction's
// exception comes back from the waits with its own type, and FLOWLANE_CHECK_ACCESS
// (set_check_access) catches a callable touching an object it did not declare. Parallelism
// is shown by a rendezvous only a parallel run reaches, never by timing.
#include <flowlane/flowlane.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

flowlane::engine_options shape(uint64_t workers, uint64_t lanes = 0) {
  flowlane::engine_options o;
  o.workers = workers;
  o.lanes = lanes;
  return o;
}

// Waits until `n` callables have arrived (true), or gives up after 30 s (false).
bool meet(std::atomic<int>& arrived, int n) {
  arrived.fetch_add(1);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (arrived.load() < n)
    if (std::chrono::steady_clock::now() > deadline) return false;
    else std::this_thread::yield();
  return true;
}

TEST(CppDefaultStream, RunsSubmissionsWithoutOperandsSideBySide) {
  flowlane::engine e(shape(4));
  std::atomic<int> arrived{0}, met{0};
  std::vector<uint32_t> lanes(4, 0);
  for (int i = 0; i < 4; ++i)
    e.host().submit([&, i](flowlane::instr_context ctx) {
      lanes[size_t(i)] = ctx.lane();
      if (meet(arrived, 4)) met++;
    });
  e.host().synchronize();  // covers the lanes it spread to
  EXPECT_EQ(met.load(), 4) << "the four did not run at the same time";
  for (uint32_t lane : lanes) EXPECT_NE(lane, 0u);
}

TEST(CppDefaultStream, WithOperandsItKeepsLane0AndItsOrder) {
  flowlane::engine e(shape(4));
  auto x = e.make_object<std::vector<int>>();
  std::vector<uint32_t> lanes;
  for (int i = 0; i < 50; ++i)
    e.host().submit(
        [&x, &lanes, i](flowlane::instr_context ctx) {
          x.value().push_back(i);
          lanes.push_back(ctx.lane());
        },
        {flowlane::read_write(x)});
  x.wait();
  std::vector<int> expected(50);
  for (int i = 0; i < 50; ++i) expected[size_t(i)] = i;
  EXPECT_EQ(x.value(), expected);
  EXPECT_EQ(lanes, std::vector<uint32_t>(50, 0u));
}

TEST(CppDefaultStream, ItsIdsReachTheLanesTheyWentTo) {
  flowlane::engine e(shape(2));
  flowlane::stream s = e.host();
  std::atomic<bool> go{false};
  const fl_instr_id held = s.submit([&] {
    while (!go.load()) std::this_thread::yield();
  });
  const fl_instr_id quick = s.submit([] {});
  EXPECT_TRUE(s.wait(quick, 30s));
  EXPECT_EQ(s.query(quick), FL_INSTR_DONE);
  EXPECT_EQ(s.query(held), FL_INSTR_PENDING);
  EXPECT_FALSE(s.wait(held, 10ms));
  go = true;
  EXPECT_TRUE(s.wait(held, 30s));
  try {
    s.query(123456789);
    FAIL() << "an id the stream never returned was located";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_INVALID_ARGUMENT);
  }
}

TEST(CppDefaultStream, LanesTheProgramNamesOrHoldsAreNotSpreadTo) {
  flowlane::engine e(shape(2, 4));  // spread range: lanes 3 and 2
  (void)e.host(3);
  uint32_t ran_on = 0;
  e.host().submit([&](flowlane::instr_context ctx) { ran_on = ctx.lane(); });
  e.synchronize();
  EXPECT_EQ(ran_on, 2u);
  flowlane::engine f(shape(1, 3));  // spread range: lane 2
  flowlane::lane a = f.acquire_lane(), b = f.acquire_lane();
  ASSERT_EQ(b.id(), 2u);
  f.host().submit([&](flowlane::instr_context ctx) { ran_on = ctx.lane(); });
  f.synchronize();
  EXPECT_EQ(ran_on, 0u) << "lane 2 is the program's while it holds it";
  b.reset();
  f.host().submit([&](flowlane::instr_context ctx) { ran_on = ctx.lane(); });
  f.synchronize();
  EXPECT_EQ(ran_on, 2u);
}

TEST(CppDefaultStream, ACallableSubmittingToItNeverQueuesBehindItself) {
  flowlane::engine e(shape(2, 4));  // spread range: lanes 3 and 2
  std::atomic<int> own_lane{0}, submitted{0};
  for (int i = 0; i < 40; ++i)
    e.host().submit([&](flowlane::instr_context ctx) {
      const uint32_t outer = ctx.lane();
      e.host().submit([&own_lane, outer](flowlane::instr_context inner) {
        if (inner.lane() == outer) own_lane++;
      });
      submitted++;
    });
  e.synchronize();
  EXPECT_EQ(submitted.load(), 40);
  EXPECT_EQ(own_lane.load(), 0) << "a callable's submission went behind it on its own lane";
}

TEST(CppDefaultStream, ManyThreadsSubmitToItAtOnce) {
  flowlane::engine e(shape(3));
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      flowlane::stream s = e.host();
      std::vector<fl_instr_id> ids;
      for (int i = 0; i < 500; ++i) ids.push_back(s.submit([&ran] { ran++; }));
      for (fl_instr_id id : ids) EXPECT_TRUE(s.wait(id, 60s));
    });
  for (std::thread& t : threads) t.join();
  e.synchronize();
  EXPECT_EQ(ran.load(), 8 * 500);
}

TEST(CppDefaultStream, AnEngineWithTwoLanesRunsThemOnLane0InOrder) {
  flowlane::engine e(shape(2, 2));
  std::vector<int> seen;
  for (int i = 0; i < 20; ++i) e.host().submit([&seen, i] { seen.push_back(i); });
  e.synchronize();
  std::vector<int> expected(20);
  for (int i = 0; i < 20; ++i) expected[size_t(i)] = i;
  EXPECT_EQ(seen, expected);
}

struct row_error : std::runtime_error {
  using std::runtime_error::runtime_error;
  int row = 12;
};

TEST(CppExceptions, EveryWaitRethrowsTheCallablesOwnException) {
  flowlane::engine e(shape(2));
  auto x = e.make_object<int>(0), y = e.make_object<int>(0);
  flowlane::stream s = e.host(1);
  const fl_instr_id bad = s.submit([]() -> void { throw row_error("bad row"); }, {flowlane::write(x)}, "parse");
  s.submit([&] { y.value() = x.value(); }, {flowlane::read(x), flowlane::write(y)}, "use");
  try {
    x.wait();
    FAIL() << "wait() returned";
  } catch (const row_error& err) {
    EXPECT_EQ(err.row, 12);
  }
  try {  // a dependent skipped because of it: the same exception
    y.wait();
    FAIL() << "wait() returned";
  } catch (const row_error& err) {
    EXPECT_STREQ(err.what(), "bad row");
  }
  try {
    s.wait(bad);
    FAIL() << "wait(id) returned";
  } catch (const row_error&) {
  }
  // A failure without an exception (a status) is still a flowlane::error.
  const fl_instr_id st = s.submit([] { return FL_ERR_INSTRUCTION_FAILED; });
  try {
    s.wait(st);
    FAIL() << "wait(id) returned";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_INSTRUCTION_FAILED);
  }
}

TEST(CppCheckAccess, AnUndeclaredObjectThrowsNamingBoth) {
  const bool was = flowlane::check_access();
  flowlane::set_check_access(true);
  flowlane::engine e(shape(2));
  auto o1 = e.make_object<int>(41), o2 = e.make_object<int>(0);
  e.host().submit([&] { o2.value() = o1.value() + 1; }, {flowlane::write(o2)}, "reads o1 unannounced");
  try {
    o2.wait();
    FAIL() << "the undeclared read went through";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_INVALID_ARGUMENT);
    const std::string what = err.what();
    EXPECT_NE(what.find("instruction 'reads o1 unannounced'"), std::string::npos) << what;
    char object[32];
    std::snprintf(object, sizeof object, "%p", static_cast<void*>(o1.get()));
    EXPECT_NE(what.find(object), std::string::npos) << what;
  }
  // Declared, it runs; outside instructions value() is the program's.
  auto o3 = e.make_object<int>(0);
  e.host().submit([&] { o3.value() = o1.value() + 1; }, {flowlane::read(o1), flowlane::write(o3)}, "declares");
  o3.wait();
  EXPECT_EQ(o3.value(), 42);
  flowlane::set_check_access(false);
  auto o4 = e.make_object<int>(0);
  e.host().submit([&] { o4.value() = o1.value(); }, {flowlane::write(o4)}, "unchecked");
  o4.wait();
  EXPECT_EQ(o4.value(), 41);
  flowlane::set_check_access(was);
}

}  // namespace
