// The C++ header (flowlane.hpp) as a C++17 program uses it: lambdas with captures as
// instructions and tasks, RAII handles, errors as exceptions. Built with -std=c++17.
#include <flowlane/flowlane.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <array>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <stdlib.h>
#include <unistd.h>

namespace {

using namespace std::chrono_literals;

flowlane::engine_options workers(uint64_t n) {
  flowlane::engine_options o;
  o.workers = n;
  return o;
}

// A gate a callable blocks on until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

// ---- recursive work through task groups ---------------------------------------------------

uint64_t fib_seq(uint64_t n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

uint64_t fib(const flowlane::engine& e, uint64_t n) {
  if (n < 12) return fib_seq(n);
  uint64_t a = 0, b = 0;
  flowlane::task_group g = e.make_task_group();
  g.spawn([&] { a = fib(e, n - 1); });
  g.spawn([&] { b = fib(e, n - 2); });
  g.wait();
  return a + b;
}

void quicksort(const flowlane::engine& e, int* lo, int* hi) {
  while (hi - lo > 256) {
    int pivot = lo[(hi - lo) / 2];
    int* mid1 = std::partition(lo, hi, [pivot](int v) { return v < pivot; });
    int* mid2 = std::partition(mid1, hi, [pivot](int v) { return v == pivot; });
    flowlane::task_group g = e.make_task_group();
    g.spawn([&e, lo, mid1] { quicksort(e, lo, mid1); });
    quicksort(e, mid2, hi);  // the larger half could be either: both are sorted before wait
    g.wait();
    return;
  }
  std::sort(lo, hi);
}

struct Node {
  uint64_t value = 0;
  std::unique_ptr<Node> left, right;
};

std::unique_ptr<Node> make_tree(int depth, uint64_t& next) {
  auto n = std::make_unique<Node>();
  n->value = next++;
  if (depth > 0) {
    n->left = make_tree(depth - 1, next);
    n->right = make_tree(depth - 1, next);
  }
  return n;
}

// Every node is its own task, all spawned into one group from inside its tasks.
void visit(flowlane::task_group& g, const Node* n, std::atomic<uint64_t>& sum) {
  sum.fetch_add(n->value, std::memory_order_relaxed);
  for (const Node* child : {n->left.get(), n->right.get()})
    if (child != nullptr) g.spawn([&g, child, &sum] { visit(g, child, sum); });
}

class CppTaskGroups : public ::testing::TestWithParam<uint64_t> {};

TEST_P(CppTaskGroups, FibWithOneTaskPerCall) {
  flowlane::engine e(workers(GetParam()));
  EXPECT_EQ(fib(e, 24), fib_seq(24));
  EXPECT_GT(e.stats().tasks, 0u);
}

TEST_P(CppTaskGroups, QuicksortSortsAndKeepsTheElements) {
  flowlane::engine e(workers(GetParam()));
  std::vector<int> v(200000);
  std::mt19937 rng(7);
  for (int& x : v) x = int(rng() % 5000);
  std::vector<int> expected = v;
  std::sort(expected.begin(), expected.end());
  quicksort(e, v.data(), v.data() + v.size());
  EXPECT_EQ(v, expected);
}

TEST_P(CppTaskGroups, TreeWalkVisitsEveryNodeOnce) {
  flowlane::engine e(workers(GetParam()));
  uint64_t next = 1;
  std::unique_ptr<Node> root = make_tree(12, next);
  const uint64_t count = next - 1;
  std::atomic<uint64_t> sum{0};
  flowlane::task_group g = e.make_task_group();
  g.spawn([&] { visit(g, root.get(), sum); });
  g.wait();
  EXPECT_EQ(sum.load(), count * (count + 1) / 2);
}

INSTANTIATE_TEST_SUITE_P(Workers, CppTaskGroups, ::testing::Values(1, 2, 4));

TEST(CppTaskGroup, WaitRethrowsTheFirstExceptionWithItsOwnType) {
  flowlane::engine e(workers(2));
  flowlane::task_group g = e.make_task_group();
  g.spawn([] { throw std::out_of_range("index 7"); });
  try {
    g.wait();
    FAIL() << "wait() returned";
  } catch (const std::out_of_range& x) {
    EXPECT_STREQ(x.what(), "index 7");
  }
  // The group is usable again after its failure was returned.
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) g.spawn([&] { ran++; });
  g.wait();
  EXPECT_EQ(ran.load(), 10);
}

TEST(CppTaskGroup, AStatusFailureThrowsFlowlaneError) {
  flowlane::engine e(workers(2));
  flowlane::task_group g = e.make_task_group();
  g.spawn([] { return FL_ERR_UNSUPPORTED; });
  try {
    g.wait();
    FAIL() << "wait() returned";
  } catch (const flowlane::error& x) {
    EXPECT_EQ(x.status(), FL_ERR_UNSUPPORTED);
  }
}

TEST(CppTaskGroup, WaitForIsFalseWhileATaskRunsThenRethrowsItsException) {
  flowlane::engine e(workers(2));
  flowlane::task_group g = e.make_task_group();
  std::atomic<bool> go{false};
  g.spawn([&] {
    while (!go.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    throw std::out_of_range("late");
  });
  EXPECT_FALSE(g.wait_for(std::chrono::milliseconds(1)));
  go = true;
  EXPECT_THROW(g.wait_for(std::chrono::seconds(60)), std::out_of_range);
  g.spawn([] {});
  EXPECT_TRUE(g.wait_for(std::chrono::seconds(60)));
}

TEST(CppTaskGroup, EveryClosureIsDestroyedOnceWhetherItRanOrWasSkipped) {
  auto token = std::make_shared<int>(0);
  {
    flowlane::engine e(workers(1));
    flowlane::task_group g = e.make_task_group();
    g.spawn([] { throw std::runtime_error("first"); });
    for (int i = 0; i < 100; ++i) g.spawn([token] { ++*token; });
    EXPECT_THROW(g.wait(), std::runtime_error);
  }
  EXPECT_EQ(token.use_count(), 1) << "a closure leaked or was destroyed twice";
}

// ---- instructions as lambdas ----------------------------------------------------------------

TEST(CppSubmit, LambdasWithCapturesRunInOperandOrder) {
  flowlane::engine e(workers(2));
  auto x = e.make_object<std::vector<int>>();
  std::vector<int>* seen = &x.value();
  for (int i = 0; i < 200; ++i) {
    uint32_t lane = uint32_t(i % 4);
    e.host(lane).submit([seen, i] { seen->push_back(i); }, {flowlane::read_write(x)}, "append");
  }
  x.wait();
  std::vector<int> expected(200);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(x.value(), expected);
}

TEST(CppSubmit, AContextLambdaSeesItsIdAndLane) {
  flowlane::engine e(workers(2));
  auto out = e.make_object<std::pair<fl_instr_id, uint32_t>>();
  auto* v = &out.value();
  fl_instr_id id = e.host(3).submit([v](flowlane::instr_context c) { *v = {c.id(), c.lane()}; },
                                    {flowlane::write(out)});
  out.wait(FL_READ);
  EXPECT_EQ(out.value().first, id);
  EXPECT_EQ(out.value().second, 3u);
}

TEST(CppSubmit, AnExceptionFailsTheInstructionWithItsTextAndSkipsItsDependents) {
  flowlane::engine e(workers(2));
  auto x = e.make_object<int>(0);
  flowlane::stream s = e.host(1);
  s.submit([]() -> void { throw std::invalid_argument("bad row 12"); }, {flowlane::write(x)}, "parse");
  bool ran = false;
  s.submit([&ran] { ran = true; }, {flowlane::read(x)}, "use");
  try {  // the callable's own exception comes back, with its type (as from a task group)
    e.synchronize();
    FAIL() << "synchronize() returned";
  } catch (const std::invalid_argument& err) {
    EXPECT_STREQ(err.what(), "bad row 12");
  }
  EXPECT_FALSE(ran);
  e.synchronize();  // each failure is returned once
}

TEST(CppSubmit, ARefusedSubmissionThrowsAndDoesNotLeakTheClosure) {
  auto token = std::make_shared<int>(0);
  flowlane::engine e(workers(1));
  auto x = e.make_object<int>(0);
  fl_object_t* h = x.get();
  x.reset();  // a released handle: the submission is refused
  flowlane::operand stale{h, FL_READ};
  try {
    e.host(0).submit([token] {}, {stale});
    FAIL() << "submit() accepted a released object";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_INVALID_HANDLE);
  }
  EXPECT_EQ(token.use_count(), 1);
}

TEST(CppSubmit, BadArgumentsThrowWithTheStatus) {
  flowlane::engine e(workers(1));
  try {
    (void)e.host(1u << 30);
    FAIL() << "an out-of-range lane was accepted";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_OUT_OF_RANGE);
    EXPECT_NE(std::string(err.what()).find("lane"), std::string::npos) << err.what();
  }
}

// ---- timed waits, queries, cancel, drain ------------------------------------------------------

TEST(CppWaits, TimedWaitsReturnFalseUntilTheWorkIsDone) {
  flowlane::engine e(workers(2));
  auto x = e.make_object<int>(0);
  Gate gate;
  flowlane::stream s = e.host(1);
  fl_instr_id id = s.submit([&gate] { gate.wait(); }, {flowlane::write(x)}, "held");
  EXPECT_FALSE(x.wait_for(20ms, FL_READ));
  EXPECT_FALSE(s.synchronize_for(1ms));
  EXPECT_FALSE(e.synchronize_for(1ms));
  EXPECT_FALSE(s.wait(id, 1ms));
  EXPECT_NE(s.query(id), FL_INSTR_DONE);
  gate.release();
  EXPECT_TRUE(s.wait(id));
  EXPECT_EQ(s.query(id), FL_INSTR_DONE);
  EXPECT_TRUE(x.wait_for(10s, FL_READ));
  EXPECT_TRUE(e.synchronize_for(10s));
}

TEST(CppWaits, CancelledInstructionsFailAndTheirClosuresAreFreed) {
  auto token = std::make_shared<int>(0);
  flowlane::engine e(workers(1));
  Gate gate, started;
  flowlane::stream s = e.host(0);
  s.submit([&] {
    started.release();
    gate.wait();
  });
  started.wait();
  fl_instr_id queued = s.submit([token] { ++*token; });
  s.cancel(queued);
  gate.release();
  try {
    s.wait(queued);
    FAIL() << "a cancelled instruction completed normally";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_CANCELLED);
  }
  EXPECT_EQ(*token, 0);
  e.drain();
  EXPECT_EQ(token.use_count(), 1);
}

TEST(CppWaits, DrainStopsAcceptingWork) {
  flowlane::engine e(workers(2));
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) e.host(uint32_t(i % 3)).submit([&] { ran++; });
  EXPECT_TRUE(e.drain());
  EXPECT_EQ(ran.load(), 100);
  try {
    e.host(0).submit([] {});
    FAIL() << "a drained engine accepted work";
  } catch (const flowlane::error& err) {
    EXPECT_EQ(err.status(), FL_ERR_SHUTDOWN);
  }
}

// ---- parallel_for -------------------------------------------------------------------------

TEST(CppParallelFor, CoversTheRangeOnceAndRethrowsTheFirstException) {
  flowlane::engine e(workers(2));
  std::vector<std::atomic<int>> hits(100000);
  e.parallel_for(0, hits.size(), [&](uint64_t lo, uint64_t hi) {
    for (uint64_t i = lo; i < hi; ++i) hits[i]++;
  });
  EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h.load() == 1; }));
  EXPECT_THROW(e.parallel_for(0, 1000, [](uint64_t lo, uint64_t) {
    if (lo == 0) throw std::length_error("chunk 0");
  }, 10),
               std::length_error);
}

TEST(CppParallelFor, RunsInsideAnInstruction) {
  flowlane::engine e(workers(2));
  auto sum = e.make_object<uint64_t>(0);
  uint64_t* out = &sum.value();
  flowlane::engine* ep = &e;
  e.host(1).submit([ep, out] {
    std::atomic<uint64_t> acc{0};
    ep->parallel_for(0, 10000, [&](uint64_t lo, uint64_t hi) {
      uint64_t s = 0;
      for (uint64_t i = lo; i < hi; ++i) s += i;
      acc += s;
    });
    *out = acc.load();
  }, {flowlane::write(sum)});
  sum.wait(FL_READ);
  EXPECT_EQ(sum.value(), 10000ull * 9999 / 2);
}

// ---- handles --------------------------------------------------------------------------------

TEST(CppHandles, MovesTransferOwnershipAndTheDumpReads) {
  flowlane::engine a(workers(1));
  flowlane::engine b = std::move(a);
  EXPECT_EQ(a.get(), nullptr);
  auto o = b.make_object<int>(5);
  auto p = std::move(o);
  EXPECT_FALSE(o);
  EXPECT_EQ(p.value(), 5);
  flowlane::object<void> ph = b.phony();
  b.host(0).submit([] {}, {flowlane::write(ph), flowlane::read(p)});
  b.synchronize();
  std::string d = b.dump();
  EXPECT_FALSE(d.empty());
  EXPECT_EQ(d.find('\0'), std::string::npos);
}

}  // namespace

// ---- lanes, streams, task graphs, the watchdog, traces -------------------------------------

namespace {

flowlane::engine_options lanes(uint64_t workers_n, uint64_t lanes_n) {
  flowlane::engine_options o = workers(workers_n);
  o.lanes = lanes_n;
  return o;
}

template <class F>
fl_status_t status_of(F&& f) {
  try {
    f();
  } catch (const flowlane::error& e) {
    return e.status();
  }
  return FL_OK;
}

TEST(CppLanes, AcquiredLanesAreHeldUntilTheirOwnerGoes) {
  flowlane::engine e(lanes(2, 3));
  flowlane::lane a = e.acquire_lane();
  flowlane::lane b = e.acquire_lane();
  EXPECT_EQ(a.id(), 1u);
  EXPECT_EQ(b.id(), 2u);
  EXPECT_EQ(status_of([&] { e.acquire_lane(); }), FL_ERR_EXHAUSTED);
  flowlane::lane moved = std::move(b);
  EXPECT_FALSE(b);
  EXPECT_EQ(status_of([&] { e.acquire_lane(); }), FL_ERR_EXHAUSTED) << "a move does not release";
  const flowlane::stream_info info = moved.host().info();
  EXPECT_EQ(info.lane, 2u);
  EXPECT_EQ(info.device.type, FL_DEVICE_CPU);
  EXPECT_EQ(info.kind, FL_STREAM_HOST);
  int ran_on = -1;
  bool same_engine = false;
  uint32_t follow_up_lane = 0;
  moved.host().submit([&](flowlane::instr_context ctx) {
    ran_on = int(ctx.lane());
    same_engine = ctx.engine() == e.get();
    // Follow-up work on its own lane's host stream, from inside.
    follow_up_lane = ctx.host().info().lane;
    ctx.host().submit([] {});
  });
  moved.host().synchronize();
  EXPECT_EQ(ran_on, 2);
  EXPECT_TRUE(same_engine);
  EXPECT_EQ(follow_up_lane, 2u);
  auto x = e.make_object<double>(1.5);
  EXPECT_EQ(x.user_data(), static_cast<void*>(&x.value()));
  moved.reset();  // work already submitted has run; the lane is free again
  flowlane::lane again = e.acquire_lane();
  EXPECT_EQ(again.id(), 2u);
}

TEST(CppStreams, ErrorPathsThrowTheirStatus) {
  flowlane::engine e(workers(1));
  // A host stream has no CUDA priority; a kernel or copy needs a CUDA stream (and a CPU-only
  // build has none at all).
  const fl_status_t priority = status_of([&] { e.host(0).set_priority(0); });
  EXPECT_TRUE(priority == FL_ERR_INVALID_ARGUMENT || priority == FL_ERR_UNSUPPORTED) << fl_status_name(priority);
  const fl_status_t kernel = status_of([&] {
    e.host(0).submit_kernel(static_cast<void (*)(int)>(nullptr), flowlane::launch{}, {}, 1);
  });
  EXPECT_TRUE(kernel == FL_ERR_INVALID_ARGUMENT || kernel == FL_ERR_UNSUPPORTED) << fl_status_name(kernel);
  int dummy = 0;
  const fl_status_t copy = status_of([&] { e.host(0).submit_memcpy(&dummy, &dummy, sizeof dummy, FL_MEMCPY_D2D); });
  EXPECT_TRUE(copy == FL_ERR_INVALID_ARGUMENT || copy == FL_ERR_UNSUPPORTED) << fl_status_name(copy);
  int destroyed = 0;
  struct Counted {
    int* n;
    Counted(int* c) : n(c) {}
    Counted(Counted&& o) noexcept : n(std::exchange(o.n, nullptr)) {}
    ~Counted() {
      if (n) ++*n;
    }
  };
  const fl_status_t device = status_of([&] {
    e.host(0).submit_device([c = Counted(&destroyed)](void*) {});
  });
  EXPECT_TRUE(device == FL_ERR_INVALID_ARGUMENT || device == FL_ERR_UNSUPPORTED) << fl_status_name(device);
  EXPECT_EQ(destroyed, 1) << "a refused device function's closure is destroyed once, by the wrapper";
  EXPECT_STRNE(flowlane::error(FL_ERR_TIMEOUT, "x").description(), "");
  EXPECT_EQ(flowlane::version_hex() >> 16, uint32_t(FL_VERSION_MAJOR));
  EXPECT_EQ(std::string(flowlane::version()).rfind(std::to_string(FL_VERSION_MAJOR) + ".", 0), 0u);
}

TEST(CppTaskGraph, RunsInDependencyOrderEveryTimeAndRethrowsTheFirstException) {
  flowlane::engine e(workers(2));
  std::mutex mu;
  std::vector<int> order;
  auto note = [&](int n) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(n);
  };
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> alive = token;
  {
    flowlane::taskgraph g = e.make_taskgraph();
    const uint64_t a = g.add([&, token] { note(0); }, "a");
    const uint64_t b = g.add([&] { note(1); });
    const uint64_t c = g.add([&] { note(2); return FL_OK; });
    const uint64_t d = g.add([&] { note(3); }, "d");
    g.precede(a, b);
    g.precede(a, c);
    g.precede(b, d);
    g.precede(c, d);
    token.reset();
    for (int round = 0; round < 3; ++round) {
      order.clear();
      g.run(2);
      ASSERT_EQ(order.size(), 4u);
      EXPECT_EQ(order.front(), 0);
      EXPECT_EQ(order.back(), 3);
    }
    EXPECT_EQ(status_of([&] { g.precede(a, a); }), FL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { g.precede(a, 99); }), FL_ERR_OUT_OF_RANGE);

    flowlane::taskgraph bad = e.make_taskgraph();
    const uint64_t x = bad.add([] { throw std::out_of_range("node x broke"); });
    const uint64_t y = bad.add([&] { note(9); });
    bad.precede(x, y);
    order.clear();
    try {
      bad.run();
      ADD_FAILURE() << "run() should rethrow";
    } catch (const std::out_of_range& ex) {
      EXPECT_STREQ(ex.what(), "node x broke");
    }
    EXPECT_TRUE(order.empty()) << "a node after a failed one does not run";
    EXPECT_FALSE(alive.expired()) << "the graph owns its callables";
  }
  EXPECT_TRUE(alive.expired()) << "destroyed with the graph";
}

TEST(CppWatchdog, ALambdaGetsTheDumpAndMayReplaceItselfFromInside) {
  flowlane::engine e(workers(1));
  std::mutex mu;
  std::condition_variable cv;
  std::string first_dump;
  int second_calls = 0;
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> second_alive = token;
  Gate gate;
  // The token is owned by the callables only: the first one, then its replacement.
  e.set_watchdog(std::chrono::milliseconds(30), [&, token](std::string_view dump) {
    // Runs on the watchdog's thread: replacing itself must neither deadlock nor free this
    // lambda while it runs.
    e.set_watchdog(std::chrono::milliseconds(30), [&, token](std::string_view) {
      std::lock_guard<std::mutex> lock(mu);
      ++second_calls;
      cv.notify_all();
      throw std::runtime_error("dropped");  // an exception from the callable is dropped
    });
    std::lock_guard<std::mutex> lock(mu);
    first_dump.assign(dump);
    cv.notify_all();
  });
  token.reset();
  e.host(0).submit([&] { gate.wait(); }, {}, "stalled-on-purpose");
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return !first_dump.empty(); })) << "the watchdog never fired";
  }
  EXPECT_NE(first_dump.find("stalled-on-purpose"), std::string::npos) << first_dump;
  gate.release();
  e.synchronize();
  // A second stall reaches the replacement.
  Gate gate2;
  e.host(0).submit([&] { gate2.wait(); });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return second_calls > 0; })) << "the replacement never ran";
  }
  gate2.release();
  e.synchronize();
  EXPECT_FALSE(second_alive.expired());
  e.set_watchdog(std::chrono::milliseconds(0));  // off: the callable is no longer needed
  EXPECT_TRUE(second_alive.expired()) << "a replaced callable is destroyed once it cannot run";
  EXPECT_EQ(status_of([&] { e.set_watchdog(std::chrono::hours(48)); }), FL_ERR_OUT_OF_RANGE);
}

TEST(CppTrace, StartAndStopWriteATimeline) {
  flowlane::engine e(workers(1));
  const std::string path = ::testing::TempDir() + "cpp_api_trace.json";
  e.trace_start(path);
  EXPECT_EQ(status_of([&] { e.trace_start(path); }), FL_ERR_INVALID_ARGUMENT) << "already tracing";
  auto x = e.make_object<int>(0);
  e.host(0).submit([&] { x.value() = 1; }, {flowlane::write(x)}, "traced-write");
  e.synchronize();
  e.trace_stop();
  EXPECT_EQ(status_of([&] { e.trace_stop(); }), FL_ERR_INVALID_ARGUMENT) << "not tracing";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  std::remove(path.c_str());
  EXPECT_NE(text.find("traced-write"), std::string::npos);
}

TEST(CppComm, HostRanksAllReduceThroughTheirCollectiveStreams) {
  flowlane::engine a(lanes(1, 2)), b(lanes(1, 2));
  const fl_comm_unique_id_t id = flowlane::comm_unique_id(FL_COMM_HOST_FAKE);
  flowlane::comm_options o;
  o.nranks = 2;
  o.lane = 1;
  o.backend = FL_COMM_HOST_FAKE;
  flowlane::communicator ca, cb;
  std::thread other([&] {  // ranks rendezvous as they join
    flowlane::comm_options ob = o;
    ob.rank = 1;
    cb = b.make_communicator(ob, id);
  });
  ca = a.make_communicator(o, id);
  other.join();
  EXPECT_EQ(ca.collective_stream().info().kind, FL_STREAM_COLLECTIVE);
  float sa[4] = {1, 2, 3, 4}, sb[4] = {10, 20, 30, 40}, ra[4] = {}, rb[4] = {};
  int64_t ia[2] = {-5, 7}, ib[2] = {3, 9}, ga[4] = {}, gb[4] = {};
  // The element types give the dtypes; both parts go as one group.
  EXPECT_EQ(flowlane::all_gather(ia, ga, 2).dtype, uint32_t(FL_DTYPE_INT64));
  EXPECT_EQ(flowlane::recv_from(ra, 4, 1).recvbuf, static_cast<void*>(ra));
  ca.submit({flowlane::all_reduce(sa, ra, 4), flowlane::all_gather(ia, ga, 2)}, {}, "sum+gather");
  cb.submit({flowlane::all_reduce(sb, rb, 4), flowlane::all_gather(ib, gb, 2)}, {}, "sum+gather");
  ca.collective_stream().synchronize();
  cb.collective_stream().synchronize();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ra[i], sa[i] + sb[i]);
    EXPECT_EQ(rb[i], sa[i] + sb[i]);
  }
  const int64_t gathered[4] = {-5, 7, 3, 9};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ga[i], gathered[i]);
    EXPECT_EQ(gb[i], gathered[i]);
  }
  EXPECT_EQ(status_of([&] { ca.submit({}); }), FL_ERR_INVALID_ARGUMENT) << "no parts";
}

TEST(CppComm, TimeoutRendezvousAndErrorMessageWrappers) {
  flowlane::engine a(lanes(1, 2));
  flowlane::comm_options o;
  o.backend = FL_COMM_HOST_FAKE;
  flowlane::communicator c = a.make_communicator(o, flowlane::comm_unique_id(FL_COMM_HOST_FAKE));
  c.set_timeout(250);
  c.set_timeout(0);
  EXPECT_EQ(status_of([&] { c.set_timeout(uint64_t(1) << 40); }), FL_ERR_OUT_OF_RANGE) << "over one day";
  // One rank: rank 0 writes its id and returns once it acknowledged itself.
  char dir[] = "/tmp/fl_cpp_rdv_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  fl_comm_unique_id_t id = flowlane::comm_unique_id(FL_COMM_HOST_FAKE);
  flowlane::comm_rendezvous_file(dir, "job1", 0, 1, 5000, id);
  EXPECT_EQ(status_of([&] { flowlane::comm_rendezvous_file(dir, "a/b", 0, 1, 5000, id); }), FL_ERR_INVALID_ARGUMENT);
  rmdir(dir);
  EXPECT_EQ(flowlane::set_last_error_message(FL_ERR_TIMEOUT, "plugin: it took too long"), FL_ERR_TIMEOUT);
  EXPECT_STREQ(fl_last_error_message(), "plugin: it took too long");
}

// An in-test transport (fl_comm_transport_t) joining two ranks of this process: a request
// is done once both ranks started its sequence number; the first test() that sees both sums
// the two ranks' float sends into both recvs (all-reduce only), before either reports done.
struct Pair {
  std::mutex mu;
  std::map<uint64_t, std::array<std::vector<fl_coll_part_t>, 2>> started;  // by seq
  std::map<uint64_t, bool> moved;
  std::vector<std::string> signatures;  // as rank 0's start saw them
  std::atomic<int> destroyed{0};
};
struct PairRank {
  Pair* pair;
  int rank;
};
struct PairRequest {
  Pair* pair;
  uint64_t seq;
};

fl_status_t pair_start(void* state, const fl_comm_transport_op_t* op, void** out, char*, uint64_t) {
  auto* me = static_cast<PairRank*>(state);
  std::lock_guard<std::mutex> lock(me->pair->mu);
  me->pair->started[op->seq][size_t(me->rank)].assign(op->parts, op->parts + op->num_parts);
  if (me->rank == 0) me->pair->signatures.push_back(op->signature);
  *out = new PairRequest{me->pair, op->seq};
  return FL_OK;
}

fl_status_t pair_test(void*, void* request, int32_t* done, char*, uint64_t) {
  auto* q = static_cast<PairRequest*>(request);
  Pair& p = *q->pair;
  std::lock_guard<std::mutex> lock(p.mu);
  auto& both = p.started[q->seq];
  *done = !both[0].empty() && !both[1].empty();
  if (*done == 0) return FL_OK;
  if (!p.moved[q->seq]) {
    p.moved[q->seq] = true;
    for (size_t k = 0; k < both[0].size(); ++k) {
      const fl_coll_part_t &x = both[0][k], &y = both[1][k];
      std::vector<float> sum(x.count);
      for (uint64_t i = 0; i < x.count; ++i)
        sum[i] = static_cast<const float*>(x.sendbuf)[i] + static_cast<const float*>(y.sendbuf)[i];
      std::copy(sum.begin(), sum.end(), static_cast<float*>(x.recvbuf));
      std::copy(sum.begin(), sum.end(), static_cast<float*>(y.recvbuf));
    }
  }
  delete q;
  return FL_OK;
}

fl_comm_transport_t pair_transport(Pair* pair, int rank) {
  fl_comm_transport_t t{};
  t.struct_size = sizeof t;
  t.name = "pair";
  t.id = 0x9a17;
  t.state = new PairRank{pair, rank};
  t.start = pair_start;
  t.test = pair_test;
  t.destroy = [](void* state) {
    ++static_cast<PairRank*>(state)->pair->destroyed;
    delete static_cast<PairRank*>(state);
  };
  return t;
}

// flowlane::communicator(engine, options, transport): its collectives go through lane
// o.lane's host COLLECTIVE stream whatever o.backend and o.device say, moves keep that, the
// transport's destroy runs once per rank when the communicator goes, and a refused create
// throws its status (the transport destroyed before it returns).
TEST(CppComm, ATransportCommunicatorRunsOnTheHostCollectiveStream) {
  flowlane::engine a(lanes(1, 2)), b(lanes(1, 2));
  Pair pair;
  flowlane::comm_options o;
  o.nranks = 2;
  o.lane = 1;
  o.backend = FL_COMM_NCCL;  // not read for a transport, nor is the device
  o.device = 7;
  {
    flowlane::communicator ca(a.get(), o, pair_transport(&pair, 0));
    flowlane::comm_options ob = o;
    ob.rank = 1;
    flowlane::communicator cb0(b.get(), ob, pair_transport(&pair, 1));
    flowlane::communicator cb = std::move(cb0);  // still a transport's: the host stream
    const flowlane::stream_info info = ca.collective_stream().info();
    EXPECT_EQ(info.lane, 1u);
    EXPECT_EQ(info.kind, FL_STREAM_COLLECTIVE);
    EXPECT_EQ(info.device.type, FL_DEVICE_CPU);
    EXPECT_EQ(cb.collective_stream().info().device.type, FL_DEVICE_CPU);
    float sa[3] = {1, 2, 3}, sb[3] = {10, 20, 30}, ra[3] = {}, rb[3] = {};
    float ta[2] = {5, 6}, tb[2] = {-5, 1}, qa[2] = {}, qb[2] = {};
    ca.submit({flowlane::all_reduce(sa, ra, 3)}, {}, "first");
    cb.submit({flowlane::all_reduce(sb, rb, 3)}, {}, "first");
    ca.submit({flowlane::all_reduce(ta, qa, 2)});
    cb.submit({flowlane::all_reduce(tb, qb, 2)});
    ca.collective_stream().synchronize();
    cb.collective_stream().synchronize();
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(ra[i], sa[i] + sb[i]);
      EXPECT_EQ(rb[i], sa[i] + sb[i]);
    }
    EXPECT_EQ(qa[0], 0.0f);
    EXPECT_EQ(qb[1], 7.0f);
    {
      std::lock_guard<std::mutex> lock(pair.mu);
      ASSERT_EQ(pair.signatures.size(), 2u);
      EXPECT_EQ(pair.signatures[0], "all_reduce(float32, sum, count=3)");
      EXPECT_EQ(pair.started.count(1) + pair.started.count(2), 2u) << "sequence numbers 1, 2";
    }
    EXPECT_EQ(pair.destroyed.load(), 0);
  }
  EXPECT_EQ(pair.destroyed.load(), 2) << "each rank's transport destroyed once, with its communicator";
  flowlane::comm_options bad = o;
  bad.lane = 5;  // the engines have 2 lanes
  EXPECT_EQ(status_of([&] { flowlane::communicator c(a.get(), bad, pair_transport(&pair, 0)); }), FL_ERR_OUT_OF_RANGE);
  EXPECT_EQ(pair.destroyed.load(), 3) << "a refused create destroys the transport";
}

}  // namespace

// ---- edge cases of the wrappers ------------------------------------------------------------

namespace {

TEST(CppTaskGraph, AnEmptyOrMovedFromGraphThrowsInsteadOfCrashing) {
  flowlane::engine e(workers(1));
  flowlane::taskgraph empty;
  EXPECT_EQ(status_of([&] { empty.run(); }), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(status_of([&] { empty.add([] {}); }), FL_ERR_INVALID_HANDLE);
  flowlane::taskgraph a = e.make_taskgraph();
  int ran = 0;
  a.add([&] { ++ran; });
  flowlane::taskgraph b = std::move(a);
  EXPECT_EQ(status_of([&] { a.run(); }), FL_ERR_INVALID_HANDLE);
  EXPECT_EQ(status_of([&] { a.add([] {}); }), FL_ERR_INVALID_HANDLE);
  b.run(1);
  EXPECT_EQ(ran, 1);
}

TEST(CppTaskGraph, ARunRefusedWhileTheGraphRunsLeavesTheExceptionToItsOwnRun) {
  // Node `thrower` throws while node `prober`, already running, tries to run the graph
  // again: each of those tries is refused with FL_ERR_INVALID_ARGUMENT, and the exception
  // reaches the run that owns it.
  flowlane::engine e(workers(2));
  flowlane::taskgraph g = e.make_taskgraph();
  std::atomic<bool> prober_started{false}, throwing{false};
  std::atomic<int> refused{0}, stolen{0}, other{0};
  auto await = [](const std::atomic<bool>& flag) {  // bounded: a hang guard only
    for (auto end = std::chrono::steady_clock::now() + 30s; !flag && std::chrono::steady_clock::now() < end;)
      std::this_thread::yield();
  };
  g.add([&] {
    await(prober_started);
    throwing = true;
    throw std::logic_error("thrower's own");
  });
  g.add([&] {
    prober_started = true;
    await(throwing);
    for (int i = 0; i < 20; ++i) {  // the exception is kept just after it is thrown
      std::this_thread::sleep_for(1ms);
      try {
        g.run();
        ++other;
      } catch (const flowlane::error& x) {
        ++(x.status() == FL_ERR_INVALID_ARGUMENT ? refused : other);
      } catch (const std::logic_error&) {
        ++stolen;
      }
    }
  });
  try {
    g.run(2);
    ADD_FAILURE() << "run() should rethrow the node's exception";
  } catch (const std::logic_error& x) {
    EXPECT_STREQ(x.what(), "thrower's own");
  } catch (const flowlane::error& x) {
    ADD_FAILURE() << "the run lost its node's exception: " << x.what();
  }
  EXPECT_EQ(stolen.load(), 0) << "a refused run took the exception of the running one";
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(refused.load(), 20);
  // Usable afterwards: a run that fails in C without running anything (a bad thread count).
  EXPECT_EQ(status_of([&] { g.run(-2); }), FL_ERR_INVALID_ARGUMENT);
}

TEST(CppParallelFor, TakesANamedBody) {
  flowlane::engine e(workers(2));
  std::atomic<uint64_t> sum{0};
  auto body = [&](uint64_t lo, uint64_t hi) {
    for (uint64_t i = lo; i < hi; ++i) sum += i;
  };
  e.parallel_for(0, 100, body);
  const auto& const_body = body;
  e.parallel_for(0, 100, const_body, 7);
  EXPECT_EQ(sum.load(), 2u * 4950u);
}

void widening_kernel(size_t, unsigned, long long, double, const float*, short) {}

TEST(CppStreams, KernelArgumentsWidenToTheirParametersButNeverNarrow) {
  // Literals of type int for size_t, unsigned and long long parameters are widened (as a
  // direct call would convert them); a float is widened to a double parameter. This must
  // compile without narrowing warnings (clang refuses narrowing in braces outright).
  flowlane::engine e(workers(1));
  const fl_status_t st = status_of([&] {
    e.host(0).submit_kernel(&widening_kernel, flowlane::launch{}, {}, 5, 7, -3, 1.5f, nullptr, short{2});
  });
  EXPECT_TRUE(st == FL_ERR_INVALID_ARGUMENT || st == FL_ERR_UNSUPPORTED) << fl_status_name(st);
  static_assert(flowlane::detail::kernel_arg_converts_v<size_t, int>, "int literal for a size_t parameter");
  static_assert(flowlane::detail::kernel_arg_converts_v<long long, unsigned char>);
  static_assert(flowlane::detail::kernel_arg_converts_v<const float*, float*>);
  static_assert(flowlane::detail::kernel_arg_converts_v<const float*, std::nullptr_t>);
  static_assert(!flowlane::detail::kernel_arg_converts_v<int, size_t>, "a size_t for an int parameter");
  static_assert(!flowlane::detail::kernel_arg_converts_v<short, int>);
  static_assert(!flowlane::detail::kernel_arg_converts_v<float, double>);
  static_assert(!flowlane::detail::kernel_arg_converts_v<float, int>);
  static_assert(!flowlane::detail::kernel_arg_converts_v<bool, int>);
  static_assert(!flowlane::detail::kernel_arg_converts_v<float*, const float*>);
  static_assert(!flowlane::detail::kernel_arg_converts_v<int*, int>);
}

// Counts its destructions in destroyed[id] (the watchdog tests track every callable).
struct Tracked {
  std::vector<std::atomic<int>>* destroyed;
  int id;
  Tracked(std::vector<std::atomic<int>>* d, int i) : destroyed(d), id(i) {}
  Tracked(const Tracked&) = delete;
  ~Tracked() { (*destroyed)[size_t(id)].fetch_add(1); }
};

TEST(CppWatchdog, ReconfiguredFromThreadsAndFromInsideEachCallableLivesThroughItsRunsAndIsFreedOnce) {
  // Three threads replace the watchdog (lambdas, off, back on) while a stall holds; every
  // callable replaces itself from inside when it runs. No reconfiguration deadlocks (a
  // program thread's waits for the running callback while that callback reconfigures),
  // a callable is never destroyed while it runs, and each one is destroyed exactly once.
  constexpr int kCallables = 3 * 60 * 2;
  std::vector<std::atomic<int>> destroyed(kCallables);
  std::atomic<int> next{0}, runs{0}, freed_while_running{0};
  {
    flowlane::engine e(workers(2));
    std::function<std::function<void(std::string_view)>()> make = [&] {
      auto t = std::make_shared<Tracked>(&destroyed, next.fetch_add(1));
      return std::function<void(std::string_view)>([&, t](std::string_view) {
        runs.fetch_add(1);
        if (next.load() < kCallables) e.set_watchdog(1ms, make());  // replaces itself
        if (destroyed[size_t(t->id)].load() != 0) freed_while_running.fetch_add(1);
      });
    };
    Gate gate;
    e.host(0).submit([&] { gate.wait(); }, {}, "stalled-on-purpose");
    std::vector<std::thread> threads;
    for (int k = 0; k < 3; ++k)
      threads.emplace_back([&, k] {
        for (int i = 0; i < 60; ++i) {
          if ((i + k) % 5 == 4)
            e.set_watchdog(0ms);
          else
            e.set_watchdog(std::chrono::milliseconds(1 + i % 2), make());
          if (i % 6 == 0) std::this_thread::sleep_for(12ms);  // room for the watchdog to fire
        }
      });
    for (auto& t : threads) t.join();
    gate.release();
    e.synchronize();
    e.set_watchdog(0ms);
  }
  const int made = next.load();
  EXPECT_EQ(freed_while_running.load(), 0);
  for (int i = 0; i < made; ++i) EXPECT_EQ(destroyed[size_t(i)].load(), 1) << "callable " << i;
  std::printf("%d callables, %d runs\n", made, runs.load());
}

TEST(CppWatchdog, TheCallbackReconfiguresWhileAProgramThreadWaitsForItToReturn) {
  // The program thread's set_watchdog waits (in the C call) for the running callback;
  // that callback's own set_watchdog must not wait for the program thread in turn.
  flowlane::engine e(workers(1));
  std::atomic<bool> in_callback{false}, main_calling{false}, inner_done{false};
  std::atomic<int> replacement_runs{0};
  e.set_watchdog(20ms, [&](std::string_view) {
    if (in_callback.exchange(true)) return;
    while (!main_calling) std::this_thread::yield();
    std::this_thread::sleep_for(20ms);  // the program thread is now inside its set_watchdog
    e.set_watchdog(20ms, [&](std::string_view) { replacement_runs.fetch_add(1); });
    inner_done = true;
  });
  Gate gate;
  e.host(0).submit([&] { gate.wait(); }, {}, "stalled-on-purpose");
  while (!in_callback) std::this_thread::yield();  // the stall shows within about 20 ms
  main_calling = true;
  e.set_watchdog(0ms);  // returns once the callback has returned (a deadlock hangs here)
  EXPECT_TRUE(inner_done.load());
  gate.release();
  e.synchronize();
  EXPECT_EQ(replacement_runs.load(), 0) << "the program thread's reconfiguration came last: off";
}

TEST(CppPinned, ACountWhoseBytesOverflowIsRefusedBeforeAnyAllocation) {
  // count * sizeof(T) wraps to 8 bytes: allocating those and filling `count` elements
  // would write far past them.
  const size_t count = SIZE_MAX / sizeof(uint64_t) + 2;
  EXPECT_EQ(status_of([&] { flowlane::pinned_buffer<uint64_t> b(count); }), FL_ERR_OUT_OF_RANGE);
}

}  // namespace

namespace {

// reset() from code the engine runs is refused by the C API: the wrapper keeps its engine
// (and the watchdog's record, which the still-running engine's watchdog calls into), so
// the program's own thread destroys it later as usual.
TEST(CppHandles, AResetRefusedInsideACallbackKeepsTheEngineAndItsWatchdog) {
  flowlane::engine e(workers(1));
  std::atomic<int> dumps{0};
  e.set_watchdog(std::chrono::milliseconds(20), [&](std::string_view) { dumps.fetch_add(1); });
  bool refused = false;
  e.host(0).submit([&] { refused = !e.reset(); });
  e.synchronize();
  EXPECT_TRUE(refused);
  ASSERT_NE(e.get(), nullptr) << "the wrapper dropped an engine that still runs";
  Gate gate;  // a stall: the watchdog calls the (still owned) record
  e.host(0).submit([&] { gate.wait(); });
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (dumps.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  gate.release();
  EXPECT_GT(dumps.load(), 0);
  EXPECT_TRUE(e.reset());
  EXPECT_EQ(e.get(), nullptr);
}

TEST(CppTaskGraph, AResetRefusedWhileTheGraphRunsKeepsItsCallables) {
  flowlane::engine e(workers(2));
  flowlane::taskgraph g = e.make_taskgraph();
  bool refused = false;
  int after = 0;
  const uint64_t a = g.add([&] { refused = !g.reset(); });
  const uint64_t b = g.add([&] { ++after; });  // runs after the refused reset: still owned
  g.precede(a, b);
  g.run(1);
  EXPECT_TRUE(refused);
  EXPECT_EQ(after, 1);
  g.run(1);  // the graph is intact
  EXPECT_EQ(after, 2);
  EXPECT_TRUE(g.reset());
}

}  // namespace

namespace {

// What a callable may return: void or fl_status_t (anything else, such as a bool whose
// `true` would be status 1, a failure, is a static_assert in call_for_status).
TEST(CppSubmit, ACallableReturnsVoidOrAStatusOnly) {
  auto v = [] {};
  auto st = [] { return FL_ERR_INSTRUCTION_FAILED; };
  EXPECT_EQ(flowlane::detail::call_for_status(v), FL_OK);
  EXPECT_EQ(flowlane::detail::call_for_status(st), FL_ERR_INSTRUCTION_FAILED);
  flowlane::engine e(workers(1));
  auto id = e.host(0).submit([] { return FL_ERR_INSTRUCTION_FAILED; });
  EXPECT_EQ(status_of([&] { e.host(0).wait(id); }), FL_ERR_INSTRUCTION_FAILED);
  (void)status_of([&] { e.synchronize(); });
}

}  // namespace

namespace {

// A replaced watchdog callable is destroyed with no lock of the wrapper held: its
// destructor may reconfigure the watchdog (it used to run under the record's locks, and
// the nested call deadlocked on them).
TEST(CppWatchdog, AReplacedCallableMayReconfigureFromItsDestructor) {
  flowlane::engine e(workers(1));
  struct Guard {
    Guard(flowlane::engine* engine, bool* flag) : e(engine), ran(flag) {}
    Guard(const Guard&) = delete;
    flowlane::engine* e;
    bool* ran;
    ~Guard() {
      e->set_watchdog(std::chrono::milliseconds(0));
      *ran = true;
    }
  };
  bool ran = false;
  auto g = std::make_shared<Guard>(&e, &ran);
  e.set_watchdog(std::chrono::seconds(10), [g](std::string_view) {});
  g.reset();  // the callable holds the last reference
  EXPECT_FALSE(ran);
  e.set_watchdog(std::chrono::seconds(10), [](std::string_view) {});  // replaces it: ~Guard runs
  EXPECT_TRUE(ran);
}

}  // namespace

namespace {

// A program thread's set_watchdog waits (in the C call) for the running callback; that
// callback waits for an instruction whose fn reconfigures the watchdog. The fn's call must
// not wait for the program thread's in turn (a lock held across the C call made this a
// cycle). Bounded: the callback stops waiting after 10 s and the test reports it.
TEST(CppWatchdog, AnInstructionTheCallbackWaitsForReconfiguresWhileAProgramThreadWaitsForTheCallback) {
  flowlane::engine e(lanes(2, 2));
  std::atomic<bool> in_callback{false}, main_calling{false};
  std::atomic<int> x_finished{-1};  // 1: the instruction finished while the callback waited
  std::atomic<int> replacement_runs{0};
  std::mutex alive_mu;
  std::weak_ptr<int> replacement_alive;  // a token the instruction's callable owns
  e.set_watchdog(20ms, [&](std::string_view) {
    if (in_callback.exchange(true)) return;
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (!main_calling && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    std::this_thread::sleep_for(100ms);  // the program thread is now inside its set_watchdog
    flowlane::stream s = e.host(1);
    const fl_instr_id x = s.submit([&] {
      auto token = std::make_shared<int>(0);
      {
        std::lock_guard<std::mutex> lock(alive_mu);
        replacement_alive = token;
      }
      e.set_watchdog(20ms, [&, token](std::string_view) { replacement_runs.fetch_add(1); });
    });
    x_finished = s.wait(x, 10s) ? 1 : 0;
  });
  Gate gate;
  e.host(0).submit([&] { gate.wait(); }, {}, "stalled-on-purpose");
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (!in_callback && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_TRUE(in_callback.load()) << "the watchdog never fired";
  main_calling = true;
  e.set_watchdog(0ms);  // returns once the callback has returned
  EXPECT_EQ(x_finished.load(), 1)
      << "deadlock: the instruction's set_watchdog waited for the program thread's, which waited for the "
         "callback, which waited 10 s for the instruction";
  // The program thread's call returned last: its configuration (off) is in force and the
  // instruction's callable, replaced, is destroyed.
  {
    std::lock_guard<std::mutex> lock(alive_mu);
    EXPECT_TRUE(replacement_alive.expired()) << "the replaced callable is still alive";
  }
  std::this_thread::sleep_for(100ms);  // still stalled: a 20 ms watchdog would fire here
  EXPECT_EQ(replacement_runs.load(), 0) << "the instruction's configuration is in force, not the program thread's";
  gate.release();
  e.synchronize();
}

}  // namespace

namespace {

// The timeout the dump names ("... (timeout 3 ms); ..."): the configuration in force when
// the watchdog fired. -1 when it names none.
long dump_timeout_ms(std::string_view dump) {
  const std::string_view key = "(timeout ";
  size_t at = dump.find(key);
  if (at == std::string_view::npos) return -1;
  long ms = -1;
  for (at += key.size(); at < dump.size() && dump[at] >= '0' && dump[at] <= '9'; ++at)
    ms = (ms < 0 ? 0 : ms * 10) + (dump[at] - '0');
  return ms;
}

// Program threads, instruction fns and the callables themselves reconfigure the watchdog
// concurrently while a stall holds; some callables wait for an instruction that
// reconfigures it while program threads wait for them. A callable runs only under its own
// call's timeout (the one the dump names), never after it was destroyed, and is destroyed
// exactly once; once a program thread's last call has returned, every other callable is
// gone and that call's own callable is the one that runs.
TEST(CppWatchdog, ConcurrentReconfigurationsRunEachCallableUnderItsOwnTimeoutAndFreeEachOnce) {
  constexpr int kThreads = 3, kRounds = 80, kMaxCallables = 1 << 14;
  using callable = std::function<void(std::string_view)>;
  std::vector<std::atomic<int>> destroyed(kMaxCallables);
  std::atomic<int> next{0}, runs{0}, final_runs{0}, mismatched{0}, freed_while_running{0}, waits_timed_out{0};
  std::mutex first_mismatch_mu;
  std::string first_mismatch;
  int final_id = -1;
  {
    flowlane::engine e(lanes(4, kThreads + 2));  // lane 0 stalls; the threads' lanes; the callables' lane
    const uint32_t callables_lane = kThreads + 1;
    std::function<void(long)> reconfigure;
    std::function<callable(long, bool)> make = [&](long timeout_ms, bool last) -> callable {
      auto t = std::make_shared<Tracked>(&destroyed, next.fetch_add(1));
      return [&, t, timeout_ms, last](std::string_view dump) {
        runs.fetch_add(1);
        if (dump_timeout_ms(dump) != timeout_ms && mismatched.fetch_add(1) == 0) {
          std::lock_guard<std::mutex> lock(first_mismatch_mu);
          first_mismatch = "callable " + std::to_string(t->id) + " of a " + std::to_string(timeout_ms) +
                           " ms call ran on: " + std::string(dump.substr(0, dump.find('\n')));
        }
        if (last) {
          final_runs.fetch_add(1);
        } else if (t->id % 4 == 1) {
          reconfigure(1 + t->id % 4);  // replaces itself
        } else if (t->id % 4 == 2 && waits_timed_out.load() == 0) {  // waits for an instruction that reconfigures
          std::this_thread::sleep_for(10ms);  // program threads now call (and wait for this one)
          try {
            flowlane::stream s = e.host(callables_lane);
            const fl_instr_id x = s.submit([&, t] { reconfigure(1 + (t->id / 4) % 4); });
            if (!s.wait(x, 10s)) waits_timed_out.fetch_add(1);
          } catch (const flowlane::error&) {  // FL_ERR_SHUTDOWN once the engine is being destroyed
          }
        }
        if ((*t->destroyed)[size_t(t->id)].load() != 0) freed_while_running.fetch_add(1);
      };
    };
    reconfigure = [&](long timeout_ms) {
      if (next.load() < kMaxCallables - 16)
        e.set_watchdog(std::chrono::milliseconds(timeout_ms), make(timeout_ms, false));
      else
        e.set_watchdog(0ms);
    };
    Gate gate;
    e.host(0).submit([&] { gate.wait(); }, {}, "stalled-on-purpose");
    std::vector<std::thread> threads;
    for (int k = 0; k < kThreads; ++k)
      threads.emplace_back([&, k] {
        std::mt19937 rng(uint32_t(k) + 1);
        flowlane::stream own = e.host(uint32_t(k) + 1);
        for (int i = 0; i < kRounds; ++i) {
          const long timeout_ms = 1 + long(rng() % 4);
          switch (i + 1 == kRounds ? 2 : rng() % 4) {  // each thread ends with a callable
            case 0:
              e.set_watchdog(0ms);
              break;
            case 1:
              own.submit([&, timeout_ms] { reconfigure(timeout_ms); });
              break;
            default:
              reconfigure(timeout_ms);
          }
          if (i % 4 == 0) std::this_thread::sleep_for(15ms);  // room for the watchdog to fire
        }
        own.synchronize();
      });
    for (auto& t : threads) t.join();
    const int concurrent_runs = runs.load();
    // Whichever call came last, a callable is in force: after a completion (it re-arms the
    // watchdog) the stall fires again and some callable runs.
    e.host(1).submit([] {});
    e.host(1).synchronize();
    auto until = std::chrono::steady_clock::now() + 10s;
    while (runs.load() == concurrent_runs && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    EXPECT_GT(runs.load(), concurrent_runs) << "the configuration in force has lost its callable";
    // The last call: it waits for a running callable (and so for what that one waits for).
    final_id = next.load();
    e.set_watchdog(6ms, make(6, true));
    for (int i = 0; i < next.load(); ++i) {
      if (i != final_id) {
        EXPECT_EQ(destroyed[size_t(i)].load(), 1) << "replaced callable " << i;
      }
    }
    EXPECT_EQ(destroyed[size_t(final_id)].load(), 0) << "the callable in force";
    until = std::chrono::steady_clock::now() + 10s;
    while (final_runs.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_GT(final_runs.load(), 0) << "the last call's callable never ran";
    gate.release();
    e.synchronize();
    std::printf("%d callables, %d runs while reconfiguring\n", next.load(), concurrent_runs);
  }
  EXPECT_EQ(mismatched.load(), 0) << first_mismatch;
  EXPECT_EQ(freed_while_running.load(), 0);
  EXPECT_EQ(waits_timed_out.load(), 0) << "a callable waited 10 s for an instruction that reconfigures";
  for (int i = 0; i < next.load(); ++i) EXPECT_EQ(destroyed[size_t(i)].load(), 1) << "callable " << i;
}

}  // namespace
