// White-box tests of Waits::find_waiter (core/engine/find_waiter.cpp): the walk of what waits for
// a calling instruction, at the moments a public-API test cannot hold still.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "engine_rig.hpp"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace flowlane::core::testing {
namespace {

// Holds the submission of the instruction named "y" between its recording and its push on
// the lane (Observer::on_submit runs there, under the lane's submit lock), until a wait has
// finished its walk (on_wait) or a short while has passed. The pause only decides whether
// an engine that misses the recording is caught; a correct engine refuses either way.
struct HoldBeforePush : Observer {
  std::atomic<bool> armed{false};
  std::atomic<bool> holding{false};
  std::atomic<bool> walked{false};
  void on_submit(const Instr& i) override {
    if (i.name != "y" || !armed.exchange(false)) return;
    holding = true;
    const auto until = Clock::now() + std::chrono::milliseconds(FL_UNDER_SANITIZER ? 1000 : 200);
    while (!walked.load() && Clock::now() < until) std::this_thread::yield();
  }
  void on_wait(bool begin, const char* what) override {
    if (begin && std::strcmp(what, "fl_instr_wait_for") == 0) walked = true;
  }
};

// The chain caller -> x (reads what the caller writes, lane 2) -> y (queued behind x on lane
// 2) -> T (reads what y writes, lane 3). T's submission has returned its id while y is
// recorded but not yet linked behind x: T already waits for y, and y will wait for x. A wait
// for T from the caller must be refused, not left to wait forever.
TEST(FindWaiter, ADependentWhoseLanePredecessorIsStillBeingQueuedIsFound) {
  Gate go;  // outlives the engine's drain
  Rig rig(4);
  auto owned = std::make_unique<HoldBeforePush>();
  HoldBeforePush* hold = owned.get();
  rig.engine.set_observer(std::move(owned));
  Object* x_obj = rig.object();
  Object* y_obj = rig.object();
  std::atomic<fl_instr_id> target{0};
  std::atomic<bool> done{false};
  fl_status_t seen = FL_OK;
  std::string msg;
  rig.submit(
      rig.host(1), {W(x_obj)},
      [&] {
        if (go.wait() != FL_OK) return FL_ERR_TIMEOUT;
        try {
          seen = rig.engine.waits().wait_instr(rig.host(3), target.load(), Deadline::after_ns(30'000'000'000ull));
        } catch (const Error& e) {
          seen = e.status;
          msg = e.message;
        }
        done = true;
        return FL_OK;
      },
      "caller");
  rig.submit(rig.host(2), {R(x_obj)}, [] { return FL_OK; }, "x");
  hold->armed = true;
  std::thread b([&] { rig.submit(rig.host(2), {W(y_obj)}, [] { return FL_OK; }, "y"); });
  ASSERT_TRUE(eventually([&] { return hold->holding.load(); }));
  target = rig.submit(rig.host(3), {R(y_obj)}, [] { return FL_OK; }, "T").id;
  go.open = true;
  b.join();
  for (uint32_t l = 1; l <= 3; ++l) EXPECT_TRUE(rig.sync(rig.host(l))) << "lane " << l;
  ASSERT_TRUE(done.load());
  EXPECT_EQ(seen, FL_ERR_INVALID_ARGUMENT) << fl_status_name(seen) << ": " << msg;
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-> 'y'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-> 'T'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace flowlane::core::testing
