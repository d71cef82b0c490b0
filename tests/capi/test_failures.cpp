// Failures and bad handles: failure floods (each failure returned exactly once, with
// its message, to any number of concurrent waiters; one entry per failure and the
// dependents it poisoned; memory flat when failures are observed), handles that carry their
// type, and accepted input that must not be undefined behaviour.
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

namespace {

fl_status_t fail_named(fl_instr_ctx_t* ctx, void*) {
  fl_instr_set_error(ctx, "planned failure");
  return FL_ERR_INSTRUCTION_FAILED;
}

fl_status_t noop_fn(fl_instr_ctx_t*, void*) { return FL_OK; }

}  // namespace

// Four threads synchronize concurrently while failures keep arriving: every failure is
// returned exactly once, each with its message (naming its instruction). They used to lose
// some and return empty messages (a record read after it was recycled).
TEST(FailureLedger, ConcurrentSynchronizesReturnEachFailureExactlyOnceWithItsMessage) {
  HangGuard guard("concurrent synchronizes over a flood of failures");
  fl_engine_t* e = make_engine(2, 4);
  const int rounds = int(fl_scaled(6, 2));
  const int per_round = 1500;
  for (int round = 0; round < rounds; ++round) {
    Gate go;
    std::vector<std::string> names;
    for (int k = 0; k < per_round; ++k) names.push_back("r" + std::to_string(round) + "f" + std::to_string(k));
    std::thread producer([&] {
      for (int k = 0; k < per_round; ++k)
        EXPECT_FL_OK(flguard::submit_raw(host_stream(e, 1 + uint32_t(k % 3)), &fail_named, nullptr, nullptr, 0,
                                         names[size_t(k)].c_str()));
      go.open = true;
    });
    std::mutex mu;
    std::multiset<std::string> seen;
    int empty = 0;
    std::vector<std::thread> waiters;
    for (int t = 0; t < 4; ++t)
      waiters.emplace_back([&, t] {
        bool produced = false;
        for (;;) {
          produced = go.open.load();
          fl_stream_t* s = host_stream(e, 1 + uint32_t(t % 3));
          fl_status_t st = t == 3 ? fl_stream_synchronize(s) : fl_engine_synchronize(e);
          if (st == FL_OK) {
            if (produced) break;  // everything produced has been waited for and returned
            continue;
          }
          std::string msg = fl_last_error_message();
          std::lock_guard<std::mutex> lk(mu);
          EXPECT_EQ(st, FL_ERR_INSTRUCTION_FAILED);
          size_t a = msg.find('\''), b = msg.find('\'', a + 1);
          if (a == std::string::npos || b == std::string::npos || !has(msg, "planned failure")) {
            ++empty;
            continue;
          }
          seen.insert(msg.substr(a + 1, b - a - 1));
        }
      });
    producer.join();
    for (auto& w : waiters) w.join();
    // Anything left is returned to a last, lone synchronize.
    while (fl_engine_synchronize(e) != FL_OK) seen.insert(std::string("late:") + fl_last_error_message());
    EXPECT_EQ(empty, 0) << "failures returned without their message";
    EXPECT_EQ(seen.size(), size_t(per_round)) << "round " << round;
    size_t missing = 0, doubled = 0;
    for (auto& n : names) {
      size_t c = seen.count(n);
      missing += c == 0;
      doubled += c > 1;
    }
    EXPECT_EQ(missing, 0u) << "round " << round << ": failures never returned";
    EXPECT_EQ(doubled, 0u) << "round " << round << ": failures returned twice";
  }
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// One failure and everything it poisoned is one report, with a count, and a single
// synchronize drains it (each skipped dependent used to be its own report).
TEST(FailureLedger, AFailureAndItsDependentsAreOneReportWithACount) {
  HangGuard guard("one failure with many dependents");
  fl_engine_t* e = make_engine(2, 4);
  fl_object_t* o = fltest::make_obj(e);
  fl_object_t* o2 = fltest::make_obj(e);
  fl_stream_t* s = host_stream(e, 1);
  fl_stream_t* s2 = host_stream(e, 2);
  fl_operand_t w{o, FL_WRITE, 0};
  ASSERT_FL_OK(flguard::submit_raw(s, &fail_named, nullptr, &w, 1, "root_failure"));
  const int dependents = int(fl_scaled(10000, 2000));
  fl_operand_t rw[2] = {{o, FL_READ_WRITE, 0}, {o2, FL_WRITE, 0}};
  for (int k = 0; k < dependents; ++k)
    ASSERT_FL_OK(flguard::submit_raw(k % 2 ? s : s2, &noop_fn, nullptr, rw, 2, "dependent"));
  fl_status_t st = fl_engine_synchronize(e);
  std::string msg = fl_last_error_message();
  EXPECT_EQ(st, FL_ERR_INSTRUCTION_FAILED);
  EXPECT_TRUE(has(msg, "root_failure")) << msg;
  EXPECT_TRUE(has(msg, std::to_string(dependents) + " instructions that depended on it were skipped")) << msg;
  EXPECT_EQ(fl_engine_synchronize(e), FL_OK) << "the dependents were reported again";
  EXPECT_FL_OK(fl_stream_synchronize(s2));
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_object_release(o2));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Draining many separate failures costs O(1) per call. 10^5 failures did not drain in 60 s
// when each call scanned the whole ledger; the guard's generous deadline catches that.
TEST(FailureLedger, ManyFailuresDrainOneCallEach) {
  const long n = fl_scaled(100000, 10000);
  HangGuard guard("draining " + std::to_string(n) + " failures", int(fl_scaled(120, 600)));
  fl_engine_t* e = make_engine(2, 4);
  fl_stream_t* s = host_stream(e, 1);
  for (long k = 0; k < n; ++k) ASSERT_FL_OK(flguard::submit_raw(s, &fail_named, nullptr, nullptr, 0, "many"));
  long returned = 0;
  while (fl_engine_synchronize(e) == FL_ERR_INSTRUCTION_FAILED) ++returned;
  EXPECT_EQ(returned, n);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// A failure observed through fl_object_wait counts as returned: synchronize does not return
// it again, and a long loop of failed-and-waited instructions keeps memory flat (the ledger
// used to keep every observed failure until a synchronize: ~590 bytes each).
TEST(FailureLedger, ObservedFailuresAreNotReturnedAgainAndMemoryStaysFlat) {
  HangGuard guard("a loop of failed-and-waited instructions");
  fl_engine_t* e = make_engine(2, 4);
  fl_object_t* o = fltest::make_obj(e);
  fl_stream_t* s = host_stream(e, 1);
  fl_operand_t w{o, FL_WRITE, 0};
  auto one = [&] {
    ASSERT_FL_OK(flguard::submit_raw(s, &fail_named, nullptr, &w, 1, "fails_and_is_waited"));
    EXPECT_EQ(fl_object_wait(o, FL_READ), FL_ERR_INSTRUCTION_FAILED);
  };
  for (int k = 0; k < 2000; ++k) one();
  EXPECT_EQ(fl_engine_synchronize(e), FL_OK) << "a failure observed by fl_object_wait was returned again";
  const size_t before = mallinfo2().uordblks;
  const long n = fl_scaled(150000, 5000);
  for (long k = 0; k < n; ++k) one();
  const size_t after = mallinfo2().uordblks;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  if (!FL_UNDER_SANITIZER) {  // the sanitizers' allocators do not report through mallinfo2
    const double per = (double(after) - double(before)) / double(n);
    EXPECT_LT(per, 64.0) << "heap grew by " << (after - before) << " bytes over " << n
                         << " observed failures: observed failures are kept";
  }
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// Handles carry their type: a handle of one type given as another is FL_ERR_INVALID_HANDLE,
// even when the two share a slot index and generation (the first engine, object, stream and
// graph of a process all had the same value, and fl_engine_destroy((fl_engine_t*)object)
// destroyed the engine).

namespace {

// Every cross-type use of the four handles; returns a description of the first accepted one.
std::string cross_type_misuse(fl_engine_t* e, fl_object_t* o, fl_stream_t* s, fl_taskgraph_t* g) {
  std::vector<std::pair<std::string, void*>> foreign = {
      {"engine", e}, {"object", o}, {"stream", s}, {"graph", g}};
  std::string bad;
  for (auto& [kind, h] : foreign) {
    auto expect_invalid = [&](const char* call, fl_status_t st) {
      if (st != FL_ERR_INVALID_HANDLE && bad.empty())
        bad = std::string(call) + " accepted a(n) " + kind + " handle: " + fl_status_name(st);
    };
    if (kind != "object") {
      void* ud = nullptr;
      expect_invalid("fl_object_user_data", fl_object_user_data(static_cast<fl_object_t*>(h), &ud));
      expect_invalid("fl_object_wait", fl_object_wait(static_cast<fl_object_t*>(h), FL_READ));
    }
    if (kind != "stream") {
      uint32_t lane = 0;
      expect_invalid("fl_stream_info", fl_stream_info(static_cast<fl_stream_t*>(h), &lane, nullptr, nullptr));
      expect_invalid("fl_stream_synchronize", fl_stream_synchronize(static_cast<fl_stream_t*>(h)));
    }
    if (kind != "engine") {
      fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
      expect_invalid("fl_engine_stats", fl_engine_stats(static_cast<fl_engine_t*>(h), &st));
      expect_invalid("fl_engine_synchronize", fl_engine_synchronize(static_cast<fl_engine_t*>(h)));
      if (fl_engine_worker_count(static_cast<fl_engine_t*>(h)) != 0 && bad.empty())
        bad = "fl_engine_worker_count answered for a(n) " + kind + " handle";
    }
    if (kind != "graph") {
      uint64_t node = 0;
      expect_invalid("fl_taskgraph_add",
                     fl_taskgraph_add(static_cast<fl_taskgraph_t*>(h), [](void*) { return FL_OK; }, nullptr, "x",
                                      &node));
    }
  }
  // The destructive ones last: had any been accepted, the handle it names is gone.
  if (bad.empty()) {
    fl_status_t st = fl_engine_destroy(reinterpret_cast<fl_engine_t*>(o));
    if (st != FL_ERR_INVALID_HANDLE) bad = std::string("fl_engine_destroy(object) gave ") + fl_status_name(st);
  }
  if (bad.empty()) {
    fl_status_t st = fl_object_release(reinterpret_cast<fl_object_t*>(e));
    if (st != FL_ERR_INVALID_HANDLE) bad = std::string("fl_object_release(engine) gave ") + fl_status_name(st);
  }
  if (bad.empty()) {
    fl_status_t st = fl_taskgraph_destroy(reinterpret_cast<fl_taskgraph_t*>(e));
    if (st != FL_ERR_INVALID_HANDLE) bad = std::string("fl_taskgraph_destroy(engine) gave ") + fl_status_name(st);
  }
  return bad;
}

// In a fresh process (a re-executed child) the first handles of each type are the first
// slot of their table: the case where the old encoding made them equal.
void fresh_process_cross_types() {
  fl_engine_t* e = nullptr;
  if (fl_engine_create(nullptr, &e) != FL_OK) std::_Exit(3);
  fl_object_t* o = nullptr;
  fl_stream_t* s = nullptr;
  fl_taskgraph_t* g = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  if (fl_object_create(e, nullptr, nullptr, &o) != FL_OK || fl_stream_get(e, 0, cpu, FL_STREAM_HOST, &s) != FL_OK ||
      fl_taskgraph_create(e, &g) != FL_OK)
    std::_Exit(4);
  std::string bad = cross_type_misuse(e, o, s, g);
  if (!bad.empty()) {
    std::fprintf(stderr, "type confusion: %s\n", bad.c_str());
    std::_Exit(1);
  }
  fl_taskgraph_destroy(g);
  fl_object_release(o);
  fl_engine_destroy(e);
  std::_Exit(0);
}

}  // namespace

TEST(HandleTypes, AHandleOfOneTypeGivenAsAnotherIsInvalid) {
  fl_engine_t* e = make_engine(1);
  fl_object_t* o = fltest::make_obj(e);
  fl_stream_t* s = host_stream(e, 0);
  fl_taskgraph_t* g = nullptr;
  ASSERT_FL_OK(fl_taskgraph_create(e, &g));
  EXPECT_EQ(cross_type_misuse(e, o, s, g), "");
  EXPECT_FL_OK(fl_taskgraph_destroy(g));
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(HandleTypes, FirstHandlesOfAFreshProcessAreNotInterchangeable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: fresh handle tables
  EXPECT_EXIT(fresh_process_cross_types(), ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------
// Accepted input is never undefined behaviour: a host-fake collective with count 0 and NULL
// buffers moves nothing (it called memcpy(NULL, ..., 0), which UBSan reports).

TEST(AcceptedInput, HostFakeCollectivesWithCountZeroAndNullBuffersMoveNothing) {
  HangGuard guard("count-0 collectives");
  fl_engine_t* e = make_engine(2, 2);
  fl_comm_unique_id_t id;
  ASSERT_FL_OK(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id));
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = 1;
  d.rank = 0;
  d.lane = 1;
  d.backend = FL_COMM_HOST_FAKE;
  fl_comm_t* c = nullptr;
  ASSERT_FL_OK(fl_comm_create(e, &d, &id, &c));
  fl_stream_t* s = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  ASSERT_FL_OK(fl_stream_get(e, 1, cpu, FL_STREAM_COLLECTIVE, &s));
  for (uint32_t op : {FL_COLL_ALL_REDUCE, FL_COLL_ALL_GATHER, FL_COLL_REDUCE_SCATTER, FL_COLL_BROADCAST}) {
    fl_coll_part_t p = fltest::coll_part(op, FL_DTYPE_FLOAT32, nullptr, nullptr, 0);
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = &p;
    in.num_parts = 1;
    in.name = "empty";
    fl_instr_id iid = 0;
    EXPECT_FL_OK(fl_submit_collective(s, c, &in, &iid));
  }
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(fl_comm_destroy(c));
  EXPECT_FL_OK(fl_engine_destroy(e));
}
