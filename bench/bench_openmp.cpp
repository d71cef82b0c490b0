// flowlane host instructions next to OpenMP tasks with depend clauses, the
// peers people reach for when they want inferred read/write dependencies.
//
// One source, two executables (libgomp and libomp both define omp_* and GOMP_*: they are
// never linked into one binary):
//   bench_openmp         the project's compiler (gcc: libgomp): BM_<X>Flowlane, BM_<X>Gomp
//   bench_openmp_libomp  clang++ -fopenmp=libomp, FL_OMP_PEER_ONLY: BM_<X>Libomp only
// The peer's suffix is the runtime actually loaded (Gomp if libgomp, Libomp if LLVM's),
// checked at startup; the binary aborts if both runtimes are in the process.
//
// Workloads <X>, kBatch instructions (tasks) per iteration, then a wait for all; no-op
// bodies (an OpenMP task bumps its thread's counter so that the run can be checked);
// ns_per_instr = 1e9 / items_per_second:
// flowlane runs every shape four ways: queued (BM_<X>Flowlane), FL_SUBMIT_INLINE
// (BM_<X>FlowlaneInline), replayed (BM_<X>FlowlaneReplay: the batch captured once with
// fl_capture_begin/end, then one fl_program_launch on lane 0 per iteration) and captured only
// (BM_<X>FlowlaneCapture: what recording the batch costs; nothing runs).
//
//   Independent  no operands. flowlane: round robin over 8 lanes; OpenMP: `task`.
//   Chain        read-write of one object. flowlane: lanes alternate 0,1 (every
//                instruction waits for the previous one, on the other lane);
//                OpenMP: `task depend(inout: x)`.
//   FanOutIn     bench_engine's fan-out/in: a producer writes X, 64 instructions read X
//                and write their Y_i, a join reads all 64 Y_i; OpenMP: depend(out: x),
//                depend(in: x) depend(out: y[i]), depend(iterator(i=0:64), in: y[i]).
//
// Threads are counted the same way for every runtime: the argument is N, the threads of
// the run including the submitting one. OpenMP: `parallel num_threads(N)` + `single`
// (the submitter is one of the N). flowlane: the submitting thread + N-1 workers; flowlane
// has at least one worker, so N = 1 gets one extra thread: scripts/bench-openmp.sh runs
// every runtime under `taskset` on N CPUs, so that all of them get the same one CPU then.
// The counter `os_threads` says how many threads the run had.
//
// Options (before Google Benchmark's own):
//   --threads=1,2,16          the N to run (default 1,2)
//   --once=SHAPE:COUNT[:N]    no benchmark: submit COUNT instructions of SHAPE once (N
//                             threads, default 2) with the first runtime of this binary,
//                             wait, check, exit. For scripts/dev/callgrind-submit.sh: every
//                             thread but the submitter is held (blocked) in a gate while
//                             it submits, so that submission runs alone and its cost is
//                             the same from run to run; then the gate opens and the
//                             instructions run. (OpenMP still runs tasks inline on the
//                             submitter once too many are queued: that is its own way.)
//                             A warm-up round first; only the second is instrumented
//                             (valgrind --instr-atstart=no, callgrind client requests).
//   --runtime=NAME            with --once: Flowlane, FlowlaneInline, FlowlaneReplay (the measured
//                             round is one launch of a program of COUNT instructions),
//                             FlowlaneCapture (the measured round captures COUNT instructions),
//                             Gomp or Libomp (default: the first)
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.hpp"

#ifndef FL_OMP_PEER_ONLY
#include "flowlane_rig.hpp"
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define FL_CALLGRIND_REQUESTS 1
#else  // valgrind not installed: --once still runs, but callgrind_submit.py refuses it
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define FL_CALLGRIND_REQUESTS 0
#endif

namespace {

using flbench::kBatch;
using flbench::kFan;

enum Shape { kIndependent, kChain, kFanOutIn, kNumShapes };
const char* const kShapeNames[kNumShapes] = {"Independent", "Chain", "FanOutIn"};

// A runtime: its benchmark body (one for every shape) and the --once body.
struct Runtime {
  std::string name;
  std::string library;  // what is loaded, for the benchmark context
  void (*bench)(benchmark::State&, Shape);
  int (*once)(Shape, int count, int threads);  // returns the instructions that ran
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_openmp: %s\n", msg.c_str());
  std::abort();
}

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "bench_openmp: %s\n", msg.c_str());
  std::exit(2);
}

// --once runs `round` (hold every other thread, submit, release, wait) twice: a warm-up, so
// that record pools, queues and allocator caches have their steady size, then the measured
// round, the only code callgrind instruments when run with --instr-atstart=no.
template <class Round>
int warm_then_measure(Round round) {
  round();
  CALLGRIND_START_INSTRUMENTATION;
  const int n = round();
  CALLGRIND_STOP_INSTRUMENTATION;
  return n;
}

// ------------------------------------------------------------------------------ flowlane
#ifndef FL_OMP_PEER_ONLY

int flowlane_workers(int threads) { return threads > 1 ? threads - 1 : 1; }

// Not inlined: scripts/dev/callgrind-submit.sh finds the submitting thread and its submission
// cost by this frame (and openmp_shape's).
[[gnu::noinline]] int flowlane_shape(flbench::FlEngine& f, Shape s, int n) {
  switch (s) {
    case kIndependent: return flbench::independent(f, n, 8);
    case kChain: return flbench::chain_two_lanes(f, n);
    case kFanOutIn: return flbench::fan_out_in(f, n);
    default: die("unknown shape");
  }
}

void flowlane_run(benchmark::State& state, Shape s, uint64_t flags) {
  const int threads = int(state.range(0));
  flbench::FlEngine f(flowlane_workers(threads));
  f.submit_flags = flags;
  flbench::run_batches(state, f, [&] { return flowlane_shape(f, s, kBatch); });
  state.counters["os_threads"] = 1 + flowlane_workers(threads);
}
void flowlane_bench(benchmark::State& state, Shape s) { flowlane_run(state, s, 0); }
// FL_SUBMIT_INLINE: an instruction ready at once (lane idle, predecessors complete) runs on
// the submitting thread, as OpenMP runs an undeferred task.
void flowlane_inline_bench(benchmark::State& state, Shape s) { flowlane_run(state, s, FL_SUBMIT_INLINE); }

int flowlane_once_with(Shape s, int count, int threads, uint64_t flags) {
  const int workers = flowlane_workers(threads);
  flbench::FlEngine f(workers, uint64_t(count) + uint64_t(workers) + 1);  // the window never blocks
  f.submit_flags = flags;
  flbench::Gate gate(/*spin=*/false);
  const uint64_t before = f.stats().completed;
  const int n = warm_then_measure([&] {
    gate.reset();
    flbench::hold_workers(f, gate, workers);
    const int submitted = flowlane_shape(f, s, count);
    gate.release();
    flbench::check(fl_engine_synchronize(f.e), "fl_engine_synchronize");
    return submitted;
  });
  const fl_engine_stats_t st = f.stats();
  if (st.completed - before != 2 * uint64_t(n + workers) || st.failed != 0) die("flowlane did not run every instruction");
  return n;
}
int flowlane_once(Shape s, int count, int threads) { return flowlane_once_with(s, count, threads, 0); }
int flowlane_inline_once(Shape s, int count, int threads) {
  return flowlane_once_with(s, count, threads, FL_SUBMIT_INLINE);
}

// --- capture and replay: the shape captured once into a program, launched per iteration ---

// Captures `n` instructions of the shape into a program (nothing runs); *size gets how many.
fl_program_t* capture_shape(flbench::FlEngine& f, Shape s, int n, int* size) {
  flbench::check(fl_capture_begin(f.e, nullptr), "fl_capture_begin");
  *size = flowlane_shape(f, s, n);
  fl_program_t* p = nullptr;
  flbench::check(fl_capture_end(f.e, &p), "fl_capture_end");
  return p;
}

// Not inlined: scripts/dev/callgrind_submit.py finds the launching thread by this frame.
[[gnu::noinline]] void replay_shape(fl_program_t* p, flbench::FlEngine& f) {
  flbench::check(fl_program_launch(p, f.lanes[0], 0, nullptr), "fl_program_launch");
}

fl_program_info_t info_of(fl_program_t* p) {
  fl_program_info_t in = FL_PROGRAM_INFO_INIT;
  flbench::check(fl_program_info(p, &in), "fl_program_info");
  return in;
}

uint64_t launches_of(fl_program_t* p) { return info_of(p).launches; }

// Replay: one launch (one instruction of lane 0) per iteration, then a wait for it.
void flowlane_replay_bench(benchmark::State& state, Shape s) {
  const int threads = int(state.range(0));
  flbench::FlEngine f(flowlane_workers(threads));
  int per_iter = 0;
  fl_program_t* p = capture_shape(f, s, kBatch, &per_iter);
  const fl_engine_stats_t before = f.stats();
  for (auto _ : state) {
    replay_shape(p, f);
    flbench::check(fl_engine_synchronize(f.e), "fl_engine_synchronize");
  }
  const fl_engine_stats_t after = f.stats();
  if (launches_of(p) != uint64_t(state.iterations()) || after.completed - before.completed != uint64_t(state.iterations()) ||
      after.failed != before.failed)
    die("flowlane did not complete every launch");
  // The program's memory (fl_program_info: besides CUDA graphs, none here) per instruction.
  const fl_program_info_t in = info_of(p);
  state.counters["program_bytes_per_instr"] = double(in.bytes) / double(per_iter);
  state.counters["program_tasks"] = double(in.tasks);
  flbench::check(fl_program_destroy(p), "fl_program_destroy");
  flbench::finish(state, per_iter);
  state.counters["os_threads"] = 1 + flowlane_workers(threads);
}

// Capture: what recording the shape costs the calling thread (fl_capture_begin, the
// submissions, fl_capture_end, fl_program_destroy); nothing runs.
void flowlane_capture_bench(benchmark::State& state, Shape s) {
  const int threads = int(state.range(0));
  flbench::FlEngine f(flowlane_workers(threads));
  int per_iter = 0;
  for (auto _ : state) {
    fl_program_t* p = capture_shape(f, s, kBatch, &per_iter);
    flbench::check(fl_program_destroy(p), "fl_program_destroy");
  }
  flbench::finish(state, per_iter);
  state.counters["os_threads"] = 1 + flowlane_workers(threads);
}

int flowlane_replay_once(Shape s, int count, int threads) {
  const int workers = flowlane_workers(threads);
  flbench::FlEngine f(workers);
  int n = 0;
  fl_program_t* p = capture_shape(f, s, count, &n);
  flbench::Gate gate(/*spin=*/false);
  warm_then_measure([&] {
    gate.reset();
    flbench::hold_workers(f, gate, workers);
    replay_shape(p, f);
    gate.release();
    flbench::check(fl_engine_synchronize(f.e), "fl_engine_synchronize");
    return n;
  });
  if (launches_of(p) != 2 || f.stats().failed != 0) die("flowlane did not replay the program twice");
  flbench::check(fl_program_destroy(p), "fl_program_destroy");
  return n;
}

int flowlane_capture_once(Shape s, int count, int threads) {
  flbench::FlEngine f(flowlane_workers(threads));
  return warm_then_measure([&] {
    int n = 0;
    fl_program_t* p = capture_shape(f, s, count, &n);
    flbench::check(fl_program_destroy(p), "fl_program_destroy");
    return n;
  });
}

#endif  // FL_OMP_PEER_ONLY

// -------------------------------------------------------------------------------- OpenMP
#ifdef _OPENMP

// Tasks run by each thread of the team: the proof that OpenMP ran them (a no-op task
// could be skipped); one cache line per thread so that counting adds no sharing.
constexpr int kMaxThreads = 1024;
struct alignas(64) TaskCount {
  uint64_t n = 0;
};
TaskCount g_ran[kMaxThreads];

inline void task_body() { g_ran[omp_get_thread_num()].n++; }

uint64_t tasks_ran() {
  uint64_t sum = 0;
  for (const TaskCount& c : g_ran) sum += c.n;
  return sum;
}

// The objects of the depend clauses (only their addresses matter).
uint64_t g_x;
uint64_t g_y[kFan];

// Creates about n tasks of the shape from the current task; returns how many exactly.
// Not inlined, like flowlane_shape.
[[gnu::noinline]] int openmp_shape(Shape s, int n) {
  switch (s) {
    case kIndependent:
      for (int k = 0; k < n; ++k) {
#pragma omp task
        task_body();
      }
      return n;
    case kChain:
      for (int k = 0; k < n; ++k) {
#pragma omp task depend(inout : g_x)
        task_body();
      }
      return n;
    case kFanOutIn: {
      const int rounds = n / (kFan + 2);
      for (int r = 0; r < rounds; ++r) {
#pragma omp task depend(out : g_x)
        task_body();
        for (int i = 0; i < kFan; ++i) {
#pragma omp task depend(in : g_x) depend(out : g_y[i])
          task_body();
        }
#pragma omp task depend(iterator(j = 0 : kFan), in : g_y[j])
        task_body();
      }
      return rounds * (kFan + 2);
    }
    default: die("unknown shape");
  }
}

// Runs `body(ran)` on one thread of a team of `threads`, the others executing tasks;
// `ran` counts the tasks created; checks afterwards that they all ran.
template <class Body>
void in_team(int threads, Body body) {
  if (threads < 1 || threads > kMaxThreads) die("thread count out of range");
  const uint64_t before = tasks_ran();
  uint64_t created = 0;
  int team = 0;
#pragma omp parallel num_threads(threads)
#pragma omp single
  {
    team = omp_get_num_threads();
    if (team == threads) created = body();
  }
  if (team != threads) die("asked for " + std::to_string(threads) + " OpenMP threads, got " + std::to_string(team));
  if (tasks_ran() - before != created)
    die("OpenMP ran " + std::to_string(tasks_ran() - before) + " of " + std::to_string(created) + " tasks");
}

void openmp_bench(benchmark::State& state, Shape s) {
  const int threads = int(state.range(0));
  int per_iter = 0;
  in_team(threads, [&] {
    uint64_t created = 0;
    for (auto _ : state) {
      per_iter = openmp_shape(s, kBatch);
#pragma omp taskwait
      created += uint64_t(per_iter);
    }
    return created;
  });
  flbench::finish(state, per_iter);
  state.counters["os_threads"] = threads;
}

int openmp_once(Shape s, int count, int threads) {
  int n = 0;
  flbench::Gate gate(/*spin=*/false);
  in_team(threads, [&] {
    n = warm_then_measure([&] {
      gate.reset();
      for (int t = 1; t < threads; ++t) {
#pragma omp task shared(gate)
        {
          task_body();
          gate.hold();
        }
      }
      gate.wait_held(threads - 1);
      const int created = openmp_shape(s, count);
      gate.release();
#pragma omp taskwait
      return created;
    });
    return 2 * uint64_t(n + threads - 1);
  });
  return n;
}

// Which OpenMP runtime this process runs: libomp defines __kmpc_fork_call (and GOMP_*
// too, for gcc-compiled code), libgomp does not. Refuses a process with both loaded.
Runtime openmp_runtime() {
  Dl_info info{};
  std::string path = dladdr(reinterpret_cast<void*>(&omp_get_num_threads), &info) && info.dli_fname
                         ? info.dli_fname
                         : "unknown";
  const bool llvm = dlsym(RTLD_DEFAULT, "__kmpc_fork_call") != nullptr;
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (gomp) dlclose(gomp);
  if (llvm && gomp) die("both libgomp and libomp are loaded in this process (" + path + ")");
  return Runtime{llvm ? "Libomp" : "Gomp", path, openmp_bench, openmp_once};
}

#endif  // _OPENMP

std::vector<Runtime> runtimes() {
  std::vector<Runtime> rts;
#ifndef FL_OMP_PEER_ONLY
  rts.push_back(Runtime{"Flowlane", "libflowlane.so." + std::to_string(FL_VERSION_MAJOR), flowlane_bench,
                        flowlane_once});
  rts.push_back(Runtime{"FlowlaneInline", "libflowlane.so." + std::to_string(FL_VERSION_MAJOR) + " (FL_SUBMIT_INLINE)",
                        flowlane_inline_bench, flowlane_inline_once});
  rts.push_back(Runtime{"FlowlaneReplay", "libflowlane.so." + std::to_string(FL_VERSION_MAJOR) + " (a captured program)",
                        flowlane_replay_bench, flowlane_replay_once});
  rts.push_back(Runtime{"FlowlaneCapture", "libflowlane.so." + std::to_string(FL_VERSION_MAJOR) + " (capture only)",
                        flowlane_capture_bench, flowlane_capture_once});
#endif
#ifdef _OPENMP
  rts.push_back(openmp_runtime());
#endif
  return rts;
}

std::vector<int> parse_ints(const std::string& list) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find_first_of(",:", pos);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(pos, end - pos);
    char* tail = nullptr;
    const long v = std::strtol(item.c_str(), &tail, 10);
    if (item.empty() || *tail != '\0' || v < 1 || v > kBatch * 100L) usage("bad number '" + item + "' in '" + list + "'");
    out.push_back(int(v));
    pos = end + 1;
  }
  return out;
}

int run_once(const std::vector<Runtime>& rts, const std::string& spec, const std::string& runtime) {
  // SHAPE:COUNT[:THREADS]
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) usage("--once=SHAPE:COUNT[:THREADS], got '" + spec + "'");
  const std::string shape_name = spec.substr(0, colon);
  int shape = 0;
  while (shape < kNumShapes && shape_name != kShapeNames[shape]) ++shape;
  if (shape == kNumShapes) usage("unknown shape '" + shape_name + "' (Independent, Chain, FanOutIn)");
  const std::vector<int> nums = parse_ints(spec.substr(colon + 1));
  if (nums.empty() || nums.size() > 2) usage("--once=SHAPE:COUNT[:THREADS], got '" + spec + "'");
  const int threads = nums.size() == 2 ? nums[1] : 2;
  for (const Runtime& rt : rts) {
    if (!runtime.empty() && rt.name != runtime) continue;
    const int ran = rt.once(Shape(shape), nums[0], threads);
    std::printf("%s %s: %d instructions, %d threads, callgrind requests %s\n", rt.name.c_str(),
                shape_name.c_str(), ran, threads, FL_CALLGRIND_REQUESTS ? "on" : "off");
    return 0;
  }
  usage("no runtime '" + runtime + "' in this binary");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  std::string once, runtime;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0)
      threads = parse_ints(arg.substr(10));
    else if (arg.rfind("--once=", 0) == 0)
      once = arg.substr(7);
    else if (arg.rfind("--runtime=", 0) == 0)
      runtime = arg.substr(10);
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  const std::vector<Runtime> rts = runtimes();
  if (!once.empty()) return run_once(rts, once, runtime);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (int s = 0; s < kNumShapes; ++s)
    for (const Runtime& rt : rts) {
      auto* b = benchmark::RegisterBenchmark(("BM_" + std::string(kShapeNames[s]) + rt.name).c_str(),
                                             [rt, s](benchmark::State& st) { rt.bench(st, Shape(s)); });
      b->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
      for (int n : threads) b->Arg(n);
    }
  for (const Runtime& rt : rts) benchmark::AddCustomContext("runtime_" + rt.name, rt.library);
  benchmark::AddCustomContext("threads_convention",
                              "threads:N = N threads including the submitter (flowlane: 1 + max(1, N-1) workers)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
