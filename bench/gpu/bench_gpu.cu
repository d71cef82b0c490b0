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
//   polling cost    BM_RawChainWithPollingThread/0 and /1000 vs BM_RawSingleStreamChain (what a
//                   thread querying events, with no pause or 1 us between queries, costs launches)
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"

namespace {

__global__ void empty_kernel() {}
__global__ void add_one(int* p) { *p += 1; }

constexpr int kBatch = 1000;  // kernels per timed batch for the chain benchmarks

// Every call of a raw-CUDA floor and of flowlane is checked: a benchmark whose calls fail
// measures nothing, so it ends with an error (which scripts/dev/gpu-check.sh treats as a failure).
void fail_with(benchmark::State& state, const std::string& what) {
  static thread_local std::string message;  // SkipWithError keeps the pointer
  message = what;
  state.SkipWithError(message.c_str());
}
#define FLB_CUDA(state, call)                                                              \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fail_with(state, std::string(#call) + ": " + cudaGetErrorString(e_));                \
      return;                                                                              \
    }                                                                                      \
  } while (0)
#define FLB_FL(state, call)                                                                \
  do {                                                                                     \
    fl_status_t s_ = (call);                                                               \
    if (s_ != FL_OK) {                                                                     \
      fail_with(state, std::string(#call) + ": " + fl_status_name(s_) + ": " + fl_last_error_message()); \
      return;                                                                              \
    }                                                                                      \
  } while (0)

bool have_gpu(benchmark::State& state) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    state.SkipWithError("no CUDA device visible");
    return false;
  }
  return true;
}

struct Engine {
  fl_engine_t* e = nullptr;
  explicit Engine(uint64_t lanes = 16) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.max_lanes = lanes;
    d.inflight_limit = 8192;
    if (fl_engine_create(&d, &e) != FL_OK) std::fprintf(stderr, "engine: %s\n", fl_last_error_message());
  }
  ~Engine() { fl_engine_destroy(e); }
  fl_stream_t* compute(uint32_t lane) {
    fl_stream_t* s = nullptr;
    fl_stream_get(e, lane, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_COMPUTE, &s);
    return s;
  }
};

fl_status_t submit_empty(fl_stream_t* s, fl_operand_t* ops = nullptr, uint64_t nops = 0) {
  fl_kernel_instr_t k = FL_KERNEL_INSTR_INIT;
  k.func = reinterpret_cast<const void*>(&empty_kernel);
  k.operands = ops;
  k.num_operands = nops;
  return fl_submit_kernel(s, &k, nullptr);
}

fl_status_t submit_add(fl_stream_t* s, int* p, fl_object_t* o) {
  fl_kernel_instr_t k = FL_KERNEL_INSTR_INIT;
  k.func = reinterpret_cast<const void*>(&add_one);
  const void* args[] = {&p};
  const uint64_t sizes[] = {sizeof(p)};
  k.args = args;
  k.arg_sizes = sizes;
  k.num_args = 1;
  fl_operand_t op{o, FL_READ_WRITE, 0};
  k.operands = &op;
  k.num_operands = 1;
  return fl_submit_kernel(s, &k, nullptr);
}

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
  if (!have_gpu(state)) return;
  cudaStream_t s;
  FLB_CUDA(state, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k) {
      void* args[1] = {&p};
      FLB_CUDA(state, cudaLaunchKernel(reinterpret_cast<const void*>(&add_one), dim3(1), dim3(1), args, 0, s));
    }
    FLB_CUDA(state, cudaStreamSynchronize(s));
  }
  FLB_CUDA(state, cudaFree(p));
  FLB_CUDA(state, cudaStreamDestroy(s));
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_RawSingleStreamChain)->UseRealTime();

// The raw chain again, with an event recorded after every 8 kernels (as flowlane covers a
// run) and a second thread querying the latest one in a loop, pausing `pace_ns` between
// queries that find it not ready (Arg: 0 = no pause, as a poller that spins on the driver).
// Against BM_RawSingleStreamChain it shows what a polling thread costs the launching one.
void BM_RawChainWithPollingThread(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const auto pace = std::chrono::nanoseconds(state.range(0));
  cudaStream_t s;
  FLB_CUDA(state, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(kBatch / 8 + 1);
  for (auto& e : ev) FLB_CUDA(state, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  std::atomic<cudaEvent_t> latest{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<long> queries{0};
  std::thread poller([&] {
    long n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      cudaEvent_t e = latest.load(std::memory_order_acquire);  // pairs with the release store below
      if (e == nullptr || cudaEventQuery(e) == cudaSuccess) continue;
      ++n;
      (void)cudaGetLastError();
      const auto until = std::chrono::steady_clock::now() + pace;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    queries.store(n);
  });
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k) {
      void* args[1] = {&p};
      FLB_CUDA(state, cudaLaunchKernel(reinterpret_cast<const void*>(&add_one), dim3(1), dim3(1), args, 0, s));
      if (k % 8 == 7) {
        FLB_CUDA(state, cudaEventRecord(ev[size_t(k / 8)], s));
        latest.store(ev[size_t(k / 8)], std::memory_order_release);  // pairs with the poller's acquire
      }
    }
    FLB_CUDA(state, cudaStreamSynchronize(s));
    latest.store(nullptr, std::memory_order_release);
  }
  stop.store(true);
  poller.join();
  state.counters["not_ready_queries_per_kernel"] =
      double(queries.load()) / double(std::max<int64_t>(1, state.iterations() * kBatch));
  for (auto& e : ev) FLB_CUDA(state, cudaEventDestroy(e));
  FLB_CUDA(state, cudaFree(p));
  FLB_CUDA(state, cudaStreamDestroy(s));
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_RawChainWithPollingThread)->Arg(0)->Arg(1000)->UseRealTime();

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

void BM_FlowlaneKernelThenObjectWait(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Engine eng;
  fl_stream_t* s = eng.compute(1);
  fl_object_t* o = nullptr;
  FLB_FL(state, fl_object_create(eng.e, nullptr, nullptr, &o));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  for (auto _ : state) {
    FLB_FL(state, submit_add(s, p, o));
    FLB_FL(state, fl_object_wait(o, FL_READ));
  }
  FLB_FL(state, fl_object_release(o));
  FLB_FL(state, fl_engine_synchronize(eng.e));
  FLB_CUDA(state, cudaFree(p));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlowlaneKernelThenObjectWait)->UseRealTime();

// The GPU result consumed by a host instruction (a completion edge through the poller), the
// caller waiting for that host instruction.
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
  for (auto _ : state) {
    FLB_FL(state, submit_add(s, p, o));
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
  }
  FLB_FL(state, fl_object_release(o));
  FLB_FL(state, fl_object_release(done));
  FLB_FL(state, fl_engine_synchronize(eng.e));
  FLB_CUDA(state, cudaFree(p));
  if (seen.load() != long(state.iterations())) state.SkipWithError("a host consumer did not run");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlowlaneKernelThenHostInstr)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
