// Adversarial tests of the refusal of waits for work that waits for the caller (public API
// only; see test_waits_on_the_caller.cpp for the basic cases). They try to make the engine
// refuse a wait that would have returned (soundness), miss a documented cycle
// (completeness), or follow a stale link while submitters, completions and record reuse
// race with the walk (memory safety: run them under ThreadSanitizer and ASan too).
//
// Every wait has a timeout of a minute that a passing run never reaches: a missed cycle
// returns FL_ERR_TIMEOUT and the test fails on it.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

namespace {

constexpr uint64_t kMinute = 60ull * 1'000'000'000ull;

fl_status_t noop() { return FL_OK; }

struct Rig {
  fl_engine_t* e = make_engine(4, 8);
  fl_stream_t* lane(uint32_t k) { return host_stream(e, k); }
  ~Rig() { fl_engine_destroy(e); }
};

// A wait's status and message, as the callback that made it saw them.
struct Outcome {
  fl_status_t st = FL_OK;
  std::string msg;
};
Outcome outcome(fl_status_t st) { return Outcome{st, st == FL_OK ? "" : fl_last_error_message()}; }

// Where the caller makes its waits: its fn, its cleanup, or a fl_parallel_for body its fn
// runs (which counts as the caller on whichever worker runs it).
enum class From { kFn, kCleanup, kLoopBody };
const char* name_of(From f) { return f == From::kFn ? "fn" : f == From::kCleanup ? "cleanup" : "loop body"; }

// A caller instruction that, once `go` opens, runs `waits` from the place `from` says.
struct Caller {
  fl_engine_t* e = nullptr;
  From from = From::kFn;
  Gate go;
  std::function<void()> waits;
  std::atomic<bool> ran{false};
  fl_status_t loop_st = FL_OK;

  void run() {
    if (!go.wait()) return;
    if (from == From::kLoopBody) {
      // Two chunks: the waits run in one of them, on this thread or a worker.
      loop_st = fl_parallel_for(
          e, 0, 2, 1,
          [](uint64_t lo, uint64_t, void* ud) {
            if (lo == 0) static_cast<Caller*>(ud)->waits();
            return FL_OK;
          },
          this);
    } else {
      waits();
    }
    ran = true;
  }
  static fl_status_t fn(fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Caller*>(ud);
    if (c->from != From::kCleanup) c->run();
    return FL_OK;
  }
  static void cleanup(void* ud) {
    auto* c = static_cast<Caller*>(ud);
    if (c->from == From::kCleanup) c->run();
  }
  fl_instr_id submit(fl_stream_t* s, std::vector<fl_operand_t> ops, fl_host_fn f = &Caller::fn) {
    fl_instr_id id = 0;
    EXPECT_FL_OK(flguard::submit_raw(s, f, this, ops.data(), ops.size(), "caller", &Caller::cleanup, &id));
    return id;
  }
};

// ---------------------------------------------------------------------------------------
// Soundness: waits for work that does not wait for the caller still wait and return.

TEST(WaitsOnTheCallerRaces, NoRefusalOfWaitsThatReturn) {
  HangGuard guard("NoRefusalOfWaitsThatReturn");
  for (From from : {From::kFn, From::kCleanup, From::kLoopBody}) {
    SCOPED_TRACE(name_of(from));
    Rig r;
    fl_object_t* x = fltest::make_obj(r.e);  // the caller reads it
    fl_object_t* z = fltest::make_obj(r.e);  // the caller's predecessor writes it
    fl_object_t* q = fltest::make_obj(r.e);  // unrelated to the caller
    fl_object_t* y = fltest::make_obj(r.e);  // the caller writes it
    fl_stream_t *l1 = r.lane(1), *l2 = r.lane(2), *l3 = r.lane(3), *l4 = r.lane(4);
    Gate other;  // holds an instruction unrelated to the caller until the caller waits for it
    std::atomic<bool> waiting{false};
    fl_instr_id earlier_writer = submit(l3, noop, {W(x)}, "earlier writer");
    submit(l1, noop, {W(z)}, "predecessor");  // on the caller's lane, before it
    Caller c;
    c.e = r.e;
    c.from = from;
    std::map<std::string, Outcome> seen;
    fl_instr_id co_reader = 0, pred_dep = 0, held = 0, behind_held = 0, done_before = 0, dependent = 0;
    c.waits = [&] {
      // Another reader of what the caller reads: reader-reader sharing orders nothing.
      seen["co-reader"] = outcome(fl_instr_wait_for(l2, co_reader, kMinute));
      // Depends on the caller's predecessor only (same lane, completed before the caller).
      seen["predecessor's dependent"] = outcome(fl_instr_wait_for(l3, pred_dep, kMinute));
      seen["completed"] = outcome(fl_instr_wait_for(l4, done_before, kMinute));
      seen["earlier"] = outcome(fl_instr_wait_for(l3, earlier_writer, kMinute));
      seen["read wait, co-reader"] = outcome(fl_object_wait_for(x, FL_READ, kMinute));
      seen["object of the predecessor"] = outcome(fl_object_wait_for(z, FL_READ_WRITE, kMinute));
      // Held by something else, not by the caller: the wait really sleeps until it opens.
      waiting = true;
      seen["held elsewhere"] = outcome(fl_instr_wait_for(l4, behind_held, kMinute));
      seen["object held elsewhere"] = outcome(fl_object_wait_for(q, FL_READ_WRITE, kMinute));
      seen["sync of a lane with no dependent"] = outcome(fl_stream_synchronize_for(l4, kMinute));
      // The id of a dependent on lane 2, asked of lane 4, which holds no dependent: it
      // waits for lane 4's instructions up to that id, none of which depends on the caller.
      seen["other stream's id"] = outcome(fl_instr_wait_for(l4, dependent, kMinute));
    };
    c.submit(l1, {R(x), W(y)});
    co_reader = submit(l2, noop, {R(x)}, "co-reader");
    pred_dep = submit(l3, noop, {R(z)}, "predecessor's dependent");
    done_before = submit(l4, noop, {}, "done before");
    ASSERT_FL_OK(fl_instr_wait_for(l4, done_before, kMinute));
    dependent = submit(l2, noop, {R(y)}, "dependent");  // RAW on the caller; lane 4's ids below are larger
    held = submit(l4, [&] { return other.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(q)}, "held");
    behind_held = submit(l4, noop, {R(q)}, "behind held");
    (void)held;
    c.go.open = true;
    std::thread opener([&] {
      while (!waiting.load()) std::this_thread::yield();
      other.open = true;
    });
    opener.join();
    ASSERT_FL_OK(fl_engine_synchronize(r.e));
    ASSERT_TRUE(c.ran.load());
    EXPECT_FL_OK(c.loop_st);
    for (auto& [what, o] : seen) EXPECT_EQ(o.st, FL_OK) << what << ": " << fl_status_name(o.st) << " " << o.msg;
    EXPECT_EQ(seen.size(), 10u);
    fl_object_release(x);
    fl_object_release(z);
    fl_object_release(q);
    fl_object_release(y);
  }
}

// ---------------------------------------------------------------------------------------
// Completeness: a dependent reached through objects and lane order, over several lanes.

TEST(WaitsOnTheCallerRaces, LongMixedChainsAreRefusedFromEveryPlace) {
  HangGuard guard("LongMixedChainsAreRefusedFromEveryPlace");
  for (From from : {From::kFn, From::kCleanup, From::kLoopBody}) {
    SCOPED_TRACE(name_of(from));
    Rig r;
    fl_object_t* x = fltest::make_obj(r.e);
    fl_object_t* y = fltest::make_obj(r.e);
    fl_object_t* z = fltest::make_obj(r.e);
    fl_object_t* u = fltest::make_obj(r.e);
    fl_object_t* v = fltest::make_obj(r.e);
    fl_stream_t *l1 = r.lane(1), *l2 = r.lane(2), *l3 = r.lane(3), *l4 = r.lane(4), *l5 = r.lane(5);
    Caller c;
    c.e = r.e;
    c.from = from;
    std::map<std::string, Outcome> seen;
    fl_instr_id war = 0, end = 0;
    c.waits = [&] {
      seen["WAR writer"] = outcome(fl_instr_wait_for(l2, war, kMinute));
      seen["end of the chain"] = outcome(fl_instr_wait_for(l5, end, kMinute));
      seen["sync of the chain's end"] = outcome(fl_stream_synchronize_for(l5, kMinute));
      seen["sync of a lane in between"] = outcome(fl_stream_synchronize_for(l3, kMinute));
      seen["read wait for the chain's last writer"] = outcome(fl_object_wait_for(v, FL_READ, kMinute));
      seen["write wait for its readers"] = outcome(fl_object_wait_for(u, FL_WRITE, kMinute));
      seen["read wait for the WAR writer"] = outcome(fl_object_wait_for(x, FL_READ, kMinute));
    };
    // The caller reads x and writes y.
    c.submit(l1, {R(x), W(y)});
    war = submit(l2, noop, {W(x)}, "war");                 // WAR on x
    submit(l2, noop, {W(z)}, "behind war");                // lane order on lane 2
    submit(l3, noop, {R(z), R(u)}, "reads z");             // RAW on z
    submit(l3, noop, {}, "lane 3 tail");                   // lane order on lane 3 (no operands)
    submit(l4, noop, {R(u)}, "reads u too");               // shares only reads with the chain: not a dependent
    submit(l3, noop, {R(u), W(v)}, "writes v");            // lane 3, behind them
    end = submit(l5, noop, {R(v)}, "end");                 // RAW on v
    c.go.open = true;
    ASSERT_FL_OK(fl_engine_synchronize(r.e));
    ASSERT_TRUE(c.ran.load());
    EXPECT_FL_OK(c.loop_st);
    ASSERT_EQ(seen.size(), 7u);
    for (auto& [what, o] : seen) {
      EXPECT_EQ(o.st, FL_ERR_INVALID_ARGUMENT) << what << ": " << fl_status_name(o.st) << " " << o.msg;
      EXPECT_TRUE(has(o.msg, "'caller'")) << what << ": " << o.msg;
    }
    EXPECT_TRUE(has(seen["end of the chain"].msg,
                    "'war' (#" ) && has(seen["end of the chain"].msg, "-> 'behind war'") &&
                has(seen["end of the chain"].msg, "-> 'end'"))
        << seen["end of the chain"].msg;
    for (fl_object_t* o : {x, y, z, u, v}) fl_object_release(o);
  }
}

// ---------------------------------------------------------------------------------------
// Random programs, submitted by several threads at once, checked after a serial replay in
// id order (the recording order) against a model of the dependency rules. The caller makes
// every kind of wait, for every instruction, stream and object, from its fn, its cleanup
// or a loop body; each is refused exactly when the model says it waits for the caller.

TEST(WaitsOnTheCallerRaces, ConcurrentSubmittersEveryWaitMatchesTheModel) {
  HangGuard guard("ConcurrentSubmittersEveryWaitMatchesTheModel");
  Rig r;
  constexpr int kLanes = 4, kObjects = 5, kThreads = 3;
  const int rounds = int(fl_scaled(60, 12));
  std::mt19937 rng(777);
  std::vector<fl_stream_t*> streams;
  for (uint32_t l = 1; l <= kLanes; ++l) streams.push_back(r.lane(l));
  int refused = 0, returned = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<fl_object_t*> objs;
    for (int k = 0; k < kObjects; ++k) objs.push_back(fltest::make_obj(r.e));
    struct Ins {
      int lane;
      std::vector<std::pair<int, uint32_t>> ops;
      fl_instr_id id = 0;
    };
    const int n = 8 + int(rng() % 24);
    std::vector<Ins> prog(size_t(n) + 1);  // prog[0] is the caller
    for (Ins& in : prog) {
      in.lane = int(rng() % kLanes);
      std::set<int> used;
      for (int j = 0, k = int(rng() % 4); j < k; ++j) {
        int o = int(rng() % kObjects);
        if (used.insert(o).second) in.ops.push_back({o, 1u + uint32_t(rng() % 3)});
      }
    }
    auto operands = [&](const Ins& in) {
      std::vector<fl_operand_t> v;
      for (auto [o, a] : in.ops) v.push_back(fl_operand_t{objs[size_t(o)], a, 0});
      return v;
    };
    Caller c;
    c.e = r.e;
    c.from = From(rng() % 3);
    std::vector<Outcome> instr_seen(prog.size()), sync_seen(kLanes), obj_seen(2 * kObjects);
    c.waits = [&] {
      for (size_t i = 1; i < prog.size(); ++i)
        instr_seen[i] = outcome(fl_instr_wait_for(streams[size_t(prog[i].lane)], prog[i].id, kMinute));
      for (int l = 0; l < kLanes; ++l) sync_seen[size_t(l)] = outcome(fl_stream_synchronize_for(streams[size_t(l)], kMinute));
      for (int o = 0; o < kObjects; ++o) {
        obj_seen[size_t(2 * o)] = outcome(fl_object_wait_for(objs[size_t(o)], FL_READ, kMinute));
        obj_seen[size_t(2 * o + 1)] = outcome(fl_object_wait_for(objs[size_t(o)], FL_WRITE, kMinute));
      }
    };
    // A few instructions before the caller, then the caller, then the rest from threads.
    const size_t before = rng() % 4;
    for (size_t i = 1; i <= before && i < prog.size(); ++i)
      prog[i].id = submit(streams[size_t(prog[i].lane)], noop, operands(prog[i]), "x");
    prog[0].id = c.submit(streams[size_t(prog[0].lane)], operands(prog[0]));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (size_t i = before + 1 + size_t(t); i < prog.size(); i += kThreads)
          prog[i].id = submit(streams[size_t(prog[i].lane)], noop, operands(prog[i]), "x");
      });
    for (std::thread& t : threads) t.join();
    // The serial replay: ids are taken in recording order.
    std::vector<size_t> order(prog.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prog[a].id < prog[b].id; });
    std::vector<bool> dep(prog.size(), false);  // waits for the caller
    dep[0] = true;
    std::vector<int> last_writer(kObjects, -1);
    std::vector<std::vector<int>> readers(kObjects);
    bool after_caller = false;
    for (size_t i : order) {
      if (i == 0) after_caller = true;
      if (after_caller && i != 0) {
        bool d = false;
        for (size_t j : order) {
          if (prog[j].id >= prog[i].id) break;
          if (!dep[j]) continue;
          bool edge = prog[j].lane == prog[i].lane;
          for (auto [o, a] : prog[i].ops)
            for (auto [oj, aj] : prog[j].ops)
              if (o == oj && ((a & FL_WRITE) || (aj & FL_WRITE))) edge = true;
          d = d || edge;
        }
        dep[i] = d;
      }
      for (auto [o, a] : prog[i].ops) {
        if (a & FL_WRITE) {
          last_writer[size_t(o)] = int(i);
          readers[size_t(o)].clear();
        } else {
          readers[size_t(o)].push_back(int(i));
        }
      }
    }
    c.go.open = true;
    ASSERT_FL_OK(fl_engine_synchronize(r.e));
    ASSERT_TRUE(c.ran.load());
    ASSERT_FL_OK(c.loop_st);
    auto check = [&](bool expect_refused, const Outcome& o, const std::string& what) {
      (expect_refused ? refused : returned)++;
      EXPECT_EQ(o.st, expect_refused ? FL_ERR_INVALID_ARGUMENT : FL_OK)
          << "round " << round << " (waits from the " << name_of(c.from) << "): " << what << ": "
          << fl_status_name(o.st) << " " << o.msg;
    };
    for (size_t i = 1; i < prog.size(); ++i)
      check(prog[i].id > prog[0].id && dep[i], instr_seen[i], "fl_instr_wait_for #" + std::to_string(prog[i].id));
    for (int l = 0; l < kLanes; ++l) {
      bool any = l == prog[0].lane;  // the caller's own lane: always refused
      for (size_t i = 1; i < prog.size(); ++i) any = any || (prog[i].lane == l && dep[i]);
      check(any, sync_seen[size_t(l)], "fl_stream_synchronize_for lane " + std::to_string(l + 1));
    }
    for (int o = 0; o < kObjects; ++o) {
      const int w = last_writer[size_t(o)];
      bool by_writer = w >= 0 && dep[size_t(w)];
      bool by_reader = false;
      for (int rd : readers[size_t(o)]) by_reader = by_reader || dep[size_t(rd)];
      check(by_writer, obj_seen[size_t(2 * o)], "fl_object_wait_for read, object " + std::to_string(o));
      check(by_writer || by_reader, obj_seen[size_t(2 * o + 1)], "fl_object_wait_for write, object " + std::to_string(o));
    }
    for (fl_object_t* o : objs) fl_object_release(o);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(refused, rounds);
  EXPECT_GT(returned, rounds);
}

// ---------------------------------------------------------------------------------------
// Memory safety under concurrency: walkers (the caller's fn and loop bodies on other
// workers) walk again and again while threads add multi-operand dependents, and others run
// many short instructions on other lanes, so records are recycled and reused as
// dependents at a high rate (a stale queue link or edge would be followed if one existed).

TEST(WaitsOnTheCallerRaces, WalksRaceWithDependentsBeingAddedAndRecordsBeingReused) {
  HangGuard guard("WalksRaceWithDependentsBeingAddedAndRecordsBeingReused");
  Rig r;
  fl_object_t* x = fltest::make_obj(r.e);
  fl_object_t* shared = fltest::make_obj(r.e);  // written by dependents, read by others
  fl_stream_t *l1 = r.lane(1), *l2 = r.lane(2), *l3 = r.lane(3), *l4 = r.lane(4), *l5 = r.lane(5),
              *l6 = r.lane(6);
  std::atomic<bool> stop{false};
  std::atomic<fl_instr_id> first{0};
  std::atomic<fl_instr_id> free_id{0};  // the last instruction on lane 5 (never a dependent)
  std::atomic<int> walks{0};
  std::mutex wrong_mu;
  std::string wrong;
  auto note = [&](const std::string& s) {
    std::lock_guard<std::mutex> lk(wrong_mu);
    if (wrong.empty()) wrong = s;
  };
  fl_object_t* free_obj = fltest::make_obj(r.e);  // used on lanes 5 and 6 only
  Caller c;
  c.e = r.e;
  c.from = From::kFn;
  const int walks_per_walker = int(fl_scaled(150, 25));
  std::function<void(uint64_t)> walker = [&](uint64_t who) {
          for (int k = 0; k < walks_per_walker; ++k, ++walks) {
            fl_status_t a = fl_instr_wait_for(l2, first.load(), kMinute);
            if (a != FL_ERR_INVALID_ARGUMENT) note(std::string("wait for a dependent: ") + fl_status_name(a));
            fl_status_t b = fl_stream_synchronize_for(who % 2 ? l3 : l4, kMinute);
            if (b != FL_ERR_INVALID_ARGUMENT) note(std::string("sync of a lane with dependents: ") + fl_status_name(b));
            fl_status_t d = fl_object_wait_for(shared, FL_WRITE, kMinute);
            if (d != FL_ERR_INVALID_ARGUMENT) note(std::string("object wait for dependents: ") + fl_status_name(d));
            // Never a dependent: must wait and return.
            fl_status_t e = fl_instr_wait_for(l5, free_id.load(), kMinute);
            if (e != FL_OK) note(std::string("wait on a free lane: ") + fl_status_name(e) + " " + fl_last_error_message());
            fl_status_t g = fl_object_wait_for(free_obj, FL_WRITE, kMinute);
            if (g != FL_OK) note(std::string("object wait on a free object: ") + fl_status_name(g) + " " +
                                 fl_last_error_message());
    }
  };
  c.waits = [&] {
    // Four walkers at once: loop bodies on this thread and on other workers.
    fl_status_t st = fl_parallel_for(
        r.e, 0, 4, 1,
        [](uint64_t lo, uint64_t, void* ud) {
          (*static_cast<std::function<void(uint64_t)>*>(ud))(lo);
          return FL_OK;
        },
        &walker);
    if (st != FL_OK) note(std::string("fl_parallel_for: ") + fl_status_name(st));
  };
  c.submit(l1, {W(x)});
  first = submit(l2, noop, {R(x), W(shared)}, "first");
  free_id = submit(l5, noop, {W(free_obj)}, "free");
  std::vector<std::thread> threads;
  // Dependents: multi-operand, through x, `shared` and private objects, on lanes 2-4.
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      fl_object_t* mine = fltest::make_obj(r.e);
      fl_stream_t* lanes[] = {l2, l3, l4};
      for (uint64_t k = 0; !stop.load() && k < uint64_t(fl_scaled(3000, 400)); ++k) {
        fl_stream_t* s = lanes[(uint64_t(t) + k) % 3];
        switch (k % 4) {
          case 0: submit(s, noop, {R(x), W(mine), R(shared)}, "dependent"); break;
          case 1: submit(s, noop, {RW(mine), W(shared)}, "through mine"); break;
          case 2: submit(s, noop, {R(shared)}, "reader"); break;
          default: submit(s, noop, {}, "lane order"); break;
        }
        if (k == 32) c.go.open = true;
      }
      fl_object_release(mine);
    });
  // Churn: many short instructions on lanes 5 and 6 (some run inline), recycled at once.
  threads.emplace_back([&] {
    for (uint64_t k = 0; !stop.load(); ++k) {
      fl_instr_id id = 0;
      fltest::try_submit(k % 2 ? l5 : l6, noop, k % 3 ? std::vector<fl_operand_t>{RW(free_obj)} : std::vector<fl_operand_t>{},
                         "churn", k % 5 == 0 ? FL_SUBMIT_INLINE : 0, &id);
      if (k % 2) free_id = id;
      if (k % 256 == 0) std::this_thread::yield();
    }
  });
  // Ends the churn once the walkers are done.
  while (!c.ran.load()) std::this_thread::yield();
  stop = true;
  for (std::thread& t : threads) t.join();
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_TRUE(wrong.empty()) << wrong << " after " << walks.load() << " walks";
  EXPECT_EQ(walks.load(), 4 * walks_per_walker);
  for (fl_object_t* o : {x, shared, free_obj}) fl_object_release(o);
}

// ---------------------------------------------------------------------------------------
// Cleanups of instructions that did not run their fn: failed, skipped and cancelled callers.

fl_status_t fails(fl_instr_ctx_t*, void*) { return FL_ERR_INSTRUCTION_FAILED; }

TEST(WaitsOnTheCallerRaces, CleanupsOfFailedSkippedAndCancelledCallersAreWalkedToo) {
  HangGuard guard("CleanupsOfFailedSkippedAndCancelledCallersAreWalkedToo");
  for (int how = 0; how < 3; ++how) {  // 0: fn fails, 1: skipped (poisoned input), 2: cancelled
    SCOPED_TRACE(how == 0 ? "failed" : how == 1 ? "skipped" : "cancelled");
    Rig r;
    fl_object_t* x = fltest::make_obj(r.e);
    fl_object_t* p = fltest::make_obj(r.e);
    fl_stream_t *l1 = r.lane(1), *l2 = r.lane(2), *l3 = r.lane(3);
    Gate hold;  // holds the caller's lane so that a cancel lands before it starts
    Caller c;
    c.e = r.e;
    c.from = From::kCleanup;
    c.go.open = true;
    Outcome dep_seen, free_seen, sync_seen;
    fl_instr_id d = 0, f = 0;
    c.waits = [&] {
      dep_seen = outcome(fl_instr_wait_for(l2, d, kMinute));
      free_seen = outcome(fl_instr_wait_for(l3, f, kMinute));
      sync_seen = outcome(fl_stream_synchronize_for(l2, kMinute));
    };
    submit(l1, [&] { return hold.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "holder");
    if (how == 1) submit(l3, [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(p)}, "poisoner");
    fl_instr_id caller = 0;
    std::vector<fl_operand_t> ops{W(x)};
    if (how == 1) ops.push_back(R(p));
    caller = c.submit(l1, ops, how == 0 ? &fails : &Caller::fn);
    if (how == 2) ASSERT_FL_OK(fl_instr_cancel(l1, caller));
    d = submit(l2, noop, {R(x)}, "dependent");
    f = submit(l3, noop, {}, "free");
    hold.open = true;
    fl_status_t st = fl_engine_synchronize(r.e);  // the caller's failure (and its family)
    EXPECT_NE(st, FL_OK);
    while (fl_engine_synchronize(r.e) != FL_OK) {
    }
    ASSERT_TRUE(c.ran.load());
    EXPECT_EQ(dep_seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(dep_seen.st) << " " << dep_seen.msg;
    EXPECT_TRUE(has(dep_seen.msg, "-> 'dependent'")) << dep_seen.msg;
    EXPECT_EQ(sync_seen.st, FL_ERR_INVALID_ARGUMENT) << fl_status_name(sync_seen.st) << " " << sync_seen.msg;
    EXPECT_EQ(free_seen.st, FL_OK) << fl_status_name(free_seen.st) << " " << free_seen.msg;
    fl_object_release(x);
    fl_object_release(p);
  }
}

// ---------------------------------------------------------------------------------------
// Not walked (documented): a release callback run by the caller's completion, and a task
// of a group created in the caller's fn. Their waits for the caller's dependents are not
// refused, and return once the caller has completed, as before.

TEST(WaitsOnTheCallerRaces, ReleaseCallbacksAndGroupTasksWaitAsBefore) {
  HangGuard guard("ReleaseCallbacksAndGroupTasksWaitAsBefore");
  Rig r;
  fl_stream_t *l1 = r.lane(1), *l2 = r.lane(2);
  fl_object_t* y = fltest::make_obj(r.e);  // the caller writes it; the dependent reads it
  struct Rel {
    fl_stream_t* s;
    std::atomic<fl_instr_id> dep{0};
    Outcome seen;
    std::atomic<bool> ran{false};
  } rel{l2, {}, {}, {}};
  fl_object_t* x = nullptr;  // released by the caller's completion
  ASSERT_FL_OK(fl_object_create(
      r.e, &rel,
      [](void* ud) {
        auto* q = static_cast<Rel*>(ud);
        q->seen = outcome(fl_instr_wait_for(q->s, q->dep.load(), kMinute));
        q->ran = true;
      },
      &x));
  std::atomic<fl_task_group_t*> g{nullptr};  // created in the caller's fn: its tasks count as the caller
  struct Task {
    fl_stream_t* s;
    std::atomic<fl_instr_id>* dep;
    Outcome seen;
    std::atomic<bool> ran{false};
  } task{l2, &rel.dep, {}, {}};
  Gate go;
  fl_status_t spawn_st = FL_ERR_INTERNAL;
  submit(
      l1,
      [&] {
        if (!go.wait()) return FL_ERR_TIMEOUT;
        fl_task_group_t* group = nullptr;
        if ((spawn_st = fl_task_group_create(r.e, &group)) != FL_OK) return FL_OK;
        g = group;
        spawn_st = fl_task_group_spawn(
            group,
            [](void* ud) {
              auto* t = static_cast<Task*>(ud);
              t->seen = outcome(fl_instr_wait_for(t->s, t->dep->load(), kMinute));
              t->ran = true;
              return FL_OK;
            },
            &task, nullptr);
        return FL_OK;
      },
      {W(x), W(y)}, "caller");
  fl_object_release(x);  // the caller's completion drops the last reference
  rel.dep = submit(l2, noop, {R(y)}, "dependent");
  go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  ASSERT_FL_OK(spawn_st);
  ASSERT_FL_OK(fl_task_group_wait(g.load()));
  ASSERT_FL_OK(fl_task_group_destroy(g.load()));
  ASSERT_TRUE(rel.ran.load());
  ASSERT_TRUE(task.ran.load());
  EXPECT_EQ(rel.seen.st, FL_OK) << fl_status_name(rel.seen.st) << " " << rel.seen.msg;
  EXPECT_EQ(task.seen.st, FL_OK) << fl_status_name(task.seen.st) << " " << task.seen.msg;
  fl_object_release(y);
}

// ---------------------------------------------------------------------------------------
// A caller run inline (FL_SUBMIT_INLINE): edges from it are traced; its own lane refuses
// as always; independent work waits and returns.

TEST(WaitsOnTheCallerRaces, AnInlineCallerRefusesItsDependentsAndWaitsForTheRest) {
  HangGuard guard("AnInlineCallerRefusesItsDependentsAndWaitsForTheRest");
  Rig r;
  fl_stream_t *l1 = r.lane(1), *l2 = r.lane(2), *l3 = r.lane(3);
  fl_object_t* x = fltest::make_obj(r.e);
  std::map<std::string, Outcome> seen;
  fl_instr_id id = 0;
  ASSERT_FL_OK(fltest::try_submit(
      l1,
      [&] {
        fl_instr_id d = submit(l2, noop, {R(x)}, "dependent");
        fl_instr_id mine = submit(l1, noop, {}, "behind on my lane");
        fl_instr_id f = submit(l3, noop, {}, "free");
        seen["dependent"] = outcome(fl_instr_wait_for(l2, d, kMinute));
        seen["own lane"] = outcome(fl_instr_wait_for(l1, mine, kMinute));
        seen["sync of own lane"] = outcome(fl_stream_synchronize_for(l1, kMinute));
        seen["read wait for the dependent reader"] = outcome(fl_object_wait_for(x, FL_WRITE, kMinute));
        seen["free"] = outcome(fl_instr_wait_for(l3, f, kMinute));
        seen["sync free"] = outcome(fl_stream_synchronize_for(l3, kMinute));
        return FL_OK;
      },
      {W(x)}, "caller", FL_SUBMIT_INLINE, &id));
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  ASSERT_EQ(seen.size(), 6u);
  for (const char* k : {"dependent", "own lane", "sync of own lane", "read wait for the dependent reader"})
    EXPECT_EQ(seen[k].st, FL_ERR_INVALID_ARGUMENT) << k << ": " << fl_status_name(seen[k].st) << " " << seen[k].msg;
  for (const char* k : {"free", "sync free"})
    EXPECT_EQ(seen[k].st, FL_OK) << k << ": " << fl_status_name(seen[k].st) << " " << seen[k].msg;
  fl_object_release(x);
}

// ---------------------------------------------------------------------------------------
// A task of a group created in an instruction's fn counts as that instruction only until it
// completes ("Calls from callbacks"): afterwards the task's waits are not refused, whatever
// is queued behind the instruction on its lane. The later user is held until the task has
// returned, so each wait must run out its short timeout (a refusal returns at once instead).

TEST(WaitsOnTheCallerRaces, AGroupTaskWaitsFreelyOnceItsInstructionHasCompleted) {
  HangGuard guard("AGroupTaskWaitsFreelyOnceItsInstructionHasCompleted");
  Rig r;
  fl_stream_t* l1 = r.lane(1);
  fl_object_t* o = fltest::make_obj(r.e);
  std::atomic<fl_task_group_t*> g{nullptr};
  const fl_instr_id owner = submit(
      l1,
      [&] {
        fl_task_group_t* group = nullptr;
        fl_status_t st = fl_task_group_create(r.e, &group);
        g = group;
        return st;
      },
      {RW(o)}, "owner");
  ASSERT_FL_OK(fl_instr_wait_for(l1, owner, kMinute));
  ASSERT_NE(g.load(), nullptr);
  Gate held;
  struct Task {
    fl_stream_t* s;
    fl_object_t* o;
    fl_instr_id later = 0;
    Outcome object_wait, instr_wait, sync;
  } task{l1, o, 0, {}, {}, {}};
  task.later = submit(l1, [&] { return held.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(o)}, "later user");
  constexpr uint64_t kShort = 1'000'000;  // 1 ms: the later user is held until the task returns
  ASSERT_FL_OK(fl_task_group_spawn(
      g.load(),
      [](void* ud) {
        auto* t = static_cast<Task*>(ud);
        t->object_wait = outcome(fl_object_wait_for(t->o, FL_READ, kShort));
        t->instr_wait = outcome(fl_instr_wait_for(t->s, t->later, kShort));
        t->sync = outcome(fl_stream_synchronize_for(t->s, kShort));
        return FL_OK;
      },
      &task, nullptr));
  ASSERT_FL_OK(fl_task_group_wait(g.load()));
  held.open = true;
  ASSERT_FL_OK(fl_task_group_destroy(g.load()));
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_EQ(task.object_wait.st, FL_ERR_TIMEOUT) << fl_status_name(task.object_wait.st) << " " << task.object_wait.msg;
  EXPECT_EQ(task.instr_wait.st, FL_ERR_TIMEOUT) << fl_status_name(task.instr_wait.st) << " " << task.instr_wait.msg;
  EXPECT_EQ(task.sync.st, FL_ERR_TIMEOUT) << fl_status_name(task.sync.st) << " " << task.sync.msg;
  fl_object_release(o);
}

}  // namespace
