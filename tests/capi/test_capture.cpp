// Capture and replay (fl_capture_*, fl_program_*): what a capture records, what a launch
// runs, the refusals, failures inside launches, lifetimes (cleanups, objects, programs,
// engines) and launches among eager work.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using fltest::make_obj;
using fltest::R;
using fltest::RW;
using fltest::W;

fl_program_t* end_capture(fl_engine_t* e) {
  fl_program_t* p = nullptr;
  EXPECT_EQ(fl_capture_end(e, &p), FL_OK) << fl_last_error_message();
  return p;
}

void begin_capture(fl_engine_t* e, const char* name = nullptr) {
  fl_capture_desc_t d = FL_CAPTURE_DESC_INIT;
  d.name = name;
  ASSERT_FL_OK(fl_capture_begin(e, &d));
}

fl_instr_id launch(fl_program_t* p, fl_stream_t* s, uint64_t flags = 0) {
  fl_instr_id id = 0;
  EXPECT_EQ(fl_program_launch(p, s, flags, &id), FL_OK) << fl_last_error_message();
  return id;
}

fl_program_info_t info(fl_program_t* p) {
  fl_program_info_t in = FL_PROGRAM_INFO_INIT;
  EXPECT_EQ(fl_program_info(p, &in), FL_OK) << fl_last_error_message();
  return in;
}

// A log appended to by instructions (ordered by the engine only through the objects and
// lanes the test gives them; the mutex only keeps the vector itself sane).
struct Log {
  std::mutex mu;
  std::vector<int> v;
  void add(int x) {
    std::lock_guard<std::mutex> lock(mu);
    v.push_back(x);
  }
  std::vector<int> take() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> out;
    out.swap(v);
    return out;
  }
};

TEST(Capture, NothingRunsWhileCapturingAndEachLaunchRunsEveryInstructionOnce) {
  EngineFixture f(2, 4);
  std::atomic<int> ran{0};
  begin_capture(f.engine, "count");
  for (int k = 0; k < 100; ++k) {
    fl_instr_id id = 12345;
    ASSERT_FL_OK(fltest::try_submit(f.host(uint32_t(k % 4)), [&ran] {
      ran.fetch_add(1);
      return FL_OK;
    }, {}, "inc", 0, &id));
    EXPECT_EQ(id, 0u) << "a captured instruction has no id";
  }
  fl_program_t* p = end_capture(f.engine);
  EXPECT_EQ(ran.load(), 0) << "nothing runs while capturing";
  fl_program_info_t in = info(p);
  EXPECT_EQ(in.instructions, 100u);
  EXPECT_EQ(in.host_instructions, 100u);
  for (int l = 0; l < 3; ++l) launch(p, f.host(0));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ran.load(), 300);
  EXPECT_EQ(info(p).launches, 3u);
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, ReplayKeepsEagerOrderPerObjectAndPerLane) {
  for (uint64_t workers : {1, 4}) {
    EngineFixture f(workers, 4);
    fl_object_t* x = make_obj(f.engine);
    Log log;
    begin_capture(f.engine);
    // A chain through x across lanes, interleaved with lane-ordered work without operands.
    for (int k = 0; k < 40; ++k) {
      fltest::submit(f.host(uint32_t(k % 3)), [&log, k] {
        log.add(k);
        return FL_OK;
      }, {RW(x)});
      fltest::submit(f.host(3), [&log, k] {
        log.add(1000 + k);
        return FL_OK;
      });
    }
    fl_program_t* p = end_capture(f.engine);
    for (int rep = 0; rep < 5; ++rep) {
      launch(p, f.host(0));
      ASSERT_FL_OK(fl_engine_synchronize(f.engine));
      std::vector<int> got = log.take();
      ASSERT_EQ(got.size(), 80u);
      std::vector<int> chain, lane3;
      for (int v : got) (v < 1000 ? chain : lane3).push_back(v);
      for (int k = 0; k < 40; ++k) {
        EXPECT_EQ(chain[size_t(k)], k) << "the object's users keep submission order (workers " << workers << ")";
        EXPECT_EQ(lane3[size_t(k)], 1000 + k) << "a lane's instructions keep submission order";
      }
    }
    ASSERT_FL_OK(fl_program_destroy(p));
    ASSERT_FL_OK(fl_object_release(x));
  }
}

TEST(Capture, AReplayRunsIndependentChainsInParallel) {
  // Two lanes, each a chain; the first instruction of each waits for the other one to have
  // started: they can only finish if the replay runs the chains at once.
  EngineFixture f(4, 4);
  std::atomic<int> started{0};
  begin_capture(f.engine);
  for (uint32_t l = 1; l <= 2; ++l) {
    fltest::submit(f.host(l), [&started] {
      started.fetch_add(1);
      const auto until = fltest::Clock::now() + std::chrono::seconds(30);
      while (started.load() < 2 && fltest::Clock::now() < until) std::this_thread::yield();
      return started.load() >= 2 ? FL_OK : FL_ERR_TIMEOUT;
    });
    for (int k = 0; k < 10; ++k) fltest::submit(f.host(l), [] { return FL_OK; });
  }
  fl_program_t* p = end_capture(f.engine);
  EXPECT_EQ(info(p).tasks, 0u) << "the parallel schedule is built by the first launch that needs it";
  launch(p, f.host(0));
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(info(p).tasks, 2u) << "each lane's chain is one task";
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, CleanupsRunOnceWhenTheProgramIsFreedNotPerLaunch) {
  EngineFixture f(2, 2);
  std::atomic<int> calls{0}, cleanups{0};
  struct Ud {
    std::atomic<int>* calls;
    std::atomic<int>* cleanups;
  } ud{&calls, &cleanups};
  begin_capture(f.engine);
  for (int k = 0; k < 5; ++k) {
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = [](fl_instr_ctx_t*, void* u) {
      static_cast<Ud*>(u)->calls->fetch_add(1);
      return FL_OK;
    };
    in.cleanup = [](void* u) { static_cast<Ud*>(u)->cleanups->fetch_add(1); };
    in.user_data = &ud;
    ASSERT_FL_OK(fl_submit_host(f.host(1), &in, nullptr));
  }
  fl_program_t* p = end_capture(f.engine);
  for (int l = 0; l < 4; ++l) launch(p, f.host(0));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(calls.load(), 20);
  EXPECT_EQ(cleanups.load(), 0) << "cleanup runs when the program is freed";
  ASSERT_FL_OK(fl_program_destroy(p));
  EXPECT_EQ(cleanups.load(), 5);
  EXPECT_FL_ERR(fl_program_destroy(p), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_ERR(fl_program_launch(p, f.host(0), 0, nullptr), FL_ERR_INVALID_HANDLE, "program");
}

TEST(Capture, ADiscardedCaptureRunsItsCleanupsAndNothingElse) {
  EngineFixture f(2, 2);
  std::atomic<int> calls{0}, cleanups{0};
  struct Ud {
    std::atomic<int>* calls;
    std::atomic<int>* cleanups;
  } ud{&calls, &cleanups};
  fl_object_t* x = make_obj(f.engine);
  begin_capture(f.engine);
  fl_operand_t op = W(x);
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void* u) {
    static_cast<Ud*>(u)->calls->fetch_add(1);
    return FL_OK;
  };
  in.cleanup = [](void* u) { static_cast<Ud*>(u)->cleanups->fetch_add(1); };
  in.user_data = &ud;
  in.operands = &op;
  in.num_operands = 1;
  ASSERT_FL_OK(fl_submit_host(f.host(1), &in, nullptr));
  ASSERT_FL_OK(fl_capture_end(f.engine, nullptr));
  EXPECT_EQ(cleanups.load(), 1);
  EXPECT_EQ(calls.load(), 0);
  // The object is not held by anything any more: released at once.
  ASSERT_FL_OK(fl_object_wait(x, FL_WRITE));
  ASSERT_FL_OK(fl_object_release(x));
}

TEST(Capture, WaitsAndQueriesOfTheEngineAreRefusedWhileCapturing) {
  EngineFixture f(2, 2);
  fl_object_t* x = make_obj(f.engine);
  fl_instr_id eager = fltest::submit(f.host(1), [] { return FL_OK; }, {W(x)});
  begin_capture(f.engine);
  EXPECT_FL_ERR(fl_engine_synchronize(f.engine), FL_ERR_CAPTURING, "fl_engine_synchronize");
  EXPECT_FL_ERR(fl_engine_synchronize_for(f.engine, 0), FL_ERR_CAPTURING, "fl_capture_end");
  EXPECT_FL_ERR(fl_stream_synchronize(f.host(1)), FL_ERR_CAPTURING, "fl_stream_synchronize");
  EXPECT_FL_ERR(fl_stream_synchronize_for(f.host(1), 0), FL_ERR_CAPTURING, "capturing");
  EXPECT_FL_ERR(fl_object_wait(x, FL_READ), FL_ERR_CAPTURING, "fl_object_wait");
  EXPECT_FL_ERR(fl_object_wait_for(x, FL_READ, 0), FL_ERR_CAPTURING, "fl_object_wait_for");
  EXPECT_FL_ERR(fl_instr_wait_for(f.host(1), eager, 0), FL_ERR_CAPTURING, "fl_instr_wait_for");
  uint32_t state = 0;
  EXPECT_FL_ERR(fl_instr_query(f.host(1), eager, &state), FL_ERR_CAPTURING, "fl_instr_query");
  EXPECT_FL_ERR(fl_engine_drain(f.engine, 0), FL_ERR_CAPTURING, "fl_engine_drain");
  // Another thread's waits are not affected.
  std::thread other([&] { EXPECT_FL_OK(fl_engine_synchronize(f.engine)); });
  other.join();
  ASSERT_FL_OK(fl_capture_end(f.engine, nullptr));
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_object_release(x));
}

TEST(Capture, LaunchingWhileCapturingIsRefused) {
  EngineFixture f(2, 2);
  begin_capture(f.engine);
  fltest::submit(f.host(1), [] { return FL_OK; });
  fl_program_t* p = end_capture(f.engine);
  begin_capture(f.engine);
  EXPECT_FL_ERR(fl_program_launch(p, f.host(0), 0, nullptr), FL_ERR_CAPTURING, "fl_program_launch");
  ASSERT_FL_OK(fl_capture_end(f.engine, nullptr));
  launch(p, f.host(0));
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, BeginAndEndAreRefusedOutOfPlace) {
  EngineFixture f(2, 2);
  EXPECT_FL_ERR(fl_capture_end(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "not capturing");
  begin_capture(f.engine);
  EXPECT_FL_ERR(fl_capture_begin(f.engine, nullptr), FL_ERR_CAPTURING, "do not nest");
  ASSERT_FL_OK(fl_capture_end(f.engine, nullptr));
  EXPECT_FL_ERR(fl_capture_end(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "not capturing");
  // Bad descriptors.
  fl_capture_desc_t d = FL_CAPTURE_DESC_INIT;
  d.flags = 1;
  EXPECT_FL_ERR(fl_capture_begin(f.engine, &d), FL_ERR_INVALID_ARGUMENT, "flags");
  d = FL_CAPTURE_DESC_INIT;
  d.struct_size = 4;
  EXPECT_FL_ERR(fl_capture_begin(f.engine, &d), FL_ERR_INVALID_ARGUMENT, "struct_size");
  EXPECT_FL_ERR(fl_capture_begin(nullptr, nullptr), FL_ERR_INVALID_HANDLE, "NULL");
  // From inside an instruction: refused, the engine stays usable.
  std::atomic<int> st{-1};
  fltest::submit(f.host(1), [&st, e = f.engine] {
    st = fl_capture_begin(e, nullptr);
    return FL_OK;
  });
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(st.load(), FL_ERR_INVALID_ARGUMENT);
  // A program's info with a bad struct_size.
  begin_capture(f.engine);
  fl_program_t* p = end_capture(f.engine);
  fl_program_info_t in{};
  EXPECT_FL_ERR(fl_program_info(p, &in), FL_ERR_INVALID_ARGUMENT, "struct_size");
  EXPECT_FL_ERR(fl_program_info(p, nullptr), FL_ERR_INVALID_ARGUMENT, "out_info");
  EXPECT_FL_ERR(fl_program_launch(p, f.host(0), 64, nullptr), FL_ERR_INVALID_ARGUMENT, "unknown flags");
  EXPECT_FL_ERR(fl_program_launch(p, nullptr, 0, nullptr), FL_ERR_INVALID_HANDLE, "stream");
  fl_stream_t* coll = nullptr;
  ASSERT_FL_OK(fl_stream_get(f.engine, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE, &coll));
  EXPECT_FL_ERR(fl_program_launch(p, coll, 0, nullptr), FL_ERR_INVALID_ARGUMENT, "FL_STREAM_HOST");
  EXPECT_FL_ERR(fl_program_launch(reinterpret_cast<fl_program_t*>(f.host(0)), f.host(0), 0, nullptr),
                FL_ERR_INVALID_HANDLE, "a stream handle");
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_program_destroy(nullptr));
}

TEST(Capture, CaptureIsPerThreadAndPerEngine) {
  EngineFixture f(2, 2), g(2, 2);
  std::atomic<int> ran{0};
  begin_capture(f.engine);
  // This thread's submissions to another engine run eagerly.
  fltest::submit(g.host(1), [&ran] {
    ran.fetch_add(1);
    return FL_OK;
  });
  ASSERT_FL_OK(fl_engine_synchronize(g.engine));
  EXPECT_EQ(ran.load(), 1);
  // Another thread's submissions to the capturing engine run eagerly.
  std::thread other([&] {
    fltest::submit(f.host(1), [&ran] {
      ran.fetch_add(10);
      return FL_OK;
    });
    EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  });
  other.join();
  EXPECT_EQ(ran.load(), 11);
  fltest::submit(f.host(1), [&ran] {
    ran.fetch_add(100);
    return FL_OK;
  });
  fl_program_t* p = end_capture(f.engine);
  EXPECT_EQ(ran.load(), 11);
  launch(p, f.host(0));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ran.load(), 111);
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, ACaptureLeftOpenAtEngineDestroyIsDiscarded) {
  std::atomic<int> cleanups{0};
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  fl_object_t* x = nullptr;
  std::atomic<int> released{0};
  ASSERT_FL_OK(fl_object_create(e, &released, [](void* r) { static_cast<std::atomic<int>*>(r)->fetch_add(1); }, &x));
  begin_capture(e);
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  fl_operand_t op = RW(x);
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  in.cleanup = [](void* c) { static_cast<std::atomic<int>*>(c)->fetch_add(1); };
  in.user_data = &cleanups;
  in.operands = &op;
  in.num_operands = 1;
  fl_stream_t* s = nullptr;
  ASSERT_FL_OK(fl_stream_get(e, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
  ASSERT_FL_OK(fl_submit_host(s, &in, nullptr));
  ASSERT_FL_OK(fl_object_release(x));
  EXPECT_EQ(released.load(), 0) << "the capture holds the object";
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_EQ(cleanups.load(), 1) << "destroy discarded the open capture";
  EXPECT_EQ(released.load(), 1);
  EXPECT_FL_ERR(fl_capture_end(e, nullptr), FL_ERR_INVALID_HANDLE, "destroyed");
  // The thread captures nowhere now: a new engine's submissions run.
  EngineFixture f(1, 2);
  std::atomic<int> ran{0};
  fltest::submit(f.host(1), [&ran] {
    ran = 1;
    return FL_OK;
  });
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ran.load(), 1);
}

TEST(Capture, EngineDestroyFreesProgramsLeftAndMakesTheirHandlesStale) {
  std::atomic<int> cleanups{0};
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  fl_stream_t* s = nullptr;
  ASSERT_FL_OK(fl_stream_get(e, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
  begin_capture(e);
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  in.cleanup = [](void* c) { static_cast<std::atomic<int>*>(c)->fetch_add(1); };
  in.user_data = &cleanups;
  ASSERT_FL_OK(fl_submit_host(s, &in, nullptr));
  fl_program_t* p = end_capture(e);
  ASSERT_FL_OK(fl_program_launch(p, s, 0, nullptr));
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_EQ(cleanups.load(), 1);
  EXPECT_FL_ERR(fl_program_launch(p, s, 0, nullptr), FL_ERR_INVALID_HANDLE, "engine was destroyed");
  EXPECT_FL_ERR(fl_program_destroy(p), FL_ERR_INVALID_HANDLE, "stale");
}

TEST(Capture, DestroyingAProgramWhileItsLaunchRunsFreesItAfterTheLaunch) {
  EngineFixture f(2, 2);
  fltest::Gate gate;
  std::atomic<int> cleanups{0};
  struct Ud {
    fltest::Gate* gate;
    std::atomic<int>* cleanups;
  } ud{&gate, &cleanups};
  begin_capture(f.engine);
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void* u) { return static_cast<Ud*>(u)->gate->wait() ? FL_OK : FL_ERR_TIMEOUT; };
  in.cleanup = [](void* u) { static_cast<Ud*>(u)->cleanups->fetch_add(1); };
  in.user_data = &ud;
  ASSERT_FL_OK(fl_submit_host(f.host(1), &in, nullptr));
  fl_program_t* p = end_capture(f.engine);
  fl_instr_id id = launch(p, f.host(0));
  launch(p, f.host(1));  // a second launch queued behind the first
  ASSERT_FL_OK(fl_program_destroy(p));
  EXPECT_FL_ERR(fl_program_launch(p, f.host(0), 0, nullptr), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_EQ(cleanups.load(), 0) << "the launches in flight keep the program";
  gate.open = true;
  EXPECT_FL_OK(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(cleanups.load(), 1);
}

TEST(Capture, AnObjectReleasedWhileAProgramUsesItLivesUntilTheProgramIsFreed) {
  EngineFixture f(2, 2);
  std::atomic<int> released{0};
  fl_object_t* x = nullptr;
  ASSERT_FL_OK(fl_object_create(f.engine, &released, [](void* r) { static_cast<std::atomic<int>*>(r)->fetch_add(1); },
                                &x));
  std::atomic<int> ran{0};
  begin_capture(f.engine);
  fltest::submit(f.host(1), [&ran] {
    ran.fetch_add(1);
    return FL_OK;
  }, {RW(x)});
  fl_program_t* p = end_capture(f.engine);
  ASSERT_FL_OK(fl_object_release(x));
  EXPECT_EQ(released.load(), 0);
  launch(p, f.host(0));
  launch(p, f.host(0));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(released.load(), 0);
  ASSERT_FL_OK(fl_program_destroy(p));
  EXPECT_EQ(released.load(), 1);
}

TEST(Capture, LaunchingOnAnotherEnginesStreamIsRefused) {
  EngineFixture f(2, 2), g(2, 2);
  begin_capture(f.engine);
  fltest::submit(f.host(1), [] { return FL_OK; });
  fl_program_t* p = end_capture(f.engine);
  EXPECT_FL_ERR(fl_program_launch(p, g.host(0), 0, nullptr), FL_ERR_INVALID_HANDLE, "another engine");
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, CollectivesAreRefusedWhileCapturing) {
  EngineFixture f(2, 2);
  fl_comm_unique_id_t id;
  ASSERT_FL_OK(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id));
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = 1;
  d.backend = FL_COMM_HOST_FAKE;
  d.lane = 1;
  fl_comm_t* c = nullptr;
  ASSERT_FL_OK(fl_comm_create(f.engine, &d, &id, &c));
  fl_stream_t* cs = nullptr;
  ASSERT_FL_OK(fl_stream_get(f.engine, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE, &cs));
  float buf[4] = {1, 2, 3, 4};
  fl_coll_part_t part = fltest::coll_part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, buf, buf, 4);
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = &part;
  in.num_parts = 1;
  begin_capture(f.engine);
  EXPECT_FL_ERR(fl_submit_collective(cs, c, &in, nullptr), FL_ERR_CAPTURING, "collectives cannot be captured");
  ASSERT_FL_OK(fl_capture_end(f.engine, nullptr));
  // The refused collective took no sequence number: the next one runs.
  ASSERT_FL_OK(fl_submit_collective(cs, c, &in, nullptr));
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_comm_destroy(c));
}

TEST(Capture, AnEmptyProgramLaunchesAndCompletes) {
  EngineFixture f(2, 2);
  begin_capture(f.engine);
  fl_program_t* p = end_capture(f.engine);
  EXPECT_EQ(info(p).instructions, 0u);
  fl_instr_id id = launch(p, f.host(0));
  EXPECT_FL_OK(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER));
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, ALaunchIsOneInstructionOfItsStream) {
  EngineFixture f(1, 4);
  begin_capture(f.engine);
  for (int k = 0; k < 50; ++k) fltest::submit(f.host(uint32_t(1 + k % 3)), [] { return FL_OK; });
  fl_program_t* p = end_capture(f.engine);
  fl_engine_stats_t before = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &before));
  fl_instr_id id = launch(p, f.host(2));
  EXPECT_NE(id, 0u);
  EXPECT_FL_OK(fl_instr_wait_for(f.host(2), id, FL_WAIT_FOREVER));
  uint32_t state = 0;
  ASSERT_FL_OK(fl_instr_query(f.host(2), id, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_DONE));
  fl_engine_stats_t after = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &after));
  EXPECT_EQ(after.submitted - before.submitted, 1u) << "a launch counts once";
  EXPECT_EQ(after.completed - before.completed, 1u);
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, LaunchesOfOneProgramRunOneAtATimeInLaunchOrder) {
  EngineFixture f(4, 4);
  Log log;
  std::atomic<int> inside{0}, overlap{0}, launch_no{0};
  begin_capture(f.engine);
  // No operands at all: only the program's own ordering keeps launches apart.
  fltest::submit(f.host(1), [&] {
    if (inside.fetch_add(1) != 0) overlap.fetch_add(1);
    log.add(launch_no.fetch_add(1));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    inside.fetch_sub(1);
    return FL_OK;
  });
  fl_program_t* p = end_capture(f.engine);
  for (int k = 0; k < 20; ++k) launch(p, f.host(uint32_t(k % 4)));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(overlap.load(), 0);
  std::vector<int> got = log.take();
  ASSERT_EQ(got.size(), 20u);
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, LaunchesAreOrderedAgainstEagerWorkThroughTheirObjects) {
  EngineFixture f(4, 4);
  fl_object_t* x = make_obj(f.engine);
  Log log;
  begin_capture(f.engine);
  for (int k = 0; k < 3; ++k)
    fltest::submit(f.host(uint32_t(1 + k)), [&log, k] {
      log.add(100 + k);
      return FL_OK;
    }, {RW(x)});
  fl_program_t* p = end_capture(f.engine);
  for (int rep = 0; rep < 10; ++rep) {
    fltest::submit(f.host(3), [&log] {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      log.add(1);
      return FL_OK;
    }, {W(x)});
    launch(p, f.host(0));
    fltest::submit(f.host(2), [&log] {
      log.add(2);
      return FL_OK;
    }, {R(x)});
  }
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  std::vector<int> got = log.take();
  std::vector<int> want;
  for (int rep = 0; rep < 10; ++rep) want.insert(want.end(), {1, 100, 101, 102, 2});
  EXPECT_EQ(got, want);
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(x));
}

TEST(Capture, AFailureInsideALaunchPoisonsAndSkipsAsEagerlyAndFailsTheLaunchNamingIt) {
  for (uint64_t workers : {1, 3}) {
    EngineFixture f(workers, 4);
    fl_object_t* a = make_obj(f.engine);
    fl_object_t* b = make_obj(f.engine);
    fl_object_t* c = make_obj(f.engine);
    std::atomic<int> reader_of_a{0}, reader_of_c{0}, writer_after{0};
    begin_capture(f.engine, "step");
    fltest::submit(f.host(1), [](fl_instr_ctx_t* ctx) {
      fl_instr_set_error(ctx, "boom");
      return FL_ERR_INSTRUCTION_FAILED;
    }, {W(a)}, "bad");
    fltest::submit(f.host(2), [&] {
      reader_of_a.fetch_add(1);
      return FL_OK;
    }, {R(a), W(b)}, "reads a");
    fltest::submit(f.host(3), [&] {
      reader_of_c.fetch_add(1);
      return FL_OK;
    }, {RW(c)}, "independent");
    fltest::submit(f.host(2), [&] {
      writer_after.fetch_add(1);
      return FL_OK;
    }, {W(a)}, "rewrites a");
    fl_program_t* p = end_capture(f.engine);
    fl_instr_id id = launch(p, f.host(0));
    fl_status_t st = fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER);
    std::string msg = fl_last_error_message();
    EXPECT_EQ(st, FL_ERR_INSTRUCTION_FAILED);
    EXPECT_NE(msg.find("launch of 'step'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("inner instruction 'bad' (#0 of program 'step', lane 1) failed: boom"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 inner instruction was skipped"), std::string::npos) << msg;
    EXPECT_EQ(reader_of_a.load(), 0) << "the reader of the poisoned value is skipped";
    EXPECT_EQ(reader_of_c.load(), 1) << "an independent instruction runs";
    EXPECT_EQ(writer_after.load(), 1) << "a later write-only instruction runs";
    // After the launch every object it writes is poisoned for eager readers.
    EXPECT_FL_ERR(fl_object_wait(c, FL_READ), FL_ERR_INSTRUCTION_FAILED, "inner instruction 'bad'");
    // A second launch fails again (the failure is its own); its reader of c now reads a
    // value the failed first launch poisoned, and is skipped.
    id = launch(p, f.host(0));
    EXPECT_FL_ERR(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER), FL_ERR_INSTRUCTION_FAILED, "boom");
    EXPECT_EQ(reader_of_c.load(), 1);
    EXPECT_EQ(writer_after.load(), 2);
    EXPECT_FL_OK(fl_engine_synchronize(f.engine));  // both failures were returned
    ASSERT_FL_OK(fl_program_destroy(p));
    for (fl_object_t* o : {a, b, c}) ASSERT_FL_OK(fl_object_release(o));
  }
}

TEST(Capture, AnInputPoisonedBeforeTheLaunchSkipsOnlyItsReadersAndTheLaunchJoinsThatFailure) {
  EngineFixture f(2, 4);
  fl_object_t* a = make_obj(f.engine);
  fl_object_t* b = make_obj(f.engine);
  fl_object_t* c = make_obj(f.engine);
  std::atomic<int> read_a{0}, read_b{0}, write_then_read_a{0};
  begin_capture(f.engine, "p");
  fltest::submit(f.host(1), [&] {
    read_a.fetch_add(1);
    return FL_OK;
  }, {R(a), W(c)}, "reads a");
  fltest::submit(f.host(2), [&] {
    read_b.fetch_add(1);
    return FL_OK;
  }, {R(b)}, "reads b");
  fl_program_t* p = end_capture(f.engine);
  // Poison a (and b is clean), eagerly, before the launch; the same instruction writes both
  // so the launch's dependencies on it name one predecessor for two objects.
  fl_instr_id bad = fltest::submit(f.host(3), [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(a)}, "poisoner");
  fltest::submit(f.host(3), [] { return FL_OK; }, {W(b)});
  fl_instr_id id = launch(p, f.host(0));
  fl_status_t st = fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER);
  EXPECT_EQ(st, FL_ERR_DEPENDENCY_FAILED) << fl_last_error_message();
  EXPECT_NE(std::string(fl_last_error_message()).find("'poisoner'"), std::string::npos) << fl_last_error_message();
  EXPECT_EQ(read_a.load(), 0);
  EXPECT_EQ(read_b.load(), 1);
  uint32_t state = 0;
  ASSERT_FL_OK(fl_instr_query(f.host(0), id, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_SKIPPED));
  (void)bad;
  (void)write_then_read_a;
  // The poisoner's failure, with the launch as a member of its family, was returned above.
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_program_destroy(p));
  for (fl_object_t* o : {a, b, c}) ASSERT_FL_OK(fl_object_release(o));
}

TEST(Capture, TwoObjectsWrittenByOnePoisonerAreBothSeenPoisoned) {
  EngineFixture f(2, 4);
  fl_object_t* a = make_obj(f.engine);
  fl_object_t* b = make_obj(f.engine);
  std::atomic<int> ran{0};
  begin_capture(f.engine);
  fltest::submit(f.host(1), [&] {
    ran.fetch_add(1);
    return FL_OK;
  }, {R(a)});
  fltest::submit(f.host(2), [&] {
    ran.fetch_add(10);
    return FL_OK;
  }, {R(b)});
  fl_program_t* p = end_capture(f.engine);
  fltest::submit(f.host(3), [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(a), W(b)}, "writes both");
  fl_instr_id id = launch(p, f.host(0));
  EXPECT_FL_ERR(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER), FL_ERR_DEPENDENCY_FAILED, "writes both");
  EXPECT_EQ(ran.load(), 0) << "both readers are skipped";
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(a));
  ASSERT_FL_OK(fl_object_release(b));
}

TEST(Capture, AReplayedFunctionsContextWorksWithTheInstrCalls) {
  EngineFixture f(2, 4);
  std::atomic<uint32_t> lane{99};
  std::atomic<fl_instr_id> id{0};
  std::atomic<fl_engine_t*> engine{nullptr};
  std::atomic<fl_instr_ctx_t*> saved{nullptr};
  begin_capture(f.engine);
  fltest::submit(f.host(3), [&](fl_instr_ctx_t* ctx) {
    lane = fl_instr_get_lane(ctx);
    id = fl_instr_get_id(ctx);
    engine = fl_instr_get_engine(ctx);
    saved = ctx;
    return FL_OK;
  });
  fl_program_t* p = end_capture(f.engine);
  fl_instr_id lid = launch(p, f.host(1));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(lane.load(), 3u) << "the lane it was captured on";
  EXPECT_EQ(id.load(), lid) << "the launch's id";
  EXPECT_EQ(engine.load(), f.engine);
  // Used after its function returned: refused, never dereferenced.
  EXPECT_EQ(fl_instr_get_lane(saved.load()), 0u);
  EXPECT_NE(std::string(fl_last_error_message()).find("not the context"), std::string::npos);
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, AReplayedFunctionsWaitForItsOwnLaunchIsRefused) {
  EngineFixture f(2, 4);
  fl_object_t* x = make_obj(f.engine);
  std::atomic<int> st{-1};
  begin_capture(f.engine);
  fltest::submit(f.host(1), [&st, x] {
    st = fl_object_wait(x, FL_READ);  // the launch writes x: it would wait for itself
    return FL_OK;
  }, {W(x)});
  fl_program_t* p = end_capture(f.engine);
  launch(p, f.host(0));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(st.load(), FL_ERR_INVALID_ARGUMENT);
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(x));
}

TEST(Capture, CancelAndDrainCoverLaunches) {
  EngineFixture f(1, 4);
  std::atomic<int> ran{0};
  begin_capture(f.engine);
  fltest::submit(f.host(1), [&ran] {
    ran.fetch_add(1);
    return FL_OK;
  });
  fl_program_t* p = end_capture(f.engine);
  fltest::Gate gate;
  fltest::submit(f.host(0), [&gate] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; });
  fl_instr_id id = launch(p, f.host(0));  // queued behind the gate
  ASSERT_FL_OK(fl_instr_cancel(f.host(0), id));
  gate.open = true;
  EXPECT_FL_ERR(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER), FL_ERR_CANCELLED, "cancelled");
  EXPECT_EQ(ran.load(), 0);
  for (int k = 0; k < 5; ++k) launch(p, f.host(k % 2 ? 0 : 2));
  EXPECT_FL_OK(fl_engine_drain(f.engine, FL_WAIT_FOREVER));
  EXPECT_EQ(ran.load(), 5);
  EXPECT_FL_ERR(fl_program_launch(p, f.host(0), 0, nullptr), FL_ERR_SHUTDOWN, "drained");
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, AnInlineLaunchRunsOnTheCallingThread) {
  EngineFixture f(1, 4);
  std::atomic<int> on_caller{0}, total{0};
  const std::thread::id me = std::this_thread::get_id();
  begin_capture(f.engine);
  for (int k = 0; k < 10; ++k)
    fltest::submit(f.host(1), [&, me] {
      total.fetch_add(1);
      if (std::this_thread::get_id() == me) on_caller.fetch_add(1);
      return FL_OK;
    });
  fl_program_t* p = end_capture(f.engine);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  launch(p, f.host(2), FL_SUBMIT_INLINE);
  EXPECT_EQ(on_caller.load(), 10) << "the launch was ready and its lane idle";
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(total.load(), 10);
  ASSERT_FL_OK(fl_program_destroy(p));
}

TEST(Capture, TheStateDumpShowsARunningLaunchsProgress) {
  EngineFixture f(2, 4);
  fltest::Gate gate;
  begin_capture(f.engine, "dumped");
  for (int k = 0; k < 3; ++k) fltest::submit(f.host(1), [] { return FL_OK; });
  fltest::submit(f.host(1), [&gate] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; });
  fl_program_t* p = end_capture(f.engine);
  fl_instr_id id = launch(p, f.host(0));
  std::string d = fltest::wait_for_dump(f.engine, {"launch #" + std::to_string(id) + " of program 'dumped': 3 of 4"});
  EXPECT_NE(d.find("3 of 4 instructions done"), std::string::npos) << d;
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_program_destroy(p));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(Capture, AReplayIsATraceSliceWithItsInstructionsInside) {
  for (uint64_t workers : {1, 4}) {
    EngineFixture f(workers, 4);
    const std::string path = fltest::unique_temp_path("capture_trace_" + std::to_string(workers) + ".json");
    begin_capture(f.engine, "traced");
    for (int k = 0; k < 6; ++k)
      fltest::submit(f.host(uint32_t(1 + k % 2)), [] { return FL_OK; }, {}, k % 2 ? "odd node" : "even node");
    fl_program_t* p = end_capture(f.engine);
    ASSERT_FL_OK(fl_trace_start(f.engine, path.c_str()));
    launch(p, f.host(3));
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
    ASSERT_FL_OK(fl_trace_stop(f.engine));
    const std::string json = read_file(path);
    EXPECT_EQ(count(json, "\"name\":\"launch of 'traced'\""), 1u) << json;
    EXPECT_EQ(count(json, "\"cat\":\"replay\""), 6u) << json;
    EXPECT_EQ(count(json, "\"name\":\"even node\""), 3u) << json;
    if (workers == 1) {
      // On the launch's own thread every node is nested in the launch's slice, on its track.
      const size_t launch = json.find("\"name\":\"launch of 'traced'\"");
      const size_t tid_at = json.find("\"tid\":", launch);
      const std::string tid = json.substr(tid_at, json.find(',', tid_at) - tid_at);
      EXPECT_EQ(count(json, "\"cat\":\"replay\",\"name\":\"odd node\",\"pid\":" +
                               json.substr(json.find("\"pid\":", launch) + 6,
                                           json.find(',', json.find("\"pid\":", launch)) - json.find("\"pid\":", launch) - 6) +
                               "," + tid),
                3u)
          << json;
    }
    std::remove(path.c_str());
    ASSERT_FL_OK(fl_program_destroy(p));
  }
}

TEST(Capture, ProgramMemoryIsProportionalToItsSize) {
  EngineFixture f(1, 8);
  fl_object_t* x = make_obj(f.engine);
  uint64_t bytes[2] = {0, 0};
  const int sizes[2] = {1000, 10000};
  for (int s = 0; s < 2; ++s) {
    begin_capture(f.engine);
    for (int k = 0; k < sizes[s]; ++k) fltest::submit(f.host(uint32_t(k & 1)), [] { return FL_OK; }, {RW(x)});
    fl_program_t* p = end_capture(f.engine);
    bytes[s] = info(p).bytes;
    ASSERT_FL_OK(fl_program_destroy(p));
  }
  const double per = double(bytes[1] - bytes[0]) / double(sizes[1] - sizes[0]);
  EXPECT_LT(per, 256.0) << "bytes per instruction: " << per;
  EXPECT_GT(per, 8.0);
  ASSERT_FL_OK(fl_object_release(x));
}

}  // namespace
