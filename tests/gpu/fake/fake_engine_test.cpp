// The engine's GPU protocol against the fake CUDA runtime (fake_cudart.cpp), on a machine
// without a GPU. Built and run by tests/gpu/fake/run.sh, not by CMake: it needs the CUDA
// build of libflowlane and LD_PRELOAD of the fake. Passing here says that flowlane's
// side (launch edges, poller, cleanup and release after completion, drain, errors) holds
// together; it says nothing about real GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_test_util.hpp"
#include "flowlane/flowlane.hpp"

extern "C" long fake_cudart_events_created();
extern "C" void fake_cudart_reset_sticky();
extern "C" long fake_cudart_event_records();
extern "C" long fake_cudart_stream_waits();
extern "C" void fake_cudart_fail_event_records(int n);

namespace {

using namespace fakegpu;

int run_set_flag(const void* const* a) {
  std::atomic_ref<int>(**static_cast<int* const*>(a[0])).store(1);
  return 0;
}
const fake::Kernel kSetFlag{1, {sizeof(int*)}, &run_set_flag};

int run_sleep_set(const void* const* a) {
  int* flag = *static_cast<int* const*>(a[0]);
  long ms = *static_cast<const long*>(a[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  std::atomic_ref<int>(*flag).store(1);
  return 0;
}
const fake::Kernel kSleepSet{2, {sizeof(int*), sizeof(long)}, &run_sleep_set};

int run_fault(const void* const*) { return 1; }
const fake::Kernel kFault{0, {}, &run_fault};


TEST(FakeGpu, ChainAcrossLanesAndStreams) {
  int value = 0;
  {
    Eng g;
    fl_object_t* o = g.obj();
    int* p = &value;
    int one = 1;
    for (int k = 0; k < 3000; ++k) {
      uint32_t lane = 1 + uint32_t(k % 3);
      fl_stream_kind_t kind = (k % 2) ? FL_STREAM_COMPUTE : FL_STREAM_H2D;
      ASSERT_EQ(kernel(g.s(lane, kGpu, kind), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "add"), FL_OK)
          << fl_last_error_message();
      one = 1;  // the bytes were copied
    }
    ASSERT_EQ(fl_object_wait(o, FL_READ), FL_OK) << fl_last_error_message();
    EXPECT_EQ(value, 3000);
    // Events are pooled: the pool holds at least as many as were in flight at once above,
    // so a second round with at most 100 in flight creates none.
    const long before = fake_cudart_events_created();
    for (int k = 0; k < 3000; ++k) {
      uint32_t lane = 1 + uint32_t(k % 3);
      ASSERT_EQ(kernel(g.s(lane, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "add"), FL_OK);
      if (k % 100 == 99) {
        ASSERT_EQ(fl_object_wait(o, FL_READ), FL_OK);
      }
    }
    EXPECT_EQ(fake_cudart_events_created() - before, 0) << "events are not reused";
    EXPECT_EQ(value, 6000);
    fl_object_release(o);
  }
}

TEST(FakeGpu, CrossStreamSuccessorNeverWaitsOnTheHost) {
  Eng g;
  int flag = 0, x = 0, out = 0;
  fl_object_t* ox = g.obj();
  fl_object_t* oflag = g.obj();
  int *fp = &flag, *xp = &x, *op = &out;
  int v = 42, one = 1;
  ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kWaitFlag, {&fp, &xp, &v}, {{ox, FL_WRITE, 0}}, "P"), FL_OK);
  // S: out += x, after P, on lane 2's compute stream.
  struct CopyCtx {
    int* x;
    int* out;
  } cc{&x, &out};
  fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
  d.fn = [](fl_instr_ctx_t*, void* stream, void* u) -> fl_status_t {
    auto* c = static_cast<CopyCtx*>(u);
    return cudaMemcpyAsync(c->out, c->x, sizeof(int), cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)) ==
                   cudaSuccess
               ? FL_OK
               : FL_ERR_CUDA;
  };
  d.user_data = &cc;
  fl_operand_t dops[1] = {{ox, FL_READ, 0}};
  d.operands = dops;
  d.num_operands = 1;
  d.name = "S";
  ASSERT_EQ(fl_submit_device(g.s(2, kGpu, FL_STREAM_COMPUTE), &d, nullptr), FL_OK);
  ASSERT_EQ(kernel(g.s(2, kGpu, FL_STREAM_H2D), kSetFlag, {&fp}, {{oflag, FL_WRITE, 0}}, "Q"), FL_OK);
  ASSERT_EQ(fl_engine_synchronize(g.e), FL_OK) << fl_last_error_message();
  EXPECT_EQ(out, 42);
  (void)op;
  (void)one;
  fl_object_release(ox);
  fl_object_release(oflag);
}

TEST(FakeGpu, DeviceCleanupAndReleaseRunAfterCompletion) {
  Eng g;
  int flag = 0;
  struct Rel {
    int* flag;
    std::atomic<int> seen{-1};
  } rel{&flag};
  fl_object_t* o = g.obj(&rel, [](void* u) {
    auto* r = static_cast<Rel*>(u);
    r->seen.store(std::atomic_ref<int>(*r->flag).load());
  });
  int* fp = &flag;
  long ms = 50;
  ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kSleepSet, {&fp, &ms}, {{o, FL_WRITE, 0}}, "slow"), FL_OK);
  fl_object_release(o);
  struct C {
    int* flag;
    std::atomic<int> seen{-1};
  } c{&flag};
  fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
  d.fn = [](fl_instr_ctx_t*, void*, void*) -> fl_status_t { return FL_OK; };
  d.cleanup = [](void* u) {
    auto* cc = static_cast<C*>(u);
    cc->seen.store(std::atomic_ref<int>(*cc->flag).load());
  };
  d.user_data = &c;
  ASSERT_EQ(fl_submit_device(g.s(1, kGpu, FL_STREAM_COMPUTE), &d, nullptr), FL_OK);  // same stream, after slow
  ASSERT_EQ(fl_engine_synchronize(g.e), FL_OK);
  EXPECT_EQ(rel.seen.load(), 1) << "release before the GPU finished with the object";
  EXPECT_EQ(c.seen.load(), 1) << "device cleanup before its GPU work completed";
}

TEST(FakeGpu, HostConsumerOnTheSameLaneWaitsForCompletion) {
  Eng g;
  std::vector<int> dev(256, 0), host(256, 0);
  fl_object_t* od = g.obj();
  fl_object_t* oh = g.obj();
  fl_memcpy_instr_t m = FL_MEMCPY_INSTR_INIT;
  m.kind = FL_MEMSET;
  m.value = 2;
  m.dst = dev.data();
  m.bytes = dev.size() * sizeof(int);
  fl_operand_t w{od, FL_WRITE, 0};
  m.operands = &w;
  m.num_operands = 1;
  ASSERT_EQ(fl_submit_memcpy(g.s(1, kGpu, FL_STREAM_COMPUTE), &m, nullptr), FL_OK);
  fl_memcpy_instr_t c = FL_MEMCPY_INSTR_INIT;
  c.kind = FL_MEMCPY_D2H;
  c.dst = host.data();
  c.src = dev.data();
  c.bytes = dev.size() * sizeof(int);
  fl_operand_t ops[2] = {{od, FL_READ, 0}, {oh, FL_WRITE, 0}};
  c.operands = ops;
  c.num_operands = 2;
  ASSERT_EQ(fl_submit_memcpy(g.s(1, kGpu, FL_STREAM_D2H), &c, nullptr), FL_OK);
  struct S {
    int* h;
    long sum = -1;
  } s{host.data()};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    auto* ss = static_cast<S*>(u);
    long t = 0;
    for (int k = 0; k < 256; ++k) t += ss->h[k];
    ss->sum = t;
    return FL_OK;
  };
  h.user_data = &s;
  fl_operand_t r{oh, FL_READ, 0};
  h.operands = &r;
  h.num_operands = 1;
  ASSERT_EQ(fl_submit_host(g.s(1, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  ASSERT_EQ(fl_engine_synchronize(g.e), FL_OK);
  EXPECT_EQ(s.sum, 256L * 0x02020202);
  fl_object_release(od);
  fl_object_release(oh);
}

TEST(FakeGpu, LaunchErrorFailsByNameAndSkipsReaders) {
  Eng g;
  int x = 0;
  int* p = &x;
  int one = 1;
  fl_object_t* o = g.obj();
  ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {{o, FL_WRITE, 0}}, "too-big", 4096), FL_OK);
  std::atomic<int> ran{0};
  ASSERT_EQ(kernel(g.s(2, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {{o, FL_READ, 0}}, "reader"), FL_OK);
  fl_status_t st = fl_engine_synchronize(g.e);
  EXPECT_EQ(st, FL_ERR_CUDA);
  std::string msg = fl_last_error_message();
  EXPECT_NE(msg.find("too-big"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudaErrorInvalidConfiguration"), std::string::npos) << msg;
  EXPECT_EQ(x, 0) << "the reader of a poisoned object ran";
  (void)ran;
  fl_object_release(o);
}

TEST(FakeGpu, AsynchronousFaultFailsWithCudaError) {
  {
    Eng g;
    fl_object_t* o = g.obj();
    ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kFault, {}, {{o, FL_WRITE, 0}}, "wild-write"), FL_OK);
    fl_status_t st = fl_engine_synchronize(g.e);
    EXPECT_EQ(st, FL_ERR_CUDA);
    std::string msg = fl_last_error_message();
    EXPECT_NE(msg.find("wild-write"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaErrorIllegalAddress"), std::string::npos) << msg;
    fl_object_release(o);
  }
  fake_cudart_reset_sticky();
}

TEST(FakeGpu, ManyLanesSubmittingConcurrently) {
  Eng g;
  constexpr int kThreads = 4, kPer = 2000;
  std::vector<int> counters(kThreads, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      fl_object_t* o = g.obj();
      int* p = &counters[t];
      int one = 1;
      for (int k = 0; k < kPer; ++k)
        kernel(g.s(1 + uint32_t(t), kGpu, (k & 1) ? FL_STREAM_COMPUTE : FL_STREAM_D2H), kAdd, {&p, &one},
               {{o, FL_READ_WRITE, 0}}, "add");
      fl_object_release(o);
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_EQ(fl_engine_synchronize(g.e), FL_OK);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(counters[t], kPer);
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  ASSERT_EQ(fl_engine_stats(g.e, &st), FL_OK);
  EXPECT_EQ(st.in_flight, 0u);
}

// --- events only where needed (gpu/README.md, "Events") -------------------------------

TEST(FakeGpu, SameStreamRunRecordsOneEventPerRunAndNoWaits) {
  Eng g;
  int x = 0;
  int* p = &x;
  int one = 1;
  fl_object_t* o = g.obj();
  Gate gate;
  gate.submit(g, 1);
  const long records = fake_cudart_event_records(), waits = fake_cudart_stream_waits();
  constexpr int kN = 1000;
  for (int k = 0; k < kN; ++k)
    ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "add"), FL_OK);
  gate.open.store(1);
  ASSERT_EQ(synchronize_or_die(g, "same-stream run"), FL_OK);
  EXPECT_EQ(x, kN);
  // Runs of at most 8 launches share an event, and a lane batch (64) ends a run: one
  // event per instruction would be kN.
  long recorded = fake_cudart_event_records() - records;
  EXPECT_LE(recorded, kN / 8 + kN / 64 + 4);
  EXPECT_GE(recorded, kN / 8);
  EXPECT_EQ(fake_cudart_stream_waits() - waits, 0) << "same stream: no event wait at all";
  fl_object_release(o);
}

TEST(FakeGpu, DeviceFunctionWaitingForAnEarlierLaunchOfItsStreamDoesNotHang) {
  Eng g;
  int x = 0;
  int* p = &x;
  int one = 1;
  fl_object_t* a = g.obj();
  Gate gate;
  gate.submit(g, 1);
  ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {{a, FL_WRITE, 0}}, "producer"), FL_OK);
  struct Seen {
    fl_object_t* a;
    int* x;
    fl_status_t st = FL_ERR_INTERNAL;
    int value = -1;
  } seen{a, &x};
  fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
  d.fn = [](fl_instr_ctx_t*, void*, void* u) -> fl_status_t {
    auto* s = static_cast<Seen*>(u);
    s->st = fl_object_wait(s->a, FL_READ);  // the producer is launched, with no event of its own yet
    s->value = std::atomic_ref<int>(*s->x).load();
    return FL_OK;
  };
  d.user_data = &seen;
  d.name = "waits-inside";
  ASSERT_EQ(fl_submit_device(g.s(1, kGpu, FL_STREAM_COMPUTE), &d, nullptr), FL_OK);
  gate.open.store(1);
  ASSERT_EQ(synchronize_or_die(g, "device function waiting on its own run"), FL_OK);
  EXPECT_EQ(seen.st, FL_OK);
  EXPECT_EQ(seen.value, 1);
  fl_object_release(a);
}

TEST(FakeGpu, SynchronizingACudaStreamOfTheCallersLaneIsRefused) {
  Eng g;
  struct Ctx {
    fl_stream_t* cuda;
    fl_status_t st = FL_OK;
    std::string msg;
  } c{g.s(1, kGpu, FL_STREAM_COMPUTE), FL_OK, {}};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    auto* c = static_cast<Ctx*>(u);
    c->st = fl_stream_synchronize(c->cuda);
    c->msg = fl_last_error_message();
    return FL_OK;
  };
  h.user_data = &c;
  ASSERT_EQ(fl_submit_host(g.s(1, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  ASSERT_EQ(synchronize_or_die(g, "own-lane synchronize"), FL_OK);
  EXPECT_EQ(c.st, FL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(c.msg.find("own lane"), std::string::npos) << c.msg;
}

TEST(FakeGpu, FailedEventRecordFailsTheWholeRunByName) {
  Eng g;
  int x = 0, y = 0;
  int* p = &x;
  int* q = &y;
  int one = 1;
  fl_object_t* o = g.obj();
  Gate gate;
  gate.submit(g, 1);
  for (int k = 0; k < 5; ++k)
    ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "in-run"), FL_OK);
  // A reader on another lane: skipped, since its input is poisoned.
  ASSERT_EQ(kernel(g.s(2, kGpu, FL_STREAM_COMPUTE), kAdd, {&q, &one}, {{o, FL_READ, 0}}, "reader"), FL_OK);
  fake_cudart_fail_event_records(1);
  gate.open.store(1);
  fl_status_t st = fl_engine_synchronize(g.e);
  std::string msg = fl_last_error_message();
  fake_cudart_fail_event_records(0);
  EXPECT_EQ(st, FL_ERR_CUDA);
  EXPECT_NE(msg.find("in-run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudaEventRecord"), std::string::npos) << msg;
  EXPECT_EQ(y, 0) << "the reader of a poisoned object ran";
  fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
  ASSERT_EQ(fl_engine_stats(g.e, &stats), FL_OK);
  EXPECT_EQ(stats.failed, 6u) << "the five kernels of the run fail, the reader is skipped";
  EXPECT_EQ(stats.in_flight, 0u);
  // The other failures are returned by later waits, once each (the reader's skip is part of
  // the failure that poisoned it, reported with a count); then the engine goes on.
  int more = 0;
  std::string all = msg;
  while (more < 10 && fl_engine_synchronize(g.e) != FL_OK) {
    ++more;
    all += fl_last_error_message();
  }
  EXPECT_EQ(more, 4);
  EXPECT_NE(all.find("1 instruction that depended on it was skipped"), std::string::npos) << all;
  ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kAdd, {&q, &one}, {}, "after"), FL_OK);
  EXPECT_EQ(synchronize_or_die(g, "after a failed record"), FL_OK);
  EXPECT_EQ(y, 1);
  fl_object_release(o);
}

// Random dependent work over 4 lanes x 2 CUDA streams + host instructions, compared with
// sequential execution: the engine must order every read-after-write, write-after-read and
// write-after-write through stream order, covering events, event waits and completion.
TEST(FakeGpu, RandomCrossStreamWorkMatchesSequentialExecution) {
  for (uint32_t seed = 1; seed <= 4; ++seed) random_work(seed, 1500, false);
}

// A release callback runs on the poller. If it submits while the window is full of GPU
// work, it must be admitted: the window can only drain through this very thread.
TEST(FakeGpu, ReleaseCallbackSubmittingIntoAFullWindowIsAdmitted) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  d.inflight_limit = 4;
  fl_engine_t* e = nullptr;
  ASSERT_EQ(fl_engine_create(&d, &e), FL_OK);
  auto stream = [e](uint32_t lane, fl_device_t dev, fl_stream_kind_t k) {
    fl_stream_t* s = nullptr;
    EXPECT_EQ(fl_stream_get(e, lane, dev, k, &s), FL_OK);
    return s;
  };
  int flag1 = 0, flag2 = 0, out1 = 0;
  std::vector<int> outs(3, 0);
  struct OnRelease {
    fl_stream_t* host;
    int* flag2;
    std::atomic<fl_status_t> st{FL_ERR_INTERNAL};
  } on_release{stream(5, kCpu, FL_STREAM_HOST), &flag2};
  fl_object_t* a = nullptr;
  ASSERT_EQ(fl_object_create(e, &on_release, [](void* u) {
              auto* r = static_cast<OnRelease*>(u);
              fl_host_instr_t h = FL_HOST_INSTR_INIT;
              h.fn = [](fl_instr_ctx_t*, void* f) -> fl_status_t {
                std::atomic_ref<int>(*static_cast<int*>(f)).store(1);
                return FL_OK;
              };
              h.user_data = r->flag2;
              h.name = "set-flag2";
              r->st.store(fl_submit_host(r->host, &h, nullptr));  // the window is full here
            }, &a), FL_OK);
  int* f1 = &flag1;
  int* f2 = &flag2;
  int* o1 = &out1;
  int v = 7;
  ASSERT_EQ(kernel(stream(1, kGpu, FL_STREAM_COMPUTE), kWaitFlag, {&f1, &o1, &v}, {{a, FL_WRITE, 0}}, "k1"), FL_OK);
  ASSERT_EQ(fl_object_release(a), FL_OK);  // release(a) runs on the poller once k1 completed
  std::vector<fl_object_t*> bs(3);
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(fl_object_create(e, nullptr, nullptr, &bs[size_t(k)]), FL_OK);
    int* o = &outs[size_t(k)];
    ASSERT_EQ(kernel(stream(2 + uint32_t(k), kGpu, FL_STREAM_COMPUTE), kWaitFlag, {&f2, &o, &v},
                     {{bs[size_t(k)], FL_WRITE, 0}}, "waits-for-flag2"), FL_OK);
  }
  std::atomic_ref<int>(flag1).store(1);  // 4 instructions in flight: the window is full
  auto f = std::async(std::launch::async, [e] { return fl_engine_synchronize(e); });
  if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: the poller stayed blocked in a release callback\n");
    std::_Exit(3);
  }
  EXPECT_EQ(f.get(), FL_OK);
  EXPECT_EQ(on_release.st.load(), FL_OK);
  EXPECT_EQ(out1, 7);
  // -1: a kernel gave up waiting (5 s) for flag2, which only the callback's submission sets.
  EXPECT_EQ(outs, std::vector<int>(3, 7));
  for (fl_object_t* b : bs) fl_object_release(b);
  fl_engine_destroy(e);
}

// Whether thread `tid` of this process sleeps in the kernel right now (state S).
bool thread_asleep(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t p = line.rfind(')');
  return p != std::string::npos && p + 2 < line.size() && line[p + 2] == 'S';
}

// fl_instr_wait_for on a device stream, whose instructions complete on the poller (a CAS
// of last_completed_id) or, failed at issue or skipped behind work in flight, deferred
// in stream order: threads waiting for different ids (registered, asleep, before the lane
// moves) and a host callback of another lane each return their own instruction's outcome,
// after it (the kernel's write is seen). A waiter that is never woken ends the process.
TEST(FakeGpu, InstrWaitForOnADeviceStreamReturnsEachOutcomeAtItsInstruction) {
  Eng g;
  fl_stream_t* cs = g.s(1, kGpu, FL_STREAM_COMPUTE);
  Gate gate;
  gate.submit(g, 1);  // nothing of lane 1 is issued before the waiters sleep
  int flag = 0;
  int* fp = &flag;
  long ms = 2;
  fl_object_t* o = g.obj();
  struct Entry {
    fl_instr_id id = 0;
    fl_status_t expect = FL_OK;
    int k = -1;  // the add's index, or -1
  };
  constexpr int kAdds = 12;
  std::vector<int> out(kAdds, 0), vals(kAdds);
  std::vector<int*> ptrs(kAdds);
  std::vector<Entry> entries;
  auto submit = [&](const fake::Kernel& k, std::vector<const void*> args, std::vector<fl_operand_t> ops,
                    const char* name, uint32_t block, Entry e) {
    ASSERT_EQ(kernel(cs, k, std::move(args), std::move(ops), name, block, &e.id), FL_OK) << fl_last_error_message();
    entries.push_back(e);
  };
  // In flight while the launches behind it are issued: a launch that fails at issue then
  // completes deferred, in stream order.
  submit(kSleepSet, {&fp, &ms}, {}, "sleeps", 1, {0, FL_OK, -1});
  for (int k = 0; k < kAdds; ++k) {
    ptrs[size_t(k)] = &out[size_t(k)];
    vals[size_t(k)] = k + 1;
    submit(kAdd, {&ptrs[size_t(k)], &vals[size_t(k)]}, {}, "add", 1, {0, FL_OK, k});
    if (k == 4) submit(kAdd, {&ptrs[0], &vals[0]}, {{o, FL_WRITE, 0}}, "too-big", 4096, {0, FL_ERR_CUDA, -1});
    if (k == 5) submit(kAdd, {&ptrs[0], &vals[0]}, {{o, FL_READ, 0}}, "reader", 1, {0, FL_ERR_DEPENDENCY_FAILED, -1});
  }
  // A host callback of lane 2 waits for the last add.
  std::atomic<int> cb_value{-1};
  std::atomic<fl_status_t> cb_st{FL_ERR_INTERNAL};
  std::atomic<pid_t> cb_tid{0};
  struct Cb {
    fl_stream_t* cs;
    fl_instr_id id;
    int* out;
    std::atomic<int>* value;
    std::atomic<fl_status_t>* st;
    std::atomic<pid_t>* tid;
  } cb{cs, entries.back().id, &out[kAdds - 1], &cb_value, &cb_st, &cb_tid};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    auto* c = static_cast<Cb*>(u);
    c->tid->store(pid_t(syscall(SYS_gettid)));
    c->st->store(fl_instr_wait_for(c->cs, c->id, FL_WAIT_FOREVER));
    c->value->store(*c->out);
    return FL_OK;
  };
  h.user_data = &cb;
  ASSERT_EQ(fl_submit_host(g.s(2, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  // Two threads per instruction (forever, and an hour: the timed path), each asleep
  // before the next starts; registered from the last id down to the first, then up.
  const size_t n = entries.size();
  std::vector<fl_status_t> got(2 * n, FL_ERR_INTERNAL);
  std::vector<int> seen(2 * n, -1);
  std::vector<std::atomic<pid_t>> tids(2 * n);
  std::vector<std::thread> threads;
  for (size_t j = 0; j < 2 * n; ++j) {
    const size_t e = j < n ? n - 1 - j : j - n;
    threads.emplace_back([&, j, e] {
      tids[j] = pid_t(syscall(SYS_gettid));
      got[j] = fl_instr_wait_for(cs, entries[e].id, j % 2 ? 3600ull * 1000000000ull : FL_WAIT_FOREVER);
      if (entries[e].k >= 0) seen[j] = out[size_t(entries[e].k)];
    });
    for (int r = 0; r < 100000 && (tids[j].load() == 0 || !thread_asleep(tids[j].load())); ++r)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (int r = 0; r < 100000 && (cb_tid.load() == 0 || !thread_asleep(cb_tid.load())); ++r)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  gate.open.store(1);
  auto joined = std::async(std::launch::async, [&] {
    for (auto& t : threads) t.join();
  });
  if (joined.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: a thread in fl_instr_wait_for on a device stream was never woken\n");
    std::_Exit(3);
  }
  ASSERT_EQ(synchronize_or_die(g, "waits on a device stream"), FL_OK);  // the waits observed the failure
  for (size_t j = 0; j < 2 * n; ++j) {
    const Entry& e = entries[j < n ? n - 1 - j : j - n];
    EXPECT_EQ(got[j], e.expect) << "wait for #" << e.id << ": " << fl_status_name(got[j]);
    if (e.k >= 0) {
      EXPECT_EQ(seen[j], e.k + 1) << "the wait for #" << e.id << " returned before its kernel ran";
    }
  }
  EXPECT_EQ(cb_st.load(), FL_OK);
  EXPECT_EQ(cb_value.load(), kAdds);
  fl_object_release(o);
}

// ---- the C++ wrappers (flowlane.hpp) of device work ----------------------------------------

int run_check_args(const void* const* a) {
  int* out = *static_cast<int* const*>(a[0]);
  const long v = *static_cast<const long*>(a[1]);
  const short s = *static_cast<const short*>(a[2]);
  *out = (v == -3 && s == 7) ? 1 : 2;
  return 0;
}
const fake::Kernel kCheckArgs{3, {sizeof(int*), sizeof(long), sizeof(short)}, &run_check_args};

TEST(FakeGpuCpp, KernelArgumentsArriveAtTheirParametersSizesAndDeviceClosuresLiveUntilTheirWorkIsDone) {
  flowlane::engine e;
  const flowlane::stream gpu = e.stream_of(1, kGpu, FL_STREAM_COMPUTE);
  // A fake kernel stands for a __global__ function void(int*, long, short): the int
  // literal is widened to the long parameter before its bytes are copied (a literal for the
  // short would narrow: it must be cast).
  auto check_args = reinterpret_cast<void (*)(int*, long, short)>(const_cast<fake::Kernel*>(&kCheckArgs));
  int result = 0;
  auto done = e.phony();
  gpu.submit_kernel(check_args, flowlane::launch{}, {flowlane::write(done)}, &result, -3, short{7});
  flowlane::launch unknown_flags;
  unknown_flags.flags = uint64_t(1) << 40;  // the flags reach the C call, which checks them
  try {
    gpu.submit_kernel(check_args, unknown_flags, {}, &result, -3, short{7});
    ADD_FAILURE() << "unknown submit flags were accepted";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_INVALID_ARGUMENT) << err.what();
  }

  // A device function's closure owns what its enqueued work uses, until that work is done.
  std::vector<int> device(4, 0);  // the fake treats unregistered memory as device memory
  flowlane::pinned_buffer<int> host(4);
  EXPECT_EQ(host.bytes(), sizeof(int) * 4);
  auto owned = std::make_shared<int>(0x01);
  std::weak_ptr<int> alive = owned;
  gpu.submit_device(
      [owned = std::move(owned), &device](void* cuda_stream) {
        if (cudaMemsetAsync(device.data(), *owned, device.size() * sizeof(int), static_cast<cudaStream_t>(cuda_stream)) !=
            cudaSuccess)
          return FL_ERR_CUDA;
        return FL_OK;
      },
      {flowlane::write(done)}, "fill");
  gpu.submit_memcpy(host.data(), device.data(), host.bytes(), FL_MEMCPY_D2H, {flowlane::read(done)}, "back");
  gpu.synchronize();
  EXPECT_EQ(result, 1) << "the kernel read its arguments at the wrong sizes";
  for (int v : host) EXPECT_EQ(v, 0x01010101);
  EXPECT_TRUE(alive.expired()) << "the device function's closure is destroyed once its work completed";
  gpu.submit_memset(device.data(), 0, device.size() * sizeof(int), {flowlane::write(done)});
  gpu.synchronize();
  EXPECT_EQ(device[0], 0);
  EXPECT_GE(flowlane::cuda_device_count(), 1);
  // A count whose bytes wrap around is refused before anything is allocated or filled.
  try {
    flowlane::pinned_buffer<uint64_t> huge(SIZE_MAX / sizeof(uint64_t) + 2);
    ADD_FAILURE() << "a pinned_buffer of " << huge.size() << " elements in " << huge.bytes() << " bytes";
  } catch (const flowlane::error& x) {
    EXPECT_EQ(x.status(), FL_ERR_OUT_OF_RANGE) << x.what();
  }
}

}  // namespace
