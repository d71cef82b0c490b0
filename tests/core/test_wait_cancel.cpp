// White-box tests of how a wait that engine destroy gives up ends (core/engine/waits.cpp,
// WaitNote): the moment between the wait waking up and its note ending, which a public-API
// test cannot hold still.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "base/error.hpp"
#include "diag/dump.hpp"
#include "engine_rig.hpp"

namespace flowlane::core::testing {
namespace {

// What the observer does with a thread at the end of its wait (on_wait(false) runs after
// the wait woke and after it checked its target, before its note ends).
enum class Role { kNone, kHeld, kAfterHeld };
thread_local Role t_role = Role::kNone;

// kHeld: held until `release` opens; kAfterHeld: goes on only once the kHeld thread is held
// (so it ends after the other has checked its target). 10 s at most each.
struct HoldAfterWait : Observer {
  std::atomic<bool> held{false};
  Gate release;
  void on_wait(bool begin, const char*) override {
    if (begin || t_role == Role::kNone) return;
    const auto until = Clock::now() + std::chrono::seconds(10);
    if (t_role == Role::kAfterHeld) {
      while (!held.load() && Clock::now() < until) std::this_thread::yield();
      return;
    }
    held = true;
    while (!release.open.load() && Clock::now() < until) std::this_thread::yield();
  }
};

enum class Kind { kInstrWait, kStreamSync };

fl_status_t wait_for(Rig& rig, Kind kind, Stream* s, fl_instr_id id, std::string* msg) {
  try {
    return kind == Kind::kInstrWait ? rig.engine.waits().wait_instr(s, id, Deadline::forever())
                                    : rig.engine.waits().synchronize(s, Deadline::forever());
  } catch (const Error& e) {
    *msg = e.message;
    return e.status;
  }
}

// X (lane 1) and Y (lane 2) wait for each other: a cycle. Both waits are given up at once
// (diag::cancel_cycle_waits, as destroy does). X is held right after it wakes and checks
// its target; Y, once X is held, ends cancelled and completes; then X goes on. X's target has completed by the time X decides,
// so X's wait reached it: it must not report a timeout (it had none: it waits forever).
void cancelled_wait_whose_target_completes_meanwhile(Kind kind) {
  Rig rig(4);
  auto owned = std::make_unique<HoldAfterWait>();
  HoldAfterWait* hold = owned.get();
  rig.engine.set_observer(std::move(owned));
  std::atomic<fl_instr_id> x_id{0}, y_id{0};
  fl_status_t st_x = FL_ERR_INTERNAL, st_y = FL_ERR_INTERNAL;
  std::string msg_x, msg_y;
  x_id = rig.submit(rig.host(1), {}, [&] {
               if (!eventually([&] { return y_id.load() != 0; })) return FL_ERR_TIMEOUT;
               t_role = Role::kHeld;
               st_x = wait_for(rig, kind, rig.host(2), y_id.load(), &msg_x);
               t_role = Role::kNone;
               return FL_OK;
             }, "x").id;
  y_id = rig.submit(rig.host(2), {}, [&] {
               t_role = Role::kAfterHeld;
               st_y = wait_for(rig, kind, rig.host(1), x_id.load(), &msg_y);
               t_role = Role::kNone;
               return FL_OK;
             }, "y").id;
  // Once both wait, the cycle is found and both waits are given up together.
  ASSERT_TRUE(eventually([&] { return diag::cancel_cycle_waits(rig.engine) == 2; }));
  ASSERT_TRUE(eventually([&] { return hold->held.load(); })) << "x's wait did not wake up";
  ASSERT_TRUE(eventually([&] { return rig.host(2)->reached(y_id.load(), true); })) << "y did not complete";
  hold->release.open = true;
  EXPECT_TRUE(rig.sync(rig.host(1)));
  EXPECT_EQ(st_y, FL_ERR_CANCELLED) << msg_y;
  EXPECT_EQ(st_x, FL_OK) << fl_status_name(st_x) << ": " << msg_x
                         << " (its target completed before the wait decided how it ended)";
}

TEST(WaitCancel, AnInstrWaitGivenUpWhoseTargetCompletesMeanwhileReportsItReached) {
  cancelled_wait_whose_target_completes_meanwhile(Kind::kInstrWait);
}

TEST(WaitCancel, AStreamSyncGivenUpWhoseStreamCompletesMeanwhileReportsItReached) {
  cancelled_wait_whose_target_completes_meanwhile(Kind::kStreamSync);
}

}  // namespace
}  // namespace flowlane::core::testing
