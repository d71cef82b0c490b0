// Fork–join the way users write it, through the public C API, next to oneTBB (issue 36):
//   FibMain*       fib(30), one group per call, called by the program's main thread
//   FibCallback*   the same started inside a worker: flowlane runs it in a host
//                  instruction's callback (the main thread sleeps in fl_stream_synchronize);
//                  oneTBB runs it in a task the main thread hands to task_group::run
//   QsortMain*     parallel quicksort of 5 M ints (cutoff 2048), from the main thread
//   QsortCallback* the same inside a worker, as FibCallback
//   ForGrain1*     10^7 trivial iterations, grain 1 (oneTBB: simple_partitioner, grainsize 1)
//   ForDefault*    the same with the default grain (flowlane grain 0, oneTBB auto_partitioner)
//   Wavefront*     a 256 x 256 grid task graph, cell (i, j) after (i-1, j) and (i, j-1), tiny
//                  bodies (oneTBB: tbb::flow::graph with continue_nodes), run from the main
//                  thread
//
// Threads: FL_BENCH_THREADS = N (default 2) in total on each side. oneTBB's main thread is
// one of its N (global_control max_allowed_parallelism = N). flowlane's main thread takes
// part in what it waits for, so the *Main, For* and Wavefront rows get N - 1 workers plus
// the main thread; the *Callback rows run on N workers while the main thread sleeps.
//
// Meant to be run one runtime per process, alternating (bench/run_forkjoin.sh:
// --benchmark_filter=Flowlane, then =Tbb, in rotated order); both in one process also
// works (scripts/run-benchmarks.sh pairs BM_<X>Flowlane with BM_<X>Tbb).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "flowlane/flowlane.h"
#include "tbb_peers.hpp"

#ifdef FL_HAVE_TBB
#include <tbb/blocked_range.h>
#include <tbb/flow_graph.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_group.h>
#endif

namespace {

unsigned threads() {
  const char* env = std::getenv("FL_BENCH_THREADS");
  int n = env ? std::atoi(env) : 2;
  return n > 1 ? unsigned(n) : 2u;
}

void check(fl_status_t st, const char* what) {
  if (st != FL_OK) {
    std::fprintf(stderr, "%s failed: %s: %s\n", what, fl_status_name(st), fl_last_error_message());
    std::abort();
  }
}

fl_engine_t* make_engine(unsigned workers) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = workers;
  fl_engine_t* x = nullptr;
  check(fl_engine_create(&d, &x), "fl_engine_create");
  return x;
}

// N - 1 workers: the main thread is the N-th (it takes part in the waits).
fl_engine_t* engine() {
  static fl_engine_t* e = make_engine(threads() - 1);
  return e;
}

// N workers, for work started in an instruction's callback while the main thread sleeps.
fl_engine_t* callback_engine() {
  static fl_engine_t* e = make_engine(threads());
  return e;
}

// Runs fn(arg) in a host instruction's callback on `e` and waits for it.
template <class F>
void in_callback(fl_engine_t* e, F& f) {
  fl_stream_t* s = nullptr;
  check(fl_stream_get(e, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s), "fl_stream_get");
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void* ud) -> fl_status_t { return (*static_cast<F*>(ud))(); };
  in.user_data = &f;
  check(fl_submit_host(s, &in, nullptr), "fl_submit_host");
  check(fl_stream_synchronize(s), "fl_stream_synchronize");
}

#ifdef FL_HAVE_TBB
void tbb_threads() {
  static tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads());
}
#endif

void set_threads(benchmark::State& state) { state.counters["threads"] = threads(); }

// ---- fib(30): one group per call, no cutoff ---------------------------------------------

constexpr long kFibN = 30;

long fib_seq(long n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

struct Fib {
  fl_engine_t* engine;
  long n;
  long result;
};

fl_status_t fib_task(void* p) {
  auto* f = static_cast<Fib*>(p);
  if (f->n < 2) {
    f->result = f->n;
    return FL_OK;
  }
  Fib a{f->engine, f->n - 1, 0}, b{f->engine, f->n - 2, 0};
  fl_task_group_t* g;
  fl_status_t st = fl_task_group_create(f->engine, &g);
  if (st != FL_OK) return st;
  st = fl_task_group_spawn(g, &fib_task, &a, nullptr);
  if (st == FL_OK) st = fib_task(&b);
  fl_status_t w = fl_task_group_wait(g);
  fl_task_group_destroy(g);
  f->result = a.result + b.result;
  return st != FL_OK ? st : w;
}

void BM_FibMainFlowlane(benchmark::State& state) {
  const long expect = fib_seq(kFibN);
  for (auto _ : state) {
    Fib f{engine(), kFibN, 0};
    check(fib_task(&f), "fib");
    if (f.result != expect) state.SkipWithError("wrong result");
  }
  set_threads(state);
}
BENCHMARK(BM_FibMainFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_FibCallbackFlowlane(benchmark::State& state) {
  const long expect = fib_seq(kFibN);
  for (auto _ : state) {
    Fib f{callback_engine(), kFibN, 0};
    auto run = [&f] { return fib_task(&f); };
    in_callback(callback_engine(), run);
    if (f.result != expect) state.SkipWithError("wrong result");
  }
  set_threads(state);
}
BENCHMARK(BM_FibCallbackFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

// The work alone, on one thread: the floor the schedulers' overhead sits on.
void BM_FibMainSequential(benchmark::State& state) {
  const long expect = fib_seq(kFibN);
  for (auto _ : state) {
    long n = kFibN;
    benchmark::DoNotOptimize(n);
    if (fib_seq(n) != expect) state.SkipWithError("wrong result");
  }
}
BENCHMARK(BM_FibMainSequential)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
using flbench::fib_tbb;

void BM_FibMainTbb(benchmark::State& state) {
  tbb_threads();
  const long expect = fib_seq(kFibN);
  for (auto _ : state)
    if (fib_tbb(kFibN) != expect) state.SkipWithError("wrong result");
  set_threads(state);
}
BENCHMARK(BM_FibMainTbb)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_FibCallbackTbb(benchmark::State& state) {
  tbb_threads();
  const long expect = fib_seq(kFibN);
  for (auto _ : state) {
    long r = 0;
    tbb::task_group tg;
    tg.run([&] { r = fib_tbb(kFibN); });
    tg.wait();
    if (r != expect) state.SkipWithError("wrong result");
  }
  set_threads(state);
}
BENCHMARK(BM_FibCallbackTbb)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- quicksort of 5 M ints, cutoff 2048 ----------------------------------------------------

constexpr size_t kSortN = 5'000'000;
constexpr size_t kSortCutoff = 2048;

const std::vector<int>& sort_input() {
  static const std::vector<int> v = [] {
    std::vector<int> x(kSortN);
    std::mt19937 rng(12345);
    for (int& e : x) e = int(rng());
    return x;
  }();
  return v;
}

// Splits [a, a + n) around a median-of-three pivot; returns the size of the left part
// (0 < m < n for n > 2: both parts are smaller than the range).
size_t partition(int* a, size_t n) {
  int x = a[0], y = a[n / 2], z = a[n - 1];
  int pivot = std::max(std::min(x, y), std::min(std::max(x, y), z));
  size_t i = 0, j = n - 1;
  for (;;) {
    while (a[i] < pivot) ++i;
    while (a[j] > pivot) --j;
    if (i >= j) return j + 1;
    std::swap(a[i], a[j]);
    ++i;
    --j;
  }
}

struct Sort {
  fl_engine_t* engine;
  int* a;
  size_t n;
};

fl_status_t sort_task(void* p) {
  auto* s = static_cast<Sort*>(p);
  if (s->n <= kSortCutoff) {
    std::sort(s->a, s->a + s->n);
    return FL_OK;
  }
  size_t m = partition(s->a, s->n);
  Sort left{s->engine, s->a, m}, right{s->engine, s->a + m, s->n - m};
  fl_task_group_t* g;
  fl_status_t st = fl_task_group_create(s->engine, &g);
  if (st != FL_OK) return st;
  st = fl_task_group_spawn(g, &sort_task, &left, nullptr);
  if (st == FL_OK) st = sort_task(&right);
  fl_status_t w = fl_task_group_wait(g);
  fl_task_group_destroy(g);
  return st != FL_OK ? st : w;
}

// Each iteration sorts a fresh copy (the copy is not timed).
template <class Sorter>
void sort_bench(benchmark::State& state, Sorter&& sorter) {
  std::vector<int> v(kSortN);
  for (auto _ : state) {
    state.PauseTiming();
    std::copy(sort_input().begin(), sort_input().end(), v.begin());
    state.ResumeTiming();
    sorter(v.data(), v.size());
    if (!std::is_sorted(v.begin(), v.end())) state.SkipWithError("not sorted");
  }
  set_threads(state);
}

void BM_QsortMainFlowlane(benchmark::State& state) {
  sort_bench(state, [](int* a, size_t n) {
    Sort s{engine(), a, n};
    check(sort_task(&s), "sort");
  });
}
BENCHMARK(BM_QsortMainFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_QsortCallbackFlowlane(benchmark::State& state) {
  sort_bench(state, [](int* a, size_t n) {
    Sort s{callback_engine(), a, n};
    auto run = [&s] { return sort_task(&s); };
    in_callback(callback_engine(), run);
  });
}
BENCHMARK(BM_QsortCallbackFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

void sort_seq(int* a, size_t n) {
  if (n <= kSortCutoff) {
    std::sort(a, a + n);
    return;
  }
  size_t m = partition(a, n);
  sort_seq(a, m);
  sort_seq(a + m, n - m);
}

// The same recursion on one thread: the floor (it does all the work on one core).
void BM_QsortMainSequential(benchmark::State& state) {
  sort_bench(state, [](int* a, size_t n) { sort_seq(a, n); });
}
BENCHMARK(BM_QsortMainSequential)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void sort_tbb(int* a, size_t n) {
  if (n <= kSortCutoff) {
    std::sort(a, a + n);
    return;
  }
  size_t m = partition(a, n);
  tbb::task_group tg;
  tg.run([=] { sort_tbb(a, m); });
  sort_tbb(a + m, n - m);
  tg.wait();
}

void BM_QsortMainTbb(benchmark::State& state) {
  tbb_threads();
  sort_bench(state, [](int* a, size_t n) { sort_tbb(a, n); });
}
BENCHMARK(BM_QsortMainTbb)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_QsortCallbackTbb(benchmark::State& state) {
  tbb_threads();
  sort_bench(state, [](int* a, size_t n) {
    tbb::task_group tg;
    tg.run([=] { sort_tbb(a, n); });
    tg.wait();
  });
}
BENCHMARK(BM_QsortCallbackTbb)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- parallel_for over 10^7 trivial iterations ---------------------------------------------

constexpr size_t kForN = 10'000'000;

std::vector<float>& for_data() {
  static std::vector<float> v(kForN, 1.0f);
  return v;
}

fl_status_t for_body(uint64_t lo, uint64_t hi, void* ud) {
  float* x = static_cast<float*>(ud);
  for (uint64_t i = lo; i < hi; ++i) x[i] = x[i] * 0.5f + 1.0f;
  return FL_OK;
}

void finish_for(benchmark::State& state) {
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(kForN));
  state.counters["ns_per_item"] = benchmark::Counter(double(state.iterations()) * double(kForN),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
                                                     benchmark::Counter::kIs1000);
  set_threads(state);
}

void for_flowlane(benchmark::State& state, uint64_t grain) {
  auto& v = for_data();
  for (auto _ : state) check(fl_parallel_for(engine(), 0, v.size(), grain, &for_body, v.data()), "fl_parallel_for");
  finish_for(state);
}

void BM_ForGrain1Flowlane(benchmark::State& state) { for_flowlane(state, 1); }
BENCHMARK(BM_ForGrain1Flowlane)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_ForDefaultFlowlane(benchmark::State& state) { for_flowlane(state, 0); }
BENCHMARK(BM_ForDefaultFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void BM_ForGrain1Tbb(benchmark::State& state) {
  tbb_threads();
  auto& v = for_data();
  for (auto _ : state)
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, v.size(), 1),
        [&](const tbb::blocked_range<size_t>& r) { for_body(r.begin(), r.end(), v.data()); },
        tbb::simple_partitioner());
  finish_for(state);
}
BENCHMARK(BM_ForGrain1Tbb)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ForDefaultTbb(benchmark::State& state) {
  tbb_threads();
  auto& v = for_data();
  for (auto _ : state)
    tbb::parallel_for(tbb::blocked_range<size_t>(0, v.size()),
                      [&](const tbb::blocked_range<size_t>& r) { for_body(r.begin(), r.end(), v.data()); });
  finish_for(state);
}
BENCHMARK(BM_ForDefaultTbb)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- wavefront task graph ------------------------------------------------------------------

constexpr int kWave = 256;

// Cell (i, j) = f(cell (i-1, j), cell (i, j-1)): tiny work, so the graph's overhead shows.
struct Wave {
  std::vector<uint64_t> cells = std::vector<uint64_t>(size_t(kWave) * kWave, 0);
  uint64_t& at(int i, int j) { return cells[size_t(i) * kWave + size_t(j)]; }
  void compute(int i, int j) {
    uint64_t up = i > 0 ? at(i - 1, j) : 1, left = j > 0 ? at(i, j - 1) : 1;
    at(i, j) = (up * 0x9E3779B97F4A7C15ull) ^ (left + uint64_t(i * kWave + j));
  }
  uint64_t expected() {
    Wave w;
    for (int i = 0; i < kWave; ++i)
      for (int j = 0; j < kWave; ++j) w.compute(i, j);
    return w.at(kWave - 1, kWave - 1);
  }
};

struct WaveCell {
  Wave* wave;
  int i, j;
};

void BM_WavefrontFlowlane(benchmark::State& state) {
  Wave w;
  const uint64_t expect = w.expected();
  std::vector<WaveCell> cells;
  cells.reserve(size_t(kWave) * kWave);
  fl_taskgraph_t* g = nullptr;
  check(fl_taskgraph_create(engine(), &g), "fl_taskgraph_create");
  for (int i = 0; i < kWave; ++i)
    for (int j = 0; j < kWave; ++j) {
      cells.push_back(WaveCell{&w, i, j});
      uint64_t id = 0;
      check(fl_taskgraph_add(
                g,
                [](void* p) -> fl_status_t {
                  auto* c = static_cast<WaveCell*>(p);
                  c->wave->compute(c->i, c->j);
                  return FL_OK;
                },
                &cells.back(), nullptr, &id),
            "fl_taskgraph_add");
      if (i > 0) check(fl_taskgraph_precede(g, uint64_t(i - 1) * kWave + uint64_t(j), id), "fl_taskgraph_precede");
      if (j > 0) check(fl_taskgraph_precede(g, id - 1, id), "fl_taskgraph_precede");
    }
  for (auto _ : state) {
    check(fl_taskgraph_run(g, int64_t(threads())), "fl_taskgraph_run");  // N - 1 workers + the caller
    if (w.at(kWave - 1, kWave - 1) != expect) state.SkipWithError("wrong result");
  }
  fl_taskgraph_destroy(g);
  state.SetItemsProcessed(int64_t(state.iterations()) * kWave * kWave);
  set_threads(state);
}
BENCHMARK(BM_WavefrontFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void BM_WavefrontTbb(benchmark::State& state) {
  tbb_threads();
  Wave w;
  const uint64_t expect = w.expected();
  using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;
  tbb::flow::graph g;
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.reserve(size_t(kWave) * kWave);
  for (int i = 0; i < kWave; ++i)
    for (int j = 0; j < kWave; ++j) {
      Wave* wp = &w;
      nodes.push_back(std::make_unique<Node>(g, [wp, i, j](const tbb::flow::continue_msg&) { wp->compute(i, j); }));
      if (i > 0) tbb::flow::make_edge(*nodes[size_t(i - 1) * kWave + size_t(j)], *nodes.back());
      if (j > 0) tbb::flow::make_edge(*nodes[nodes.size() - 2], *nodes.back());
    }
  for (auto _ : state) {
    nodes[0]->try_put(tbb::flow::continue_msg());
    g.wait_for_all();
    if (w.at(kWave - 1, kWave - 1) != expect) state.SkipWithError("wrong result");
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * kWave * kWave);
  set_threads(state);
}
BENCHMARK(BM_WavefrontTbb)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();
