// The scenarios of docs/design.md that need no GPU, through the public API. None of them
// relies on timing for its verdict: where "X does not wait for Y" is the property, Y is
// held behind a gate that only opens after X has been observed, so a wrong engine
// deadlocks (and the gate's own timeout fails the test) instead of passing by luck.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using fltest::Clock;
using fltest::Gate;
using fltest::R;
using fltest::RW;
using fltest::W;

template <class F>
fl_instr_id submit_fn(fl_stream_t* s, F f, std::vector<fl_operand_t> ops = {}, const char* name = nullptr) {
  return fltest::submit(s, std::move(f), std::move(ops), name);
}

fl_object_t* obj(fl_engine_t* e) { return fltest::make_obj(e); }

long resident_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

// print(loss): a long chain on lane 0; lane 1 copies an early result. Waiting on lane 1's
// output returns while lane 0's chain is still held at its gate.
TEST(Scenario, PrintLossDoesNotWaitForBackward) {
  EngineFixture f(2);
  Gate backward_gate;
  fl_object_t* loss = obj(f.engine);
  fl_object_t* grads = obj(f.engine);
  fl_object_t* printed = obj(f.engine);
  double loss_value = 0, printed_value = 0;
  std::atomic<int> backward_done{0};
  submit_fn(f.host(0), [&] { loss_value = 2.5; return FL_OK; }, {W(loss)}, "forward");
  submit_fn(f.host(0), [&] { return backward_gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {R(loss), W(grads)}, "backward.gate");
  for (int k = 0; k < 100; ++k)
    submit_fn(f.host(0), [&] { backward_done++; return FL_OK; }, {RW(grads)}, "backward");
  submit_fn(f.host(1), [&] { printed_value = loss_value; return FL_OK; }, {R(loss), W(printed)}, "print(loss)");
  ASSERT_FL_OK(fl_object_wait(printed, FL_READ));
  EXPECT_EQ(printed_value, 2.5);
  EXPECT_EQ(backward_done.load(), 0) << "print(loss) waited for the backward chain";
  backward_gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(backward_done.load(), 100);
  for (auto* o : {loss, grads, printed}) fl_object_release(o);
}

// if-nan check: copy a value to another lane, keep submitting dependent work on lane 0,
// then inspect the copy. Lane 0 finishes its work while the check is still held.
TEST(Scenario, IfNanCheckOnAnotherLaneNeverStallsLane0) {
  EngineFixture f(2);
  Gate check_gate;
  fl_object_t* x = obj(f.engine);
  fl_object_t* copy = obj(f.engine);
  double xv = 0, copyv = -1;
  submit_fn(f.host(0), [&] { xv = 1.0; return FL_OK; }, {W(x)}, "produce");
  submit_fn(f.host(1), [&] {
    double v = xv;
    if (!check_gate.wait()) return FL_ERR_TIMEOUT;
    copyv = v;
    return FL_OK;
  }, {R(x), W(copy)}, "copy-for-check");
  std::atomic<int> lane0_steps{0};
  // Writes of x must wait for the copy's read (WAR)... so lane 0 keeps working on other data.
  fl_object_t* y = obj(f.engine);
  for (int k = 0; k < 200; ++k) submit_fn(f.host(0), [&] { lane0_steps++; return FL_OK; }, {R(x), RW(y)}, "step");
  ASSERT_FL_OK(fl_stream_synchronize(f.host(0)));  // returns although the check is held
  EXPECT_EQ(lane0_steps.load(), 200);
  check_gate.open = true;
  ASSERT_FL_OK(fl_object_wait(copy, FL_READ));
  EXPECT_EQ(copyv, 1.0);
  EXPECT_FALSE(copyv != copyv) << "nan";
  for (auto* o : {x, copy, y}) fl_object_release(o);
}

// decoder / loss overlap: input transfer on lane 1, compute on lane 0, loss on lane 2.
// Steady state runs the three stages of different micro-batches at the same time.
TEST(Scenario, DecoderComputeLossOverlapAcrossThreeLanes) {
  EngineFixture f(3);
  const int kBatches = 12;
  struct Span {
    Clock::time_point a, b;
  };
  std::vector<Span> load(kBatches), compute(kBatches), loss(kBatches);
  std::vector<fl_object_t*> in(kBatches), out(kBatches);
  auto work = [](Span& s) {
    s.a = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s.b = Clock::now();
    return FL_OK;
  };
  for (int i = 0; i < kBatches; ++i) {
    in[i] = obj(f.engine);
    out[i] = obj(f.engine);
    submit_fn(f.host(1), [&, i] { return work(load[i]); }, {W(in[i])}, "h2d");
    submit_fn(f.host(0), [&, i] { return work(compute[i]); }, {R(in[i]), W(out[i])}, "compute");
    submit_fn(f.host(2), [&, i] { return work(loss[i]); }, {R(out[i])}, "loss");
  }
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  auto overlap = [](const std::vector<Span>& p, const std::vector<Span>& q) {
    int n = 0;
    for (auto& x : p)
      for (auto& y : q)
        if (x.a < y.b && y.a < x.b) ++n;
    return n;
  };
  for (int i = 0; i < kBatches; ++i) {  // dependencies respected
    EXPECT_LE(load[i].b, compute[i].a);
    EXPECT_LE(compute[i].b, loss[i].a);
  }
  EXPECT_GT(overlap(load, compute), 0) << "input transfer never overlapped compute";
  EXPECT_GT(overlap(compute, loss), 0) << "compute never overlapped the loss reduction";
  for (int i = 0; i < kBatches; ++i) {
    fl_object_release(in[i]);
    fl_object_release(out[i]);
  }
}

// for-loop of fresh lanes: `for i in 1e6: with lane(new): work()` reuses the same lane,
// stream and records, so resident memory stays flat.
TEST(Scenario, ForLoopOfFreshLanesKeepsMemoryFlat) {
  EngineFixture f(2);
  const long kIters = fl_scaled(1000000, 50000);
  const long kWarmup = kIters / 10;
  std::atomic<long> ran{0};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void* ud) {
    static_cast<std::atomic<long>*>(ud)->fetch_add(1, std::memory_order_relaxed);
    return FL_OK;
  };
  in.user_data = &ran;
  long rss_after_warmup = 0;
  std::vector<fl_stream_t*> seen;
  for (long k = 0; k < kIters; ++k) {
    uint32_t lane;
    ASSERT_FL_OK(fl_lane_acquire(f.engine, &lane));
    fl_stream_t* s;
    ASSERT_FL_OK(fl_stream_get(f.engine, lane, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
    if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
    fl_object_t* o;
    ASSERT_FL_OK(fl_object_create(f.engine, nullptr, nullptr, &o));
    fl_operand_t op{o, FL_WRITE, 0};
    in.operands = &op;
    in.num_operands = 1;
    ASSERT_FL_OK(fl_submit_host(s, &in, nullptr));
    ASSERT_FL_OK(fl_object_release(o));
    ASSERT_FL_OK(fl_lane_release(f.engine, lane));
    if (k == kWarmup) {
      ASSERT_FL_OK(fl_engine_synchronize(f.engine));
      rss_after_warmup = resident_kib();
    }
  }
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  long rss_end = resident_kib();
  EXPECT_EQ(ran.load(), kIters);
  EXPECT_EQ(seen.size(), 1u) << "a fresh lane each iteration should be the same recycled lane";
  // Flat: growth after warm-up bounded by a few MiB whatever the iteration count.
  // Sanitizer allocators quarantine freed memory and keep shadow state, so resident size
  // says nothing about the engine there; the iterations still run for their race checks.
  if (FL_UNDER_SANITIZER) return;
  EXPECT_LT(rss_end - rss_after_warmup, 16 * 1024) << "RSS grew from " << rss_after_warmup << " KiB to " << rss_end
                                                   << " KiB over " << kIters << " iterations";
}

// fork/join through phony objects (torchgpipe): a phony written by `fork` after reading a,
// read by `join` before writing b, orders b after a across lanes with no data between them.
TEST(Scenario, ForkJoinThroughPhonyObjectsOrdersAcrossLanes) {
  EngineFixture f(2);
  Gate hold_a;
  std::vector<std::string> order;
  std::mutex mu;
  auto log = [&](const char* what) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(what);
  };
  fl_object_t* a = obj(f.engine);
  fl_object_t* b = obj(f.engine);
  fl_object_t* phony = obj(f.engine);
  submit_fn(f.host(1), [&] { if (!hold_a.wait()) return FL_ERR_TIMEOUT; log("a"); return FL_OK; }, {W(a)}, "a");
  submit_fn(f.host(1), [&] { log("fork"); return FL_OK; }, {R(a), W(phony)}, "fork");
  submit_fn(f.host(2), [&] { log("join"); return FL_OK; }, {R(phony), W(b)}, "join");
  submit_fn(f.host(2), [&] { log("b"); return FL_OK; }, {RW(b)}, "b");
  // The state, not a sleep: lane 2 has reached 'join' and is blocked on a predecessor
  // (the phony's writer 'fork', which waits for 'a' behind its gate).
  std::string dump = fltest::wait_for_dump(f.engine, {"oldest: 'join'", "BLOCKED", "'fork'"});
  EXPECT_NE(dump.find("oldest: 'join' (#3, lane 2, host) BLOCKED"), std::string::npos) << dump;
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(order.empty()) << "join/b ran before a";
  }
  hold_a.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(order, (std::vector<std::string>{"a", "fork", "join", "b"}));
  for (auto* o : {a, b, phony}) fl_object_release(o);
}

// Pipeline order: GPipe forward over n stages (one lane each) and m micro-batches, then
// the backward in reverse, ordered only by activations and phony objects. Every stage
// sees its micro-batches in order and every dependency is respected.
TEST(Scenario, PipelineScheduleRespectsEveryDependency) {
  const int n = 4, m = 6;
  EngineFixture f(3, n + 1);
  std::atomic<int> clock{0};
  std::vector<std::vector<int>> fwd(m, std::vector<int>(n, -1)), bwd(m, std::vector<int>(n, -1));
  std::vector<std::vector<fl_object_t*>> act(m, std::vector<fl_object_t*>(n + 1)), grad(m, std::vector<fl_object_t*>(n + 1));
  std::vector<fl_object_t*> order_phony(n);
  for (auto& row : act)
    for (auto& o : row) o = obj(f.engine);
  for (auto& row : grad)
    for (auto& o : row) o = obj(f.engine);
  for (auto& o : order_phony) o = obj(f.engine);
  // GPipe clock cycles: at cycle k run every (i, j) with i + j = k.
  for (int k = 0; k < m + n - 1; ++k)
    for (int j = 0; j < n; ++j) {
      int i = k - j;
      if (i < 0 || i >= m) continue;
      submit_fn(f.host(uint32_t(j + 1)), [&, i, j] { fwd[i][j] = clock++; return FL_OK; },
                {R(act[i][j]), W(act[i][j + 1])}, "F");
    }
  for (int k = 0; k < m + n - 1; ++k)
    for (int j = n - 1; j >= 0; --j) {
      int i = k - (n - 1 - j);
      if (i < 0 || i >= m) continue;
      i = m - 1 - i;  // backward runs micro-batches in reverse
      // The phony per stage serialises backward micro-batches (torchgpipe's fork/join).
      submit_fn(f.host(uint32_t(j + 1)), [&, i, j] { bwd[i][j] = clock++; return FL_OK; },
                {R(grad[i][j + 1]), R(act[i][j]), W(grad[i][j]), RW(order_phony[j])}, "B");
    }
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      ASSERT_GE(fwd[i][j], 0);
      ASSERT_GE(bwd[i][j], 0);
      if (j > 0) {
        EXPECT_LT(fwd[i][j - 1], fwd[i][j]) << "F(" << i << "," << j << ") before its input";
      }
      if (i > 0) {
        EXPECT_LT(fwd[i - 1][j], fwd[i][j]) << "stage " << j << " out of order";
      }
      if (j < n - 1) {
        EXPECT_LT(bwd[i][j + 1], bwd[i][j]) << "B(" << i << "," << j << ") before its gradient";
      }
      EXPECT_LT(fwd[i][j], bwd[i][j]);
      if (i < m - 1) {
        EXPECT_LT(bwd[i + 1][j], bwd[i][j]) << "backward of stage " << j << " out of order";
      }
    }
  for (auto& row : act)
    for (auto* o : row) fl_object_release(o);
  for (auto& row : grad)
    for (auto* o : row) fl_object_release(o);
  for (auto* o : order_phony) fl_object_release(o);
}
