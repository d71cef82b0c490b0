// Fork–join through the public C API, next to oneTBB in the same binary:
//   FibTaskGroup*       fib(30), one task per call: fl_task_group_* vs tbb::task_group
//   ParallelForDefault* 10^7 trivial iterations with the default grain: fl_parallel_for
//                       (grain 0) vs tbb::parallel_for (auto_partitioner)
// Both runtimes get the same number of threads (FL_BENCH_THREADS, default 2: flowlane's
// workers, oneTBB's max_allowed_parallelism). scripts/run-benchmarks.sh reports the
// flowlane / oneTBB ratios.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <vector>

#include "flowlane/flowlane.h"

#ifdef FL_HAVE_TBB
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_group.h>
#endif

namespace {

unsigned threads() {
  const char* env = std::getenv("FL_BENCH_THREADS");
  int n = env ? std::atoi(env) : 2;
  return n > 0 ? unsigned(n) : 2u;
}

void check(fl_status_t st, const char* what) {
  if (st != FL_OK) {
    std::fprintf(stderr, "%s failed: %s: %s\n", what, fl_status_name(st), fl_last_error_message());
    std::abort();
  }
}

fl_engine_t* engine() {
  static fl_engine_t* e = [] {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = threads();
    fl_engine_t* x = nullptr;
    check(fl_engine_create(&d, &x), "fl_engine_create");
    return x;
  }();
  return e;
}

#ifdef FL_HAVE_TBB
tbb::global_control& tbb_threads() {
  static tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads());
  return gc;
}
#endif

// ---- fib(30), one task per call, no cutoff ------------------------------------------------

struct Fib {
  long n;
  long result;
};

fl_status_t fib_task(void* p) {
  auto* f = static_cast<Fib*>(p);
  if (f->n < 2) {
    f->result = f->n;
    return FL_OK;
  }
  Fib a{f->n - 1, 0}, b{f->n - 2, 0};
  fl_task_group_t* g;
  fl_status_t st = fl_task_group_create(engine(), &g);
  if (st != FL_OK) return st;
  st = fl_task_group_spawn(g, &fib_task, &a, nullptr);
  if (st == FL_OK) st = fib_task(&b);
  fl_status_t w = fl_task_group_wait(g);
  fl_task_group_destroy(g);
  f->result = a.result + b.result;
  return st != FL_OK ? st : w;
}

long fib_seq(long n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

void BM_FibTaskGroupFlowlane(benchmark::State& state) {
  const long n = long(state.range(0));
  const long expect = fib_seq(n);
  fl_task_group_t* root;
  check(fl_task_group_create(engine(), &root), "fl_task_group_create");
  for (auto _ : state) {
    Fib f{n, 0};
    check(fl_task_group_spawn(root, &fib_task, &f, nullptr), "fl_task_group_spawn");
    check(fl_task_group_wait(root), "fl_task_group_wait");
    if (f.result != expect) state.SkipWithError("wrong result");
  }
  fl_task_group_destroy(root);
  state.counters["threads"] = threads();
}
BENCHMARK(BM_FibTaskGroupFlowlane)->Arg(30)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
long fib_tbb(long n) {
  if (n < 2) return n;
  long a = 0;
  tbb::task_group tg;
  tg.run([&] { a = fib_tbb(n - 1); });
  long b = fib_tbb(n - 2);
  tg.wait();
  return a + b;
}

void BM_FibTaskGroupTbb(benchmark::State& state) {
  tbb_threads();
  const long n = long(state.range(0));
  const long expect = fib_seq(n);
  for (auto _ : state) {
    long r = 0;
    tbb::task_group tg;  // from outside, as the flowlane row: the root is handed to a worker
    tg.run([&] { r = fib_tbb(n); });
    tg.wait();
    if (r != expect) state.SkipWithError("wrong result");
  }
  state.counters["threads"] = threads();
}
BENCHMARK(BM_FibTaskGroupTbb)->Arg(30)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- parallel_for over 10^7 trivial iterations, default grain ----------------------------

std::vector<float>& data() {
  static std::vector<float> v(10'000'000, 1.0f);
  return v;
}

fl_status_t body(uint64_t lo, uint64_t hi, void* ud) {
  float* x = static_cast<float*>(ud);
  for (uint64_t i = lo; i < hi; ++i) x[i] = x[i] * 0.5f + 1.0f;
  return FL_OK;
}

void BM_ParallelForDefaultFlowlane(benchmark::State& state) {
  auto& v = data();
  for (auto _ : state) check(fl_parallel_for(engine(), 0, v.size(), 0, &body, v.data()), "fl_parallel_for");
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(v.size()));
  state.counters["threads"] = threads();
}
BENCHMARK(BM_ParallelForDefaultFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void BM_ParallelForDefaultTbb(benchmark::State& state) {
  tbb_threads();
  auto& v = data();
  for (auto _ : state)
    tbb::parallel_for(tbb::blocked_range<size_t>(0, v.size()),
                      [&](const tbb::blocked_range<size_t>& r) { body(r.begin(), r.end(), v.data()); });
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(v.size()));
  state.counters["threads"] = threads();
}
BENCHMARK(BM_ParallelForDefaultTbb)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();
