// FL_SUBMIT_INLINE: a host instruction that is ready at once (its lane idle, every
// predecessor complete) runs on the submitting thread before fl_submit_host returns;
// anything else is queued as without the flag. These tests pin both sides of that rule,
// the callback rules on the submitting thread (no nesting, no self-waits, destroy
// refused), failures and skips, and many threads mixing inline and queued submissions on
// shared lanes and objects.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

namespace {

// Submits f with FL_SUBMIT_INLINE (plus `extra` flags); returns the status and id.
template <class F>
fl_status_t submit_inline(fl_stream_t* s, F f, std::vector<fl_operand_t> ops = {}, fl_instr_id* out_id = nullptr,
                          uint64_t extra = 0) {
  return fltest::try_submit(s, std::move(f), std::move(ops), "inline", FL_SUBMIT_INLINE | extra, out_id);
}

struct CleanupProbe {
  std::thread::id* where;
  static void cleanup(void* ud) { *static_cast<CleanupProbe*>(ud)->where = std::this_thread::get_id(); }
};

}  // namespace

TEST(SubmitInline, ARunnableInstructionRunsOnTheCallerBeforeTheReturn) {
  HangGuard guard("inline submission on an idle engine");
  fl_engine_t* e = make_engine(2, 4);
  fl_stream_t* s = host_stream(e, 1);
  fl_object_t* x = fltest::make_obj(e);
  const std::thread::id me = std::this_thread::get_id();
  for (int k = 0; k < 100; ++k) {
    std::thread::id ran_on{};
    uint32_t lane = 99;
    fl_instr_id seen_id = 0, id = 0;
    ASSERT_FL_OK(submit_inline(
        s,
        [&](fl_instr_ctx_t* ctx) {
          ran_on = std::this_thread::get_id();
          lane = fl_instr_get_lane(ctx);
          seen_id = fl_instr_get_id(ctx);
          return FL_OK;
        },
        {RW(x)}, &id));
    // Every predecessor (the previous iteration, same object, same lane) is complete and
    // the lane idle once the previous call returned: this one ran during the call.
    EXPECT_EQ(ran_on, me) << "iteration " << k;
    EXPECT_EQ(lane, 1u);
    EXPECT_EQ(seen_id, id);
  }
  // Its cleanup ran before the return too.
  std::thread::id cleaned_on{};
  CleanupProbe probe{&cleaned_on};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  in.cleanup = &CleanupProbe::cleanup;
  in.user_data = &probe;
  in.flags = FL_SUBMIT_INLINE;
  ASSERT_FL_OK(fl_submit_host(s, &in, nullptr));
  EXPECT_EQ(cleaned_on, me);
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(e, &st));
  EXPECT_EQ(st.completed, 101u);
  EXPECT_EQ(st.in_flight, 0u);
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_engine_synchronize(e));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

TEST(SubmitInline, ABusyLaneQueuesItBehindInOrder) {
  HangGuard guard("inline submission to a busy lane");
  fl_engine_t* e = make_engine(2, 4);
  fl_stream_t* s = host_stream(e, 1);
  Gate gate;
  std::atomic<int> order{0};
  int first = -1, second = -1;
  std::thread::id second_on{};
  submit(s, [&] {
    first = order.fetch_add(1);
    return gate.wait() ? FL_OK : FL_ERR_INTERNAL;
  });
  ASSERT_FL_OK(submit_inline(s, [&] {
    second = order.fetch_add(1);
    second_on = std::this_thread::get_id();
    return FL_OK;
  }));
  EXPECT_EQ(second, -1) << "ran inline although its lane was busy";
  gate.open = true;
  ASSERT_FL_OK(fl_stream_synchronize(s));
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  EXPECT_NE(second_on, std::this_thread::get_id());
  ASSERT_FL_OK(fl_engine_destroy(e));
}

TEST(SubmitInline, AnUnfinishedPredecessorOnAnotherLaneQueuesIt) {
  HangGuard guard("inline submission with a running predecessor");
  fl_engine_t* e = make_engine(2, 4);
  fl_object_t* x = fltest::make_obj(e);
  Gate gate;
  std::atomic<bool> writer_done{false};
  bool saw_writer = false;
  std::thread::id reader_on{};
  submit(host_stream(e, 1),
         [&] {
           bool ok = gate.wait();
           writer_done = true;
           return ok ? FL_OK : FL_ERR_INTERNAL;
         },
         {W(x)});
  ASSERT_FL_OK(submit_inline(host_stream(e, 2),
                             [&] {
                               saw_writer = writer_done.load();
                               reader_on = std::this_thread::get_id();
                               return FL_OK;
                             },
                             {R(x)}));
  EXPECT_EQ(reader_on, std::thread::id{}) << "ran inline before its predecessor completed";
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_TRUE(saw_writer);
  EXPECT_NE(reader_on, std::this_thread::get_id());
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// How many engine callbacks of these tests are on this thread's stack.
thread_local int t_depth = 0;
struct Depth {
  std::atomic<int>* nested;
  explicit Depth(std::atomic<int>* n) : nested(n) {
    if (++t_depth > 1) nested->fetch_add(1);
  }
  ~Depth() { --t_depth; }
};

// Engine-run code (an instruction's function run inline or by a worker, a cleanup, a
// parallel_for body, a task-graph task) that submits with FL_SUBMIT_INLINE to an idle lane
// gets its instruction queued: it never runs nested on the callback's stack.
TEST(SubmitInline, IsIgnoredInsideCallbacksCleanupsLoopBodiesAndTasks) {
  HangGuard guard("FL_SUBMIT_INLINE from engine-run code");
  fl_engine_t* e = make_engine(2, 4);
  fl_stream_t* idle = host_stream(e, 3);
  struct Shared {
    fl_stream_t* idle;
    std::atomic<int> nested{0}, followed{0}, refused{0}, calls{0};
    void follow_up() {
      Depth d(&nested);
      calls.fetch_add(1);
      fl_status_t st = submit_inline(idle, [this] {
        Depth inner(&nested);
        followed.fetch_add(1);
        return FL_OK;
      });
      if (st != FL_OK) refused.fetch_add(1);
    }
  } sh;
  sh.idle = idle;
  // From a function run inline (on this thread) and from one run by a worker.
  ASSERT_FL_OK(submit_inline(host_stream(e, 1), [&] { return sh.follow_up(), FL_OK; }));
  ASSERT_FL_OK(fl_engine_synchronize(e));
  submit(host_stream(e, 1), [&] { return sh.follow_up(), FL_OK; });
  ASSERT_FL_OK(fl_engine_synchronize(e));
  // From a cleanup of an instruction run inline.
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  in.cleanup = [](void* ud) { static_cast<Shared*>(ud)->follow_up(); };
  in.user_data = &sh;
  in.flags = FL_SUBMIT_INLINE;
  ASSERT_FL_OK(fl_submit_host(host_stream(e, 1), &in, nullptr));
  ASSERT_FL_OK(fl_engine_synchronize(e));
  // From parallel_for bodies (one of them on this thread) and a task-graph task.
  ASSERT_FL_OK(fl_parallel_for(
      e, 0, 4, 1, [](uint64_t, uint64_t, void* ud) { return static_cast<Shared*>(ud)->follow_up(), FL_OK; }, &sh));
  fl_taskgraph_t* g = nullptr;
  uint64_t node = 0;
  ASSERT_FL_OK(fl_taskgraph_create(e, &g));
  ASSERT_FL_OK(fl_taskgraph_add(g, [](void* ud) { return static_cast<Shared*>(ud)->follow_up(), FL_OK; }, &sh, "t",
                                &node));
  ASSERT_FL_OK(fl_taskgraph_run(g, -1));
  ASSERT_FL_OK(fl_taskgraph_destroy(g));
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(sh.refused.load(), 0);
  EXPECT_GE(sh.calls.load(), 5);
  EXPECT_EQ(sh.followed.load(), sh.calls.load());
  EXPECT_EQ(sh.nested.load(), 0) << "an instruction ran nested inside another engine callback";
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// The callback rules hold for an instruction run inline: it is engine-run code.
TEST(SubmitInline, ACallbackRunInlineFollowsTheCallbackRules) {
  HangGuard guard("callback rules inline");
  fl_engine_t* e = make_engine(2, 4);
  fl_stream_t* own = host_stream(e, 1);
  fl_stream_t* other = host_stream(e, 2);
  submit(other, [] { return FL_OK; });
  fl_status_t destroy_st = FL_OK, own_sync = FL_OK, engine_sync = FL_OK, other_sync = FL_ERR_INTERNAL;
  std::thread::id ran_on{};
  ASSERT_FL_OK(fl_stream_synchronize(other));
  ASSERT_FL_OK(submit_inline(own, [&] {
    ran_on = std::this_thread::get_id();
    destroy_st = fl_engine_destroy(e);
    own_sync = fl_stream_synchronize(own);
    engine_sync = fl_engine_synchronize(e);
    other_sync = fl_stream_synchronize(other);
    return FL_OK;
  }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(destroy_st, FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(own_sync, FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(engine_sync, FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(other_sync, FL_OK);
  ASSERT_FL_OK(fl_engine_synchronize(e));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

TEST(SubmitInline, FailuresAndSkipsAreReportedAsWithoutTheFlag) {
  HangGuard guard("inline failures");
  fl_engine_t* e = make_engine(2, 4);
  fl_stream_t* s = host_stream(e, 1);
  fl_object_t* x = fltest::make_obj(e);
  bool reader_ran = false;
  std::thread::id failing_on{};
  // The failing writer runs inline; fl_submit_host still accepts it.
  ASSERT_FL_OK(submit_inline(
      s,
      [&](fl_instr_ctx_t* ctx) {
        failing_on = std::this_thread::get_id();
        fl_instr_set_error(ctx, "the writer gave up");
        return FL_ERR_INSTRUCTION_FAILED;
      },
      {W(x)}));
  EXPECT_EQ(failing_on, std::this_thread::get_id());
  // A reader run inline on another lane: skipped, its cleanup still runs (Closure frees).
  ASSERT_FL_OK(submit_inline(host_stream(e, 2),
                             [&] {
                               reader_ran = true;
                               return FL_OK;
                             },
                             {R(x)}));
  EXPECT_FALSE(reader_ran);
  EXPECT_EQ(fl_engine_synchronize(e), FL_ERR_INSTRUCTION_FAILED);
  EXPECT_TRUE(has(fl_last_error_message(), "the writer gave up")) << fl_last_error_message();
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(e, &st));
  EXPECT_EQ(st.completed, 2u);
  EXPECT_EQ(st.failed, 2u);  // the failure and the skip
  // A C++ exception escaping fn run inline becomes a failure, not a throw through the API.
  ASSERT_FL_OK(submit_inline(s, []() -> fl_status_t { throw std::runtime_error("boom"); }));
  EXPECT_EQ(fl_stream_synchronize(s), FL_ERR_INSTRUCTION_FAILED);
  EXPECT_TRUE(has(fl_last_error_message(), "boom")) << fl_last_error_message();
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

TEST(SubmitInline, FlagErrorsAreSpecific) {
  fl_engine_t* e = make_engine(1, 2);
  fl_stream_t* s = host_stream(e, 0);
  int calls = 0;
  EXPECT_EQ(submit_inline(s, [&] { return ++calls, FL_OK; }, {}, nullptr, 4), FL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(fl_last_error_message(), "FL_SUBMIT_INLINE are defined")) << fl_last_error_message();
  // Inline and nonblocking together: the window is never full here, so it runs inline.
  EXPECT_FL_OK(submit_inline(s, [&] { return ++calls, FL_OK; }, {}, nullptr, FL_SUBMIT_NONBLOCKING));
  EXPECT_EQ(calls, 1);
  ASSERT_FL_OK(fl_engine_destroy(e));
}

TEST(SubmitInline, AFullWindowStillBlocksOrRefusesFirst) {
  HangGuard guard("inline submission and the window");
  fl_engine_t* e = make_engine(1, 4, /*window=*/2);
  Gate gate;
  submit(host_stream(e, 1), [&] { return gate.wait() ? FL_OK : FL_ERR_INTERNAL; });
  submit(host_stream(e, 1), [&] { return FL_OK; });
  int calls = 0;
  EXPECT_EQ(submit_inline(host_stream(e, 2), [&] { return ++calls, FL_OK; }, {}, nullptr, FL_SUBMIT_NONBLOCKING),
            FL_ERR_WOULD_BLOCK);
  EXPECT_EQ(calls, 0);
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(submit_inline(host_stream(e, 2), [&] { return ++calls, FL_OK; }));
  EXPECT_EQ(calls, 1);
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// Many threads, shared lanes and objects, half the submissions inline: per object, every
// access sees exactly the writes its submitter made to it before (RAW) and none made after
// (WAR, WAW), on plain non-atomic state (ThreadSanitizer checks the ordering in the
// sanitizer stage); nothing is lost or run twice.
TEST(SubmitInline, ManyThreadsMixingInlineAndQueuedOnSharedObjectsKeepTheRules) {
  HangGuard guard("threads mixing inline and queued submissions");
  constexpr int kThreads = 4, kObjects = 3, kLanes = 3;
  const int per_thread = int(fl_scaled(3000, 400));
  fl_engine_t* e = make_engine(2, kLanes + 1);
  std::vector<fl_object_t*> objs;
  for (int k = 0; k < kObjects; ++k) objs.push_back(fltest::make_obj(e));
  struct State {
    uint64_t by_thread[kThreads] = {};  // writes made so far by each submitting thread
  };
  std::vector<State> state(kObjects);
  std::atomic<uint64_t> ran{0}, inline_ran{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t rng = 0x9E3779B97F4A7C15ull * uint64_t(t + 1);
      auto next = [&] {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        return rng;
      };
      std::vector<uint64_t> mine(kObjects, 0);  // my writes submitted so far, per object
      const std::thread::id me = std::this_thread::get_id();
      for (int k = 0; k < per_thread; ++k) {
        const int o = int(next() % kObjects);
        const int o2 = int(next() % kObjects);
        const uint32_t lane = uint32_t(1 + next() % kLanes);
        const bool write = next() % 3 == 0;
        const bool inl = next() % 2 == 0;
        fl_stream_t* s = host_stream(e, lane);
        std::vector<fl_operand_t> ops = {write ? RW(objs[size_t(o)]) : R(objs[size_t(o)]), R(objs[size_t(o2)])};
        const uint64_t expect = mine[size_t(o)];
        auto body = [&state, &ran, &inline_ran, &bad, t, o, write, expect, me] {
          uint64_t& seen = state[size_t(o)].by_thread[t];
          if (seen != expect) bad.fetch_add(1);
          if (write) ++seen;
          ran.fetch_add(1);
          if (std::this_thread::get_id() == me) inline_ran.fetch_add(1);
          return FL_OK;
        };
        if (write) ++mine[size_t(o)];
        if (inl) {
          if (submit_inline(s, body, ops) != FL_OK) bad.fetch_add(1);
        } else {
          fltest::submit(s, body, ops);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(ran.load(), uint64_t(kThreads) * uint64_t(per_thread));
  EXPECT_EQ(bad.load(), 0u);
  std::printf("ran %llu instructions, %llu of them on their submitting thread\n", (unsigned long long)ran.load(),
              (unsigned long long)inline_ran.load());
  for (auto* o : objs) ASSERT_FL_OK(fl_object_release(o));
  ASSERT_FL_OK(fl_engine_destroy(e));
}
