// Completion of device work by whoever is there (gpu/README.md, "Completion"), against the
// fake CUDA runtime: the lane runner between its launches, a program thread waiting for
// the result, the poller as the fallback, each made the only possible completer in turn by
// blinding the fake's answers to the others; work whose completion runs user code on the
// poller only; a host consumer of a GPU result on the waiting thread; a cross-lane device
// chain that stays on the worker that releases it; many completers racing on the per-stream
// try-lock. The fake's counters say which thread saw each completion (fake_cudart.cpp).
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>

#include "fake_test_util.hpp"

namespace {

using namespace fakegpu;

// A stream's worth of kernels behind a gate, so that the lane launches them back to back.
struct Burst {
  int value = 0;
  int* p = &value;
  int one = 1;
};

// In the synchronous fake every event is complete once recorded: the lane, querying its
// own stream between launches, finds its runs done and completes them itself; the poller
// is handed the stream only when the lane leaves it (at the end of each batch of 64).
TEST(FakeCompletion, TheLaunchingLaneCompletesItsOwnStreamBetweenLaunches) {
  FakeReset reset;
  fake_cudart_mark_this_thread();
  Eng g;
  fl_object_t* o = g.obj();
  Gate gate;
  gate.submit(g, 1);
  Burst b;
  constexpr int kN = 512;
  for (int k = 0; k < kN; ++k)
    ASSERT_EQ(kernel(g.gpu(1), kAdd, {&b.p, &b.one}, {{o, FL_READ_WRITE, 0}}, "add"), FL_OK);
  const long lane0 = fake_cudart_ready_queries(kOther), poller0 = fake_cudart_queries(kPoller);
  fake_cudart_set_sync(1);
  gate.open.store(1);
  ASSERT_EQ(or_die([o] { return fl_object_wait(o, FL_READ); }, "the burst"), FL_OK);
  fake_cudart_set_sync(0);
  EXPECT_EQ(b.value, kN);
  const long by_lane = fake_cudart_ready_queries(kOther) - lane0;
  const long poller_queries = fake_cudart_queries(kPoller) - poller0;
  // 64 runs of 8; the lane leaves the stream at the end of each of its 8 batches, and the
  // run covered then is the poller's (or the waiting thread's).
  EXPECT_GE(by_lane, kN / 8 - kN / 64 - 1) << "the lane did not complete its own runs";
  // The poller queries only streams handed to it: a few per batch, not one per launch.
  EXPECT_LE(poller_queries, 4 * (kN / 64 + 2)) << "the poller polled the stream while its lane launched";
  fl_object_release(o);
}

// A program thread that waits for a GPU result completes it: here the only thread that
// can (the poller's and the lanes' queries are blinded). Each kind of wait, polling with
// a zero timeout (each call helps once).
TEST(FakeCompletion, AWaitingThreadCompletesWhatItWaitsFor) {
  FakeReset reset;
  fake_cudart_mark_this_thread();
  Eng g;
  fl_stream_t* s = g.gpu(1);
  fl_object_t* o = g.obj();
  int x = 0, one = 1;
  int* p = &x;
  fake_cudart_blind(kPoller, 1);
  fake_cudart_blind(kOther, 1);
  const long mine0 = fake_cudart_ready_queries(kMarked), poller0 = fake_cudart_ready_queries(kPoller);
  fl_instr_id id = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(kernel(s, kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "add", 1, &id), FL_OK);
    fl_status_t st = FL_ERR_TIMEOUT;
    const bool done = eventually([&] {
      st = round == 0   ? fl_object_wait_for(o, FL_READ, 0)
           : round == 1 ? fl_stream_synchronize_for(s, 0)
                        : fl_instr_wait_for(s, id, 0);
      return st != FL_ERR_TIMEOUT;
    });
    ASSERT_TRUE(done) << "round " << round << ": nobody completed the kernel";
    EXPECT_EQ(st, FL_OK) << fl_last_error_message();
    EXPECT_EQ(std::atomic_ref<int>(x).load(), round + 1);
  }
  EXPECT_EQ(fake_cudart_ready_queries(kPoller) - poller0, 0);  // blinded: never saw it done
  EXPECT_GE(fake_cudart_ready_queries(kMarked) - mine0, 3);
  fake_cudart_blind(kPoller, 0);
  fake_cudart_blind(kOther, 0);
  fl_object_release(o);
}

// The poller is the fallback: with the waiting thread and the lanes blinded, it completes.
TEST(FakeCompletion, ThePollerCompletesWhatNoOtherThreadCan) {
  FakeReset reset;
  fake_cudart_mark_this_thread();
  Eng g;
  fl_object_t* o = g.obj();
  int x = 0, one = 1;
  int* p = &x;
  fake_cudart_blind(kMarked, 1);
  fake_cudart_blind(kOther, 1);
  const long poller0 = fake_cudart_ready_queries(kPoller);
  for (int k = 0; k < 20; ++k) ASSERT_EQ(kernel(g.gpu(1), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "add"), FL_OK);
  ASSERT_EQ(or_die([o] { return fl_object_wait(o, FL_READ); }, "the poller's completion"), FL_OK);
  EXPECT_EQ(x, 20);
  EXPECT_GE(fake_cudart_ready_queries(kPoller) - poller0, 1);
  fl_object_release(o);
}

// Completion that runs user code (a device function's cleanup, an object's release
// callback) stays on the poller, in stream order with the work around it, though the lane
// and the waiting thread complete the rest.
TEST(FakeCompletion, CompletionThatRunsUserCodeStaysOnThePoller) {
  FakeReset reset;
  fake_cudart_mark_this_thread();
  Eng g;
  fl_stream_t* s = g.gpu(1);
  struct Seen {
    std::atomic<int> on_poller{0}, elsewhere{0};
    std::atomic<int> value_at_release{-1};
    int* x = nullptr;
  } seen;
  int x = 0, one = 1;
  int* p = &x;
  seen.x = &x;
  fl_object_t* work = g.obj();
  fl_object_t* released = g.obj(&seen, [](void* u) {
    auto* sn = static_cast<Seen*>(u);
    (thread_name() == "fl-gpu-poller" ? sn->on_poller : sn->elsewhere).fetch_add(1);
    sn->value_at_release.store(std::atomic_ref<int>(*sn->x).load());
  });
  Gate gate;
  gate.submit(g, 1);
  for (int k = 0; k < 40; ++k) {
    ASSERT_EQ(kernel(s, kAdd, {&p, &one}, {{work, FL_READ_WRITE, 0}}, "light"), FL_OK);
    if (k % 10 == 9) {
      fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
      d.fn = [](fl_instr_ctx_t*, void*, void*) -> fl_status_t { return FL_OK; };
      d.cleanup = [](void* u) {
        auto* sn = static_cast<Seen*>(u);
        (thread_name() == "fl-gpu-poller" ? sn->on_poller : sn->elsewhere).fetch_add(1);
      };
      d.user_data = &seen;
      fl_operand_t op{work, FL_READ, 0};
      d.operands = &op;
      d.num_operands = 1;
      d.name = "with-cleanup";
      ASSERT_EQ(fl_submit_device(s, &d, nullptr), FL_OK);
    }
  }
  // The last user of `released` is the last kernel: its completion runs the release.
  ASSERT_EQ(kernel(s, kAdd, {&p, &one}, {{work, FL_READ_WRITE, 0}, {released, FL_READ, 0}}, "last"), FL_OK);
  ASSERT_EQ(fl_object_release(released), FL_OK);
  fake_cudart_set_sync(1);
  gate.open.store(1);
  ASSERT_EQ(synchronize_or_die(g, "work with user code"), FL_OK);
  fake_cudart_set_sync(0);
  EXPECT_EQ(seen.on_poller.load(), 4 + 1) << "cleanups and the release ran elsewhere " << seen.elsewhere.load();
  EXPECT_EQ(seen.elsewhere.load(), 0);
  EXPECT_EQ(seen.value_at_release.load(), 41) << "the release ran before the GPU work it waited for";
  fl_object_release(work);
}

// A host instruction whose input is a GPU result runs on the thread that waits for it and
// sees the completion: no hand-off to a worker.
TEST(FakeCompletion, AHostConsumerOfAGpuResultRunsOnTheThreadThatWaitsForIt) {
  FakeReset reset;
  fake_cudart_mark_this_thread();
  Eng g;
  int flag = 0, x = 0, v = 5;
  int *fp = &flag, *xp = &x;
  fl_object_t* ox = g.obj();
  fl_object_t* done = g.obj();
  ASSERT_EQ(kernel(g.gpu(1), kWaitFlag, {&fp, &xp, &v}, {{ox, FL_WRITE, 0}}, "producer"), FL_OK);
  struct Consumer {
    int* x;
    std::atomic<int> seen{0};
    std::atomic<long> tid{0};
  } c{&x};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    auto* c = static_cast<Consumer*>(u);
    c->tid.store(long(syscall(SYS_gettid)));
    c->seen.store(std::atomic_ref<int>(*c->x).load());
    return FL_OK;
  };
  h.user_data = &c;
  fl_operand_t hops[2] = {{ox, FL_READ, 0}, {done, FL_WRITE, 0}};
  h.operands = hops;
  h.num_operands = 2;
  h.name = "consumer";
  ASSERT_EQ(fl_submit_host(g.s(1, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  // The lane issued the kernel and is blocked on the consumer (the dump says so).
  ASSERT_TRUE(eventually([&] { return dump(g.e).find("'consumer'") != std::string::npos &&
                                      dump(g.e).find("BLOCKED") != std::string::npos; }))
      << dump(g.e);
  fake_cudart_blind(kPoller, 1);  // only this thread can see the kernel finish
  fake_cudart_blind(kOther, 1);
  std::atomic_ref<int>(flag).store(1);
  fl_status_t st = FL_ERR_TIMEOUT;
  ASSERT_TRUE(eventually([&] { return (st = fl_object_wait_for(done, FL_READ, 0)) != FL_ERR_TIMEOUT; }));
  EXPECT_EQ(st, FL_OK) << fl_last_error_message();
  EXPECT_EQ(c.seen.load(), 5);
  EXPECT_EQ(c.tid.load(), long(syscall(SYS_gettid))) << "the consumer ran on a worker, not on the waiting thread";
  fl_object_release(ox);
  fl_object_release(done);
}

// A device chain alternating between two lanes: each step is released by the other lane's
// issue, and the worker that releases it takes the lane on itself instead of handing it to
// the pool (one pool task for the whole chain on a one-worker engine; without that, one per
// step).
TEST(FakeCompletion, ACrossLaneDeviceChainStaysOnTheWorkerThatReleasesIt) {
  FakeReset reset;
  Eng g(1);
  fl_object_t* o = g.obj();
  int x = 0, one = 1;
  int* p = &x;
  Gate gate;
  gate.submit(g, 1);
  constexpr int kSteps = 400;
  for (int k = 0; k < kSteps; ++k)
    ASSERT_EQ(kernel(g.gpu(1 + uint32_t(k % 2)), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "step"), FL_OK);
  fl_engine_stats_t before = FL_ENGINE_STATS_INIT;
  ASSERT_EQ(fl_engine_stats(g.e, &before), FL_OK);
  gate.open.store(1);
  ASSERT_EQ(synchronize_or_die(g, "cross-lane chain"), FL_OK);
  EXPECT_EQ(x, kSteps);
  fl_engine_stats_t after = FL_ENGINE_STATS_INIT;
  ASSERT_EQ(fl_engine_stats(g.e, &after), FL_OK);
  EXPECT_LT(after.tasks - before.tasks, uint64_t(kSteps / 4)) << "the lanes went through the pool at every step";
  fl_object_release(o);
}

// Lanes, waiting threads and the poller all complete at once, on shared and separate
// streams, light and user-code work mixed: every instruction completes once, in stream
// order (each lane's host probe reads its stream's kernels in order), with the right result.
TEST(FakeCompletion, ManyCompletersRaceOnTheStreamsTryLock) {
  FakeReset reset;
  Eng g(3);
  constexpr int kLanes = 4, kPer = 600;
  std::vector<int> values(kLanes, 0);
  std::vector<fl_object_t*> objs;
  for (int l = 0; l < kLanes; ++l) objs.push_back(g.obj());
  std::atomic<int> cleanups{0};
  std::atomic<bool> stop{false};
  // Helpers: program threads waiting with zero timeouts on every object and stream.
  std::vector<std::thread> helpers;
  for (int h = 0; h < 3; ++h) {
    helpers.emplace_back([&, h] {
      while (!stop.load()) {
        for (int l = 0; l < kLanes; ++l) {
          if (h == 0) (void)fl_object_wait_for(objs[size_t(l)], FL_READ, 0);
          if (h == 1) (void)fl_stream_synchronize_for(g.gpu(1 + uint32_t(l)), 0);
          if (h == 2) (void)fl_engine_synchronize_for(g.e, 0);
        }
      }
    });
  }
  std::vector<std::thread> submitters;
  for (int l = 0; l < kLanes; ++l) {
    submitters.emplace_back([&, l] {
      int* p = &values[size_t(l)];
      int one = 1;
      fl_stream_t* s = g.gpu(1 + uint32_t(l));
      for (int k = 0; k < kPer; ++k) {
        ASSERT_EQ(kernel(s, kAdd, {&p, &one}, {{objs[size_t(l)], FL_READ_WRITE, 0}}, "add"), FL_OK);
        if (k % 50 == 49) {
          fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
          d.fn = [](fl_instr_ctx_t*, void*, void*) -> fl_status_t { return FL_OK; };
          d.cleanup = [](void* u) { static_cast<std::atomic<int>*>(u)->fetch_add(1); };
          d.user_data = &cleanups;
          fl_operand_t op{objs[size_t(l)], FL_READ, 0};
          d.operands = &op;
          d.num_operands = 1;
          ASSERT_EQ(fl_submit_device(s, &d, nullptr), FL_OK);
        }
      }
    });
  }
  for (auto& t : submitters) t.join();
  ASSERT_EQ(synchronize_or_die(g, "racing completers"), FL_OK);
  stop.store(true);
  for (auto& t : helpers) t.join();
  EXPECT_EQ(values, std::vector<int>(kLanes, kPer));
  EXPECT_EQ(cleanups.load(), kLanes * (kPer / 50));
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_EQ(fl_engine_stats(g.e, &st), FL_OK);
  EXPECT_EQ(st.completed, st.submitted);
  EXPECT_EQ(st.in_flight, 0u);
  for (fl_object_t* o : objs) fl_object_release(o);
}

// Whether a thread of this process named `name` sleeps in the kernel right now (state S).
bool named_thread_asleep(const std::string& name) {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return false;
  bool asleep = false;
  while (dirent* ent = readdir(d)) {
    if (ent->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + ent->d_name;
    std::ifstream comm(dir + "/comm");
    std::string n;
    std::getline(comm, n);
    if (n != name) continue;
    std::ifstream f(dir + "/stat");
    std::string line;
    std::getline(f, line);
    const size_t p = line.rfind(')');
    asleep = p != std::string::npos && p + 2 < line.size() && line[p + 2] == 'S';
    break;
  }
  closedir(d);
  return asleep;
}

// Nothing spins once no GPU work is in flight: the poller goes to sleep (bench/gpu/
// fake_idle_cpu.cpp measures the idle engine's CPU time).
TEST(FakeCompletion, ThePollerSleepsOnceNoGpuWorkIsInFlight) {
  FakeReset reset;
  Eng g;
  fl_object_t* o = g.obj();
  int x = 0, one = 1;
  int* p = &x;
  for (int k = 0; k < 100; ++k) ASSERT_EQ(kernel(g.gpu(1), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "add"), FL_OK);
  ASSERT_EQ(synchronize_or_die(g, "work before idling"), FL_OK);
  EXPECT_TRUE(eventually([] { return named_thread_asleep("fl-gpu-poller"); })) << "the poller never went to sleep";
  fl_object_release(o);
}

}  // namespace
