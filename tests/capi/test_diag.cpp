// Watchdog and state dump (docs/design.md, guarantee 9): real deadlocks, and the dump must name the
// culprits. Each test unsticks its deadlock before it ends (opens the gate, or destroys
// the engine, which cancels waits that lie on a cycle), so the process always exits.
// No timing assertions: waits for the watchdog are bounded generously (30 s).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_diag_util.hpp"

using namespace fldiag;

// (a) A host instruction waits in fl_object_wait for an object written by a LATER
// instruction on its own lane: that writer can never run before it returns.
TEST(Watchdog, WaitForWorkQueuedBehindTheCallerIsRefusedNotAHang) {
  // A callback waiting for an object whose writer is queued behind it on its own lane could
  // never return (the writer starts only after the callback): refused at once, the engine
  // stays usable, the writer runs, and the watchdog has nothing to report.
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  DumpCatcher dc;
  dc.install(e, 200);
  fl_object_t* x = make_obj(e);
  Gate writer_submitted;
  std::atomic<int> wait_status{-1};
  std::string wait_message;
  std::atomic<bool> writer_ran{false};
  fl_instr_id a = submit(host_of(e, 1), [&](fl_instr_ctx_t*) {
    if (!writer_submitted.wait()) return FL_ERR_TIMEOUT;
    fl_status_t st = fl_object_wait(x, FL_READ);  // 'produce_x' is queued behind us
    wait_message = fl_last_error_message();
    wait_status = st;
    return FL_OK;
  }, {}, "wait_for_x");
  fl_instr_id w = submit(host_of(e, 1), [&](fl_instr_ctx_t*) { writer_ran = true; return FL_OK; },
                         {W(x)}, "produce_x");
  writer_submitted.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(wait_status.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(wait_message, "'produce_x' (#" + std::to_string(w) + ", lane 1, host) is queued behind the "
                                     "calling instruction 'wait_for_x' (#" + std::to_string(a)))
      << wait_message;
  EXPECT_TRUE(writer_ran.load());
  EXPECT_EQ(dc.count(), 0u);
  ASSERT_FL_OK(fl_object_release(x));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// (a') A real cycle across two lanes: a release callback that lane 1's instruction runs as
// it completes waits for an object written on lane 2 by an instruction that itself waits
// for an instruction queued behind it on lane 1. (From the instruction's fn or cleanup the
// engine refuses that wait up front; a release callback's instruction is completing, so
// the engine does not walk what waits for it, and the wait hangs.) The dump names it;
// destroying the engine cancels the wait (FL_ERR_CANCELLED) so everything drains.
TEST(Watchdog, TwoLaneWaitCycleIsNamed) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  DumpCatcher dc;
  dc.install(e, 200);
  fl_object_t* x = make_obj(e);
  fl_object_t* y = make_obj(e);
  struct Release {
    fl_object_t* x;
    std::atomic<int> wait_status{-1};
  } rel{x};
  fl_object_t* held = nullptr;  // its last reference goes with 'lane1.wait_x' (its release waits for x)
  ASSERT_FL_OK(fl_object_create(
      e, &rel,
      [](void* p) {
        auto* r = static_cast<Release*>(p);
        r->wait_status = fl_object_wait(r->x, FL_READ);
      },
      &held));
  Gate all_submitted;
  fl_instr_id a = submit(host_of(e, 1), [&](fl_instr_ctx_t*) { return all_submitted.wait() ? FL_OK : FL_ERR_TIMEOUT; },
                         {W(held)}, "lane1.wait_x");
  ASSERT_FL_OK(fl_object_release(held));
  fl_instr_id b = submit(host_of(e, 1), [](fl_instr_ctx_t*) { return FL_OK; }, {W(y)}, "lane1.make_y");
  fl_instr_id c = submit(host_of(e, 2), [](fl_instr_ctx_t*) { return FL_OK; }, {R(y), W(x)}, "lane2.y_to_x");
  all_submitted.open = true;
  std::string dump = dc.wait_for(1);
  ASSERT_FALSE(dump.empty());
  std::printf("%s", dump.c_str());
  EXPECT_TRUE(contains(dump, "DEADLOCK: cycle of waits lane 1 -> lane 2 -> lane 1") ||
              contains(dump, "DEADLOCK: cycle of waits lane 2 -> lane 1 -> lane 2")) << dump;
  EXPECT_TRUE(contains(dump, "'lane2.y_to_x' (#" + std::to_string(c) + ", lane 2, host) BLOCKED")) << dump;
  EXPECT_TRUE(contains(dump, "produced by 'lane1.make_y' (#" + std::to_string(b) + ", lane 1, host), pending; queued on lane 1 behind 'lane1.wait_x' (#" + std::to_string(a))) << dump;
  EXPECT_TRUE(contains(dump, "'lane1.wait_x' (#" + std::to_string(a) + ", lane 1, host) waits in fl_object_wait")) << dump;
  EXPECT_TRUE(contains(dump, "oldest: 'lane1.wait_x' (#" + std::to_string(a) + ", lane 1, host) COMPLETING")) << dump;
  fl_object_release(x);
  fl_object_release(y);
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_EQ(rel.wait_status.load(), FL_ERR_CANCELLED);
}

// (b) A submitter blocked on a full window whose oldest work waits on something not yet
// submitted: the gate that a later submission ('gate.open') would open.
TEST(Watchdog, FullWindowWithParkedSubmitterIsExplained) {
  EngineFixture f(2, 0, /*window=*/4);
  DumpCatcher dc;
  dc.install(f.engine, 200);
  Gate gate;
  fl_object_t* g = make_obj(f.engine);
  fl_instr_id head = submit(f.host(1), [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(g)},
                            "gate.wait");
  std::vector<fl_instr_id> consumers;
  for (int k = 0; k < 3; ++k) {
    std::string name = "consumer." + std::to_string(k);
    consumers.push_back(submit(f.host(2), [](fl_instr_ctx_t*) { return FL_OK; }, {R(g)}, name.c_str()));
  }
  std::atomic<bool> submitted{false};
  std::thread submitter([&] {  // blocks: the window is full
    fl_stream_t* s3 = f.host(3);
    submit(s3, [&](fl_instr_ctx_t*) { gate.open = true; return FL_OK; }, {}, "gate.open");
    submitted = true;
  });
  std::string dump = dc.wait_for(1);
  ASSERT_FALSE(dump.empty());
  std::printf("%s", dump.c_str());
  EXPECT_FALSE(submitted.load());
  EXPECT_TRUE(contains(dump, "in-flight window: 4 of 4 instructions (FULL); 1 submitter parked")) << dump;
  EXPECT_TRUE(contains(dump, "'gate.wait' (#" + std::to_string(head) + ", lane 1, host) RUNNING")) << dump;
  EXPECT_TRUE(contains(dump, "not waiting on anything flowlane tracks")) << dump;
  EXPECT_TRUE(contains(dump, "'consumer.0' (#" + std::to_string(consumers[0]) + ", lane 2, host) BLOCKED")) << dump;
  EXPECT_TRUE(contains(dump, "produced by 'gate.wait' (#" + std::to_string(head) + ", lane 1, host), running; it is the head of lane 1")) << dump;
  EXPECT_TRUE(contains(dump, "wait cycles: none found")) << dump;
  // Unstick: open the gate ourselves; the parked submitter gets room.
  gate.open = true;
  submitter.join();
  EXPECT_TRUE(submitted.load());
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_GE(st.window_stalls, 1u);
  fl_object_release(g);
}

// The watchdog fires once per stall and re-arms after progress; quiet engines never fire.
TEST(Watchdog, FiresOncePerStallAndRearmsAfterProgress) {
  EngineFixture f(2);
  DumpCatcher dc;
  dc.install(f.engine, 100);
  for (int k = 0; k < 50; ++k) submit(f.host(0), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "quick");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // idle: no pending work, no dump
  EXPECT_EQ(dc.count(), 0u);
  Gate g1, g2;
  submit(f.host(1), [&](fl_instr_ctx_t*) { return g1.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "stall.one");
  ASSERT_FALSE(dc.wait_for(1).empty());
  EXPECT_TRUE(contains(dc.wait_for(1), "'stall.one'"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(dc.count(), 1u) << "a stall is reported once";
  g1.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  submit(f.host(1), [&](fl_instr_ctx_t*) { return g2.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "stall.two");
  std::string second = dc.wait_for(2);
  ASSERT_FALSE(second.empty()) << "re-armed after progress";
  EXPECT_TRUE(contains(second, "'stall.two'"));
  g2.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
}

// watchdog_ms in the engine descriptor turns it on (stderr by default); a path appends
// the dump to a file; timeout 0 turns it off.
TEST(Watchdog, DescriptorPathAndOff) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  d.watchdog_ms = 100;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  std::string path = fltest::unique_temp_path("flowlane_watchdog_dump.txt");
  std::remove(path.c_str());
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 100;
  w.path = path.c_str();
  ASSERT_FL_OK(fl_engine_set_watchdog(e, &w));
  Gate gate;
  fl_stream_t* s = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  ASSERT_FL_OK(fl_stream_get(e, 1, cpu, FL_STREAM_HOST, &s));
  submit(s, [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "to.file");
  std::string text;
  for (int k = 0; k < 300 && !contains(text, "=== end of dump ==="); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  EXPECT_TRUE(contains(text, "'to.file'")) << text;
  w.timeout_ms = 0;
  ASSERT_FL_OK(fl_engine_set_watchdog(e, &w));
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(e));
  ASSERT_FL_OK(fl_engine_destroy(e));
  std::remove(path.c_str());
}

TEST(Watchdog, ErrorsAreClear) {
  EngineFixture f(1);
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  EXPECT_FL_ERR(fl_engine_set_watchdog(nullptr, &w), FL_ERR_INVALID_HANDLE, "engine is NULL");
  EXPECT_FL_ERR(fl_engine_set_watchdog(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "descriptor is NULL");
  fl_watchdog_desc_t bad = w;
  bad.struct_size = 8;
  EXPECT_FL_ERR(fl_engine_set_watchdog(f.engine, &bad), FL_ERR_INVALID_ARGUMENT, "struct_size");
  bad = w;
  bad.flags = 4;
  EXPECT_FL_ERR(fl_engine_set_watchdog(f.engine, &bad), FL_ERR_INVALID_ARGUMENT, "flags");
  bad = w;
  bad.timeout_ms = uint64_t(1) << 40;
  EXPECT_FL_ERR(fl_engine_set_watchdog(f.engine, &bad), FL_ERR_OUT_OF_RANGE, "exceeds one day");
  bad = w;
  bad.path = "";
  EXPECT_FL_ERR(fl_engine_set_watchdog(f.engine, &bad), FL_ERR_INVALID_ARGUMENT, "path is empty");
  char buf[8];
  EXPECT_FL_ERR(fl_engine_dump(nullptr, buf, sizeof buf, nullptr), FL_ERR_INVALID_HANDLE, "engine is NULL");
  EXPECT_FL_ERR(fl_engine_dump(f.engine, nullptr, 5, nullptr), FL_ERR_INVALID_ARGUMENT, "buffer is NULL");
  // Truncation: NUL-terminated, needed reports the full size.
  uint64_t needed = 0;
  ASSERT_FL_OK(fl_engine_dump(f.engine, buf, sizeof buf, &needed));
  EXPECT_EQ(std::strlen(buf), sizeof buf - 1);
  EXPECT_GT(needed, sizeof buf);
  std::string full = dump_now(f.engine);
  EXPECT_TRUE(contains(full, "lanes with pending work: 0"));
  EXPECT_TRUE(contains(full, "wait cycles: none found"));
  // A stale engine.
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_FL_ERR(fl_engine_dump(e, buf, sizeof buf, nullptr), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_ERR(fl_engine_set_watchdog(e, &w), FL_ERR_INVALID_HANDLE, "stale");
}

// The callback may reconfigure the watchdog; after set_watchdog returns the old callback
// is not running; destroying an engine whose watchdog is on joins the thread.
TEST(Watchdog, CallbackMayReconfigureAndDestroyJoins) {
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int> calls{0};
  } ctx;
  EngineFixture f(2);
  ctx.e = f.engine;
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 50;
  w.user_data = &ctx;
  w.callback = [](const char*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->calls++;
    fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;  // turn itself off from inside
    fl_engine_set_watchdog(c->e, &off);
  };
  ASSERT_FL_OK(fl_engine_set_watchdog(f.engine, &w));
  Gate gate;
  submit(f.host(1), [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "held");
  for (int k = 0; k < 3000 && ctx.calls.load() == 0; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ctx.calls.load(), 1);
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
}

// Creating and destroying engines with the watchdog on does not leak threads or hang.
TEST(Watchdog, ManyEnginesWithWatchdog) {
  for (int k = 0; k < fl_scaled(50, 10); ++k) {
    fl_engine_t* e = nullptr;
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 1;
    d.watchdog_ms = 1000;
    ASSERT_FL_OK(fl_engine_create(&d, &e));
    submit(host_of(e, 0), [](fl_instr_ctx_t*) { return FL_OK; });
    ASSERT_FL_OK(fl_engine_destroy(e));
  }
}

// A callback waiting in fl_object_wait is shown in the dump with the object it waits on.
// The object may be freed under that registration: its last user, the one waited for,
// drops the last reference as it completes, before the waiting callback has woken up to
// withdraw it. A dump taken in that instant must not read the freed object (it once read
// its handle through the registration: a use-after-free that ASan and TSan report; found by
// WaitCycles.ASecondTasksIdWaitBesideAnObjectWaitOnACycleDoesNotHideIt under TSan). Dumps
// are taken without pause while the waits end; without a sanitizer this only checks that
// they succeed.
TEST(StateDump, AnObjectWaitWhoseObjectItsLastUserFreesIsDumpedWithoutReadingTheObject) {
  EngineFixture f(2);
  std::atomic<bool> stop{false};
  std::atomic<long> dumps{0};
  std::thread dumper([&] {
    std::vector<char> buf(1 << 16);
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t needed = 0;
      EXPECT_EQ(fl_engine_dump(f.engine, buf.data(), buf.size(), &needed), FL_OK) << fl_last_error_message();
      dumps.fetch_add(1, std::memory_order_relaxed);
    }
  });
  std::atomic<int> failures{0};
  for (int k = 0; k < fl_scaled(400, 150); ++k) {
    fl_object_t* x = make_obj(f.engine);
    std::atomic<bool> go{false};
    submit(f.host(2), [&go] {
      while (!go.load()) std::this_thread::yield();
      return FL_OK;
    }, {W(x)}, "last user");
    submit(f.host(1), [x, &failures] {
      if (fl_object_wait(x, FL_READ) != FL_OK) failures++;
      return FL_OK;
    }, {}, "waits for x");
    // Released once the wait is registered (the dump shows it): the program's handle is
    // valid throughout the call, and "last user" now holds the object's last reference.
    std::vector<char> buf(1 << 16);
    for (;;) {
      uint64_t needed = 0;
      ASSERT_FL_OK(fl_engine_dump(f.engine, buf.data(), buf.size(), &needed));
      if (std::string(buf.data()).find("waits in fl_object_wait for object") != std::string::npos) break;
      std::this_thread::yield();
    }
    ASSERT_FL_OK(fl_object_release(x));
    go = true;
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  }
  stop = true;
  dumper.join();
  EXPECT_EQ(failures.load(), 0);
}
