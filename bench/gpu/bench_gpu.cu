// GPU backend benchmarks: every flowlane number beside its raw-CUDA floor in the same
// binary, so a ratio comes from one run on one machine (gpu/README.md, "Benchmarks").
// scripts/dev/gpu_report.py turns the JSON into the ratios against those floors.
//
//   submit cost     BM_RawLaunch                vs BM_FlowlaneSubmitKernel (caller-side time
//                   of a batch of kBatch submissions, the launches happen on workers)
//   same stream     BM_RawSingleStreamChain     vs BM_FlowlaneSingleStreamChain
//   two streams     BM_RawTwoStreamEventChain   vs BM_FlowlaneTwoStreamChain (two lanes: each
//                   step a cross-lane launch edge) and BM_FlowlaneTwoStreamChainOneLane (two
//                   CUDA streams of one lane: lane order, event + wait per step)
//   8 lanes         BM_RawLaunch8Streams        vs BM_FlowlaneSubmit8Lanes (aggregate launches/s,
//                   each thread: kBatch launches then a wait for its stream)
//   host consumer   BM_RawLaunchSync            vs BM_FlowlaneKernelThenObjectWait
//                   and BM_FlowlaneKernelThenHostInstr (a host instruction reads the result)
//   idle            BM_FlowlaneIdleEngineCpu: the CPU an engine with CUDA streams uses when no
//                   GPU work is in flight (idle_cpu_percent, goal <= 1)
// What else costs the launching thread (a polling thread, a spinning one, extra runtime
// calls) is measured without flowlane in bench_gpu_controls.cu.
// With FLOWLANE_GPU_HOPS=FILE, BM_FlowlaneKernelThenObjectWait and ..HostInstr also write
// FILE.bench (instruction id, ns at the submit call, ns when the wait returned) for
// scripts/dev/gpu_hops.py, beside the backend's per-hop timestamps in FILE.
#include "bench/gpu/bench_gpu_common.cuh"

namespace {

// --- submit cost ------------------------------------------------------------------------

// The floor of BM_FlowlaneSubmitKernel, measured the same way: caller-side time of kBatch
// launches (the launch queue never fills), then an untimed wait.
void BM_RawLaunch(benchmark::State& state) {
  if (!have_gpu(state)) return;
  cudaStream_t s;
  FLB_CUDA(state, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kBatch; ++k) {
      void* args[1] = {nullptr};
      FLB_CUDA(state, cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(1), args, 0, s));
    }
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    FLB_CUDA(state, cudaStreamSynchronize(s));
  }
  FLB_CUDA(state, cudaStreamDestroy(s));
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_RawLaunch)->UseManualTime();

// Caller-side time only: each iteration times the submission of kBatch kernels (the
// window, 8192, never fills), then waits for them untimed.
void BM_FlowlaneSubmitKernel(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  fl_stream_t* s = eng.compute(1);
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kBatch; ++k) FLB_FL(state, submit_empty(s));
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    FLB_FL(state, fl_stream_synchronize(s));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_FlowlaneSubmitKernel)->UseManualTime();

// --- chains (each iteration: kBatch dependent kernels, then wait for the last) ----------

void BM_RawSingleStreamChain(benchmark::State& state) {
  raw_chain(state, [](benchmark::State&, cudaStream_t, int) { return cudaSuccess; });
}
BENCHMARK(BM_RawSingleStreamChain)->UseRealTime();

// Each iteration: kBatch kernels incrementing one counter, alternating between streams a
// and b (a == b: one stream), then a wait for the last.
void flowlane_chain(benchmark::State& state, Engine& eng, fl_stream_t* a, fl_stream_t* b) {
  fl_stream_t* s[2] = {a, b};
  fl_object_t* o = nullptr;
  FLB_FL(state, fl_object_create(eng.e, nullptr, nullptr, &o));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k) FLB_FL(state, submit_add(s[k & 1], p, o));
    FLB_FL(state, fl_object_wait(o, FL_READ));
  }
  FLB_FL(state, fl_object_release(o));
  FLB_FL(state, fl_engine_synchronize(eng.e));
  FLB_CUDA(state, cudaFree(p));
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_FlowlaneSingleStreamChain(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  flowlane_chain(state, eng, eng.compute(1), eng.compute(1));
}
BENCHMARK(BM_FlowlaneSingleStreamChain)->UseRealTime();

void BM_RawTwoStreamEventChain(benchmark::State& state) {
  if (!have_gpu(state)) return;
  cudaStream_t s[2];
  for (auto& x : s) FLB_CUDA(state, cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(kBatch);
  for (auto& e : ev) FLB_CUDA(state, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k) {
      cudaStream_t cs = s[k & 1];
      if (k > 0) FLB_CUDA(state, cudaStreamWaitEvent(cs, ev[k - 1], 0));
      void* args[1] = {&p};
      FLB_CUDA(state, cudaLaunchKernel(reinterpret_cast<const void*>(&add_one), dim3(1), dim3(1), args, 0, cs));
      FLB_CUDA(state, cudaEventRecord(ev[k], cs));
    }
    FLB_CUDA(state, cudaEventSynchronize(ev[kBatch - 1]));
  }
  for (auto& e : ev) FLB_CUDA(state, cudaEventDestroy(e));
  for (auto& x : s) FLB_CUDA(state, cudaStreamDestroy(x));
  FLB_CUDA(state, cudaFree(p));
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_RawTwoStreamEventChain)->UseRealTime();

void BM_FlowlaneTwoStreamChain(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  flowlane_chain(state, eng, eng.compute(1), eng.compute(2));
}
BENCHMARK(BM_FlowlaneTwoStreamChain)->UseRealTime();

void BM_FlowlaneTwoStreamChainOneLane(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  fl_stream_t* d2h = nullptr;
  FLB_FL(state, fl_stream_get(eng.e, 1, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_D2H, &d2h));
  flowlane_chain(state, eng, eng.compute(1), d2h);
}
BENCHMARK(BM_FlowlaneTwoStreamChainOneLane)->UseRealTime();

// --- 8 submitting threads, one stream / lane each ---------------------------------------

// Each iteration of each thread: kBatch empty kernels, then a wait for its own stream.
void BM_RawLaunch8Streams(benchmark::State& state) {
  if (!have_gpu(state)) return;
  cudaStream_t s;
  FLB_CUDA(state, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k) {
      void* args[1] = {nullptr};
      FLB_CUDA(state, cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(1), args, 0, s));
    }
    FLB_CUDA(state, cudaStreamSynchronize(s));
  }
  FLB_CUDA(state, cudaStreamDestroy(s));
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_RawLaunch8Streams)->Threads(8)->UseRealTime();

// One engine for every run of this benchmark (Google Benchmark calls the function several
// times); never destroyed, the process exit reclaims it.
Engine* g_shared = nullptr;
std::mutex g_shared_mu;

void BM_FlowlaneSubmit8Lanes(benchmark::State& state) {
  if (!have_gpu(state)) return;
  fl_stream_t* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_shared_mu);
    if (g_shared == nullptr) g_shared = new Engine(16);
    s = g_shared->compute(1 + uint32_t(state.thread_index()));
  }
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k) FLB_FL(state, submit_empty(s));
    FLB_FL(state, fl_stream_synchronize(s));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_FlowlaneSubmit8Lanes)->Threads(8)->UseRealTime();

// --- a host consumer of a GPU result ----------------------------------------------------

void BM_RawLaunchSync(benchmark::State& state) {
  if (!have_gpu(state)) return;
  cudaStream_t s;
  FLB_CUDA(state, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  for (auto _ : state) {
    void* args[1] = {&p};
    FLB_CUDA(state, cudaLaunchKernel(reinterpret_cast<const void*>(&add_one), dim3(1), dim3(1), args, 0, s));
    FLB_CUDA(state, cudaStreamSynchronize(s));
  }
  FLB_CUDA(state, cudaFree(p));
  FLB_CUDA(state, cudaStreamDestroy(s));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RawLaunchSync)->UseRealTime();

// The caller's side of the hop timestamps (FLOWLANE_GPU_HOPS): per round trip, the
// benchmark, the engine's handle, the id of the kernel, the time of the submit call and the
// time the wait returned, appended to FILE.bench when the benchmark ends.
struct CallerHops {
  const char* path = std::getenv("FLOWLANE_GPU_HOPS");
  const char* label;
  uint64_t engine;
  std::vector<std::array<int64_t, 3>> rows;
  CallerHops(const char* l, fl_engine_t* e) : label(l), engine(reinterpret_cast<uintptr_t>(e)) {}
  static int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  bool on() const { return path != nullptr && *path != 0; }
  ~CallerHops() {
    if (!on() || rows.empty()) return;
    FILE* f = std::fopen((std::string(path) + ".bench").c_str(), "a");
    if (f == nullptr) return;
    for (const auto& r : rows)
      std::fprintf(f, "%s %llu %lld %lld %lld\n", label, (unsigned long long)engine, (long long)r[0], (long long)r[1],
                   (long long)r[2]);
    std::fclose(f);
  }
};

void BM_FlowlaneKernelThenObjectWait(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  fl_stream_t* s = eng.compute(1);
  fl_object_t* o = nullptr;
  FLB_FL(state, fl_object_create(eng.e, nullptr, nullptr, &o));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  CallerHops hops("object_wait", eng.e);
  for (auto _ : state) {
    const int64_t t0 = hops.on() ? CallerHops::now() : 0;
    fl_instr_id id = 0;
    FLB_FL(state, submit_add(s, p, o, &id));
    FLB_FL(state, fl_object_wait(o, FL_READ));
    if (hops.on()) hops.rows.push_back({int64_t(id), t0, CallerHops::now()});
  }
  FLB_FL(state, fl_object_release(o));
  FLB_FL(state, fl_engine_synchronize(eng.e));
  FLB_CUDA(state, cudaFree(p));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlowlaneKernelThenObjectWait)->UseRealTime();

// The GPU result consumed by a host instruction (a completion edge; the waiting caller
// completes the kernel and runs the host instruction itself when it can), the caller
// waiting for that host instruction.
void BM_FlowlaneKernelThenHostInstr(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  fl_stream_t* s = eng.compute(1);
  fl_stream_t* host = nullptr;
  FLB_FL(state, fl_stream_get(eng.e, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &host));
  fl_object_t* o = nullptr;
  fl_object_t* done = nullptr;
  FLB_FL(state, fl_object_create(eng.e, nullptr, nullptr, &o));
  FLB_FL(state, fl_object_create(eng.e, nullptr, nullptr, &done));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  std::atomic<long> seen{0};
  fl_operand_t ops[2] = {{o, FL_READ, 0}, {done, FL_WRITE, 0}};
  CallerHops hops("host_instr", eng.e);
  for (auto _ : state) {
    const int64_t t0 = hops.on() ? CallerHops::now() : 0;
    fl_instr_id id = 0;
    FLB_FL(state, submit_add(s, p, o, &id));
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
      static_cast<std::atomic<long>*>(u)->fetch_add(1, std::memory_order_relaxed);
      return FL_OK;
    };
    h.user_data = &seen;
    h.operands = ops;
    h.num_operands = 2;
    FLB_FL(state, fl_submit_host(host, &h, nullptr));
    FLB_FL(state, fl_object_wait(done, FL_READ));
    if (hops.on()) hops.rows.push_back({int64_t(id), t0, CallerHops::now()});
  }
  FLB_FL(state, fl_object_release(o));
  FLB_FL(state, fl_object_release(done));
  FLB_FL(state, fl_engine_synchronize(eng.e));
  FLB_CUDA(state, cudaFree(p));
  if (seen.load() != long(state.iterations())) state.SkipWithError("a host consumer did not run");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlowlaneKernelThenHostInstr)->UseRealTime();

// --- an idle engine ----------------------------------------------------------------------

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// An engine with CUDA streams on 4 lanes that just ran GPU work, then nothing: the CPU the
// whole process uses over one second (its other engines are idle too), in percent of one
// core. Goal: <= 1 (nothing spins when no GPU work is in flight).
void BM_FlowlaneIdleEngineCpu(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  fl_object_t* o = nullptr;
  FLB_FL(state, fl_object_create(eng.e, nullptr, nullptr, &o));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  double percent = 0;
  for (auto _ : state) {
    for (int k = 0; k < 400; ++k) FLB_FL(state, submit_add(eng.compute(1 + uint32_t(k % 4)), p, o));
    FLB_FL(state, fl_object_wait(o, FL_READ));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the spins that follow work end
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    percent = 100.0 * (process_cpu_seconds() - c0) / wall;
  }
  state.counters["idle_cpu_percent"] = percent;
  FLB_FL(state, fl_object_release(o));
  FLB_CUDA(state, cudaFree(p));
}
BENCHMARK(BM_FlowlaneIdleEngineCpu)->Iterations(1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
