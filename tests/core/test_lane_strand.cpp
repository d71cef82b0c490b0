// White-box tests of the lane strand (core/engine/lane.cpp; core/engine/README.md, "Lanes
// as strands"): one runner per lane at a time, submission order, a lane blocked on its
// head stays owned and resumes when the head's predecessor completes, an idle lane gives
// its ownership back (`scheduled` = 0) and the pool parks.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine_rig.hpp"

namespace flowlane::core::testing {
namespace {

// Many submitting threads, one lane each plus one shared lane, more workers than lanes'
// worth of work: no two instructions of a lane ever run at once, and each submitter's
// instructions run in its submission order.
TEST(LaneStrand, OneRunnerPerLaneInSubmissionOrder) {
  Rig rig(4);
  const int kThreads = 3, kEach = FL_UNDER_SANITIZER ? 500 : 5000;
  struct PerLane {
    std::atomic<int> running{0};
    std::atomic<int> max_running{0};
  };
  PerLane lanes[kThreads + 1];
  std::vector<int> last_seen(kThreads, -1);  // written by the shared lane's runner only
  std::atomic<bool> out_of_order{false};
  auto body = [&](PerLane& pl) {
    int now = pl.running.fetch_add(1) + 1;
    int prev = pl.max_running.load();
    while (now > prev && !pl.max_running.compare_exchange_weak(prev, now)) {
    }
    for (int spin = 0; spin < 50; ++spin) std::atomic_signal_fence(std::memory_order_seq_cst);
    pl.running.fetch_sub(1);
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int n = 0; n < kEach; ++n) {
        rig.submit(rig.host(uint32_t(1 + t)), {}, [&, t] {
          body(lanes[t]);
          return FL_OK;
        });
        rig.submit(rig.host(7), {}, [&, t, n] {  // the shared lane: several producers
          body(lanes[kThreads]);
          if (last_seen[t] >= n) out_of_order = true;
          last_seen[t] = n;
          return FL_OK;
        });
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(rig.sync(rig.host(uint32_t(1 + t))));
  EXPECT_TRUE(rig.sync(rig.host(7)));
  for (int l = 0; l <= kThreads; ++l) EXPECT_EQ(lanes[l].max_running.load(), 1) << "lane slot " << l;
  EXPECT_FALSE(out_of_order.load());
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(last_seen[t], kEach - 1);
}

// A lane whose head waits for another lane's instruction stays owned (scheduled = 1, its
// head in `cur`) without occupying a worker, and runs the head once the predecessor
// completes.
TEST(LaneStrand, BlockedLaneStaysOwnedAndResumes) {
  Rig rig(2);
  Object* o = rig.object();
  Gate gate;
  std::atomic<bool> ran{false};
  rig.submit(rig.host(1), {W(o)}, [&] { return gate.wait(); }, "producer");
  auto consumer = rig.submit(rig.host(2), {R(o)}, [&] {
    ran = true;
    return FL_OK;
  }, "consumer");
  Lane& lane = rig.engine.lane(2);
  // The runner reached the head and dropped the lane's unit: the lane is blocked on it.
  ASSERT_TRUE(eventually([&] { return consumer.i->pending.load() == 1; }));
  EXPECT_EQ(lane.scheduled.load(), 1u);
  EXPECT_EQ(lane.cur, consumer.i);
  EXPECT_FALSE(ran.load());
  // The blocked lane holds no worker: another lane's work runs meanwhile on the free one.
  std::atomic<bool> other{false};
  rig.submit(rig.host(3), {}, [&] {
    other = true;
    return FL_OK;
  });
  EXPECT_TRUE(rig.sync(rig.host(3)));
  EXPECT_TRUE(other.load());
  gate.open = true;
  EXPECT_TRUE(rig.sync(rig.host(2)));
  EXPECT_TRUE(ran.load());
}

// Once its queue is empty the lane gives up its ownership (scheduled = 0) and every
// worker parks; new work schedules the lane again.
TEST(LaneStrand, IdleLaneGoesIdleAndThePoolParks) {
  Rig rig(2);
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> ran{0};
    for (int k = 0; k < 100; ++k)
      rig.submit(rig.host(1), {}, [&] {
        ran.fetch_add(1);
        return FL_OK;
      });
    EXPECT_TRUE(rig.sync(rig.host(1)));
    EXPECT_EQ(ran.load(), 100);
    Lane& lane = rig.engine.lane(1);
    EXPECT_TRUE(eventually([&] { return lane.scheduled.load() == 0; })) << "the lane never went idle";
    EXPECT_TRUE(eventually([&] { return rig.engine.pool().parked_workers() == rig.engine.pool().size(); }))
        << "the workers never parked";
  }
}

// A push that lands after the runner's last look at the queue and before it marks the lane
// idle: the producer saw the lane owned and did not schedule it, so only the runner's look
// after marking it idle (Lane::give_up) can run it. The observer's idle hook submits exactly
// there, once; without that look the instruction would be stranded on an idle lane.
TEST(LaneStrand, APushJustBeforeTheLaneGoesIdleIsRunByTheRunnerGivingItUp) {
  Rig rig(2);
  struct PushWhenIdle : Observer {
    Rig* rig = nullptr;
    std::atomic<int> fired{0};
    std::atomic<bool> submitted{false};
    std::atomic<bool> ran{false};
    void on_lane_idle(uint32_t lane) override {
      if (lane != 1 || fired.exchange(1) != 0) return;
      // On the lane's runner, which still owns the lane: the push sees it owned.
      rig->submit(rig->host(1), {}, [this] {
        ran = true;
        return FL_OK;
      }, "pushed-while-idling");
      // Re-checked only after the hook returns: it really was a push onto an owned lane.
      EXPECT_EQ(rig->engine.lane(1).scheduled.load(), 1u);
      submitted = true;
    }
  };
  auto owned = std::make_unique<PushWhenIdle>();
  PushWhenIdle* ob = owned.get();
  ob->rig = &rig;
  rig.engine.set_observer(std::move(owned));
  rig.submit(rig.host(1), {}, [] { return FL_OK; }, "first");
  ASSERT_TRUE(eventually([&] { return ob->submitted.load(); })) << "the lane never went idle";
  EXPECT_EQ(rig.engine.waits().synchronize(rig.host(1), Deadline::after_ns(10'000'000'000ull)), FL_OK)
      << "the instruction pushed while the runner was giving the lane up was stranded";
  EXPECT_TRUE(ob->ran.load());
  EXPECT_TRUE(eventually([&] { return rig.engine.lane(1).scheduled.load() == 0; })) << "the lane never went idle";
}

// fl_instr_cancel requests are kept once per instruction, however often they are made: a
// caller spinning on fl_instr_cancel while the lane is busy used to grow the lane's list
// without bound (and the runner's scan of it for every instruction, a livelock under load).
// A request for the running instruction is dropped once the next one starts.
TEST(LaneStrand, RepeatedCancelRequestsAreKeptOncePerInstruction) {
  Rig rig(1);
  Lane& lane = rig.engine.lane(1);
  Stream* s = rig.host(1);
  Gate gate;
  std::atomic<int> ran{0};
  auto counted = [&] {
    ran.fetch_add(1);
    return FL_OK;
  };
  auto blocker = rig.submit(s, {}, [&] { return gate.wait(); }, "blocker");
  auto x = rig.submit(s, {}, counted, "x");
  auto y = rig.submit(s, {}, counted, "y");
  rig.submit(s, {}, counted, "z");
  ASSERT_TRUE(eventually([&] { return blocker.i->state.load() == uint32_t(InstrState::kRunning); }));
  for (int k = 0; k < 10000; ++k) rig.engine.cancel_drain().cancel(s, y.id);
  rig.engine.cancel_drain().cancel(s, x.id);
  rig.engine.cancel_drain().cancel(s, blocker.id);  // started already: can never take effect
  rig.engine.cancel_drain().cancel(s, y.id);
  EXPECT_EQ(lane.cancel_requests.load(), 3u);
  {
    std::lock_guard<std::mutex> lock(lane.cancel_mu);
    EXPECT_EQ(lane.cancel_ids, (std::vector<fl_instr_id>{blocker.id, x.id, y.id}));
  }
  gate.open = true;
  int reported = 0;  // synchronize reports the two cancellations, one per call
  while (!rig.sync(s) && reported < 10) ++reported;
  EXPECT_EQ(reported, 2);
  EXPECT_EQ(ran.load(), 1);  // z only
  EXPECT_EQ(lane.cancelled.load(), 2u);
  EXPECT_EQ(lane.cancel_requests.load(), 0u);
}

// FL_SUBMIT_INLINE on an idle, empty lane: the submitter claims it under the submit lock,
// runs the instruction without queueing it, and gives the lane back (scheduled = 0).
TEST(LaneStrand, InlineSubmissionRunsOnTheSubmitterAndLeavesTheLaneIdle) {
  Rig rig(1);
  Lane& lane = rig.engine.lane(1);
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id ran_on{};
  rig.submit(rig.host(1), {}, [&] {
    ran_on = std::this_thread::get_id();
    return FL_OK;
  }, "inline", false, /*run_inline=*/true);
  EXPECT_EQ(ran_on, me);
  EXPECT_EQ(lane.scheduled.load(), 0u);
  EXPECT_TRUE(lane.empty_owned());
  EXPECT_EQ(lane.completed.load(), 1u);
}

// The window between another producer's push and its schedule(): the lane is idle but
// not empty. An inline submission that claims it then must not run its own instruction
// ahead of the queued one (nor run the other thread's instruction itself): both go to a
// worker, in queue order.
TEST(LaneStrand, InlineSubmissionBehindAQueuedButUnscheduledInstructionGoesToTheWorker) {
  Rig rig(1);
  Lane& lane = rig.engine.lane(1);
  std::vector<std::string> order;  // written by the lane runner only
  std::thread::id x_on{}, y_on{};
  // Pretend the lane is owned while X is pushed, so that X's schedule() submits nothing:
  // X is then queued on an idle lane, as between another producer's push and schedule().
  lane.scheduled.store(1);
  rig.submit(rig.host(1), {}, [&] {
    order.push_back("x");
    x_on = std::this_thread::get_id();
    return FL_OK;
  }, "x");
  lane.scheduled.store(0);
  rig.submit(rig.host(1), {}, [&] {
    order.push_back("y");
    y_on = std::this_thread::get_id();
    return FL_OK;
  }, "y", false, /*run_inline=*/true);
  ASSERT_TRUE(rig.sync(rig.host(1)));
  EXPECT_EQ(order, (std::vector<std::string>{"x", "y"}));
  EXPECT_NE(y_on, std::this_thread::get_id());
  EXPECT_NE(x_on, std::this_thread::get_id());
  EXPECT_TRUE(eventually([&] { return lane.scheduled.load() == 0; }));
}

}  // namespace
}  // namespace flowlane::core::testing
