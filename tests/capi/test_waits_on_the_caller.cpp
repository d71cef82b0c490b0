// Waits from a callback for work that waits for the caller (public API only). An
// instruction of another lane that depends on the calling instruction — through an
// object, through the lane order of the instructions in between, directly or through
// others — cannot complete before the caller returns: fl_instr_wait_for, fl_stream_synchronize
// and fl_object_wait refuse such a wait with FL_ERR_INVALID_ARGUMENT, naming the chain,
// instead of waiting until their timeout (or forever). Waits for anything that does not
// depend on the caller still wait and succeed.
//
// Every wait here has a timeout of a minute that a passing run never reaches: an engine
// that does not recognise the cycle returns FL_ERR_TIMEOUT and the test fails on it.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

namespace {

constexpr uint64_t kMinute = 60ull * 1'000'000'000ull;

// What a callback saw: the status and message of the wait it made.
struct Seen {
  std::atomic<bool> done{false};
  fl_status_t st = FL_OK;
  std::string msg;
  void set(fl_status_t s) {
    st = s;
    msg = s == FL_OK ? "" : fl_last_error_message();
    done.store(true);
  }
};

// A caller on lane 1 that writes X and, once the test has submitted what it needs (`go`),
// runs `wait` and records its result in `seen`.
fl_instr_id submit_caller(fl_stream_t* s, fl_object_t* x, fltest::Gate& go, Seen& seen,
                          std::function<fl_status_t()> wait) {
  return submit(
      s,
      [&go, &seen, wait] {
        if (!go.wait()) return FL_ERR_TIMEOUT;
        seen.set(wait());
        return FL_OK;
      },
      {W(x)}, "caller");
}

fl_status_t noop() { return FL_OK; }

struct Rig {
  fl_engine_t* e = make_engine(4, 8);
  fl_stream_t* lane(uint32_t k) { return host_stream(e, k); }
  ~Rig() { fl_engine_destroy(e); }
};

TEST(WaitsOnTheCaller, WaitForAnInstructionReadingTheCallersOutputIsRefused) {
  HangGuard guard("WaitForAnInstructionReadingTheCallersOutputIsRefused");
  Rig r;
  fl_object_t* x = fltest::make_obj(r.e);
  fltest::Gate go;
  Seen seen;
  std::atomic<fl_instr_id> reader{0};
  fl_stream_t* s2 = r.lane(2);
  submit_caller(r.lane(1), x, go, seen, [&] { return fl_instr_wait_for(s2, reader.load(), kMinute); });
  reader = submit(s2, noop, {R(x)}, "reader");
  go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_EQ(seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(seen.st) << ": " << seen.msg;
  EXPECT_TRUE(has(seen.msg, "waits for the caller to complete")) << seen.msg;
  EXPECT_TRUE(has(seen.msg, "'caller'") && has(seen.msg, "-> 'reader'")) << seen.msg;
  uint32_t state = 0;
  ASSERT_FL_OK(fl_instr_query(s2, reader, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_DONE));  // the refusal changed nothing: it ran after the caller
  fl_object_release(x);
}

// caller (lane 1) writes X; `a` (lane 2) reads X; `b` queues behind `a` on lane 2 and
// writes Y; `c` (lane 3) reads Y. `c` waits for the caller through a's edge, lane 2's
// order and b's write of Y, though it shares no object with the caller.
struct Chain {
  Rig r;
  fl_object_t* x = fltest::make_obj(r.e);
  fl_object_t* y = fltest::make_obj(r.e);
  fltest::Gate go;
  Seen seen;
  fl_stream_t* s2 = r.lane(2);
  fl_stream_t* s3 = r.lane(3);
  fl_stream_t* s4 = r.lane(4);
  std::atomic<fl_instr_id> c{0};
  std::atomic<fl_instr_id> free_id{0};  // lane 4, independent of the caller
  explicit Chain(std::function<fl_status_t(Chain&)> wait) {
    submit_caller(r.lane(1), x, go, seen, [this, wait] { return wait(*this); });
    submit(s2, noop, {R(x)}, "a");
    submit(s2, noop, {W(y)}, "b");
    c = submit(s3, noop, {R(y)}, "c");
    free_id = submit(s4, noop, {}, "free");
    go.open = true;
  }
  ~Chain() {
    fl_object_release(x);
    fl_object_release(y);
  }
};

TEST(WaitsOnTheCaller, WaitForAnInstructionDependingOnTheCallerThroughOthersIsRefusedNamingTheChain) {
  HangGuard guard("WaitForAnInstructionDependingOnTheCallerThroughOthersIsRefusedNamingTheChain");
  Chain ch([](Chain& c) { return fl_instr_wait_for(c.s3, c.c.load(), kMinute); });
  ASSERT_FL_OK(fl_engine_synchronize(ch.r.e));
  EXPECT_EQ(ch.seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(ch.seen.st) << ": " << ch.seen.msg;
  EXPECT_TRUE(has(ch.seen.msg, "'caller'") && has(ch.seen.msg, "-> 'a'") && has(ch.seen.msg, "-> 'b'") &&
              has(ch.seen.msg, "-> 'c'"))
      << ch.seen.msg;
}

TEST(WaitsOnTheCaller, StreamSynchronizeOfALaneHoldingADependentIsRefusedAndOfAnotherLaneWaits) {
  HangGuard guard("StreamSynchronizeOfALaneHoldingADependentIsRefusedAndOfAnotherLaneWaits");
  Seen other;
  Chain ch([&other](Chain& c) {
    other.set(fl_stream_synchronize_for(c.s4, kMinute));  // independent: waits and succeeds
    return fl_stream_synchronize_for(c.s3, kMinute);
  });
  ASSERT_FL_OK(fl_engine_synchronize(ch.r.e));
  EXPECT_EQ(other.st, FL_OK) << other.msg;
  EXPECT_EQ(ch.seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(ch.seen.st) << ": " << ch.seen.msg;
  EXPECT_TRUE(has(ch.seen.msg, "fl_stream_synchronize") && has(ch.seen.msg, "-> 'c'")) << ch.seen.msg;
}

TEST(WaitsOnTheCaller, ObjectWaitForAWriterDependingOnTheCallerThroughAnotherObjectIsRefused) {
  HangGuard guard("ObjectWaitForAWriterDependingOnTheCallerThroughAnotherObjectIsRefused");
  // Y's last writer `b` waits for the caller, which does not use Y itself.
  Chain ch([](Chain& c) { return fl_object_wait_for(c.y, FL_READ, kMinute); });
  ASSERT_FL_OK(fl_engine_synchronize(ch.r.e));
  EXPECT_EQ(ch.seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(ch.seen.st) << ": " << ch.seen.msg;
  EXPECT_TRUE(has(ch.seen.msg, "fl_object_wait") && has(ch.seen.msg, "-> 'b'")) << ch.seen.msg;
}

// The cycle a watchdog used to have to name: the caller waits for an object whose writer
// (lane 2) waits for an instruction queued behind the caller on its own lane.
TEST(WaitsOnTheCaller, ObjectWaitForAWriterBlockedBehindTheCallerOnItsOwnLaneIsRefused) {
  HangGuard guard("ObjectWaitForAWriterBlockedBehindTheCallerOnItsOwnLaneIsRefused");
  Rig r;
  fl_object_t* x = fltest::make_obj(r.e);
  fl_object_t* y = fltest::make_obj(r.e);
  fltest::Gate go;
  Seen seen;
  submit(
      r.lane(1),
      [&] {
        if (!go.wait()) return FL_ERR_TIMEOUT;
        seen.set(fl_object_wait_for(x, FL_READ, kMinute));
        return FL_OK;
      },
      {}, "caller");
  submit(r.lane(1), noop, {W(y)}, "make y");
  submit(r.lane(2), noop, {R(y), W(x)}, "y to x");
  go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_EQ(seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(seen.st) << ": " << seen.msg;
  EXPECT_TRUE(has(seen.msg, "'caller'") && has(seen.msg, "-> 'make y'") && has(seen.msg, "-> 'y to x'")) << seen.msg;
  fl_object_release(x);
  fl_object_release(y);
}

TEST(WaitsOnTheCaller, WaitsForWorkThatDoesNotDependOnTheCallerStillWait) {
  HangGuard guard("WaitsForWorkThatDoesNotDependOnTheCallerStillWait");
  Rig r;
  fl_object_t* x = fltest::make_obj(r.e);
  fl_object_t* z = fltest::make_obj(r.e);
  fltest::Gate go;
  Seen seen;
  fl_stream_t* s2 = r.lane(2);
  fl_stream_t* s3 = r.lane(3);
  std::atomic<fl_instr_id> later_reader{0}, unrelated{0};
  // The caller only reads Z: a later reader of Z does not wait for it (readers run
  // together), nor does an instruction on another object.
  submit(
      r.lane(1),
      [&] {
        if (!go.wait()) return FL_ERR_TIMEOUT;
        fl_status_t st = fl_instr_wait_for(s2, later_reader.load(), kMinute);
        if (st == FL_OK) st = fl_instr_wait_for(s3, unrelated.load(), kMinute);
        if (st == FL_OK) st = fl_object_wait_for(x, FL_READ_WRITE, kMinute);
        if (st == FL_OK) st = fl_stream_synchronize_for(s2, kMinute);
        seen.set(st);
        return FL_OK;
      },
      {R(z)}, "caller");
  later_reader = submit(s2, noop, {R(z)}, "later reader");
  unrelated = submit(s3, noop, {W(x)}, "unrelated");
  go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_EQ(seen.st, FL_OK) << fl_status_name(seen.st) << ": " << seen.msg;
  fl_object_release(x);
  fl_object_release(z);
}

TEST(WaitsOnTheCaller, AWaitFromTheCallersCleanupIsRefusedToo) {
  HangGuard guard("AWaitFromTheCallersCleanupIsRefusedToo");
  Rig r;
  fl_object_t* x = fltest::make_obj(r.e);
  fl_stream_t* s2 = r.lane(2);
  struct Ctx {
    fltest::Gate go;
    Seen seen;
    fl_stream_t* s2;
    std::atomic<fl_instr_id> reader{0};
  } ctx;
  ctx.s2 = s2;
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) { return FL_OK; };
  in.cleanup = [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    if (!c->go.wait()) return;
    c->seen.set(fl_instr_wait_for(c->s2, c->reader.load(), kMinute));
  };
  in.user_data = &ctx;
  fl_operand_t w = W(x);
  in.operands = &w;
  in.num_operands = 1;
  in.name = "caller";
  ASSERT_FL_OK(fl_submit_host(r.lane(1), &in, nullptr));
  ctx.reader = submit(s2, noop, {R(x)}, "reader");
  ctx.go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_EQ(ctx.seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(ctx.seen.st) << ": " << ctx.seen.msg;
  fl_object_release(x);
}

// Submitters keep adding dependents of the caller on other lanes while it walks what
// waits for it (ThreadSanitizer checks the walk against the concurrent edge pushes and
// queue links); a wait for one of them is refused, whichever is picked.
TEST(WaitsOnTheCaller, RefusedWhileOtherThreadsKeepAddingDependents) {
  HangGuard guard("RefusedWhileOtherThreadsKeepAddingDependents");
  Rig r;
  fl_object_t* x = fltest::make_obj(r.e);
  fltest::Gate go;
  Seen seen;
  std::atomic<bool> stop{false};
  std::atomic<fl_instr_id> first{0};
  std::atomic<int> waits{0};
  std::vector<fl_stream_t*> lanes{r.lane(2), r.lane(3), r.lane(4), r.lane(5)};
  std::string wrong;  // the first wait not refused
  submit_caller(r.lane(1), x, go, seen, [&] {
    for (int k = 0; k < int(fl_scaled(200, 40)) && wrong.empty(); ++k, ++waits) {
      fl_status_t w = fl_instr_wait_for(lanes[0], first.load(), kMinute);
      if (w != FL_ERR_INVALID_ARGUMENT) wrong = std::string("fl_instr_wait_for returned ") + fl_status_name(w);
      fl_status_t s = fl_stream_synchronize_for(lanes[size_t(k) % lanes.size()], kMinute);
      if (s != FL_ERR_INVALID_ARGUMENT) wrong = std::string("fl_stream_synchronize_for returned ") + fl_status_name(s);
    }
    stop = true;
    return FL_OK;
  });
  first = submit(lanes[0], noop, {R(x)}, "first");
  for (fl_stream_t* s : lanes) submit(s, noop, {R(x)}, "reader");
  std::vector<std::thread> submitters;
  for (size_t t = 0; t < 2; ++t)
    submitters.emplace_back([&, t] {
      fl_object_t* mine = fltest::make_obj(r.e);
      for (uint64_t k = 0; !stop.load() && k < uint64_t(fl_scaled(2000, 400)); ++k) {
        fl_stream_t* s = lanes[(t + k) % lanes.size()];
        if (k % 3 == 0)
          submit(s, noop, {R(x), W(mine)}, "dependent");
        else
          submit(s, noop, {RW(mine)}, "through mine");
        if (k % 64 == 0) go.open = true;
      }
      go.open = true;
      fl_object_release(mine);
    });
  for (std::thread& t : submitters) t.join();
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  ASSERT_TRUE(seen.done.load());
  EXPECT_TRUE(wrong.empty()) << wrong << " after " << waits.load() << " waits";
  fl_object_release(x);
}

// Random programs checked against a model of the dependency rules: one instruction's
// callback waits for one picked later instruction, and the wait is refused exactly when
// the model says the picked one depends on the caller (through objects and lane order).
TEST(WaitsOnTheCaller, RefusedExactlyWhenTheModelSaysTheTargetDependsOnTheCaller) {
  HangGuard guard("RefusedExactlyWhenTheModelSaysTheTargetDependsOnTheCaller");
  Rig r;
  constexpr int kLanes = 4, kObjects = 5;
  const int rounds = int(fl_scaled(150, 30));
  std::mt19937 rng(20261127);
  int refused = 0, waited = 0;
  for (int round = 0; round < rounds; ++round) {
    const int n = 6 + int(rng() % 20);
    std::vector<fl_object_t*> objs;
    for (int k = 0; k < kObjects; ++k) objs.push_back(fltest::make_obj(r.e));
    // The program: each instruction's lane and accesses (object -> FL_READ/WRITE bits).
    const size_t count = size_t(n);
    std::vector<uint32_t> lane(count);
    std::vector<std::vector<std::pair<int, uint32_t>>> ops(count);
    for (int i = 0; i < n; ++i) {
      lane[size_t(i)] = 1 + uint32_t(rng() % kLanes);
      const int k = int(rng() % 3);
      std::set<int> used;
      for (int j = 0; j < k; ++j) {
        int o = int(rng() % kObjects);
        if (used.insert(o).second) ops[size_t(i)].push_back({o, 1u + uint32_t(rng() % 3)});
      }
    }
    const int caller = int(rng() % uint32_t(n - 1));
    const int target = caller + 1 + int(rng() % uint32_t(n - caller - 1));
    // The model: j depends on i (i < j) through an object (RAW, WAW, WAR since the last
    // write) or the lane; depends_on_caller is the closure from the caller.
    std::vector<bool> dep(count, false);
    dep[size_t(caller)] = true;
    for (int j = caller + 1; j < n; ++j) {
      for (int i = caller; i < j && !dep[size_t(j)]; ++i) {
        if (!dep[size_t(i)]) continue;
        bool edge = lane[size_t(i)] == lane[size_t(j)];
        for (auto [o, a] : ops[size_t(j)])
          for (auto [oi, ai] : ops[size_t(i)])
            if (o == oi && ((a & FL_WRITE) || (ai & FL_WRITE))) edge = true;
        // Only the last write and the reads since it are recorded: an earlier access
        // reaches j through that write, which depends on it, so the plain pairwise rule
        // gives the same closure.
        dep[size_t(j)] = edge;
      }
    }
    const bool expect_refused = dep[size_t(target)];
    fltest::Gate go;
    Seen seen;
    std::vector<fl_stream_t*> streams;
    for (int i = 0; i < n; ++i) streams.push_back(r.lane(lane[size_t(i)]));
    std::atomic<fl_instr_id> target_id{0};
    for (int i = 0; i < n; ++i) {
      std::vector<fl_operand_t> v;
      for (auto [o, a] : ops[size_t(i)]) v.push_back(fl_operand_t{objs[size_t(o)], a, 0});
      fl_instr_id id;
      if (i == caller) {
        fl_stream_t* ts = streams[size_t(target)];
        id = submit(
            streams[size_t(i)],
            [&go, &seen, &target_id, ts] {
              if (!go.wait()) return FL_ERR_TIMEOUT;
              seen.set(fl_instr_wait_for(ts, target_id.load(), kMinute));
              return FL_OK;
            },
            v, "caller");
      } else {
        id = submit(streams[size_t(i)], noop, v, "x");
      }
      if (i == target) target_id = id;
    }
    go.open = true;
    ASSERT_FL_OK(fl_engine_synchronize(r.e));
    ASSERT_TRUE(seen.done.load());
    if (expect_refused) {
      ++refused;
      ASSERT_EQ(seen.st, FL_ERR_INVALID_ARGUMENT)
          << "round " << round << ": caller #" << caller << " target #" << target << ": " << seen.msg;
    } else {
      ++waited;
      ASSERT_EQ(seen.st, FL_OK) << "round " << round << ": caller #" << caller << " target #" << target << ": "
                                << fl_status_name(seen.st) << " " << seen.msg;
    }
    for (fl_object_t* o : objs) fl_object_release(o);
  }
  // Both outcomes were exercised.
  EXPECT_GT(refused, rounds / 10);
  EXPECT_GT(waited, rounds / 10);
}

}  // namespace
