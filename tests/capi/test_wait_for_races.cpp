// fl_instr_wait_for under adversarial use (public API only). A waiter registers the id it
// needs on its stream, and a completion wakes it only when the stream reaches that id
// (Stream::id_targets / wake_at_id in core/engine/stream.cpp): a waiter that is not woken
// hangs (the HangGuard turns that into a failure; waits with a timeout use one of an hour,
// which takes the same timed path), and a waiter that returns too early is caught by the
// instruction's own write, which it reads after the wait (a plain int: ThreadSanitizer
// also checks the happens-before the wait promises). No check here depends on timing.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

namespace {

using fltest::Clock;
using fltest::make_obj;
using fltest::submit_busy;
using fltest::try_submit;

constexpr uint64_t kAnHour = 3600ull * 1'000'000'000ull;  // a timed wait that never times out here

// How a waiter waits: forever; with a timeout that never passes (the timed sleep path);
// or with a short one (0 polls) that may well pass (registering and withdrawing its id).
enum class Mode { kForever, kLong, kShort };
uint64_t timeout_of(Mode m, uint64_t short_ns) {
  return m == Mode::kForever ? FL_WAIT_FOREVER : m == Mode::kLong ? kAnHour : short_ns;
}

// One instruction of a test: its id (0 until the submitter has it) and what it writes.
struct Slot {
  std::atomic<fl_instr_id> id{0};
  int value = 0;  // written by the instruction, read by its waiters after the wait
};

// The instructions submitted to one stream, published as they are submitted.
struct Track {
  fl_stream_t* s = nullptr;
  std::unique_ptr<Slot[]> slots;
  size_t capacity = 0;
  std::atomic<size_t> reserved{0};  // slots handed out; a slot's id is stored once submitted
  Track(fl_stream_t* stream, size_t n) : s(stream), slots(new Slot[n]), capacity(n) {}
};

// Collects failures from any thread (gtest assertions are made on the test's thread).
struct Failures {
  std::mutex mu;
  std::vector<std::string> first;
  std::atomic<int> count{0};
  void add(const std::string& what) {
    count.fetch_add(1);
    std::lock_guard<std::mutex> lk(mu);
    if (first.size() < 10) first.push_back(what);
  }
  std::string text() {
    std::lock_guard<std::mutex> lk(mu);
    std::string t;
    for (const std::string& s : first) t += "\n  " + s;
    return t;
  }
};

// Busy for a few hundred nanoseconds: completions spread out, so waiters really sleep.
void busy(unsigned rounds) {
  std::atomic<unsigned> sink{0};
  for (unsigned i = 0; i < rounds; ++i) sink.fetch_add(1, std::memory_order_relaxed);
}

// Submits an instruction that writes slot k of t (k + 1) and publishes its id.
fl_status_t submit_slot(Track& t, size_t k, unsigned spin) {
  Slot* slot = &t.slots[k];
  fl_instr_id id = 0;
  fl_status_t st = try_submit(
      t.s, [slot, k, spin] {
        busy(spin);
        slot->value = int(k) + 1;
        return FL_OK;
      },
      {}, "slot", 0, &id);
  if (st == FL_OK) slot->id.store(id, std::memory_order_release);
  return st;
}

// Waits for slot k of t; records a failure unless the wait returned FL_OK after the
// instruction's write, or FL_ERR_TIMEOUT for a short timeout. Returns the status.
fl_status_t wait_slot(Track& t, size_t k, Mode m, uint64_t short_ns, Failures& fails, const char* who) {
  const fl_instr_id id = t.slots[k].id.load(std::memory_order_acquire);
  const fl_status_t st = fl_instr_wait_for(t.s, id, timeout_of(m, short_ns));
  if (st == FL_OK) {
    if (t.slots[k].value != int(k) + 1)
      fails.add(std::string(who) + ": fl_instr_wait_for(#" + std::to_string(id) +
                ") returned FL_OK before the instruction ran (value " + std::to_string(t.slots[k].value) + ")");
  } else if (!(st == FL_ERR_TIMEOUT && m == Mode::kShort)) {
    fails.add(std::string(who) + ": fl_instr_wait_for(#" + std::to_string(id) + ", " +
              (m == Mode::kForever ? "forever" : m == Mode::kLong ? "an hour" : "short") + ") returned " +
              fl_status_name(st) + ": " + fl_last_error_message());
  }
  return st;
}

pid_t this_tid() { return pid_t(::syscall(SYS_gettid)); }

// Whether thread `tid` of this process sleeps in the kernel right now (state S).
bool asleep(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t p = line.rfind(')');  // the command name may contain anything
  return p != std::string::npos && p + 2 < line.size() && line[p + 2] == 'S';
}

// Waits until thread `tid` (published once it is about to wait) sleeps; false after 60 s.
// Used to make a waiter register its id before what it waits for completes: a waiter
// caught sleeping elsewhere only weakens the test, never fails it.
bool wait_asleep(const std::atomic<pid_t>& tid) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (tid.load() == 0 || !asleep(tid.load())) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// A gate instruction at the head of a stream: everything behind it stays pending until
// the test opens it.
fl_instr_id submit_gate(fl_stream_t* s, Gate& gate) {
  return submit(s, [&gate] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "gate");
}

// Threads waiting for different ids of one stream, each registered (asleep) before any of
// them completes, are each woken by their own instruction. They register in an order in
// which only the first lowers the stream's wake-up id: the others rely on each completion
// that wakes someone re-arming the stream for the next registered id (a completer that
// cleared it, or armed only the count targets, or woke a single waiter, strands the rest).
TEST(WaitForRaces, WaitersForDifferentIdsOfOneStreamAreEachWokenByTheirOwnInstruction) {
  HangGuard guard("waiters for different ids of one stream");
  EngineFixture f(2);
  fl_stream_t* s = f.host(1);
  Gate gate;
  submit_gate(s, gate);
  const size_t n = 24;
  Track t(s, n);
  for (size_t k = 0; k < n; ++k) ASSERT_FL_OK(submit_slot(t, k, 200));
  // Ascending even indices (only the first lowers wake_at_id), then descending odd ones,
  // then two more waiters for an id already waited for.
  std::vector<size_t> order;
  for (size_t k = 0; k < n; k += 2) order.push_back(k);
  for (size_t k = n - 1; k < n; k -= 2) order.push_back(k);
  order.push_back(11);
  order.push_back(11);
  Failures fails;
  std::vector<std::atomic<pid_t>> tids(order.size());
  std::vector<std::thread> threads;
  for (size_t j = 0; j < order.size(); ++j) {
    threads.emplace_back([&, j] {
      tids[j] = this_tid();
      wait_slot(t, order[j], j % 2 ? Mode::kLong : Mode::kForever, 0, fails, "waiter");
    });
    EXPECT_TRUE(wait_asleep(tids[j])) << "waiter " << j << " never went to sleep";
  }
  gate.open = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(fails.count.load(), 0) << fails.text();
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
}

// Waits for an id that time out withdraw only their own registration: another waiter for
// the same id, registered first, is still woken when it completes (also after a completion
// before it re-armed the stream from the registered ids).
TEST(WaitForRaces, TimedOutWaitsForAnIdLeaveTheOtherWaitersForItRegistered) {
  HangGuard guard("timed-out waits beside a waiter for the same id");
  EngineFixture f(2);
  fl_stream_t* s = f.host(1);
  Gate gate;
  submit_gate(s, gate);
  Track t(s, 3);
  for (size_t k = 0; k < 3; ++k) ASSERT_FL_OK(submit_slot(t, k, 100));
  Failures fails;
  // Sleeps for the first id: its completion re-arms the stream from the registered ids.
  std::atomic<pid_t> early_tid{0}, late_tid{0};
  std::thread early([&] {
    early_tid = this_tid();
    wait_slot(t, 0, Mode::kForever, 0, fails, "waiter for the first id");
  });
  ASSERT_TRUE(wait_asleep(early_tid));
  std::thread late([&] {
    late_tid = this_tid();
    wait_slot(t, 2, Mode::kLong, 0, fails, "waiter for the last id");
  });
  ASSERT_TRUE(wait_asleep(late_tid));
  // Waits for the same (last) id that time out, from this thread and another one.
  for (int r = 0; r < 20; ++r) {
    EXPECT_EQ(fl_instr_wait_for(s, t.slots[2].id.load(), r % 2 ? 0 : 200'000), FL_ERR_TIMEOUT);
    std::thread other([&] { EXPECT_EQ(fl_instr_wait_for(s, t.slots[2].id.load(), 100'000), FL_ERR_TIMEOUT); });
    other.join();
  }
  gate.open = true;
  early.join();
  late.join();
  EXPECT_EQ(fails.count.load(), 0) << fails.text();
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
}

// Sleeps of the calling thread so far that really slept (voluntary context switches).
long voluntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// A wait for an early id that timed out leaves the stream armed for that id; the first
// completion that reaches it re-arms the stream for the ids still registered, so a waiter
// for the last of 400 instructions still sleeps through the completions before its own
// (a completion that never re-armed the stream would wake it at every completion after
// the withdrawn id: about a hundred sleeps here). A count, not a time.
TEST(WaitForRaces, AWithdrawnWaitDoesNotLeaveEveryLaterCompletionWakingTheOtherWaiters) {
  HangGuard guard("a waiter for the last id after a withdrawn wait");
  EngineFixture f(1);
  fl_stream_t* s = f.host(1);
  Gate gate;
  submit_gate(s, gate);
  const int n = 400;
  const std::vector<fl_instr_id> ids = submit_busy(s, n, std::chrono::microseconds(2));
  std::atomic<pid_t> tid{0};
  fl_status_t st = FL_ERR_INTERNAL;
  long sleeps = -1;
  std::thread waiter([&] {
    const long before = voluntary_switches();
    tid = this_tid();
    st = fl_instr_wait_for(s, ids[n - 1], FL_WAIT_FOREVER);
    sleeps = voluntary_switches() - before;
  });
  ASSERT_TRUE(wait_asleep(tid));
  // Lowers the stream's wake-up id to ids[10], then withdraws (the gate is closed).
  EXPECT_EQ(fl_instr_wait_for(s, ids[10], 1'000'000), FL_ERR_TIMEOUT);
  gate.open = true;
  waiter.join();
  EXPECT_FL_OK(st);
  EXPECT_LE(sleeps, 10) << "the waiter for the last id was woken at the completions after a withdrawn wait's id";
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
}

// Many threads wait for different ids of several streams at once, forever, with a timeout
// that does not pass, and with short timeouts (which register and withdraw ids all the
// time), beside synchronizes of the same streams (count targets on the same wait mutex),
// while one thread per stream keeps submitting (and waits for its instruction 32 back, so
// that the lanes stay busy the whole time). Each wait that returns FL_OK does so after
// its instruction ran; the last waits cover every stream's last instruction.
TEST(WaitForRaces, ManyWaitersForDifferentIdsOfSeveralStreamsWhileWorkKeepsComing) {
  const size_t per_stream = size_t(fl_scaled(6000, 1500));
  const int streams = 3, waiters = 6;
  HangGuard guard("many waiters on several streams while submitters keep adding work");
  EngineFixture f(2);
  std::vector<std::unique_ptr<Track>> tracks;
  for (int l = 0; l < streams; ++l) tracks.push_back(std::make_unique<Track>(f.host(uint32_t(l + 1)), per_stream));
  Failures fails;
  std::atomic<int> submitters_done{0};
  std::vector<std::thread> threads;
  for (int l = 0; l < streams; ++l)
    threads.emplace_back([&, l] {
      Track& t = *tracks[size_t(l)];
      for (size_t k = 0; k < per_stream; ++k) {
        const fl_status_t st = submit_slot(t, k, k % 7 == 0 ? 2000 : 100);
        if (st != FL_OK) {
          fails.add(std::string("submit: ") + fl_status_name(st));
          break;
        }
        t.reserved.store(k + 1, std::memory_order_release);
        // At most 32 ahead of the lane: the submitter waits too, and the run lasts.
        if (k >= 32) wait_slot(t, k - 32, Mode::kForever, 0, fails, "submitter");
      }
      submitters_done.fetch_add(1);
    });
  std::atomic<long> timed_out{0}, waited{0};
  for (int w = 0; w < waiters; ++w)
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(0x5eed + uint64_t(w));
      while (submitters_done.load() < streams) {
        Track& t = *tracks[rng() % streams];
        const size_t have = t.reserved.load(std::memory_order_acquire);
        if (have == 0) continue;
        // Mostly ids just submitted (still ahead of the lane), sometimes any id.
        size_t k = rng() % 4 ? have - 1 - std::min<size_t>(have - 1, rng() % 8) : rng() % have;
        const Mode m = Mode(rng() % 3);
        if (wait_slot(t, k, m, rng() % 4 ? rng() % 50'000 : 0, fails, "waiter") == FL_ERR_TIMEOUT) ++timed_out;
        ++waited;
      }
      for (auto& tp : tracks) wait_slot(*tp, per_stream - 1, w % 2 ? Mode::kLong : Mode::kForever, 0, fails, "final");
    });
  threads.emplace_back([&] {  // synchronizes of the same streams: count targets
    for (int r = 0; submitters_done.load() < streams; ++r) {
      Track& t = *tracks[size_t(r % streams)];
      const fl_status_t st = fl_stream_synchronize_for(t.s, r % 2 ? FL_WAIT_FOREVER : 20'000);
      if (st != FL_OK && st != FL_ERR_TIMEOUT) fails.add(std::string("synchronize: ") + fl_status_name(st));
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ(fails.count.load(), 0) << fails.text();
  EXPECT_GT(waited.load(), 0);
  std::printf("[ info ] %ld waits, %ld of them timed out (short timeouts)\n", waited.load(), timed_out.load());
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
}

// A wait racing with the completion of its own instruction (between its first check and
// its registration, the completion must be seen or must wake it), thousands of times.
TEST(WaitForRaces, AWaitRacingWithItsInstructionsCompletionReturnsAfterIt) {
  const size_t n = size_t(fl_scaled(20000, 2000));
  HangGuard guard("waits racing with their instruction's completion");
  EngineFixture f(2);
  Track t(f.host(1), n);
  Failures fails;
  std::atomic<size_t> submitted{0};
  std::thread waiter([&] {
    for (size_t k = 0; k < n; ++k) {
      while (submitted.load(std::memory_order_acquire) <= k) {
      }
      wait_slot(t, k, Mode(k % 2), 0, fails, "racing waiter");
    }
  });
  for (size_t k = 0; k < n; ++k) {
    ASSERT_FL_OK(submit_slot(t, k, unsigned(k % 5) * 40));
    submitted.store(k + 1, std::memory_order_release);
    if (k % 3 == 0) wait_slot(t, k, Mode::kForever, 0, fails, "submitter");
  }
  waiter.join();
  EXPECT_EQ(fails.count.load(), 0) << fails.text();
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
}

// What a waiter inside the engine recorded.
struct InsideWait {
  std::atomic<pid_t> tid{0};
  fl_status_t st = FL_ERR_INTERNAL;
  int value = -1;
  bool done = false;  // written before the callback / task returns
};

// Waits inside callbacks of other lanes and inside task-group tasks: on a worker the wait
// first helps with its own work, then blocks while a spare stands in. Some of those
// callbacks are in turn waited for by callbacks of a third lane (a chain of waits).
TEST(WaitForRaces, WaitsInsideCallbacksOfOtherLanesAndInsideTasks) {
  HangGuard guard("fl_instr_wait_for inside callbacks and tasks");
  EngineFixture f(2, 16);
  fl_stream_t* s = f.host(1);
  Gate gate;
  submit_gate(s, gate);
  const size_t n = 16;
  Track t(s, n);
  for (size_t k = 0; k < n; ++k) ASSERT_FL_OK(submit_slot(t, k, 300));
  fl_object_t* poisoned = make_obj(f.engine);
  const fl_instr_id bad = submit(s, [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(poisoned)}, "bad");

  // Lanes 2..7: a callback each, waiting for ids of lane 1 (the last one for `bad`).
  const int cb_lanes = 6;
  std::vector<InsideWait> in_cb(cb_lanes);
  std::vector<fl_instr_id> cb_ids(cb_lanes);
  for (int c = 0; c < cb_lanes; ++c) {
    const size_t k = size_t(c) * 3 % n;
    InsideWait* rec = &in_cb[size_t(c)];
    const bool for_bad = c == cb_lanes - 1;
    cb_ids[size_t(c)] = submit(f.host(uint32_t(2 + c)), [&t, s, rec, k, c, bad, for_bad] {
      rec->tid = this_tid();
      rec->st = fl_instr_wait_for(s, for_bad ? bad : t.slots[k].id.load(), c % 2 ? kAnHour : FL_WAIT_FOREVER);
      rec->value = t.slots[k].value;
      rec->done = true;
      return FL_OK;
    });
  }
  // Lane 8: a callback waiting for the callbacks above (which wait themselves).
  std::atomic<int> chain_ok{-1};
  submit(f.host(8), [&] {
    int ok = 0;
    for (int c = 0; c < cb_lanes; ++c)
      ok += fl_instr_wait_for(f.host(uint32_t(2 + c)), cb_ids[size_t(c)], FL_WAIT_FOREVER) == FL_OK &&
            in_cb[size_t(c)].done;
    chain_ok = ok;
    return FL_OK;
  });
  // Task-group tasks waiting for ids of lane 1.
  struct TaskArg {
    Track* t;
    size_t k;
    InsideWait rec;
  };
  const int tasks = 6;
  std::vector<TaskArg> args(tasks);
  fl_task_group_t* g = nullptr;
  ASSERT_FL_OK(fl_task_group_create(f.engine, &g));
  for (int j = 0; j < tasks; ++j) {
    args[size_t(j)].t = &t;
    args[size_t(j)].k = n - 1 - size_t(j) * 2;
    ASSERT_FL_OK(fl_task_group_spawn(g, [](void* p) {
      auto* a = static_cast<TaskArg*>(p);
      a->rec.tid = this_tid();
      a->rec.st = fl_instr_wait_for(a->t->s, a->t->slots[a->k].id.load(), a->k % 2 ? kAnHour : FL_WAIT_FOREVER);
      a->rec.value = a->t->slots[a->k].value;
      a->rec.done = true;
      return FL_OK;
    }, &args[size_t(j)], nullptr));
  }
  // Every waiter inside the engine has gone to sleep before lane 1 moves.
  for (auto& r : in_cb) EXPECT_TRUE(wait_asleep(r.tid));
  for (auto& a : args) EXPECT_TRUE(wait_asleep(a.rec.tid));
  gate.open = true;
  EXPECT_FL_OK(fl_task_group_wait(g));
  EXPECT_FL_OK(fl_task_group_destroy(g));
  // The waits observed bad's failure: nothing is left for synchronize.
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  for (int c = 0; c < cb_lanes; ++c) {
    const InsideWait& r = in_cb[size_t(c)];
    EXPECT_TRUE(r.done);
    if (c == cb_lanes - 1) {
      EXPECT_EQ(r.st, FL_ERR_INSTRUCTION_FAILED) << "a callback's wait for a failed instruction";
    } else {
      EXPECT_EQ(r.st, FL_OK) << "callback on lane " << 2 + c;
      EXPECT_EQ(r.value, int(size_t(c) * 3 % n) + 1) << "callback on lane " << 2 + c << " returned early";
    }
  }
  for (const TaskArg& a : args) {
    EXPECT_TRUE(a.rec.done);
    EXPECT_EQ(a.rec.st, FL_OK);
    EXPECT_EQ(a.rec.value, int(a.k) + 1) << "a task's wait returned early";
  }
  EXPECT_EQ(chain_ok.load(), cb_lanes);
  fl_object_release(poisoned);
}

// Waits for failed, skipped and cancelled instructions (each asleep before the stream
// moves, several per id, forever or with a timeout) return their outcome: the failure's
// status, FL_ERR_DEPENDENCY_FAILED, FL_ERR_CANCELLED; the instructions around them FL_OK.
// A waiter inside a callback of another lane sees the same outcomes, and the waits count
// as observing the failures (synchronize has nothing left).
TEST(WaitForRaces, WaitsForFailedSkippedAndCancelledInstructionsReturnTheirOutcome) {
  HangGuard guard("waits for failed, skipped and cancelled instructions");
  EngineFixture f(3);
  fl_stream_t* s1 = f.host(1);
  fl_stream_t* s2 = f.host(2);
  Gate gate;
  submit_gate(s1, gate);
  struct Expect {
    fl_stream_t* s;
    fl_instr_id id;
    fl_status_t st;
    uint32_t state;
  };
  std::vector<Expect> expect;
  std::vector<fl_object_t*> objs;
  for (int r = 0; r < 4; ++r) {
    fl_object_t* p = make_obj(f.engine);
    fl_object_t* q = make_obj(f.engine);
    objs.push_back(p);
    objs.push_back(q);
    expect.push_back({s1, submit(s1, [] { return FL_OK; }, {}, "ok"), FL_OK, FL_INSTR_DONE});
    expect.push_back({s1, submit(s1, [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(p)}, "fails"),
                      FL_ERR_INSTRUCTION_FAILED, FL_INSTR_FAILED});
    fl_stream_t* skip_on = r % 2 ? s1 : s2;  // same lane (lane order) or another one (an edge)
    expect.push_back({skip_on, submit(skip_on, [] { return FL_OK; }, {R(p)}, "skipped"), FL_ERR_DEPENDENCY_FAILED,
                      FL_INSTR_SKIPPED});
    const fl_instr_id c = submit(s1, [] { return FL_OK; }, {W(q)}, "cancelled");
    ASSERT_FL_OK(fl_instr_cancel(s1, c));
    expect.push_back({s1, c, FL_ERR_CANCELLED, FL_INSTR_CANCELLED});
    expect.push_back({s2, submit(s2, [] { return FL_OK; }, {R(q)}, "skipped after cancel"),
                      FL_ERR_DEPENDENCY_FAILED, FL_INSTR_SKIPPED});
    expect.push_back({s2, submit(s2, [] { return FL_OK; }, {}, "ok2"), FL_OK, FL_INSTR_DONE});
  }
  // A callback of lane 3 waits for each of them in turn.
  std::vector<fl_status_t> in_cb(expect.size(), FL_ERR_INTERNAL);
  submit(f.host(3), [&] {
    for (size_t j = 0; j < expect.size(); ++j) in_cb[j] = fl_instr_wait_for(expect[j].s, expect[j].id, FL_WAIT_FOREVER);
    return FL_OK;
  });
  // Two threads per instruction, asleep before the gate opens.
  std::vector<fl_status_t> got(expect.size() * 2, FL_ERR_INTERNAL);
  std::vector<std::atomic<pid_t>> tids(got.size());
  std::vector<std::thread> threads;
  for (size_t j = 0; j < got.size(); ++j) {
    threads.emplace_back([&, j] {
      const Expect& e = expect[j / 2];
      tids[j] = this_tid();
      got[j] = fl_instr_wait_for(e.s, e.id, j % 2 ? kAnHour : FL_WAIT_FOREVER);
    });
    EXPECT_TRUE(wait_asleep(tids[j]));
  }
  gate.open = true;
  for (auto& th : threads) th.join();
  ASSERT_FL_OK(fl_stream_synchronize(f.host(3)));
  for (size_t j = 0; j < got.size(); ++j)
    EXPECT_EQ(got[j], expect[j / 2].st) << "thread wait for #" << expect[j / 2].id << ": " << fl_status_name(got[j]);
  for (size_t j = 0; j < expect.size(); ++j) {
    EXPECT_EQ(in_cb[j], expect[j].st) << "callback wait for #" << expect[j].id;
    uint32_t state = 99;
    ASSERT_FL_OK(fl_instr_query(expect[j].s, expect[j].id, &state));
    EXPECT_EQ(state, expect[j].state) << "#" << expect[j].id;
    EXPECT_EQ(fl_instr_wait_for(expect[j].s, expect[j].id, 0), expect[j].st) << "a second wait for #" << expect[j].id;
  }
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  for (fl_object_t* o : objs) fl_object_release(o);
}

// Waits race with fl_engine_drain: threads of the caller keep submitting until refused
// (FL_ERR_SHUTDOWN), callbacks keep submitting follow-ups (admitted: part of the drain) and
// some callbacks wait for instructions of another lane, while waiter threads wait for
// random published ids. Every wait returns after its instruction; when drain returns,
// every published instruction has completed.
TEST(WaitForRaces, WaitsRacingWithEngineDrainReturnTheirInstructionsOutcome) {
  const size_t cap = size_t(fl_scaled(20000, 3000));
  HangGuard guard("fl_instr_wait_for racing with fl_engine_drain");
  EngineFixture f(2);
  const int own = 3;  // lanes 1..3 fed by threads; lane 4 by callbacks
  std::vector<std::unique_ptr<Track>> tracks;
  for (int l = 0; l < own + 1; ++l) tracks.push_back(std::make_unique<Track>(f.host(uint32_t(l + 1)), cap));
  Track& follow = *tracks[own];
  Failures fails;
  std::atomic<int> cb_waits{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::vector<fl_status_t> refused(own, FL_OK);
  for (int l = 0; l < own; ++l)
    threads.emplace_back([&, l] {
      Track& t = *tracks[size_t(l)];
      // Lane 1's callbacks wait for lane 2's newest instruction: there is one from the start.
      while (l == 0 && tracks[1]->reserved.load() == 0) std::this_thread::yield();
      for (size_t k = 0; k < cap; ++k) {
        Slot* slot = &t.slots[k];
        fl_instr_id id = 0;
        fl_status_t st = try_submit(
            t.s, [&, slot, k, l] {
              busy(k % 5 == 0 ? 1500 : 100);
              slot->value = int(k) + 1;
              if (k % 50 == 0) {  // a follow-up on lane 4, submitted from the callback
                const size_t j = follow.reserved.fetch_add(1);
                if (j < follow.capacity && submit_slot(follow, j, 100) != FL_OK)
                  fails.add(std::string("follow-up refused: ") + fl_last_error_message());
              }
              if (l == 0 && k % 40 == 0) {  // lane 1 waits for lane 2's newest instruction
                Track& other = *tracks[1];
                const size_t have = std::min(other.reserved.load(std::memory_order_acquire), other.capacity);
                if (have > 0 && other.slots[have - 1].id.load(std::memory_order_acquire) != 0) {
                  wait_slot(other, have - 1, Mode::kForever, 0, fails, "callback");
                  cb_waits.fetch_add(1);
                }
              }
              return FL_OK;
            },
            {}, "drained", 0, &id);
        if (st != FL_OK) {
          refused[size_t(l)] = st;
          break;
        }
        slot->id.store(id, std::memory_order_release);
        t.reserved.store(k + 1, std::memory_order_release);
      }
    });
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(0xd5a1 + uint64_t(w));
      while (!stop.load()) {
        Track& t = *tracks[rng() % tracks.size()];
        const size_t have = std::min(t.reserved.load(std::memory_order_acquire), t.capacity);
        if (have == 0) continue;
        const size_t k = rng() % 2 ? have - 1 : rng() % have;
        if (t.slots[k].id.load(std::memory_order_acquire) == 0) continue;  // a follow-up being submitted
        wait_slot(t, k, Mode(rng() % 3), rng() % 20'000, fails, "waiter");
      }
    });
  // Drain once the submitters are well under way.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (tracks[0]->reserved.load() < cap / 4 && Clock::now() < deadline) std::this_thread::yield();
  EXPECT_FL_OK(fl_engine_drain(f.engine, FL_WAIT_FOREVER));
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(fails.count.load(), 0) << fails.text();
  for (int l = 0; l < own; ++l)
    EXPECT_TRUE(refused[size_t(l)] == FL_ERR_SHUTDOWN || tracks[size_t(l)]->reserved.load() == cap)
        << "lane " << l + 1 << ": " << fl_status_name(refused[size_t(l)]);
  // Everything published had completed when drain returned: a poll finds it done.
  for (auto& tp : tracks) {
    const size_t have = std::min(tp->reserved.load(), tp->capacity);
    for (size_t k = 0; k < have; ++k) {
      const fl_instr_id id = tp->slots[k].id.load();
      if (id == 0) continue;
      ASSERT_EQ(fl_instr_wait_for(tp->s, id, 0), FL_OK) << "#" << id << " after the drain: " << fl_last_error_message();
      ASSERT_EQ(tp->slots[k].value, int(k) + 1);
    }
  }
  EXPECT_GT(cb_waits.load(), 0);
  EXPECT_FL_OK(fl_engine_drain(f.engine, 0));
}

// Callbacks that wait (fl_instr_wait_for) while fl_engine_destroy drains get their real
// answer, as "Calls from callbacks" promises: they sleep for instructions of another lane
// (one of which fails) that only move once the destroy has begun (a callback that
// submits until refused with FL_ERR_SHUTDOWN opens the gate).
TEST(WaitForRaces, CallbacksWaitingWhileTheEngineIsDestroyedGetTheirRealAnswer) {
  HangGuard guard("fl_instr_wait_for in callbacks during fl_engine_destroy");
  fl_engine_t* e = make_engine(4, 32);
  ASSERT_NE(e, nullptr);
  fl_stream_t* s = host_stream(e, 1);
  Gate gate;
  submit_gate(s, gate);
  const size_t n = 12;
  Track t(s, n);
  for (size_t k = 0; k < n; ++k) ASSERT_FL_OK(submit_slot(t, k, 300));
  fl_object_t* p = make_obj(e);
  const fl_instr_id bad = submit(s, [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(p)}, "bad");
  const fl_instr_id skipped = submit(s, [] { return FL_OK; }, {R(p)}, "skipped");
  fl_object_release(p);
  const int waiters = 5;
  std::vector<InsideWait> rec(waiters + 2);
  for (int c = 0; c < waiters + 2; ++c) {
    InsideWait* r = &rec[size_t(c)];
    const size_t k = size_t(c) * 5 % n;
    const fl_instr_id target = c == waiters ? bad : c == waiters + 1 ? skipped : 0;
    submit(host_stream(e, uint32_t(2 + c)), [&t, s, r, k, target, c] {
      r->tid = this_tid();
      r->st = fl_instr_wait_for(s, target ? target : t.slots[k].id.load(), c % 2 ? kAnHour : FL_WAIT_FOREVER);
      r->value = target ? 0 : t.slots[k].value;
      r->done = true;
      return FL_OK;
    });
  }
  // Opens the gate once a submission is refused: the destroy has begun.
  std::atomic<fl_status_t> refusal{FL_OK};
  fl_stream_t* spare_lane = host_stream(e, 20);
  submit(host_stream(e, 19), [&] {
    for (;;) {
      fl_instr_id id = 0;
      const fl_status_t st = try_submit(spare_lane, [] { return FL_OK; }, {}, "filler", 0, &id);
      if (st != FL_OK) {
        refusal = st;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    gate.open = true;
    return FL_OK;
  });
  for (auto& r : rec) EXPECT_TRUE(wait_asleep(r.tid));
  EXPECT_FL_OK(fl_engine_destroy(e));
  EXPECT_EQ(refusal.load(), FL_ERR_SHUTDOWN);
  for (int c = 0; c < waiters + 2; ++c) {
    const InsideWait& r = rec[size_t(c)];
    EXPECT_TRUE(r.done);
    if (c == waiters) {
      EXPECT_EQ(r.st, FL_ERR_INSTRUCTION_FAILED);
    } else if (c == waiters + 1) {
      EXPECT_EQ(r.st, FL_ERR_DEPENDENCY_FAILED);
    } else {
      EXPECT_EQ(r.st, FL_OK) << "waiter " << c;
      EXPECT_EQ(r.value, int(size_t(c) * 5 % n) + 1) << "waiter " << c << " returned early";
    }
  }
}

}  // namespace
