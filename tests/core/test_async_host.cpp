// Asynchronous host instructions (SubmitArgs::async_start; core/engine/README.md,
// "Asynchronous host instructions"): the lane moves on while one is in flight, a stream's
// instructions complete in submission order whoever finishes them and in whatever order,
// same-lane readers wait for them through edges, skipped and cancelled ones are still
// started (so a transport can take part), and finishes from many threads keep the counters
// right.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "engine_rig.hpp"
#include "test_util.hpp"

namespace flowlane::core::testing {
namespace {

// Records the edges and the order in which instructions complete.
struct EndLog : EdgeLog {
  std::mutex mu;
  std::vector<fl_instr_id> ends;
  void on_end(const Instr& i) override {
    std::lock_guard<std::mutex> lock(mu);
    ends.push_back(i.id);
  }
  std::vector<fl_instr_id> order() {
    std::lock_guard<std::mutex> lock(mu);
    return ends;
  }
};

// An asynchronous instruction the test finishes by hand: its start records the record and
// whether it was skipped.
struct Async {
  std::atomic<Instr*> started{nullptr};
  std::atomic<int> starts{0};
  std::atomic<bool> skipped{false};
  std::function<void(Instr*)> on_start;  // e.g. finish at once
};

struct AsyncRig : Rig {
  EndLog* ends = nullptr;
  AsyncRig() : Rig(2) {
    auto l = std::make_unique<EndLog>();
    ends = l.get();
    engine.set_observer(std::move(l));
  }
  Stream* coll(uint32_t lane) { return engine.stream(lane, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE); }
  fl_instr_id submit_async(Stream* s, std::vector<Operand> ops, Async* a, const char* name = nullptr) {
    Instr* i = engine.new_instr();
    i->operands = std::move(ops);
    SubmitArgs args;
    args.async_start = [](Instr* x, void* ud, bool skipped) noexcept {
      auto* as = static_cast<Async*>(ud);
      as->skipped = skipped;
      as->starts.fetch_add(1);
      as->started = x;
      if (as->on_start) as->on_start(x);
    };
    args.user_data = a;
    args.name = name;
    return engine.submit(s, i, args);
  }
  void finish(Async& a, fl_status_t st = FL_OK, const std::string& why = "") {
    ASSERT_TRUE(eventually([&] { return a.started.load() != nullptr; })) << "never started";
    Instr* i = a.started.exchange(nullptr);
    engine.executor().finish_async(i, st, why);
  }
  fl_status_t wait(Stream* s, fl_instr_id id) {
    return engine.waits().wait_instr(s, id, Deadline::after_ns(60'000'000'000ull));
  }
  bool done(Stream* s, fl_instr_id id) { return s->reached(id, true); }
};

TEST(AsyncHost, TheLaneRunsOnWhileAnInstructionIsInFlight) {
  AsyncRig rig;
  Async a;
  const fl_instr_id id = rig.submit_async(rig.coll(1), {}, &a, "in flight");
  ASSERT_TRUE(eventually([&] { return a.starts.load() == 1; }));
  std::atomic<bool> ran{false};
  auto b = rig.submit(rig.host(1), {}, [&] {
    ran = true;
    return FL_OK;
  });
  EXPECT_TRUE(rig.sync(rig.host(1))) << "the lane is held by an instruction in flight";
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(rig.done(rig.coll(1), id));
  rig.finish(a);
  EXPECT_EQ(rig.wait(rig.coll(1), id), FL_OK);
  (void)b;
}

TEST(AsyncHost, AStreamCompletesInSubmissionOrderWhateverTheFinishOrder) {
  AsyncRig rig;
  Stream* s = rig.coll(1);
  Async a[3];
  fl_instr_id ids[3];
  for (int k = 0; k < 3; ++k) ids[k] = rig.submit_async(s, {}, &a[k]);
  ASSERT_TRUE(eventually([&] { return a[2].starts.load() == 1; })) << "all three start without waiting";
  rig.finish(a[2]);
  rig.finish(a[1], FL_ERR_INSTRUCTION_FAILED, "second failed");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(rig.done(s, ids[1])) << "completed before the first one";
  EXPECT_FALSE(rig.done(s, ids[2]));
  rig.finish(a[0]);
  EXPECT_EQ(rig.wait(s, ids[2]), FL_OK);
  EXPECT_EQ(rig.ends->order(), (std::vector<fl_instr_id>{ids[0], ids[1], ids[2]}));
  EXPECT_EQ(rig.wait(s, ids[1]), FL_ERR_INSTRUCTION_FAILED);
  EXPECT_EQ(rig.engine.stats().completed, 3u);
  EXPECT_EQ(rig.engine.stats().failed, 1u);
}

// A synchronous instruction of the same stream runs in its turn but completes after the one
// in flight before it (a stream completes in order: synchronize counts on it).
TEST(AsyncHost, ASynchronousInstructionBehindOneInFlightCompletesAfterIt) {
  AsyncRig rig;
  Stream* s = rig.coll(1);
  Async a;
  const fl_instr_id first = rig.submit_async(s, {}, &a);
  std::atomic<bool> ran{false};
  auto second = rig.submit(s, {}, [&] {
    ran = true;
    return FL_OK;
  });
  ASSERT_TRUE(eventually([&] { return ran.load(); })) << "it starts in its turn";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(rig.done(s, second.id));
  rig.finish(a);
  EXPECT_EQ(rig.wait(s, second.id), FL_OK);
  EXPECT_EQ(rig.ends->order(), (std::vector<fl_instr_id>{first, second.id}));
}

// Lane order no longer implies completion: a reader on the same lane waits for the writer
// in flight through an edge, and is skipped when it fails.
TEST(AsyncHost, ASameLaneReaderWaitsForTheWriterInFlight) {
  AsyncRig rig;
  Object* o = rig.object();
  Async a;
  const fl_instr_id w = rig.submit_async(rig.coll(1), {W(o)}, &a);
  std::atomic<bool> ran{false};
  auto r = rig.submit(rig.host(1), {R(o)}, [&] {
    ran = true;
    return FL_OK;
  });
  ASSERT_TRUE(eventually([&] { return a.starts.load() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(ran.load()) << "the reader ran before the writer completed";
  EXPECT_TRUE(rig.ends->has(w, r.id)) << "no edge from the writer in flight to its same-lane reader";
  rig.finish(a, FL_ERR_INSTRUCTION_FAILED, "the transport failed");
  EXPECT_EQ(rig.wait(rig.host(1), r.id), FL_ERR_DEPENDENCY_FAILED);
  EXPECT_FALSE(ran.load());
}

// Skipped (a poisoned input) and cancelled asynchronous instructions are still started,
// told so, and keep their outcome whatever their finish says.
TEST(AsyncHost, SkippedAndCancelledOnesAreStartedAndKeepTheirOutcome) {
  AsyncRig rig;
  Object* o = rig.object();
  auto bad = rig.submit(rig.host(2), {W(o)}, [] { return FL_ERR_INSTRUCTION_FAILED; }, "bad");
  ASSERT_FALSE(rig.sync(rig.host(2)));
  Async a;
  const fl_instr_id id = rig.submit_async(rig.coll(1), {R(o)}, &a);
  ASSERT_TRUE(eventually([&] { return a.starts.load() == 1; }));
  EXPECT_TRUE(a.skipped.load());
  rig.finish(a);  // FL_OK from the transport: still skipped
  EXPECT_EQ(rig.wait(rig.coll(1), id), FL_ERR_DEPENDENCY_FAILED);

  Gate gate;
  rig.submit(rig.host(3), {}, [&] { return gate.wait(); });
  Stream* c3 = rig.coll(3);
  Async b;
  const fl_instr_id cancelled = rig.submit_async(c3, {}, &b);
  rig.engine.cancel_drain().cancel(c3, cancelled);
  gate.open = true;
  ASSERT_TRUE(eventually([&] { return b.starts.load() == 1; }));
  EXPECT_TRUE(b.skipped.load());
  rig.finish(b, FL_ERR_INSTRUCTION_FAILED, "ignored");
  EXPECT_EQ(rig.wait(c3, cancelled), FL_ERR_CANCELLED);
  (void)bad;
}

TEST(AsyncHost, AFinishInsideTheStartCompletesAtOnce) {
  AsyncRig rig;
  Async a;
  AsyncRig* r = &rig;
  a.on_start = [r](Instr* i) { r->engine.executor().finish_async(i, FL_OK, ""); };
  std::vector<fl_instr_id> ids;
  for (int k = 0; k < 100; ++k) ids.push_back(rig.submit_async(rig.coll(1), {}, &a));
  EXPECT_TRUE(rig.sync(rig.coll(1)));
  EXPECT_EQ(rig.ends->order(), ids);
}

// Many streams, instructions finished from several threads in random order: every stream
// completes in its order, and the engine's counters add up.
TEST(AsyncHost, FinishesFromManyThreadsKeepEachStreamInOrder) {
  AsyncRig rig;
  const int kStreams = 3, kPer = FL_UNDER_SANITIZER ? 200 : 2000;
  std::vector<Async> as(size_t(kStreams * kPer));
  std::vector<std::vector<fl_instr_id>> ids(kStreams);
  std::mutex mu;
  std::vector<Instr*> started;
  for (auto& a : as)
    a.on_start = [&](Instr* i) {
      std::lock_guard<std::mutex> lk(mu);
      started.push_back(i);
    };
  std::atomic<bool> stop{false};
  std::vector<std::thread> finishers;
  for (int t = 0; t < 3; ++t)
    finishers.emplace_back([&, t] {
      std::mt19937 rng(uint32_t(t + 1));
      while (!stop.load()) {
        Instr* i = nullptr;
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!started.empty()) {
            size_t k = rng() % started.size();
            i = started[k];
            started[k] = started.back();
            started.pop_back();
          }
        }
        if (i != nullptr)
          rig.engine.executor().finish_async(i, rng() % 7 == 0 ? FL_ERR_INSTRUCTION_FAILED : FL_OK, "random");
        else
          std::this_thread::yield();
      }
    });
  for (int k = 0; k < kPer; ++k)
    for (int s = 0; s < kStreams; ++s)
      ids[size_t(s)].push_back(rig.submit_async(rig.coll(uint32_t(1 + s)), {}, &as[size_t(s * kPer + k)]));
  for (int s = 0; s < kStreams; ++s) {
    // Failures are returned one per wait: loop until the stream is done.
    Stream* st = rig.coll(uint32_t(1 + s));
    ASSERT_TRUE(eventually([&] { return st->reached(ids[size_t(s)].back(), true); }));
  }
  stop = true;
  for (auto& t : finishers) t.join();
  const std::vector<fl_instr_id> order = rig.ends->order();
  for (int s = 0; s < kStreams; ++s) {
    std::vector<fl_instr_id> mine;
    for (fl_instr_id id : order)
      if (std::find(ids[size_t(s)].begin(), ids[size_t(s)].end(), id) != ids[size_t(s)].end()) mine.push_back(id);
    EXPECT_EQ(mine, ids[size_t(s)]) << "stream " << s << " completed out of order";
  }
  EXPECT_EQ(rig.engine.stats().completed, uint64_t(kStreams * kPer));
}

}  // namespace
}  // namespace flowlane::core::testing
