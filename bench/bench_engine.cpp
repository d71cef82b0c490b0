// Per-instruction cost of the engine (lanes, dependency inference, window), through the
// public C API, next to StarPU's starpu_task_insert with the same access patterns
// (no-op codelet, STARPU_NCPU = workers, calibration off) in the same binary.
//
// Each benchmark iteration submits a batch of kBatch instructions and waits for all of
// them; items_per_second is instructions per second, so ns/instruction = 1e9 / that.
// BM_*Flowlane / BM_*Starpu pairs are reported as ratios by scripts/run-benchmarks.sh.
// Two rows time one part alone: SubmitOnly the caller's submission, CrossLaneHandoff the
// execution of a pre-submitted chain whose every edge crosses lanes (ns per hand-off).
// The flowlane shapes and the engine set-up live in flowlane_rig.hpp (shared with
// bench_openmp); every flowlane call is checked, and run_batches checks that the engine
// completed every instruction.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/spinlock.hpp"
#include "flowlane_rig.hpp"

#ifdef FL_HAVE_STARPU
#include <starpu.h>
#endif

namespace {

using flbench::check;
using flbench::FlEngine;
using flbench::finish;
using flbench::kBatch;
using flbench::kFan;
using flbench::submit;

// ----------------------------------------------------------------------------- flowlane
// The shapes (flowlane_rig.hpp) are shared with bench_openmp, which runs them next to
// OpenMP tasks; here the argument is the engine's worker count.

void BM_IndependentOneLaneFlowlane(benchmark::State& state) {
  FlEngine f(int(state.range(0)));
  flbench::run_batches(state, f, [&] { return flbench::independent(f, kBatch, 1); });
}

// A caller waiting for a busy lane's last instruction: kBusyBatch instructions on one lane,
// each busy for about 1 us, then fl_instr_wait_for(last) or fl_stream_synchronize. The
// two rows should take the same time: a waiter for one instruction must cost the lane
// nothing per instruction completed before it.
constexpr int kBusyBatch = 2000;
fl_status_t busy_1us(fl_instr_ctx_t*, void*) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(1);
  while (std::chrono::steady_clock::now() < until) {
  }
  return FL_OK;
}
void busy_lane(benchmark::State& state, bool wait_for_last) {
  FlEngine f(int(state.range(0)));
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = busy_1us;
  const fl_engine_stats_t before = f.stats();
  for (auto _ : state) {
    fl_instr_id last = 0;
    for (int k = 0; k < kBusyBatch; ++k) check(fl_submit_host(f.lanes[0], &in, &last), "fl_submit_host");
    if (wait_for_last)
      check(fl_instr_wait_for(f.lanes[0], last, FL_WAIT_FOREVER), "fl_instr_wait_for");
    else
      check(fl_stream_synchronize(f.lanes[0]), "fl_stream_synchronize");
  }
  if (f.stats().completed - before.completed != uint64_t(state.iterations()) * uint64_t(kBusyBatch)) std::abort();
  finish(state, kBusyBatch);
}
void BM_BusyLaneWaitForLastFlowlane(benchmark::State& state) { busy_lane(state, true); }
void BM_BusyLaneSynchronizeFlowlane(benchmark::State& state) { busy_lane(state, false); }

void BM_IndependentEightLanesFlowlane(benchmark::State& state) {
  FlEngine f(int(state.range(0)));
  flbench::run_batches(state, f, [&] { return flbench::independent(f, kBatch, 8); });
}

void BM_ChainTwoLanesFlowlane(benchmark::State& state) {
  FlEngine f(int(state.range(0)));
  flbench::run_batches(state, f, [&] { return flbench::chain_two_lanes(f, kBatch); });
}

// One producer writes X; 64 instructions on 8 lanes read X and each write its Y_i; one
// join reads every Y_i. kFan + 2 instructions per round.
void BM_FanOutInFlowlane(benchmark::State& state) {
  FlEngine f(int(state.range(0)));
  flbench::run_batches(state, f, [&] { return flbench::fan_out_in(f, kBatch); });
}

// Cost of one cross-lane hand-off alone: kBatch instructions read-write one object on
// alternating lanes, so each one is a dependency edge to the other lane, whose strand is
// blocked on it and must be re-scheduled when its predecessor completes. Every worker is
// held by a gate instruction (lanes 0..workers-1) while the chain is submitted; the time
// measured runs from opening the gate to the end of the chain, so no submission is inside
// it. ns_per_handoff = that time / kBatch.
void BM_CrossLaneHandoffFlowlane(benchmark::State& state) {
  const int workers = int(state.range(0));
  FlEngine f(workers, 2 * kBatch);  // the window never blocks the submitter
  flbench::Gate gate(/*spin=*/true);
  const fl_engine_stats_t before = f.stats();
  for (auto _ : state) {
    gate.reset();
    flbench::hold_workers(f, gate, workers);
    flbench::chain_two_lanes(f, kBatch);
    auto t0 = std::chrono::steady_clock::now();
    gate.release();
    check(fl_engine_synchronize(f.e), "fl_engine_synchronize");
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  if (f.stats().completed - before.completed != uint64_t(state.iterations()) * uint64_t(kBatch + workers))
    std::abort();
  finish(state, kBatch, "ns_per_handoff");
}

// A program thread's round trip: submit one host instruction, wait for it
// (fl_instr_wait_for), repeat; ns per round trip. The worker hands the completion back to a
// thread that is waiting for it: this row shows what that wake-up costs (compare runs with
// FLOWLANE_WAIT_SPIN_NS=0, which blocks at once, and the default, which polls first).
void BM_RoundTripFlowlane(benchmark::State& state) {
  FlEngine f(int(state.range(0)));
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) -> fl_status_t { return FL_OK; };
  const fl_engine_stats_t before = f.stats();
  for (auto _ : state) {
    fl_instr_id id = 0;
    check(fl_submit_host(f.lanes[0], &in, &id), "fl_submit_host");
    check(fl_instr_wait_for(f.lanes[0], id, FL_WAIT_FOREVER), "fl_instr_wait_for");
  }
  if (f.stats().completed - before.completed != uint64_t(state.iterations())) std::abort();
  finish(state, 1, "ns_per_round_trip");
}

// Caller-side cost only: the time spent inside fl_submit_host (the window is large
// enough never to block); the drain is outside the measured time.
void BM_SubmitOnlyFlowlane(benchmark::State& state) {
  FlEngine f(int(state.range(0)), 2 * kBatch);
  fl_operand_t op{f.object(), FL_READ, 0};
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kBatch; ++k) submit(f.lanes[k & 7], &op, 1);
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    check(fl_engine_synchronize(f.e), "fl_engine_synchronize");
  }
  finish(state, kBatch);
}

// Submission from several threads at once. "OwnLane": each thread submits to its own lane
// with its own object (the common case). "SharedObject": every thread's instructions read
// one object, so the object's spin lock is shared. The counter `contended_per_instr` is
// the number of spin-lock acquisitions that found the lock held (base/spinlock.hpp),
// per submitted instruction: the direct evidence that the per-lane and per-object locks
// are uncontended in the common case. Time is per instruction, all threads together.
FlEngine* g_shared_engine = nullptr;
std::vector<fl_object_t*> g_thread_objects;
uint64_t g_contentions_before = 0;

void SetupShared(const benchmark::State& state) {
  g_shared_engine = new FlEngine(2, 1u << 14);
  g_thread_objects.clear();
  for (int t = 0; t < state.threads(); ++t) g_thread_objects.push_back(g_shared_engine->object());
  // Warm the record caches so that the first benchmark does not pay first-touch allocation.
  flbench::independent(*g_shared_engine, 1 << 15, 8);
  check(fl_engine_synchronize(g_shared_engine->e), "fl_engine_synchronize");
  g_contentions_before = flowlane::spin_contentions().load();
}

void TeardownShared(const benchmark::State&) {
  delete g_shared_engine;  // synchronizes, releases the objects
  g_shared_engine = nullptr;
}

void SubmitThreads(benchmark::State& state, bool shared) {
  const int per_iter = 1000;
  FlEngine& f = *g_shared_engine;
  fl_object_t* o = g_thread_objects[shared ? 0 : size_t(state.thread_index())];
  fl_operand_t op{o, FL_READ, 0};
  for (auto _ : state)
    for (int k = 0; k < per_iter; ++k) submit(f.lanes[size_t(1 + state.thread_index())], &op, 1);
  finish(state, per_iter);
  // Each thread reports the process-wide count; the framework sums thread counters, so
  // thread 0 alone reports it.
  if (state.thread_index() == 0) {
    double instrs = double(state.iterations()) * per_iter * state.threads();
    state.counters["contended_per_instr"] =
        double(flowlane::spin_contentions().load() - g_contentions_before) / instrs;
  }
}

void BM_SubmitThreadsOwnLaneFlowlane(benchmark::State& state) { SubmitThreads(state, false); }
void BM_SubmitThreadsSharedObjectFlowlane(benchmark::State& state) { SubmitThreads(state, true); }

// ------------------------------------------------------------------------------- StarPU

#ifdef FL_HAVE_STARPU

void starpu_noop(void**, void*) {}

struct StarpuRuntime {
  starpu_codelet cl0{}, cl1{}, clv{};
  int ncpus = -1;
  void ensure(int workers) {
    if (ncpus == workers) return;
    if (ncpus != -1) starpu_shutdown();
    setenv("STARPU_SILENT", "1", 1);
    setenv("STARPU_CALIBRATE", "0", 1);
    starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = workers;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.calibrate = 0;
    if (starpu_init(&conf) != 0) std::abort();
    ncpus = workers;
    starpu_codelet_init(&cl0);
    cl0.cpu_funcs[0] = starpu_noop;
    cl0.nbuffers = 0;
    cl0.name = "noop0";
    starpu_codelet_init(&cl1);
    cl1.cpu_funcs[0] = starpu_noop;
    cl1.nbuffers = 1;
    cl1.modes[0] = STARPU_RW;
    cl1.name = "noop1";
    starpu_codelet_init(&clv);
    clv.cpu_funcs[0] = starpu_noop;
    clv.nbuffers = STARPU_VARIABLE_NBUFFERS;
    clv.name = "noopv";
  }
} g_starpu;

void BM_IndependentOneLaneStarpu(benchmark::State& state) {
  g_starpu.ensure(int(state.range(0)));
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k)
      if (starpu_task_insert(&g_starpu.cl0, 0) != 0) std::abort();
    starpu_task_wait_for_all();
  }
  finish(state, kBatch);
}

void BM_ChainTwoLanesStarpu(benchmark::State& state) {
  g_starpu.ensure(int(state.range(0)));
  uint64_t var = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, uintptr_t(&var), sizeof(var));
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k)
      if (starpu_task_insert(&g_starpu.cl1, STARPU_RW, h, 0) != 0) std::abort();
    starpu_task_wait_for_all();
  }
  starpu_data_unregister(h);
  finish(state, kBatch);
}

void BM_FanOutInStarpu(benchmark::State& state) {
  g_starpu.ensure(int(state.range(0)));
  uint64_t xv = 0;
  std::vector<uint64_t> yv(kFan);
  starpu_data_handle_t x;
  std::vector<starpu_data_handle_t> ys(kFan);
  starpu_variable_data_register(&x, STARPU_MAIN_RAM, uintptr_t(&xv), sizeof(xv));
  for (int i = 0; i < kFan; ++i)
    starpu_variable_data_register(&ys[size_t(i)], STARPU_MAIN_RAM, uintptr_t(&yv[size_t(i)]), sizeof(uint64_t));
  std::vector<starpu_data_descr> join(kFan);
  for (int i = 0; i < kFan; ++i) join[size_t(i)] = starpu_data_descr{ys[size_t(i)], STARPU_R};
  const int rounds = kBatch / (kFan + 2);
  for (auto _ : state) {
    for (int r = 0; r < rounds; ++r) {
      if (starpu_task_insert(&g_starpu.clv, STARPU_W, x, 0) != 0) std::abort();
      for (int i = 0; i < kFan; ++i)
        if (starpu_task_insert(&g_starpu.clv, STARPU_R, x, STARPU_W, ys[size_t(i)], 0) != 0) std::abort();
      if (starpu_task_insert(&g_starpu.clv, STARPU_DATA_MODE_ARRAY, join.data(), kFan, 0) != 0) std::abort();
    }
    starpu_task_wait_for_all();
  }
  starpu_data_unregister(x);
  for (auto& y : ys) starpu_data_unregister(y);
  finish(state, rounds * (kFan + 2));
}

void BM_SubmitOnlyStarpu(benchmark::State& state) {
  g_starpu.ensure(int(state.range(0)));
  uint64_t var = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, uintptr_t(&var), sizeof(var));
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kBatch; ++k)
      if (starpu_task_insert(&g_starpu.clv, STARPU_R, h, 0) != 0) std::abort();
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    starpu_task_wait_for_all();
  }
  starpu_data_unregister(h);
  finish(state, kBatch);
}

#endif  // FL_HAVE_STARPU

void Workers(benchmark::internal::Benchmark* b) {
  // 1 worker + the submitting thread fill this 2-core machine; 2 workers oversubscribe it
  // (the submitter competes with an idle worker that spins before parking).
  b->ArgName("workers")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_IndependentOneLaneFlowlane)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_BusyLaneWaitForLastFlowlane)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_BusyLaneSynchronizeFlowlane)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_IndependentEightLanesFlowlane)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_ChainTwoLanesFlowlane)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_FanOutInFlowlane)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_CrossLaneHandoffFlowlane)->Apply(Workers)->UseManualTime();
BENCHMARK(BM_RoundTripFlowlane)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_SubmitOnlyFlowlane)->Apply(Workers)->UseManualTime();
BENCHMARK(BM_SubmitThreadsOwnLaneFlowlane)->ThreadRange(1, 4)->Setup(SetupShared)->Teardown(TeardownShared)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SubmitThreadsSharedObjectFlowlane)->ThreadRange(1, 4)->Setup(SetupShared)->Teardown(TeardownShared)->Unit(benchmark::kMicrosecond);
#ifdef FL_HAVE_STARPU
BENCHMARK(BM_IndependentOneLaneStarpu)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_ChainTwoLanesStarpu)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_FanOutInStarpu)->Apply(Workers)->UseRealTime();
BENCHMARK(BM_SubmitOnlyStarpu)->Apply(Workers)->UseManualTime();
#endif

BENCHMARK_MAIN();
