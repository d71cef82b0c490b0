// Capture and replay under the concurrency users bring: one program destroyed from several
// threads at once, a program destroyed by a callback while its engine's destroy drains, two threads capturing
// on one engine at once, a program destroyed from inside its own replayed function, and
// every call on a stale program handle.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using fltest::RW;

// A program of one host instruction on lane 1 whose cleanup counts into *cleanups.
fl_program_t* counted_program(fl_engine_t* e, fl_stream_t* s, std::atomic<int>* cleanups) {
  EXPECT_EQ(fl_capture_begin(e, nullptr), FL_OK) << fl_last_error_message();
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  in.cleanup = [](void* c) { static_cast<std::atomic<int>*>(c)->fetch_add(1); };
  in.user_data = cleanups;
  EXPECT_EQ(fl_submit_host(s, &in, nullptr), FL_OK) << fl_last_error_message();
  fl_program_t* p = nullptr;
  EXPECT_EQ(fl_capture_end(e, &p), FL_OK) << fl_last_error_message();
  return p;
}

// Runs fn(i) on n threads released together.
template <class Fn>
void together(int n, Fn fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CaptureRaces, DestroyFromSeveralThreadsFreesOnceAndTheLosersGetInvalidHandle) {
  EngineFixture f(2, 2);
  for (int round = 0; round < 100; ++round) {
    std::atomic<int> cleanups{0};
    fl_program_t* p = counted_program(f.engine, f.host(1), &cleanups);
    ASSERT_FL_OK(fl_program_launch(p, f.host(0), 0, nullptr));  // in flight or done: either way
    std::atomic<int> ok{0}, stale{0}, other{0};
    together(4, [&](int) {
      fl_status_t st = fl_program_destroy(p);
      (st == FL_OK ? ok : st == FL_ERR_INVALID_HANDLE ? stale : other).fetch_add(1);
    });
    ASSERT_EQ(ok.load(), 1) << "round " << round;
    ASSERT_EQ(stale.load(), 3) << "round " << round;
    ASSERT_EQ(other.load(), 0) << "round " << round;
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
    ASSERT_EQ(cleanups.load(), 1) << "round " << round;
  }
}

// fl_engine_destroy lets callbacks call in while it drains (the program's own threads must
// not call at all: the header). A replayed function that destroys its own program then, and
// programs the engine frees itself: each freed exactly once.
TEST(CaptureRaces, AProgramDestroyedByACallbackWhileEngineDestroyDrainsIsFreedOnce) {
  for (int round = 0; round < 20; ++round) {
    fl_engine_t* e = nullptr;
    ASSERT_FL_OK(fl_engine_create(nullptr, &e));
    fl_stream_t* s = nullptr;
    ASSERT_FL_OK(fl_stream_get(e, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
    std::atomic<int> cleanups{0};
    fl_program_t* left = counted_program(e, s, &cleanups);  // freed by the engine's destroy
    ASSERT_FL_OK(fl_program_launch(left, s, 0, nullptr));
    struct Self {
      fltest::Gate gate;
      std::atomic<fl_program_t*> program{nullptr};
      std::atomic<int> status{-1};
      std::atomic<int>* cleanups;
    } self;
    self.cleanups = &cleanups;
    ASSERT_FL_OK(fl_capture_begin(e, nullptr));
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = [](fl_instr_ctx_t*, void* u) {
      auto* me = static_cast<Self*>(u);
      if (!me->gate.wait()) return FL_ERR_TIMEOUT;
      me->status = fl_program_destroy(me->program.load());
      return FL_OK;
    };
    in.cleanup = [](void* u) { static_cast<Self*>(u)->cleanups->fetch_add(1); };
    in.user_data = &self;
    ASSERT_FL_OK(fl_submit_host(s, &in, nullptr));
    fl_program_t* p = nullptr;
    ASSERT_FL_OK(fl_capture_end(e, &p));
    self.program = p;
    ASSERT_FL_OK(fl_program_launch(p, s, 0, nullptr));
    std::thread opener([&self] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // (destroy is likely draining)
      self.gate.open = true;
    });
    ASSERT_FL_OK(fl_engine_destroy(e));
    opener.join();
    EXPECT_EQ(self.status.load(), FL_OK) << "round " << round;
    ASSERT_EQ(cleanups.load(), 2) << "round " << round << ": each program freed exactly once";
    EXPECT_FL_ERR(fl_program_destroy(left), FL_ERR_INVALID_HANDLE, "");
  }
}

TEST(CaptureRaces, TwoThreadsCaptureOnOneEngineAtOnceIntoTwoPrograms) {
  EngineFixture f(2, 4);
  fl_object_t* x = fltest::make_obj(f.engine);
  fl_object_t* y = fltest::make_obj(f.engine);
  std::atomic<int> xs{0}, ys{0};
  fl_program_t* programs[2] = {nullptr, nullptr};
  together(2, [&](int i) {
    ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
    std::atomic<int>* n = i == 0 ? &xs : &ys;
    for (int k = 0; k < 50; ++k) {
      fltest::submit(f.host(static_cast<uint32_t>(1 + i)), [n] {
        n->fetch_add(1);
        return FL_OK;
      }, {RW(i == 0 ? x : y)});
    }
    EXPECT_FL_OK(fl_capture_end(f.engine, &programs[i]));
  });
  ASSERT_NE(programs[0], nullptr);
  ASSERT_NE(programs[1], nullptr);
  EXPECT_EQ(xs.load() + ys.load(), 0) << "nothing ran while capturing";
  fl_program_info_t in = FL_PROGRAM_INFO_INIT;
  ASSERT_FL_OK(fl_program_info(programs[0], &in));
  EXPECT_EQ(in.instructions, 50u) << "each program has only its own thread's submissions";
  ASSERT_FL_OK(fl_program_launch(programs[0], f.host(0), 0, nullptr));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(xs.load(), 50);
  EXPECT_EQ(ys.load(), 0);
  ASSERT_FL_OK(fl_program_launch(programs[1], f.host(3), 0, nullptr));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ys.load(), 50);
  for (fl_program_t* p : programs) ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_object_release(y));
}

TEST(CaptureRaces, AProgramDestroyedFromItsOwnReplayedFunctionIsFreedAfterThatLaunch) {
  EngineFixture f(2, 2);
  std::atomic<fl_program_t*> self{nullptr};
  std::atomic<int> destroy_status{-1}, ran{0};
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  fltest::submit(f.host(1), [&] {
    destroy_status = fl_program_destroy(self.load());
    return FL_OK;
  });
  fltest::submit(f.host(1), [&] {
    ran.fetch_add(1);  // after the destroy, in the same launch: the program is still there
    return FL_OK;
  });
  fl_program_t* p = nullptr;
  ASSERT_FL_OK(fl_capture_end(f.engine, &p));
  self = p;
  fl_instr_id id = 0;
  ASSERT_FL_OK(fl_program_launch(p, f.host(0), 0, &id));
  EXPECT_FL_OK(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER));
  EXPECT_EQ(destroy_status.load(), FL_OK);
  EXPECT_EQ(ran.load(), 1);
  EXPECT_FL_ERR(fl_program_launch(p, f.host(0), 0, nullptr), FL_ERR_INVALID_HANDLE, "");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
}

TEST(CaptureRaces, EveryCallOnAStaleProgramAnswersInvalidHandle) {
  EngineFixture f(2, 2);
  std::atomic<int> cleanups{0};
  fl_program_t* p = counted_program(f.engine, f.host(1), &cleanups);
  ASSERT_FL_OK(fl_program_destroy(p));
  EXPECT_EQ(cleanups.load(), 1);
  fl_program_info_t in = FL_PROGRAM_INFO_INIT;
  EXPECT_FL_ERR(fl_program_info(p, &in), FL_ERR_INVALID_HANDLE, "");
  EXPECT_FL_ERR(fl_program_launch(p, f.host(0), 0, nullptr), FL_ERR_INVALID_HANDLE, "");
  EXPECT_FL_ERR(fl_program_destroy(p), FL_ERR_INVALID_HANDLE, "");
}

TEST(CaptureRaces, LaunchesFromManyThreadsRunOneAtATimeAndAllRun) {
  EngineFixture f(3, 4);
  std::atomic<int> inside{0}, overlap{0}, runs{0};
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  fltest::submit(f.host(1), [&] {
    if (inside.fetch_add(1) != 0) overlap.fetch_add(1);
    std::this_thread::yield();
    runs.fetch_add(1);
    inside.fetch_sub(1);
    return FL_OK;
  });
  fl_program_t* p = nullptr;
  ASSERT_FL_OK(fl_capture_end(f.engine, &p));
  together(4, [&](int i) {
    for (int k = 0; k < 50; ++k) EXPECT_FL_OK(fl_program_launch(p, f.host(static_cast<uint32_t>(i)), 0, nullptr));
  });
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(runs.load(), 200);
  EXPECT_EQ(overlap.load(), 0) << "launches of one program run one after the other";
  fl_program_info_t in = FL_PROGRAM_INFO_INIT;
  ASSERT_FL_OK(fl_program_info(p, &in));
  EXPECT_EQ(in.launches, 200u);
  ASSERT_FL_OK(fl_program_destroy(p));
}

}  // namespace
