// Controls for the same-stream chain's gap to raw launches (gpu/README.md, "Measured on a
// GPU"): raw CUDA only, no flowlane, each beside the plain raw chain of this binary, so
// that one run tells which of the suspects costs the launching thread what:
//   BM_ControlRawChain                  the floor: kBatch dependent kernels on one stream
//   BM_ControlPollingThread/pace/every  a second thread querying the latest of the events
//                                       recorded every 8 launches, pausing `pace` ns after
//                                       every query (every = 1) or only after a not-ready
//                                       one (every = 0, the first measurement's pacing)
//   BM_ControlSpinningThread            a second thread spinning without calling CUDA
//                                       (CPU or SMT contention alone)
//   BM_ControlOldPerLaunchCalls         the runtime calls flowlane's lane made around each
//                                       launch before (cudaGetDevice, two cudaGetLastError,
//                                       a record every 8)
//   BM_ControlLaneQueries               what the lane does now: a record every 8 launches
//                                       and, on the launching thread, a query of the
//                                       previous run's event
#include "bench/gpu/bench_gpu_common.cuh"

namespace {

void BM_ControlRawChain(benchmark::State& state) {
  raw_chain(state, [](benchmark::State&, cudaStream_t, int) { return cudaSuccess; });
}
BENCHMARK(BM_ControlRawChain)->UseRealTime();

// Events recorded every 8 launches, reused round-robin (created once, outside the timing).
struct Every8 {
  std::vector<cudaEvent_t> ev;
  std::atomic<cudaEvent_t> latest{nullptr};
  explicit Every8(benchmark::State& state) : ev(kBatch / 8 + 1) {
    for (auto& e : ev)
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) state.SkipWithError("cudaEventCreate");
  }
  ~Every8() {
    for (auto& e : ev) (void)cudaEventDestroy(e);
  }
  cudaError_t after(cudaStream_t s, int k) {
    if (k % 8 != 7) return cudaSuccess;
    cudaEvent_t e = ev[size_t(k / 8)];
    cudaError_t r = cudaEventRecord(e, s);
    latest.store(e, std::memory_order_release);  // pairs with the polling thread's acquire load
    return r;
  }
};

// A second thread while the chain runs: `body()` is called in a loop until the end.
template <class Body>
struct Beside {
  std::atomic<bool> stop{false};
  std::thread t;
  explicit Beside(Body body)
      : t([this, body]() mutable {
          while (!stop.load(std::memory_order_relaxed)) body();
        }) {}
  ~Beside() {
    stop.store(true);
    t.join();
  }
};

void pause_ns(int64_t ns) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
}

void BM_ControlPollingThread(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int64_t pace = state.range(0);
  const bool every = state.range(1) != 0;
  Every8 ev8(state);
  std::atomic<long> queries{0};
  {
    Beside poller([&] {
      cudaEvent_t e = ev8.latest.load(std::memory_order_acquire);  // pairs with Every8::after's release
      if (e == nullptr) return;
      const bool ready = cudaEventQuery(e) == cudaSuccess;
      if (!ready) (void)cudaGetLastError();
      queries.fetch_add(1, std::memory_order_relaxed);
      if (pace > 0 && (every || !ready)) pause_ns(pace);
    });
    raw_chain(state, [&](benchmark::State&, cudaStream_t s, int k) { return ev8.after(s, k); });
  }
  state.counters["queries_per_kernel"] = double(queries.load()) / double(std::max<int64_t>(1, state.iterations() * kBatch));
}
BENCHMARK(BM_ControlPollingThread)->Args({0, 0})->Args({1000, 0})->Args({1000, 1})->Args({4000, 1})->UseRealTime();

void BM_ControlSpinningThread(benchmark::State& state) {
  Beside spinner([] {
    for (int k = 0; k < 64; ++k) __builtin_ia32_pause();
  });
  raw_chain(state, [](benchmark::State&, cudaStream_t, int) { return cudaSuccess; });
}
BENCHMARK(BM_ControlSpinningThread)->UseRealTime();

void BM_ControlOldPerLaunchCalls(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Every8 ev8(state);
  raw_chain(state, [&](benchmark::State&, cudaStream_t s, int k) {
    int dev = -1;
    (void)cudaGetDevice(&dev);
    (void)cudaGetLastError();
    (void)cudaGetLastError();
    return ev8.after(s, k);
  });
}
BENCHMARK(BM_ControlOldPerLaunchCalls)->UseRealTime();

void BM_ControlLaneQueries(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Every8 ev8(state);
  raw_chain(state, [&](benchmark::State&, cudaStream_t s, int k) {
    cudaError_t r = ev8.after(s, k);
    if (r == cudaSuccess && k % 8 == 7 && k >= 15) {
      if (cudaEventQuery(ev8.ev[size_t(k / 8 - 1)]) != cudaSuccess) (void)cudaGetLastError();
    }
    return r;
  });
}
BENCHMARK(BM_ControlLaneQueries)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
