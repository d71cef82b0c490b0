// Timeline traces (Chrome trace-event JSON for Perfetto) and fl_engine_stats.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_diag_util.hpp"

using namespace fldiag;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// Minimal structural JSON check: balanced brackets outside strings, valid escapes.
bool balanced_json(const std::string& s) {
  std::vector<char> stack;
  bool in_str = false;
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (in_str) {
      if (c == '\\') ++k;
      else if (c == '"') in_str = false;
      else if (static_cast<unsigned char>(c) < 0x20) return false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '{' || c == '[') stack.push_back(c);
    else if (c == '}' || c == ']') {
      if (stack.empty() || stack.back() != (c == '}' ? '{' : '[')) return false;
      stack.pop_back();
    }
  }
  return stack.empty() && !in_str;
}

}  // namespace

TEST(Trace, SlicesTracksFlowsAndWaits) {
  EngineFixture f(2);
  std::string path = fltest::unique_temp_path("flowlane_trace_basic.json");
  ASSERT_FL_OK(fl_trace_start(f.engine, path.c_str()));
  EXPECT_FL_ERR(fl_trace_start(f.engine, path.c_str()), FL_ERR_INVALID_ARGUMENT, "already tracing");
  fl_object_t* a = make_obj(f.engine);
  fl_object_t* b = make_obj(f.engine);
  const int kSteps = 10;
  for (int k = 0; k < kSteps; ++k) {
    submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_OK; }, {RW(a)}, "produce \"a\"");
    submit(host_of(f.engine, 2), [](fl_instr_ctx_t*) { return FL_OK; }, {R(a), RW(b)}, "consume");
  }
  // A wait inside a callback nests under its instruction.
  submit(host_of(f.engine, 3), [&](fl_instr_ctx_t*) { return fl_object_wait(b, FL_READ); }, {}, "waiter");
  // A skipped instruction is an instant event.
  fl_object_t* bad = make_obj(f.engine);
  submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_ERR_INSTRUCTION_FAILED; }, {W(bad)}, "fails");
  submit(host_of(f.engine, 2), [](fl_instr_ctx_t*) { return FL_OK; }, {R(bad)}, "skipped.one");
  EXPECT_EQ(fl_engine_synchronize(f.engine), FL_ERR_INSTRUCTION_FAILED);
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  EXPECT_FL_ERR(fl_trace_stop(f.engine), FL_ERR_INVALID_ARGUMENT, "not tracing");
  std::string json = read_file(path);
  ASSERT_FALSE(json.empty());
  EXPECT_TRUE(balanced_json(json));
  EXPECT_TRUE(contains(json, "\"traceEvents\":["));
  EXPECT_EQ(count_of(json, "\"name\":\"produce \\\"a\\\"\""), size_t(kSteps)) << "names are escaped";
  EXPECT_EQ(count_of(json, "\"ph\":\"X\",\"cat\":\"instr\",\"name\":\"consume\""), size_t(kSteps));
  EXPECT_TRUE(contains(json, "\"args\":{\"name\":\"lane 1 host\"}"));
  EXPECT_TRUE(contains(json, "\"args\":{\"name\":\"lane 2 host\"}"));
  EXPECT_GE(count_of(json, "\"ph\":\"s\""), 1u) << "flow arrows for cross-lane edges";
  EXPECT_EQ(count_of(json, "\"ph\":\"s\""), count_of(json, "\"ph\":\"f\""));
  EXPECT_TRUE(contains(json, "\"cat\":\"wait\",\"name\":\"fl_object_wait\""));
  EXPECT_TRUE(contains(json, "\"name\":\"skipped: skipped.one\""));
  EXPECT_TRUE(contains(json, "\"state\":\"failed\""));
  EXPECT_TRUE(contains(json, "\"dropped_events\":0"));
  // Tracing again after a stop works; off means no file change.
  ASSERT_FL_OK(fl_trace_start(f.engine, path.c_str()));
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  EXPECT_FALSE(contains(read_file(path), "consume"));
  for (auto* o : {a, b, bad}) fl_object_release(o);
  std::remove(path.c_str());
}

TEST(Trace, ParallelLoopsAndTaskGraphsAreSlicesAndFailuresCarryTheirText) {
  EngineFixture f(2);
  std::string path = fltest::unique_temp_path("flowlane_trace_loops.json");
  ASSERT_FL_OK(fl_trace_start(f.engine, path.c_str()));
  auto body = [](uint64_t, uint64_t, void*) -> fl_status_t { return FL_OK; };
  ASSERT_FL_OK(fl_parallel_for(f.engine, 0, 1000, 10, body, nullptr));  // on the caller's track
  fl_engine_t* e = f.engine;
  submit(host_of(f.engine, 2), [e, body](fl_instr_ctx_t*) { return fl_parallel_for(e, 0, 77, 1, body, nullptr); }, {},
         "loops");  // nested under the instruction's slice
  auto failing = [](uint64_t lo, uint64_t, void*) -> fl_status_t { return lo == 0 ? FL_ERR_UNSUPPORTED : FL_OK; };
  EXPECT_EQ(fl_parallel_for(f.engine, 0, 5, 1, failing, nullptr), FL_ERR_UNSUPPORTED);
  fl_taskgraph_t* g = nullptr;
  ASSERT_FL_OK(fl_taskgraph_create(f.engine, &g));
  uint64_t n0 = 0, n1 = 0;
  auto task = [](void*) -> fl_status_t { return FL_OK; };
  ASSERT_FL_OK(fl_taskgraph_add(g, task, nullptr, "t0", &n0));
  ASSERT_FL_OK(fl_taskgraph_add(g, task, nullptr, "t1", &n1));
  ASSERT_FL_OK(fl_taskgraph_precede(g, n0, n1));
  ASSERT_FL_OK(fl_taskgraph_run(g, -1));
  fl_task_group_t* group = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &group));
  Gate held;
  ASSERT_FL_OK(fl_task_group_spawn(group, [](void* p) { return static_cast<Gate*>(p)->wait() ? FL_OK : FL_ERR_INTERNAL; },
                                   &held, nullptr));
  EXPECT_EQ(fl_task_group_wait_for(group, 0), FL_ERR_TIMEOUT);
  held.open = true;
  ASSERT_FL_OK(fl_task_group_wait(group));
  ASSERT_FL_OK(fl_task_group_destroy(group));
  submit(host_of(f.engine, 1), [](fl_instr_ctx_t* c) {
    fl_instr_set_error(c, "disk \"full\" on /tmp");
    return FL_ERR_UNSUPPORTED;
  }, {}, "save");
  EXPECT_EQ(fl_engine_synchronize(f.engine), FL_ERR_UNSUPPORTED);
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  ASSERT_FL_OK(fl_taskgraph_destroy(g));
  std::string json = read_file(path);
  EXPECT_TRUE(balanced_json(json));
  EXPECT_TRUE(contains(json, "\"cat\":\"parallel\",\"name\":\"fl_parallel_for\"")) << json;
  EXPECT_TRUE(contains(json, "\"args\":{\"items\":1000,\"status\":\"FL_OK\"}")) << json;
  EXPECT_TRUE(contains(json, "\"args\":{\"items\":77,\"status\":\"FL_OK\"}")) << json;
  EXPECT_TRUE(contains(json, "\"args\":{\"items\":5,\"status\":\"FL_ERR_UNSUPPORTED\"}")) << json;
  EXPECT_TRUE(contains(json, "\"cat\":\"parallel\",\"name\":\"fl_taskgraph_run\"")) << json;
  EXPECT_TRUE(contains(json, "\"args\":{\"items\":2,\"status\":\"FL_OK\"}")) << json;
  EXPECT_TRUE(contains(json, "\"cat\":\"parallel\",\"name\":\"fl_task_group_wait_for\"")) << json;
  EXPECT_TRUE(contains(json, "\"args\":{\"items\":1,\"status\":\"FL_ERR_TIMEOUT\"}")) << json;
  EXPECT_TRUE(contains(json, "\"cat\":\"parallel\",\"name\":\"fl_task_group_wait\"")) << json;
  EXPECT_TRUE(contains(json, "\"args\":{\"name\":\"lane 2 host\"}")) << "the nested loop is on its lane's track";
  EXPECT_TRUE(contains(json, "disk \\\"full\\\" on /tmp")) << "the failed slice carries its escaped text: " << json;
  std::remove(path.c_str());
}

TEST(Trace, WindowStallsAreRecorded) {
  EngineFixture f(2, 0, /*window=*/2);
  std::string path = fltest::unique_temp_path("flowlane_trace_stall.json");
  ASSERT_FL_OK(fl_trace_start(f.engine, path.c_str()));
  Gate gate;
  submit(host_of(f.engine, 1), [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "held");
  submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "second");
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open = true;
  });
  submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "third");  // stalls until the gate opens
  opener.join();
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  std::string json = read_file(path);
  EXPECT_TRUE(balanced_json(json));
  EXPECT_TRUE(contains(json, "\"name\":\"window full\""));
  EXPECT_TRUE(contains(json, "\"name\":\"window stall\""));
  EXPECT_TRUE(contains(json, "(submitter)"));
  std::remove(path.c_str());
}

TEST(Trace, RingBufferBoundsMemoryAndCountsDrops) {
  EngineFixture f(2);
  std::string path = fltest::unique_temp_path("flowlane_trace_ring.json");
  ASSERT_FL_OK(fl_trace_start(f.engine, path.c_str()));
  const int kCount = 300000;  // 2 events each: more than the ring holds
  for (int k = 0; k < kCount; ++k) submit(host_of(f.engine, k % 4), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "tiny");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  std::string json = read_file(path);
  EXPECT_TRUE(balanced_json(json));
  EXPECT_FALSE(contains(json, "\"dropped_events\":0,"));
  size_t slices = count_of(json, "\"cat\":\"instr\"");
  EXPECT_GT(slices, 1000u);
  EXPECT_LT(slices, size_t(kCount));
  std::remove(path.c_str());
}

TEST(Trace, EnvironmentVariableTracesFromCreationToDestroy) {
  std::string path = fltest::unique_temp_path("flowlane_trace_env_%e.json");
  ::setenv("FLOWLANE_TRACE", path.c_str(), 1);
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 1;
  fl_status_t st = fl_engine_create(&d, &e);
  ::unsetenv("FLOWLANE_TRACE");
  ASSERT_FL_OK(st);
  submit(host_of(e, 0), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "from.env");
  EXPECT_FL_ERR(fl_trace_start(e, "/tmp/x.json"), FL_ERR_INVALID_ARGUMENT, "already tracing");
  ASSERT_FL_OK(fl_engine_destroy(e));  // writes the file
  // %e is the engine's number in this process; find the file it made.
  bool found = false;
  for (int n = 1; n < 10000 && !found; ++n) {
    std::string p = path;
    p.replace(p.find("%e"), 2, std::to_string(n));
    std::string json = read_file(p);
    if (contains(json, "from.env")) {
      found = true;
      EXPECT_TRUE(balanced_json(json));
      std::remove(p.c_str());
    }
  }
  EXPECT_TRUE(found);
}

TEST(Trace, Errors) {
  EngineFixture f(1);
  EXPECT_FL_ERR(fl_trace_start(nullptr, "/tmp/t.json"), FL_ERR_INVALID_HANDLE, "engine is NULL");
  EXPECT_FL_ERR(fl_trace_start(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "path is NULL");
  EXPECT_FL_ERR(fl_trace_start(f.engine, "/nonexistent-dir/x/trace.json"), FL_ERR_INVALID_ARGUMENT, "cannot open");
  EXPECT_FL_ERR(fl_trace_stop(nullptr), FL_ERR_INVALID_HANDLE, "engine is NULL");
  EXPECT_FL_ERR(fl_trace_stop(f.engine), FL_ERR_INVALID_ARGUMENT, "not tracing");
}

// Engine destroy while tracing writes the file (work drained first).
TEST(Trace, DestroyWritesTheTrace) {
  std::string path = fltest::unique_temp_path("flowlane_trace_destroy.json");
  fl_engine_t* e = nullptr;
  ASSERT_FL_OK(fl_engine_create(nullptr, &e));
  ASSERT_FL_OK(fl_trace_start(e, path.c_str()));
  for (int k = 0; k < 20; ++k) submit(host_of(e, 1), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "before.destroy");
  ASSERT_FL_OK(fl_engine_destroy(e));
  std::string json = read_file(path);
  EXPECT_EQ(count_of(json, "\"name\":\"before.destroy\""), 20u);
  std::remove(path.c_str());
}

// A stopped trace's observer is restarted by the next fl_trace_start: each file holds its
// own trace's events only, with its own drop count, and a failure text of the first trace
// does not reappear in the second.
TEST(Trace, RestartedTraceHoldsOnlyItsOwnEvents) {
  EngineFixture f(2);
  std::string first = fltest::unique_temp_path("flowlane_trace_first.json");
  std::string second = fltest::unique_temp_path("flowlane_trace_second.json");
  ASSERT_FL_OK(fl_trace_start(f.engine, first.c_str()));
  const int kOverflow = 140000;  // 2 events each: more than the ring holds
  for (int k = 0; k < kOverflow; ++k) submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "one");
  submit(host_of(f.engine, 1), [](fl_instr_ctx_t* ctx) {  // last on its lane: its slice is kept
    fl_instr_set_error(ctx, "first trace's failure");
    return FL_ERR_INSTRUCTION_FAILED;
  }, {}, "one.fails");
  EXPECT_EQ(fl_engine_synchronize(f.engine), FL_ERR_INSTRUCTION_FAILED);
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  ASSERT_FL_OK(fl_trace_start(f.engine, second.c_str()));
  for (int k = 0; k < 30; ++k) submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_OK; }, {}, "two");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_trace_stop(f.engine));
  std::string a = read_file(first);
  std::string b = read_file(second);
  EXPECT_TRUE(balanced_json(a));
  EXPECT_TRUE(balanced_json(b));
  EXPECT_FALSE(contains(a, "\"dropped_events\":0,"));
  EXPECT_TRUE(contains(a, "first trace's failure"));
  EXPECT_TRUE(contains(b, "\"dropped_events\":0,"));
  EXPECT_EQ(count_of(b, "\"name\":\"two\""), 30u);
  EXPECT_EQ(count_of(b, "\"name\":\"one"), 0u);
  EXPECT_FALSE(contains(b, "first trace's failure"));
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST(Stats, CountersAddUp) {
  EngineFixture f(2, 0, /*window=*/2);
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.submitted, 0u);
  fl_object_t* o = make_obj(f.engine);
  Gate gate;
  submit(host_of(f.engine, 1), [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(o)}, "held");
  submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_ERR_INSTRUCTION_FAILED; }, {W(o)}, "fails");
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.submitted, 2u);
  EXPECT_EQ(st.in_flight, 2u);
  EXPECT_EQ(st.completed, 0u);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open = true;
  });
  submit(host_of(f.engine, 2), [](fl_instr_ctx_t*) { return FL_OK; }, {R(o)}, "skipped");  // waits for room
  opener.join();
  EXPECT_EQ(fl_engine_synchronize(f.engine), FL_ERR_INSTRUCTION_FAILED);
  ASSERT_FL_OK(fl_engine_stats(f.engine, &st));
  EXPECT_EQ(st.submitted, 3u);
  EXPECT_EQ(st.completed, 3u);
  EXPECT_EQ(st.failed, 2u) << "the failure and the skipped dependent";
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_EQ(st.window_stalls, 1u);
  EXPECT_GE(st.parks, 0u);
  EXPECT_GE(st.steals, 0u);
  // Errors; an older, smaller struct gets only its fields.
  EXPECT_FL_ERR(fl_engine_stats(nullptr, &st), FL_ERR_INVALID_HANDLE, "engine is NULL");
  EXPECT_FL_ERR(fl_engine_stats(f.engine, nullptr), FL_ERR_INVALID_ARGUMENT, "out_stats");
  fl_engine_stats_t small = FL_ENGINE_STATS_INIT;
  small.struct_size = 2 * sizeof(uint64_t);  // struct_size + submitted
  small.completed = 777;
  ASSERT_FL_OK(fl_engine_stats(f.engine, &small));
  EXPECT_EQ(small.submitted, 3u);
  EXPECT_EQ(small.completed, 777u) << "beyond struct_size is untouched";
  fl_object_release(o);
}
