// Helpers shared by the GPU benchmarks (bench_gpu.cu, bench_gpu_controls.cu): checked CUDA
// and flowlane calls (a benchmark whose calls fail ends with an error, which
// scripts/dev/gpu-check.sh treats as a failure), an engine, the tiny kernels.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

fl_status_t submit_add(fl_stream_t* s, int* p, fl_object_t* o, fl_instr_id* id = nullptr) {
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
  return fl_submit_kernel(s, &k, id);
}

// The raw-CUDA same-stream chain: each iteration kBatch dependent kernels on one stream,
// then a wait; `after(state, stream, k)` runs after launch k (what a control adds to each
// launch: extra runtime calls, a record every 8). Its error ends the benchmark.
template <class After>
void raw_chain(benchmark::State& state, After after) {
  if (!have_gpu(state)) return;
  cudaStream_t s;
  FLB_CUDA(state, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* p;
  FLB_CUDA(state, cudaMalloc(&p, sizeof(int)));
  for (auto _ : state) {
    for (int k = 0; k < kBatch; ++k) {
      void* args[1] = {&p};
      FLB_CUDA(state, cudaLaunchKernel(reinterpret_cast<const void*>(&add_one), dim3(1), dim3(1), args, 0, s));
      FLB_CUDA(state, after(state, s, k));
    }
    FLB_CUDA(state, cudaStreamSynchronize(s));
  }
  FLB_CUDA(state, cudaFree(p));
  FLB_CUDA(state, cudaStreamDestroy(s));
  state.SetItemsProcessed(state.iterations() * kBatch);
}

}  // namespace
