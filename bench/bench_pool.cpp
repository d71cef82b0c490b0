// The work-stealing pool against oneTBB, in one binary so that ratios come from one run.
//
// Layers measured:
//   Fib*, EmptyTasks*  — sched::Pool + sched::Latch (C++ internals, no C boundary): one task
//                        per call / per empty task, the scheduler's raw overhead.
//   ParallelFor*       — sched::parallel_for (what fl_parallel_for calls, minus a handle
//                        lookup) vs tbb::parallel_for with its default partitioner.
//   TreeGraph*         — sched::TaskGraph on a sched::Pool (what fl_taskgraph_run runs) vs
//                        tbb::flow::graph with continue_nodes; a binary reduction tree.
//   IdleEngineCpu      — process CPU time (getrusage) of an idle engine (public C API) over
//                        2 s of wall time, in percent of one core; not a speed.
//   Compile*           — the parallel_compile example through the PUBLIC C API
//                        (fl_taskgraph_*), vs the same ops as a tbb::flow::graph.
// Thread counts: flowlane pools get N workers and the caller blocks; TBB runs with N
// threads including the caller (global_control), so both use N threads.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "sched/parallel_for.hpp"
#include "sched/latch.hpp"
#include "sched/pool.hpp"
#include "sched/taskgraph.hpp"
#include "sched/topology.hpp"
#include "parallel_compile/lstm_graph.hpp"
#include "tbb_peers.hpp"

#ifdef FL_HAVE_TBB
#include <tbb/flow_graph.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_group.h>
#endif

namespace fc = flowlane::sched;

namespace {

unsigned threads() { return fc::logical_core_count(); }

fc::Pool& pool() {
  static fc::Pool p(threads());
  return p;
}

#ifdef FL_HAVE_TBB
tbb::global_control& tbb_threads() {
  static tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads());
  return gc;
}
#endif

// Runs f on a worker of the pool and waits from outside.
template <class F>
void on_pool(F&& f) {
  struct Root : fc::Task {
    F* f;
    fc::Latch latch{1};
  } root;
  root.f = &f;
  root.run = [](fc::Task* t) {
    auto* r = static_cast<Root*>(t);
    (*r->f)();
    r->latch.count_down();
  };
  pool().submit(&root);
  root.latch.wait();
}

// ---- fib(30), one task per call, no cutoff ----------------------------------------------

struct FibTask : fc::Task {
  int n;
  long result;
  fc::Latch* latch;
};

long fib_flowlane(int n);

void fib_run(fc::Task* t) {
  auto* f = static_cast<FibTask*>(t);
  f->result = fib_flowlane(f->n);
  f->latch->count_down();
}

long fib_flowlane(int n) {
  if (n < 2) return n;
  fc::Latch latch(1);
  FibTask child;
  child.run = &fib_run;
  child.n = n - 1;
  child.latch = &latch;
  pool().submit(&child);
  long b = fib_flowlane(n - 2);
  latch.wait();
  return child.result + b;
}

void BM_FibFlowlane(benchmark::State& state) {
  int n = int(state.range(0));
  long r = 0;
  for (auto _ : state) on_pool([&] { r = fib_flowlane(n); });
  benchmark::DoNotOptimize(r);
  state.counters["threads"] = pool().size();
}
BENCHMARK(BM_FibFlowlane)->Arg(30)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
using flbench::fib_tbb;

void BM_FibTbb(benchmark::State& state) {
  tbb_threads();
  int n = int(state.range(0));
  long r = 0;
  for (auto _ : state) r = fib_tbb(n);
  benchmark::DoNotOptimize(r);
}
BENCHMARK(BM_FibTbb)->Arg(30)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- spawn and join 10^6 empty tasks ----------------------------------------------------

struct EmptyTask : fc::Task {
  fc::Latch* latch;
};

void BM_EmptyTasksFlowlane(benchmark::State& state) {
  const size_t n = size_t(state.range(0));
  std::vector<EmptyTask> tasks(n);
  for (auto _ : state) {
    on_pool([&] {
      fc::Latch latch{static_cast<int64_t>(n)};
      for (auto& t : tasks) {
        t.run = [](fc::Task* self) { static_cast<EmptyTask*>(self)->latch->count_down(); };
        t.latch = &latch;
        pool().submit(&t);  // into this worker's deque; the other workers steal
      }
      latch.wait();
    });
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
}
BENCHMARK(BM_EmptyTasksFlowlane)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same from a thread outside the pool: every task goes through the injection queue.
void BM_EmptyTasksFlowlaneFromOutside(benchmark::State& state) {
  const size_t n = size_t(state.range(0));
  std::vector<EmptyTask> tasks(n);
  for (auto _ : state) {
    fc::Latch latch{static_cast<int64_t>(n)};
    for (auto& t : tasks) {
      t.run = [](fc::Task* self) { static_cast<EmptyTask*>(self)->latch->count_down(); };
      t.latch = &latch;
      pool().submit(&t);
    }
    latch.wait();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
}
BENCHMARK(BM_EmptyTasksFlowlaneFromOutside)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void BM_EmptyTasksTbb(benchmark::State& state) {
  tbb_threads();
  const size_t n = size_t(state.range(0));
  for (auto _ : state) {
    tbb::task_group tg;
    for (size_t i = 0; i < n; ++i) tg.run([] {});
    tg.wait();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
}
BENCHMARK(BM_EmptyTasksTbb)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- parallel_for over 10^7 trivial iterations -----------------------------------------

std::vector<float>& pf_data() {
  static std::vector<float> v(10'000'000, 1.0f);
  return v;
}

fl_status_t pf_body(uint64_t lo, uint64_t hi, void* ud) {
  float* x = static_cast<float*>(ud);
  for (uint64_t i = lo; i < hi; ++i) x[i] = x[i] * 0.5f + 1.0f;
  return FL_OK;
}

void BM_ParallelForFlowlane(benchmark::State& state) {
  auto& v = pf_data();
  for (auto _ : state) {
    auto r = fc::parallel_for(pool(), 0, v.size(), 0, &pf_body, v.data());
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(v.size()));
}
BENCHMARK(BM_ParallelForFlowlane)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void BM_ParallelForTbb(benchmark::State& state) {
  tbb_threads();
  auto& v = pf_data();
  for (auto _ : state) {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, v.size()), [&](const tbb::blocked_range<size_t>& r) {
      pf_body(r.begin(), r.end(), v.data());
    });
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(v.size()));
}
BENCHMARK(BM_ParallelForTbb)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- binary reduction tree as a task graph ---------------------------------------------

struct TreeCell {
  long value = 0;
  const long* left = nullptr;
  const long* right = nullptr;
};

fl_status_t tree_node(void* ud) {
  auto* c = static_cast<TreeCell*>(ud);
  c->value = 1 + (c->left ? *c->left : 0) + (c->right ? *c->right : 0);
  return FL_OK;
}

void BM_TreeGraphFlowlane(benchmark::State& state) {
  const int n = (1 << int(state.range(0))) - 1;
  std::vector<TreeCell> cells(static_cast<size_t>(n));
  fc::TaskGraph g;
  for (int i = 0; i < n; ++i) g.add(&tree_node, &cells[size_t(i)], nullptr);
  for (int i = 0; 2 * i + 2 < n; ++i) {
    cells[size_t(i)].left = &cells[size_t(2 * i + 1)].value;
    cells[size_t(i)].right = &cells[size_t(2 * i + 2)].value;
    g.precede(uint64_t(2 * i + 1), uint64_t(i));
    g.precede(uint64_t(2 * i + 2), uint64_t(i));
  }
  for (auto _ : state) {
    if (g.run(pool()) != FL_OK || cells[0].value != n) state.SkipWithError("wrong result");
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_TreeGraphFlowlane)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void BM_TreeGraphTbb(benchmark::State& state) {
  tbb_threads();
  const int n = (1 << int(state.range(0))) - 1;
  std::vector<TreeCell> cells(static_cast<size_t>(n));
  tbb::flow::graph g;
  std::vector<std::unique_ptr<tbb::flow::continue_node<tbb::flow::continue_msg>>> nodes;
  nodes.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    TreeCell* c = &cells[size_t(i)];
    nodes.push_back(std::make_unique<tbb::flow::continue_node<tbb::flow::continue_msg>>(
        g, [c](const tbb::flow::continue_msg&) { tree_node(c); }));
  }
  std::vector<int> leaves;
  for (int i = 0; i < n; ++i) {
    if (2 * i + 2 < n) {
      cells[size_t(i)].left = &cells[size_t(2 * i + 1)].value;
      cells[size_t(i)].right = &cells[size_t(2 * i + 2)].value;
      tbb::flow::make_edge(*nodes[size_t(2 * i + 1)], *nodes[size_t(i)]);
      tbb::flow::make_edge(*nodes[size_t(2 * i + 2)], *nodes[size_t(i)]);
    } else {
      leaves.push_back(i);
    }
  }
  for (auto _ : state) {
    for (int i : leaves) nodes[size_t(i)]->try_put(tbb::flow::continue_msg());
    g.wait_for_all();
    if (cells[0].value != n) state.SkipWithError("wrong result");
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_TreeGraphTbb)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- the parallel_compile example ------------------------------------------------------

void BM_CompileFlowlane(benchmark::State& state) {
  lstm::Graph graph = lstm::build(int(state.range(0)));
  fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
  desc.num_workers = threads();
  fl_engine_t* engine = nullptr;
  if (fl_engine_create(&desc, &engine) != FL_OK) {
    state.SkipWithError(fl_last_error_message());
    return;
  }
  std::vector<lstm::TaskCtx> ctx;
  fl_taskgraph_t* tg = nullptr;
  if (lstm::make_taskgraph(engine, graph, ctx, &tg) != FL_OK) {
    state.SkipWithError(fl_last_error_message());
    fl_engine_destroy(engine);
    return;
  }
  for (auto _ : state) {
    if (fl_taskgraph_run(tg, -1) != FL_OK) state.SkipWithError(fl_last_error_message());
  }
  state.counters["ops"] = double(graph.ops.size());
  fl_taskgraph_destroy(tg);
  fl_engine_destroy(engine);
}
BENCHMARK(BM_CompileFlowlane)->Arg(150)->Arg(300)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same compile on one thread with no scheduler at all: ops in id order (a topological
// order), the baseline for speed-up.
void BM_CompileSequential(benchmark::State& state) {
  lstm::Graph graph = lstm::build(int(state.range(0)));
  for (auto _ : state)
    for (uint32_t i = 0; i < graph.ops.size(); ++i) lstm::compile_op(graph, i);
  state.counters["ops"] = double(graph.ops.size());
}
BENCHMARK(BM_CompileSequential)->Arg(150)->Arg(300)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef FL_HAVE_TBB
void BM_CompileTbb(benchmark::State& state) {
  tbb_threads();
  lstm::Graph graph = lstm::build(int(state.range(0)));
  using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;
  tbb::flow::graph g;
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.reserve(graph.ops.size());
  for (uint32_t i = 0; i < graph.ops.size(); ++i)
    nodes.push_back(std::make_unique<Node>(g, [&graph, i](const tbb::flow::continue_msg&) { lstm::compile_op(graph, i); }));
  std::vector<uint32_t> roots;
  for (uint32_t i = 0; i < graph.ops.size(); ++i) {
    if (graph.ops[i].inputs.empty()) roots.push_back(i);
    for (uint32_t p : graph.ops[i].inputs) tbb::flow::make_edge(*nodes[p], *nodes[i]);
  }
  for (auto _ : state) {
    for (uint32_t r : roots) nodes[r]->try_put(tbb::flow::continue_msg());
    g.wait_for_all();
  }
  state.counters["ops"] = double(graph.ops.size());
}
BENCHMARK(BM_CompileTbb)->Arg(150)->Arg(300)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// ---- idle CPU ---------------------------------------------------------------------------

void BM_IdleEngineCpu(benchmark::State& state) {
  fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
  desc.num_workers = threads();
  fl_engine_t* engine = nullptr;
  if (fl_engine_create(&desc, &engine) != FL_OK) {
    state.SkipWithError(fl_last_error_message());
    return;
  }
  // Wake every worker once (a parallel_for touching all of them), then let them park.
  auto& v = pf_data();
  fl_parallel_for(engine, 0, v.size(), 0, &pf_body, v.data());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto cpu_s = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  double cpu = 0, wall = 0;
  for (auto _ : state) {
    double c0 = cpu_s();
    auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu += cpu_s() - c0;
  }
  state.counters["cpu_percent_of_one_core"] = 100.0 * cpu / wall;
  state.counters["workers"] = double(fl_engine_worker_count(engine));
  fl_engine_destroy(engine);
}
BENCHMARK(BM_IdleEngineCpu)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
