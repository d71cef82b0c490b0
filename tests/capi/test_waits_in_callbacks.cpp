// Concurrency guarantees, part 1: several submitting threads sharing multi-object
// instructions, waits inside callbacks, the window and own-lane waits. Each test runs under
// a HangGuard: an engine that deadlocks fails the test with a message instead of hanging.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

// ---------------------------------------------------------------------------------------
// Many submitting threads on shared multi-object instructions: every object sees its
// instructions in one serial order (writers exclusive, readers between the writers they
// were recorded between), and that order is the order the instructions were recorded in,
// which the engine numbers by id. The engine used to record operands one object at a time,
// so two threads could be ordered differently on two objects: a cycle, and a hang.

namespace {

constexpr int kObjects = 4;

struct ObjLog {
  std::atomic<int> active{0};  // > 0: readers inside; -1: a writer inside
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint8_t>> log;  // (instruction id, FL_READ/FL_WRITE) in execution order
};

struct Shared {
  ObjLog objs[kObjects];
  std::atomic<uint64_t> ran{0};
  std::atomic<uint64_t> overlaps{0};
  std::atomic<uint64_t> bad_ids{0};
};

struct Rec {
  Shared* sh;
  uint8_t read_mask;   // objects this instruction reads only
  uint8_t write_mask;  // objects it writes (W or RW)
  uint8_t wonly_mask;  // of those, the ones it only writes (W)
};

fl_status_t record_access(fl_instr_ctx_t* ctx, void* ud) {
  auto* r = static_cast<Rec*>(ud);
  const uint64_t id = fl_instr_get_id(ctx);
  if (id == 0) r->sh->bad_ids.fetch_add(1);
  for (int o = 0; o < kObjects; ++o) {
    ObjLog& L = r->sh->objs[o];
    if (r->write_mask & (1u << o)) {
      int expected = 0;
      if (!L.active.compare_exchange_strong(expected, -1)) r->sh->overlaps.fetch_add(1);
      {
        std::lock_guard<std::mutex> lk(L.mu);
        L.log.emplace_back(id, uint8_t(FL_WRITE));
      }
      L.active.store(0);
    } else if (r->read_mask & (1u << o)) {
      if (L.active.fetch_add(1) < 0) r->sh->overlaps.fetch_add(1);
      {
        std::lock_guard<std::mutex> lk(L.mu);
        L.log.emplace_back(id, uint8_t(FL_READ));
      }
      L.active.fetch_sub(1);
    }
  }
  r->sh->ran.fetch_add(1, std::memory_order_relaxed);
  return FL_OK;
}

// The object's execution log must be a serial order that agrees with recording (id) order:
// writers in increasing id order, each reader between the writers whose ids surround it.
std::string check_log(const std::vector<std::pair<uint64_t, uint8_t>>& log) {
  uint64_t prev_writer = 0;
  std::vector<size_t> reader_pos;
  std::vector<uint64_t> writer_after(log.size(), UINT64_MAX);  // first writer id after each position
  uint64_t next = UINT64_MAX;
  for (size_t k = log.size(); k-- > 0;) {
    writer_after[k] = next;
    if (log[k].second == FL_WRITE) next = log[k].first;
  }
  for (size_t k = 0; k < log.size(); ++k) {
    const auto [id, acc] = log[k];
    if (acc == FL_WRITE) {
      if (id <= prev_writer)
        return "writer #" + std::to_string(id) + " ran after writer #" + std::to_string(prev_writer);
      prev_writer = id;
    } else if (!(prev_writer < id && id < writer_after[k])) {
      return "reader #" + std::to_string(id) + " ran between writers #" + std::to_string(prev_writer) + " and #" +
             (writer_after[k] == UINT64_MAX ? std::string("(none)") : std::to_string(writer_after[k]));
    }
  }
  return "";
}

void run_shared_objects(int threads, long total, uint64_t seed) {
  SCOPED_TRACE("threads=" + std::to_string(threads) + " total=" + std::to_string(total) +
               " seed=" + std::to_string(seed));
  HangGuard guard("SharedObjects: " + std::to_string(threads) + " submitting threads, " + std::to_string(total) +
                  " instructions");
  fl_engine_t* e = make_engine(2, uint64_t(threads) + 1);
  ASSERT_NE(e, nullptr);
  Shared sh;
  fl_object_t* objs[kObjects];
  for (auto& o : objs) ASSERT_FL_OK(fl_object_create(e, nullptr, nullptr, &o));
  const long per = total / threads;
  std::vector<std::vector<Rec>> recs(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    std::mt19937_64 rng(seed + uint64_t(t) * 7919);
    recs[size_t(t)].resize(size_t(per));
    for (auto& r : recs[size_t(t)]) {
      r.sh = &sh;
      r.read_mask = r.write_mask = r.wonly_mask = 0;
      const int n = 1 + int(rng() % 3);
      for (int k = 0; k < n; ++k) {
        const int o = int(rng() % kObjects);
        const uint32_t acc = 1 + uint32_t(rng() % 3);
        if (acc & FL_WRITE) r.write_mask |= uint8_t(1u << o);
        if (acc & FL_READ) r.read_mask |= uint8_t(1u << o);
      }
      r.wonly_mask = uint8_t(r.write_mask & ~r.read_mask);
      r.read_mask &= uint8_t(~r.write_mask);
    }
  }
  std::atomic<uint64_t> refused{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      fl_stream_t* s = host_stream(e, uint32_t(t) + 1);
      for (auto& r : recs[size_t(t)]) {
        fl_operand_t ops[kObjects];
        size_t n = 0;
        for (int o = 0; o < kObjects; ++o) {
          if (r.write_mask & (1u << o)) ops[n++] = (r.wonly_mask & (1u << o)) ? W(objs[o]) : RW(objs[o]);
          else if (r.read_mask & (1u << o)) ops[n++] = R(objs[o]);
        }
        if (flguard::submit_raw(s, &record_access, &r, ops, n) != FL_OK) refused.fetch_add(1);
      }
    });
  for (auto& t : ts) t.join();
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(refused.load(), 0u);
  EXPECT_EQ(sh.ran.load(), uint64_t(per) * uint64_t(threads));
  EXPECT_EQ(sh.overlaps.load(), 0u) << "a writer ran concurrently with another user of its object";
  EXPECT_EQ(sh.bad_ids.load(), 0u);
  for (int o = 0; o < kObjects; ++o) {
    std::string why = check_log(sh.objs[o].log);
    EXPECT_EQ(why, "") << "object " << o << ": its order differs from the recording order";
  }
  for (auto& o : objs) ASSERT_FL_OK(fl_object_release(o));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

}  // namespace

TEST(SerializableSubmission, FourThreadsMillionInstructionsOnSharedObjects) {
  run_shared_objects(4, fl_scaled(1000000, 40000), 11);
}

TEST(SerializableSubmission, TwoAndEightThreadsOnSharedObjects) {
  run_shared_objects(2, fl_scaled(200000, 20000), 12);
  run_shared_objects(8, fl_scaled(200000, 20000), 13);
}

// ---------------------------------------------------------------------------------------
// Waits inside callbacks deadlock only on a cycle of waits. A on lane 1 writes o and waits
// for B (lane 3) — through each kind of wait a callback can make; C (lane 2) waits for o.
// With one worker, the waiting worker used to run C on its own stack, and C could never
// return while A below it waited: a hang without a cycle.

namespace {

enum class WaitKind { kObjectWait, kStreamSync, kParallelFor, kTaskGraph };

struct WaitCase {
  fl_object_t* p = nullptr;   // written by B
  fl_stream_t* lane3 = nullptr;
  fl_engine_t* e = nullptr;
  std::atomic<int> a_status{-1};
};

fl_status_t wait_for_b(WaitCase* c, WaitKind kind) {
  switch (kind) {
    case WaitKind::kObjectWait: return fl_object_wait(c->p, FL_READ);
    case WaitKind::kStreamSync: return fl_stream_synchronize(c->lane3);
    case WaitKind::kParallelFor:
      return fl_parallel_for(c->e, 0, 1, 1, [](uint64_t, uint64_t, void* ud) {
        return fl_object_wait(static_cast<WaitCase*>(ud)->p, FL_READ);
      }, c);
    case WaitKind::kTaskGraph: {
      fl_taskgraph_t* g = nullptr;
      if (fl_taskgraph_create(c->e, &g) != FL_OK) return FL_ERR_INTERNAL;
      uint64_t node = 0;
      fl_taskgraph_add(g, [](void* ud) { return fl_object_wait(static_cast<WaitCase*>(ud)->p, FL_READ); }, c,
                       "wait_p", &node);
      fl_status_t st = fl_taskgraph_run(g, -1);
      fl_taskgraph_destroy(g);
      return st;
    }
  }
  return FL_ERR_INTERNAL;
}

void run_wait_case(WaitKind kind, const char* what) {
  HangGuard guard(std::string("wait inside a callback without a cycle: ") + what);
  fl_engine_t* e = make_engine(1, 4);
  ASSERT_NE(e, nullptr);
  WaitCase c;
  c.e = e;
  c.lane3 = host_stream(e, 3);
  fl_object_t* o = fltest::make_obj(e);
  c.p = fltest::make_obj(e);
  Gate queued;
  std::atomic<int> c_status{-1};
  std::atomic<bool> b_ran{false};
  submit(host_stream(e, 1), [&] {
    if (!queued.wait()) return FL_ERR_TIMEOUT;
    c.a_status = wait_for_b(&c, kind);
    return FL_OK;
  }, {W(o)}, "A");
  submit(host_stream(e, 2), [&] {
    c_status = fl_object_wait(o, FL_READ);
    return FL_OK;
  }, {}, "C");
  submit(c.lane3, [&] {
    b_ran = true;
    return FL_OK;
  }, {W(c.p)}, "B");
  queued.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(c.a_status.load(), FL_OK) << what;
  EXPECT_EQ(c_status.load(), FL_OK) << what;
  EXPECT_TRUE(b_ran.load());
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_object_release(c.p));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

}  // namespace

TEST(WaitsInCallbacks, ObjectWaitDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kObjectWait, "fl_object_wait");
}
TEST(WaitsInCallbacks, StreamSynchronizeOfAnotherLaneDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kStreamSync, "fl_stream_synchronize");
}
TEST(WaitsInCallbacks, NestedParallelForBodyWaitDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kParallelFor, "fl_parallel_for body");
}
TEST(WaitsInCallbacks, NestedTaskGraphTaskWaitDoesNotRunAnotherCallbackThatWaitsForIt) {
  run_wait_case(WaitKind::kTaskGraph, "fl_taskgraph_run task");
}

// Chains of waiting callbacks on one worker: every instruction of lanes 1..8 waits for the
// object the next lane writes; the last one is written by a plain instruction. Every wait
// finishes (the pool stands in for blocked workers), none deadlocks.
TEST(WaitsInCallbacks, ChainOfWaitingCallbacksOnOneWorkerCompletes) {
  HangGuard guard("chain of 8 waiting callbacks on one worker");
  fl_engine_t* e = make_engine(1, 10);
  ASSERT_NE(e, nullptr);
  fl_object_t* objs[9];
  for (auto& o : objs) o = fltest::make_obj(e);
  std::atomic<int> ok{0};
  Gate all_submitted;
  for (uint32_t l = 1; l <= 8; ++l)
    submit(host_stream(e, l), [&, l] {
      if (!all_submitted.wait()) return FL_ERR_TIMEOUT;
      if (fl_object_wait(objs[l], FL_READ) == FL_OK) ok.fetch_add(1);
      return FL_OK;
    }, {W(objs[l - 1])});
  submit(host_stream(e, 9), [] { return FL_OK; }, {W(objs[8])});
  all_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(ok.load(), 8);
  for (auto& o : objs) EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// The window: with a window of 1, an instruction's nested work (a task graph on a smaller
// pool, a parallel_for body) submits; the submission must be admitted, not block on the
// slot the instruction itself holds.

namespace {

struct WindowCase {
  fl_stream_t* target = nullptr;
  std::atomic<int> submit_status{-1};
  std::atomic<bool> follow_up_ran{false};
};

fl_status_t follow_up(fl_instr_ctx_t*, void* ud) {
  static_cast<WindowCase*>(ud)->follow_up_ran = true;
  return FL_OK;
}

fl_status_t submit_follow_up(void* ud) {
  auto* c = static_cast<WindowCase*>(ud);
  c->submit_status = flguard::submit_raw(c->target, &follow_up, c, nullptr, 0, "follow_up");
  return FL_OK;
}

}  // namespace

TEST(Window, TaskOfAGraphOnASmallerPoolSubmitsWithoutBlocking) {
  HangGuard guard("a task graph task submitting with a window of 1");
  fl_engine_t* e = make_engine(2, 0, 1);
  ASSERT_NE(e, nullptr);
  WindowCase c;
  c.target = host_stream(e, 2);
  std::atomic<int> run_status{-1};
  submit(host_stream(e, 1), [&](fl_instr_ctx_t* ctx) {
    fl_taskgraph_t* g = nullptr;
    if (fl_taskgraph_create(fl_instr_engine(ctx), &g) != FL_OK) return FL_ERR_INTERNAL;
    uint64_t n = 0;
    fl_taskgraph_add(g, &submit_follow_up, &c, "submitter", &n);
    run_status = fl_taskgraph_run(g, 1);  // one thread: a pool of its own, smaller than the engine's
    fl_taskgraph_destroy(g);
    return FL_OK;
  });
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(fl_engine_synchronize(e));  // the follow-up may have been submitted after the first
  EXPECT_EQ(run_status.load(), FL_OK);
  EXPECT_EQ(c.submit_status.load(), FL_OK);
  EXPECT_TRUE(c.follow_up_ran.load());
  EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(Window, ParallelForBodyInsideAnInstructionSubmitsWithoutBlocking) {
  HangGuard guard("a parallel_for body submitting with a window of 1");
  fl_engine_t* e = make_engine(2, 0, 1);
  ASSERT_NE(e, nullptr);
  WindowCase c;
  c.target = host_stream(e, 2);
  std::atomic<int> loop_status{-1};
  submit(host_stream(e, 1), [&](fl_instr_ctx_t* ctx) {
    loop_status = fl_parallel_for(fl_instr_engine(ctx), 0, 4, 1, [](uint64_t lo, uint64_t, void* ud) {
      return lo == 3 ? submit_follow_up(ud) : FL_OK;
    }, &c);
    return FL_OK;
  });
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(loop_status.load(), FL_OK);
  EXPECT_EQ(c.submit_status.load(), FL_OK);
  EXPECT_TRUE(c.follow_up_ran.load());
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// ---------------------------------------------------------------------------------------
// fl_object_wait from a callback for a writer queued behind the caller on its own lane can
// never return: refused (as fl_stream_synchronize of the own lane is), never a hang. A
// writer on another lane is waited for normally.

TEST(OwnLaneWait, ObjectWaitForALaterWriterOfTheOwnLaneIsRefused) {
  HangGuard guard("fl_object_wait for a later own-lane writer");
  fl_engine_t* e = make_engine(2, 4);
  ASSERT_NE(e, nullptr);
  fl_object_t* o = fltest::make_obj(e);
  fl_object_t* q = fltest::make_obj(e);
  Gate later_submitted;
  std::atomic<int> own{-1}, other{-1};
  std::string own_msg;
  submit(host_stream(e, 1), [&] {
    if (!later_submitted.wait()) return FL_ERR_TIMEOUT;
    own = fl_object_wait(o, FL_READ);
    own_msg = fl_last_error_message();
    other = fl_object_wait(q, FL_WRITE);  // written on lane 2: fine
    return FL_OK;
  }, {}, "waiter");
  std::atomic<bool> later_ran{false};
  submit(host_stream(e, 1), [&] {
    later_ran = true;
    return FL_OK;
  }, {W(o)}, "later_writer");
  submit(host_stream(e, 2), [] { return FL_OK; }, {W(q)}, "other_lane_writer");
  later_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(own.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(own_msg, "later_writer")) << own_msg;
  EXPECT_EQ(other.load(), FL_OK);
  EXPECT_TRUE(later_ran.load());
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_object_release(q));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// A callback waiting on an object it lists itself, whose latest writer was recorded after it
// on another lane: that writer depends on the caller through the object, so the wait would
// wait for the caller itself.
// (It used to hang: only the caller itself and later instructions of its own lane were refused.)
TEST(OwnLaneWait, ObjectWaitOnAnOwnOperandWithALaterWriterOnAnotherLaneIsRefused) {
  HangGuard guard("fl_object_wait on an own operand with a later writer on another lane");
  fl_engine_t* e = make_engine(2, 4);
  ASSERT_NE(e, nullptr);
  fl_object_t* o = fltest::make_obj(e);
  Gate later_submitted;
  std::atomic<int> st{-1};
  submit(host_stream(e, 1), [&] {
    if (!later_submitted.wait()) return FL_ERR_TIMEOUT;
    st = fl_object_wait(o, FL_READ);
    return FL_OK;
  }, {W(o)}, "writes_then_waits");
  submit(host_stream(e, 2), [] { return FL_OK; }, {W(o)}, "later_writer_other_lane");
  later_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(st.load(), FL_ERR_INVALID_ARGUMENT);
  // A reader recorded after a caller that only reads does not depend on it: no refusal.
  std::atomic<int> st2{-1};
  Gate reader_submitted;
  fl_object_t* q = fltest::make_obj(e);
  submit(host_stream(e, 1), [&] {
    if (!reader_submitted.wait()) return FL_ERR_TIMEOUT;
    st2 = fl_object_wait(q, FL_READ);
    return FL_OK;
  }, {R(q)}, "reads_then_waits");
  submit(host_stream(e, 2), [] { return FL_OK; }, {R(q)}, "later_reader_other_lane");
  reader_submitted.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(st2.load(), FL_OK);
  EXPECT_FL_OK(fl_object_release(q));
  EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_engine_destroy(e));
}
