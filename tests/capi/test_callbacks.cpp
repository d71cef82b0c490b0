// Callbacks that call back into the API. From every kind of
// code the engine runs (instruction function, cleanup, release callback, parallel_for body,
// task-graph task, watchdog callback) every call answers — never hangs — destroy is refused
// with FL_ERR_INVALID_ARGUMENT and the engine stays usable; waits that would wait for the
// caller itself are refused; calls made while destroy runs answer.
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "capi/capi_test_util.hpp"

using flcapi::check_usable_and_destroy;
using flcapi::make_object;
using flcapi::submit;

namespace {

struct Call {
  std::string name;
  fl_status_t status;
  std::string message;
};

struct Calls {
  std::mutex mu;
  std::vector<Call> calls;
  void add(const char* name, fl_status_t st) {
    std::lock_guard<std::mutex> lk(mu);
    calls.push_back({name, st, fl_last_error_message()});
  }
  fl_status_t status_of(const std::string& name) {
    std::lock_guard<std::mutex> lk(mu);
    for (auto& c : calls)
      if (c.name == name) return c.status;
    return fl_status_t(-1);
  }
  std::string table() {
    std::lock_guard<std::mutex> lk(mu);
    std::string t;
    for (auto& c : calls) t += "  " + c.name + " -> " + fl_status_name(c.status) + " " + c.message + "\n";
    return t;
  }
};

fl_status_t noop_fn(fl_instr_ctx_t*, void*) { return FL_OK; }
fl_status_t noop_task(void*) { return FL_OK; }
fl_status_t noop_range(uint64_t, uint64_t, void*) { return FL_OK; }

// Calls (nearly) every function of the API on `e` from wherever it runs. `other_lane` is a
// lane no caller runs on; `own` is the caller's own lane stream, or null outside instructions.
void exercise(fl_engine_t* e, uint32_t other_lane, fl_stream_t* own, Calls& out) {
  out.add("fl_version_hex", fl_version_hex() == FL_VERSION_HEX ? FL_OK : FL_ERR_INTERNAL);
  out.add("fl_engine_lane_count", fl_engine_lane_count(e) > other_lane ? FL_OK : FL_ERR_INTERNAL);
  out.add("fl_engine_worker_count", fl_engine_worker_count(e) > 0 ? FL_OK : FL_ERR_INTERNAL);
  fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
  out.add("fl_engine_stats", fl_engine_stats(e, &stats));
  uint64_t needed = 0;
  out.add("fl_engine_dump(size)", fl_engine_dump(e, nullptr, 0, &needed));
  std::string buf(size_t(needed) + 1024, '\0');
  out.add("fl_engine_dump", fl_engine_dump(e, buf.data(), buf.size(), &needed));
  uint32_t lane = 0;
  fl_status_t st = fl_lane_acquire(e, &lane);
  out.add("fl_lane_acquire", st);
  if (st == FL_OK) out.add("fl_lane_release", fl_lane_release(e, lane));
  fl_stream_t* s = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  out.add("fl_stream_get", fl_stream_get(e, other_lane, cpu, FL_STREAM_HOST, &s));
  if (s == nullptr) return;
  uint32_t info_lane = 0;
  out.add("fl_stream_info", fl_stream_info(s, &info_lane, nullptr, nullptr));
  fl_object_t* x = nullptr;
  out.add("fl_object_create", fl_object_create(e, &buf, nullptr, &x));
  if (x == nullptr) return;
  void* ud = nullptr;
  out.add("fl_object_user_data", fl_object_user_data(x, &ud));
  fl_operand_t op{x, FL_WRITE, 0};
  out.add("fl_submit_host", flguard::submit_raw(s, &noop_fn, nullptr, &op, 1, "exercise_writer"));
  out.add("fl_object_wait", fl_object_wait(x, FL_READ));
  out.add("fl_stream_synchronize(other lane)", fl_stream_synchronize(s));
  if (own != nullptr) out.add("fl_stream_synchronize(own lane)", fl_stream_synchronize(own));
  out.add("fl_object_release", fl_object_release(x));
  out.add("fl_parallel_for", fl_parallel_for(e, 0, 16, 1, &noop_range, nullptr));
  fl_taskgraph_t* g = nullptr;
  out.add("fl_taskgraph_create", fl_taskgraph_create(e, &g));
  if (g != nullptr) {
    uint64_t a = 0, b = 0;
    out.add("fl_taskgraph_add", fl_taskgraph_add(g, &noop_task, nullptr, "a", &a));
    fl_taskgraph_add(g, &noop_task, nullptr, "b", &b);
    out.add("fl_taskgraph_precede", fl_taskgraph_precede(g, a, b));
    out.add("fl_taskgraph_run(-1)", fl_taskgraph_run(g, -1));
    out.add("fl_taskgraph_run(1)", fl_taskgraph_run(g, 1));
    out.add("fl_taskgraph_destroy", fl_taskgraph_destroy(g));
  }
  fl_comm_unique_id_t id;
  out.add("fl_comm_get_unique_id", fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id));
  int32_t devices = 0;
  st = fl_cuda_device_count(&devices);
  out.add("fl_cuda_device_count", st == FL_ERR_UNSUPPORTED ? FL_OK : st);
  // Another engine, created and destroyed from inside this one's callback.
  fl_engine_t* other = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 1;
  out.add("fl_engine_create(another)", fl_engine_create(&d, &other));
  if (other != nullptr) out.add("fl_engine_destroy(another)", fl_engine_destroy(other));
  out.add("fl_engine_synchronize", fl_engine_synchronize(e));
  out.add("fl_engine_destroy", fl_engine_destroy(e));
}

// The answers every context must give: destroy refused, synchronize refused where the
// caller holds up an instruction, everything else FL_OK.
void check(Calls& c, const char* where, bool holds_instruction) {
  SCOPED_TRACE(std::string(where) + "\n" + c.table());
  EXPECT_EQ(c.status_of("fl_engine_destroy"), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c.status_of("fl_engine_synchronize"), holds_instruction ? FL_ERR_INVALID_ARGUMENT : FL_OK);
  std::lock_guard<std::mutex> lk(c.mu);
  EXPECT_GE(c.calls.size(), 20u) << "the exercise stopped early";
  for (auto& call : c.calls) {
    if (call.name == "fl_engine_destroy" || call.name == "fl_engine_synchronize") continue;
    if (call.name == "fl_stream_synchronize(own lane)") {
      EXPECT_EQ(call.status, FL_ERR_INVALID_ARGUMENT) << call.name;
      continue;
    }
    EXPECT_EQ(call.status, FL_OK) << call.name << ": " << call.message;
  }
}

constexpr uint32_t kOtherLane = 5;

}  // namespace

TEST(CallbacksCallBackIn, FromAnInstructionFunction) {
  HangGuard guard("every API call from an instruction's function");
  fl_engine_t* e = make_engine(2, 8);
  Calls calls;
  fl_stream_t* own = host_stream(e, 1);
  submit(own, [&] {
    exercise(e, kOtherLane, own, calls);
    return FL_OK;
  });
  EXPECT_FL_OK(fl_engine_synchronize(e));
  check(calls, "fn", true);
  check_usable_and_destroy(e);
}

TEST(CallbacksCallBackIn, FromACleanup) {
  HangGuard guard("every API call from a cleanup");
  fl_engine_t* e = make_engine(2, 8);
  struct Ctx {
    fl_engine_t* e;
    fl_stream_t* own;
    Calls calls;
  } ctx{e, host_stream(e, 1), {}};
  ASSERT_FL_OK(flguard::submit_raw(ctx.own, &noop_fn, &ctx, nullptr, 0, "with_cleanup", [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    exercise(c->e, kOtherLane, c->own, c->calls);
  }));
  EXPECT_FL_OK(fl_engine_synchronize(e));
  check(ctx.calls, "cleanup", true);
  check_usable_and_destroy(e);
}

TEST(CallbacksCallBackIn, FromAReleaseRunByTheLastInstruction) {
  HangGuard guard("every API call from a release callback run by an instruction's completion");
  fl_engine_t* e = make_engine(2, 8);
  struct Ctx {
    fl_engine_t* e;
    fl_stream_t* own;
    Calls calls;
  } ctx{e, host_stream(e, 1), {}};
  fl_object_t* o = nullptr;
  ASSERT_FL_OK(fl_object_create(e, &ctx, [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    exercise(c->e, kOtherLane, c->own, c->calls);
  }, &o));
  Gate released;
  submit(ctx.own, [&] { return released.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {W(o)}, "last_user");
  ASSERT_FL_OK(fl_object_release(o));  // the instruction's completion runs the release callback
  released.open = true;
  EXPECT_FL_OK(fl_engine_synchronize(e));
  check(ctx.calls, "release run by an instruction's completion", true);
  check_usable_and_destroy(e);
}

TEST(CallbacksCallBackIn, FromAParallelForBody) {
  HangGuard guard("every API call from a parallel_for body");
  fl_engine_t* e = make_engine(2, 8);
  struct Ctx {
    fl_engine_t* e;
    Calls calls;
    std::atomic<int> chunks{0};
  } ctx{e, {}, {}};
  fl_status_t st = fl_parallel_for(e, 0, 8, 1, [](uint64_t lo, uint64_t, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (lo == 5) exercise(c->e, kOtherLane, nullptr, c->calls);
    c->chunks.fetch_add(1);
    return FL_OK;
  }, &ctx);
  EXPECT_EQ(st, FL_OK) << fl_last_error_message();
  EXPECT_EQ(ctx.chunks.load(), 8) << "the loop did not run every chunk";
  check(ctx.calls, "parallel_for body", false);
  check_usable_and_destroy(e);
}

TEST(CallbacksCallBackIn, FromATaskGraphTaskOnASmallerPool) {
  HangGuard guard("every API call from a task-graph task on a smaller pool");
  fl_engine_t* e = make_engine(2, 8);
  struct Ctx {
    fl_engine_t* e;
    Calls calls;
  } ctx{e, {}};
  fl_taskgraph_t* g = nullptr;
  ASSERT_FL_OK(fl_taskgraph_create(e, &g));
  uint64_t n = 0;
  ASSERT_FL_OK(fl_taskgraph_add(g, [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    exercise(c->e, kOtherLane, nullptr, c->calls);
    return FL_OK;
  }, &ctx, "exercise", &n));
  EXPECT_FL_OK(fl_taskgraph_run(g, 1));
  check(ctx.calls, "task-graph task (1 thread)", false);
  EXPECT_FL_OK(fl_taskgraph_destroy(g));
  check_usable_and_destroy(e);
}

// A task of a graph that an instruction runs executes on another thread (here the graph's
// own one-thread pool); it carries the instruction's frame there, so fl_engine_synchronize
// and the own lane's fl_stream_synchronize are refused. (They used to wait for the
// instruction that waits for the graph: a hang.)
TEST(CallbacksCallBackIn, FromATaskGraphTaskInsideAnInstruction) {
  HangGuard guard("every API call from a task-graph task run by an instruction");
  fl_engine_t* e = make_engine(2, 8);
  struct Ctx {
    fl_engine_t* e;
    Calls calls;
  } ctx{e, {}};
  std::atomic<int> run{-1};
  submit(host_stream(e, 1), [&] {
    fl_taskgraph_t* g = nullptr;
    if (fl_taskgraph_create(e, &g) != FL_OK) return FL_ERR_INTERNAL;
    uint64_t n = 0;
    fl_taskgraph_add(g, [](void* ud) {
      auto* c = static_cast<Ctx*>(ud);
      exercise(c->e, kOtherLane, nullptr, c->calls);
      return FL_OK;
    }, &ctx, "exercise", &n);
    run = fl_taskgraph_run(g, 1);
    fl_taskgraph_destroy(g);
    return FL_OK;
  });
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_EQ(run.load(), FL_OK);
  check(ctx.calls, "task-graph task inside an instruction", true);
  check_usable_and_destroy(e);
}

TEST(CallbacksCallBackIn, FromTheWatchdogCallback) {
  HangGuard guard("every API call from the watchdog callback");
  fl_engine_t* e = make_engine(2, 8);
  struct Ctx {
    fl_engine_t* e;
    Calls calls;
    Gate stalled;
    std::atomic<int> dumps{0};
    Gate exercised;
  } ctx{e, {}, {}, {}, {}};
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 100;
  w.user_data = &ctx;
  w.callback = [](const char*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (c->dumps.fetch_add(1) != 0) return;
    c->stalled.open = true;  // the stalled instruction may finish: synchronize can return
    exercise(c->e, kOtherLane, nullptr, c->calls);
    c->exercised.open = true;
  };
  ASSERT_FL_OK(fl_engine_set_watchdog(e, &w));
  submit(host_stream(e, 1), [&] { return ctx.stalled.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "stalled");
  ASSERT_TRUE(ctx.exercised.wait()) << "the watchdog never called back";
  EXPECT_FL_OK(fl_engine_synchronize(e));
  check(ctx.calls, "watchdog callback", false);
  fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;
  EXPECT_FL_OK(fl_engine_set_watchdog(e, &off));
  check_usable_and_destroy(e);
}

// ---------------------------------------------------------------------------------------
// Destroy: release callbacks that run inside fl_engine_destroy may call back in; every call
// answers (the real answer, or FL_ERR_SHUTDOWN for new work), destroy itself is refused.

TEST(DestroyFromCallbacks, ReleaseCallbacksRunByDestroyCanCallBackIn) {
  HangGuard guard("release callbacks calling back in during fl_engine_destroy");
  fl_engine_t* e = make_engine(2, 4);
  struct Ctx {
    fl_engine_t* e;
    fl_stream_t* s;
    fl_object_t* other;
    Calls calls;
  } ctx{e, host_stream(e, 1), nullptr, {}};
  ASSERT_FL_OK(fl_object_create(e, nullptr, nullptr, &ctx.other));
  fl_object_t* held = nullptr;
  ASSERT_FL_OK(fl_object_create(e, &ctx, [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
    c->calls.add("fl_engine_stats", fl_engine_stats(c->e, &st));
    uint64_t needed = 0;
    c->calls.add("fl_engine_dump", fl_engine_dump(c->e, nullptr, 0, &needed));
    c->calls.add("fl_engine_worker_count", fl_engine_worker_count(c->e) > 0 ? FL_OK : FL_ERR_SHUTDOWN);
    c->calls.add("fl_engine_synchronize", fl_engine_synchronize(c->e));
    c->calls.add("fl_stream_synchronize", fl_stream_synchronize(c->s));
    c->calls.add("fl_object_wait", fl_object_wait(c->other, FL_READ));
    c->calls.add("fl_submit_host", flguard::submit_raw(c->s, &noop_fn, nullptr, nullptr, 0));
    c->calls.add("fl_parallel_for", fl_parallel_for(c->e, 0, 4, 1, &noop_range, nullptr));
    c->calls.add("fl_engine_destroy", fl_engine_destroy(c->e));
  }, &held));
  submit(ctx.s, [] { return FL_OK; }, {W(held), R(ctx.other)});
  ASSERT_FL_OK(fl_engine_destroy(e));  // runs held's release callback (and frees 'other')
  SCOPED_TRACE(ctx.calls.table());
  auto answered = [](fl_status_t st) {
    return st == FL_OK || st == FL_ERR_SHUTDOWN || st == FL_ERR_INVALID_HANDLE;
  };
  EXPECT_EQ(ctx.calls.calls.size(), 9u);
  for (auto& c : ctx.calls.calls) {
    if (c.name == "fl_engine_destroy") {
      EXPECT_EQ(c.status, FL_ERR_INVALID_ARGUMENT) << c.message;
    } else if (c.name == "fl_submit_host") {
      EXPECT_EQ(c.status, FL_ERR_SHUTDOWN) << c.message;
    } else if (c.name == "fl_engine_synchronize") {
      EXPECT_TRUE(c.status == FL_ERR_INVALID_ARGUMENT || answered(c.status)) << c.message;
    } else {
      EXPECT_TRUE(answered(c.status)) << c.name << ": " << fl_status_name(c.status) << " " << c.message;
    }
  }
}

// fl_engine_destroy from a parallel_for body called by a thread of the caller's: refused, the
// loop runs to the end, the engine stays usable (it used to return FL_OK mid-loop).
TEST(DestroyFromCallbacks, FromAParallelForBodyIsRefusedAndTheLoopCompletes) {
  HangGuard guard("fl_engine_destroy from a parallel_for body");
  fl_engine_t* e = make_engine(2);
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int> destroy{-1};
    std::atomic<int> chunks{0};
  } ctx{e, {}, {}};
  EXPECT_FL_OK(fl_parallel_for(e, 0, 64, 1, [](uint64_t lo, uint64_t, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (lo == 7) c->destroy = fl_engine_destroy(c->e);
    c->chunks.fetch_add(1);
    return FL_OK;
  }, &ctx));
  EXPECT_EQ(ctx.destroy.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.chunks.load(), 64);
  check_usable_and_destroy(e);
}

// From a task-graph task run on a pool smaller than the engine's (it used to abort with
// std::system_error), and from the watchdog callback (FL_ERR_INTERNAL and a leaked engine).
TEST(DestroyFromCallbacks, FromATaskOnASmallerPoolAndFromTheWatchdogIsRefused) {
  HangGuard guard("fl_engine_destroy from a task and from the watchdog callback");
  fl_engine_t* e = make_engine(4);
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int> from_task{-1};
    std::atomic<int> from_watchdog{-1};
    Gate stalled, dumped;
  } ctx{e, {}, {}, {}, {}};
  fl_taskgraph_t* g = nullptr;
  ASSERT_FL_OK(fl_taskgraph_create(e, &g));
  uint64_t n = 0;
  ASSERT_FL_OK(fl_taskgraph_add(g, [](void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->from_task = fl_engine_destroy(c->e);
    return FL_OK;
  }, &ctx, "destroyer", &n));
  EXPECT_FL_OK(fl_taskgraph_run(g, 2));
  EXPECT_FL_OK(fl_taskgraph_destroy(g));
  EXPECT_EQ(ctx.from_task.load(), FL_ERR_INVALID_ARGUMENT);

  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 100;
  w.user_data = &ctx;
  w.callback = [](const char*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    if (c->dumped.open.load()) return;
    c->from_watchdog = fl_engine_destroy(c->e);
    c->stalled.open = true;
    c->dumped.open = true;
  };
  ASSERT_FL_OK(fl_engine_set_watchdog(e, &w));
  submit(host_stream(e, 0), [&] { return ctx.stalled.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "stalled");
  ASSERT_TRUE(ctx.dumped.wait()) << "the watchdog never called back";
  EXPECT_EQ(ctx.from_watchdog.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_FL_OK(fl_engine_synchronize(e));
  fl_watchdog_desc_t off = FL_WATCHDOG_DESC_INIT;
  EXPECT_FL_OK(fl_engine_set_watchdog(e, &off));
  check_usable_and_destroy(e);
}

// The same rule for a parallel_for body that an instruction's loop runs on another worker:
// fl_engine_synchronize there would wait for the instruction that waits for the loop.
TEST(CallbacksCallBackIn, SynchronizeFromAParallelForBodyOnAnotherWorkerIsRefused) {
  HangGuard guard("fl_engine_synchronize from a parallel_for body on a helping worker");
  fl_engine_t* e = make_engine(2, 4);
  struct Ctx {
    fl_engine_t* e;
    std::thread::id caller;
    std::atomic<int> sync{-1};
    std::atomic<bool> elsewhere{false};
  } ctx{e, {}, {}, {}};
  for (int attempt = 0; attempt < 200 && !ctx.elsewhere.load(); ++attempt) {
    submit(host_stream(e, 1), [&] {
      ctx.caller = std::this_thread::get_id();
      return fl_parallel_for(e, 0, 2, 1, [](uint64_t, uint64_t, void* ud) {
        auto* c = static_cast<Ctx*>(ud);
        if (std::this_thread::get_id() == c->caller) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));  // leave the other chunk to a helper
          return FL_OK;
        }
        c->elsewhere = true;
        c->sync = fl_engine_synchronize(c->e);
        return FL_OK;
      }, &ctx);
    });
    EXPECT_FL_OK(fl_engine_synchronize(e));
  }
  if (!ctx.elsewhere.load()) GTEST_SKIP() << "no chunk ever ran on another worker";
  EXPECT_EQ(ctx.sync.load(), FL_ERR_INVALID_ARGUMENT);
  check_usable_and_destroy(e);
}

// ---------------------------------------------------------------------------------------
// Waits from inside callbacks

TEST(Callbacks, SynchronizeFromInsideAnInstructionIsRejected) {
  EngineFixture f;
  std::atomic<int> status{-1};
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int>* status;
  } ctx{f.engine, &status};
  submit(f.host(0), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->status->store(fl_engine_synchronize(c->e));
    return FL_OK;
  }, &ctx);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(status.load(), FL_ERR_INVALID_ARGUMENT);
}

TEST(Callbacks, DestroyFromInsideAnInstructionIsRejected) {
  EngineFixture f;
  std::atomic<int> status{-1};
  struct Ctx {
    fl_engine_t* e;
    std::atomic<int>* status;
  } ctx{f.engine, &status};
  submit(f.host(0), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->status->store(fl_engine_destroy(c->e));
    return FL_OK;
  }, &ctx);
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(status.load(), FL_ERR_INVALID_ARGUMENT);
}

TEST(Callbacks, ObjectWaitOnOwnOperandIsRejected) {
  EngineFixture f;
  fl_object_t* o = make_object(f.engine);
  std::atomic<int> status{-1};
  struct Ctx {
    fl_object_t* o;
    std::atomic<int>* status;
  } ctx{o, &status};
  submit(f.host(0), [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->status->store(fl_object_wait(c->o, FL_READ));
    return FL_OK;
  }, &ctx, {{o, FL_WRITE, 0}});
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(status.load(), FL_ERR_INVALID_ARGUMENT);
  ASSERT_FL_OK(fl_object_release(o));
}


namespace {

struct GroupCtx {
  fl_engine_t* e = nullptr;
  std::thread::id caller;
  std::atomic<int> destroy{-1}, drain{-1}, sync{-1};
  std::atomic<bool> elsewhere{false};
};

fl_status_t group_task(void* ud) {
  auto* c = static_cast<GroupCtx*>(ud);
  if (std::this_thread::get_id() == c->caller) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // leave the other task to another worker
    return FL_OK;
  }
  c->elsewhere = true;
  c->destroy = fl_engine_destroy(c->e);
  c->drain = fl_engine_drain(c->e, 0);
  c->sync = fl_engine_synchronize_for(c->e, FL_WAIT_FOREVER);
  return FL_OK;
}

}  // namespace

// Task-group tasks spawned by an instruction and run by another worker: destroy and drain
// are refused, and a synchronize there (which would wait for the instruction that waits for
// the group) is refused too: the group, created inside the instruction's callback, runs its
// tasks under a frame that stands for the instruction while it is pending.
TEST(TaskGroupsInCallbacks, TasksOfAnInstructionsGroupCannotDestroyDrainOrSynchronize) {
  HangGuard guard("destroy/drain/synchronize from task-group tasks of an instruction");
  fl_engine_t* e = make_engine(2, 4);
  GroupCtx ctx;
  ctx.e = e;
  for (int attempt = 0; attempt < 200 && !ctx.elsewhere.load(); ++attempt) {
    submit(host_stream(e, 1), [&] {
      ctx.caller = std::this_thread::get_id();
      fl_task_group_t* g = nullptr;
      if (fl_task_group_create(e, &g) != FL_OK) return FL_ERR_INTERNAL;
      fl_task_group_spawn(g, &group_task, &ctx, nullptr);
      fl_task_group_spawn(g, &group_task, &ctx, nullptr);
      fl_status_t st = fl_task_group_wait(g);
      fl_task_group_destroy(g);
      return st;
    });
    EXPECT_FL_OK(fl_engine_synchronize(e));
  }
  if (!ctx.elsewhere.load()) GTEST_SKIP() << "no task ever ran on another worker";
  EXPECT_EQ(ctx.destroy.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.drain.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx.sync.load(), FL_ERR_INVALID_ARGUMENT);
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// A group created inside an instruction may outlive it: once the instruction has completed
// nothing waits for the group's tasks, and their synchronize works (a refusal then would be
// a false one). The group keeps the instruction's record until it is destroyed.
TEST(TaskGroupsInCallbacks, TasksOfAGroupThatOutlivedItsInstructionMaySynchronize) {
  HangGuard guard("synchronize from a task of a group that outlived its instruction");
  fl_engine_t* e = make_engine(2, 4);
  struct Late {
    fl_engine_t* e;
    std::atomic<bool> go{false};
    std::atomic<int> sync{-1};
  } late{e};
  fl_task_group_t* g = nullptr;
  submit(host_stream(e, 1), [&] {
    if (fl_task_group_create(e, &g) != FL_OK) return FL_ERR_INTERNAL;
    return fl_task_group_spawn(
        g,
        [](void* ud) {
          auto* l = static_cast<Late*>(ud);
          while (!l->go.load()) std::this_thread::yield();
          l->sync = fl_engine_synchronize(l->e);
          return FL_OK;
        },
        &late, nullptr);
  });
  ASSERT_FL_OK(fl_stream_synchronize(host_stream(e, 1)));  // the instruction has completed
  late.go = true;
  ASSERT_FL_OK(fl_task_group_wait(g));
  EXPECT_EQ(late.sync.load(), FL_OK) << fl_last_error_message();
  ASSERT_FL_OK(fl_task_group_destroy(g));
  // The record the group held goes back to the engine: more work runs normally.
  submit(host_stream(e, 1), [] { return FL_OK; });
  ASSERT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(fl_engine_destroy(e));
}
