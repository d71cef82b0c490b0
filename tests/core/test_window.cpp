// White-box tests of the in-flight window (Window::admit / Window::retire in
// core/engine/window.cpp; core/engine/README.md, "The in-flight window"): a submitter
// parked on a full window resumes when the window has drained to its low-water mark — not
// at the first free slot, and never stranded — and submissions from code the engine runs
// are admitted over the limit.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "engine_rig.hpp"

namespace flowlane::core::testing {
namespace {

// Notes the in-flight count at the moment a parked submitter resumes.
struct StallLog : Observer {
  Engine* engine = nullptr;
  std::atomic<int> stalls{0};
  std::atomic<int64_t> inflight_at_resume{-1};
  void on_window_stall(bool begin) override {
    if (begin)
      stalls.fetch_add(1);
    else
      inflight_at_resume.store(engine->inflight());
  }
};

TEST(Window, ParkedSubmitterResumesAtTheLowWaterMark) {
  const uint64_t kLimit = 64;
  Rig rig(2, kLimit);
  Engine& e = rig.engine;
  auto log = std::make_unique<StallLog>();
  StallLog* stall = log.get();
  stall->engine = &e;
  e.set_observer(std::move(log));
  ASSERT_LT(e.window().low_water(), int64_t(kLimit) - 1) << "the mark must leave room for a batch";
  // Fill the window with instructions that complete one at a time, when told to.
  std::atomic<uint64_t> allowed{0};
  for (uint64_t k = 0; k < kLimit; ++k)
    rig.submit(rig.host(1), {}, [&allowed, k] { return eventually([&] { return allowed.load() > k; }) ? FL_OK : FL_ERR_TIMEOUT; });
  ASSERT_EQ(e.inflight(), int64_t(kLimit));
  std::atomic<bool> returned{false};
  std::thread submitter([&] {
    rig.submit(rig.host(2), {}, [] { return FL_OK; });  // blocks: the window is full
    returned = true;
  });
  ASSERT_TRUE(eventually([&] { return e.window_waiters() == 1; }));
  Stream* s = rig.host(1);
  for (uint64_t k = 1; k <= kLimit && !returned.load(); ++k) {
    allowed = k;
    ASSERT_TRUE(eventually([&] { return s->completed.load() >= k; }));
    if (int64_t(kLimit - k) > e.window().low_water()) {  // what completions left (the submitter adds one once it resumes)
      EXPECT_EQ(e.window_waiters(), 1u) << "resumed above the low-water mark, at " << e.inflight();
    } else {
      // At the mark: the parked submitter must be woken (never stranded).
      ASSERT_TRUE(eventually([&] { return returned.load(); })) << "stranded at the low-water mark";
    }
  }
  submitter.join();
  EXPECT_EQ(stall->stalls.load(), 1);
  EXPECT_EQ(stall->inflight_at_resume.load(), e.window().low_water()) << "a parked submitter resumes at the mark";
  allowed = kLimit;
  EXPECT_TRUE(rig.sync(rig.host(1)));
  EXPECT_TRUE(rig.sync(rig.host(2)));
}

// An instruction that submits into a full window is admitted over the limit, even with
// FL_SUBMIT_NONBLOCKING: it may be the very work that must finish to open the window.
TEST(Window, WorkerSubmissionsAreAdmittedOverTheLimit) {
  const uint64_t kLimit = 4;
  Rig rig(2, kLimit);
  Engine& e = rig.engine;
  Gate gate;
  std::atomic<int> children{0};
  std::atomic<int> refused{0};
  std::atomic<int64_t> max_inflight{0};
  for (uint64_t k = 1; k < kLimit; ++k) rig.submit(rig.host(2), {}, [&] { return gate.wait(); });
  rig.submit(rig.host(1), {}, [&] {
    for (int n = 0; n < 10; ++n) {
      try {
        rig.submit(rig.host(3), {}, [&] {
          children.fetch_add(1);
          return FL_OK;
        }, "child", /*nonblocking=*/true);
      } catch (const Error&) {
        refused.fetch_add(1);
      }
      int64_t now = e.inflight();
      if (now > max_inflight.load()) max_inflight = now;
    }
    gate.open = true;
    return FL_OK;
  });
  EXPECT_TRUE(rig.sync(rig.host(1)));
  EXPECT_TRUE(rig.sync(rig.host(2)));
  EXPECT_TRUE(rig.sync(rig.host(3)));
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(children.load(), 10);
  EXPECT_GT(max_inflight.load(), int64_t(kLimit)) << "the callback's submissions were not admitted over the limit";
  EXPECT_EQ(e.stats().window_stalls, 0u);
}

// Outside threads get FL_ERR_WOULD_BLOCK from a full window with the nonblocking flag, and
// the refused submission leaves the count unchanged.
TEST(Window, NonblockingOutsideSubmissionIsRefusedAndCountsNothing) {
  const uint64_t kLimit = 2;
  Rig rig(1, kLimit);
  Gate gate;
  for (uint64_t k = 0; k < kLimit; ++k) rig.submit(rig.host(1), {}, [&] { return gate.wait(); });
  try {
    rig.submit(rig.host(2), {}, [] { return FL_OK; }, "extra", /*nonblocking=*/true);
    ADD_FAILURE() << "a full window admitted an outside submission";
  } catch (const Error& err) {
    EXPECT_EQ(err.status, FL_ERR_WOULD_BLOCK);
  }
  EXPECT_EQ(rig.engine.inflight(), int64_t(kLimit));
  gate.open = true;
  EXPECT_TRUE(rig.sync(rig.host(1)));
  EXPECT_EQ(rig.engine.inflight(), 0);
}

}  // namespace
}  // namespace flowlane::core::testing
