// White-box tests of the trace's lifecycle (core/diag/trace.cpp): what a trace leaves
// behind once it is stopped. The engine keeps every observer it ever installed (a hook may
// still be running in one it has replaced), so a program that starts and stops traces in a
// loop must not get a new observer, or keep an event buffer, per trace.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "diag/trace.hpp"
#include "diag/watchdog.hpp"
#include "engine_rig.hpp"
#include "test_util.hpp"

namespace flowlane::core::testing {
namespace {

TEST(TraceLifecycle, RestartedTracesReuseOneObserverAndStoppedOnesHoldNoBuffer) {
  Rig rig(1);
  diag::Diagnostics& d = diag::diagnostics(rig.engine);
  const size_t kept_before = rig.engine.observers_kept();
  const std::string path = fltest::unique_temp_path("flowlane_trace_restart.json");
  Stream* s = rig.host(1);
  diag::TraceObserver* first = nullptr;
  for (int round = 0; round < 20; ++round) {
    diag::trace_start(&rig.engine, path.c_str());
    diag::TraceObserver* t = nullptr;
    {
      std::lock_guard<std::mutex> lock(d.trace_mu);
      t = d.trace;
    }
    ASSERT_NE(t, nullptr);
    if (first == nullptr) first = t;
    EXPECT_EQ(t, first) << "round " << round;
    for (int k = 0; k < 2000; ++k) rig.submit(s, {}, [] { return FL_OK; });  // 4000 events: the buffer grows
    ASSERT_TRUE(rig.sync(s));
    diag::trace_stop(&rig.engine, /*at_destroy=*/false);
    EXPECT_EQ(t->buffer_capacity(), 0u) << "round " << round;
  }
  EXPECT_EQ(rig.engine.observers_kept(), kept_before + 1);
  std::remove(path.c_str());
}

// Hooks keep running while traces stop and restart (a hook may still hold the observer it
// read before fl_trace_stop cleared it): under ThreadSanitizer this checks that a restart
// does not race with them.
TEST(TraceLifecycle, TracesRestartWhileInstructionsRun) {
  Rig rig(2);
  const size_t kept_before = rig.engine.observers_kept();
  const std::string path = fltest::unique_temp_path("flowlane_trace_restart_busy.json");
  std::atomic<bool> stop{false};
  std::thread submitter([&] {
    Stream* s = rig.host(1);
    while (!stop.load()) {
      for (int k = 0; k < 64; ++k) rig.submit(s, {}, [] { return FL_OK; });
      ASSERT_TRUE(rig.sync(s));
    }
  });
  const int kRounds = FL_UNDER_SANITIZER ? 8 : 20;
  for (int round = 0; round < kRounds; ++round) {
    diag::trace_start(&rig.engine, path.c_str());
    std::this_thread::yield();
    diag::trace_stop(&rig.engine, /*at_destroy=*/false);
  }
  stop = true;
  submitter.join();
  EXPECT_EQ(rig.engine.observers_kept(), kept_before + 1);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace flowlane::core::testing
